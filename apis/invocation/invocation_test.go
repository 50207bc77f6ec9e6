package invocation

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestCheckID(t *testing.T) {
	for _, id := range []string{"a", strings.Repeat("i", MaxIDBytes), "order-42/retry 1", "naïve-ünïcode", "🙂"} {
		assert.NoError(t, CheckID(id), "%q", id)
	}
	for _, id := range []string{"", strings.Repeat("i", MaxIDBytes+1), "\xff", "a\xffb", "tab\there", "nul\x00", "del\x7f", "c1\u0085"} {
		assert.Error(t, CheckID(id), "%q", id)
	}
}
