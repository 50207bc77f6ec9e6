package server

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"

	"kruntimes.io/kruntimes/apis/runlog"
)

func TestCommandLogsForgetTheOldestEndedCommands(t *testing.T) {
	c := newCommandLogs(nil)
	c.Start("running")
	for i := range maxCommandLogs + 1 {
		id := strconv.Itoa(i)
		c.Start(id)
		c.Write(id, runlog.StreamStdout, []byte("x"))
		c.End(id)
	}
	_, done, ok := c.lookup("running")
	assert.True(t, ok, "a running command is never forgotten")
	assert.False(t, isClosed(done))
	_, _, ok = c.lookup("0")
	assert.False(t, ok, "the oldest ended command is forgotten")
	_, _, ok = c.lookup("1")
	assert.False(t, ok)
	log, done, ok := c.lookup(strconv.Itoa(maxCommandLogs))
	assert.True(t, ok)
	assert.True(t, isClosed(done))
	assert.Equal(t, int64(1), log.Written())
	c.End("unknown")
	c.Write("unknown", runlog.StreamStdout, []byte("x"))
}
