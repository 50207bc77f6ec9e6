package memlimit

import (
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestApply(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "")
	os.Unsetenv("GOMEMLIMIT")
	t.Cleanup(func() { debug.SetMemoryLimit(math.MaxInt64) })
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
		return p
	}
	cases := []struct {
		name   string
		value  string
		cgroup string
		want   int64
	}{
		{"auto takes 90% of a cgroup v2 limit", Auto, file("v2", "1073741824\n"), 966367641},
		{"auto without a limit (v2 max) sets none", Auto, file("max", "max\n"), 0},
		{"auto without a limit (v1's huge number) sets none", Auto, file("v1", "9223372036854771712\n"), 0},
		{"a quantity is taken as is", "900Mi", file("ignored", "1073741824\n"), 900 << 20},
		{"off sets none", Off, file("off", "1073741824\n"), 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			debug.SetMemoryLimit(math.MaxInt64)
			cgroupLimitFiles = []string{filepath.Join(dir, "absent"), tc.cgroup}
			got, _, err := Apply(tc.value)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
			assert.Equal(t, tc.want, currentLimit(), "the Go runtime's limit")
		})
	}
}

func TestGOMEMLIMITWins(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "123MiB")
	t.Cleanup(func() { debug.SetMemoryLimit(math.MaxInt64) })
	debug.SetMemoryLimit(123 << 20)
	got, source, err := Apply("900Mi")
	require.NoError(t, err)
	assert.Equal(t, int64(123<<20), got)
	assert.Equal(t, "GOMEMLIMIT", source)
}

func TestValidate(t *testing.T) {
	for _, bad := range []string{"lots", "-1Gi", "0", "1.5.5"} {
		assert.Error(t, Validate(bad), bad)
	}
	for _, good := range []string{Auto, Off, "900Mi", "1G"} {
		assert.NoError(t, Validate(good), good)
	}
}
