package outputs

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParse(t *testing.T) {
	manyKeys := func(n int) string {
		var b strings.Builder
		for i := range n {
			fmt.Fprintf(&b, "K%d=v\n", i)
		}
		return b.String()
	}
	bigValues := func(n, size int) string {
		var b strings.Builder
		for i := range n {
			fmt.Fprintf(&b, "K%d=%s\n", i, strings.Repeat("x", size))
		}
		return b.String()
	}
	tests := []struct {
		name       string
		data       string
		want       map[string]string
		wantReason string
	}{
		{name: "key value lines parse", data: "A=1\nb.c-d=x=y\n\n", want: map[string]string{"A": "1", "b.c-d": "x=y"}},
		{name: "CRLF line endings are tolerated", data: "A=1\r\n", want: map[string]string{"A": "1"}},
		{name: "later duplicate wins", data: "A=1\nA=2\n", want: map[string]string{"A": "2"}},
		{name: "empty value is allowed", data: "A=\n", want: map[string]string{"A": ""}},
		{name: "line without equals is invalid", data: "A\n", wantReason: ReasonInvalid},
		{name: "key with a space is invalid", data: "A B=1\n", wantReason: ReasonInvalid},
		{name: "key starting with a digit is invalid", data: "1A=1\n", wantReason: ReasonInvalid},
		{name: "64 keys are allowed", data: manyKeys(64)},
		{name: "65 keys are too large", data: manyKeys(65), wantReason: ReasonTooLarge},
		{name: "key of 129 bytes is too large", data: strings.Repeat("k", 129) + "=1\n", wantReason: ReasonTooLarge},
		{name: "value of 8 KiB is allowed", data: "A=" + strings.Repeat("x", 8<<10) + "\n"},
		{name: "value over 8 KiB is too large", data: "A=" + strings.Repeat("x", 8<<10+1) + "\n", wantReason: ReasonTooLarge},
		{name: "value that is not UTF-8 is invalid", data: "A=\xff\xfe\n", wantReason: ReasonInvalid},
		{name: "UTF-8 value is allowed", data: "A=grüße ✓\n", want: map[string]string{"A": "grüße ✓"}},
		{name: "total over 64 KiB is too large", data: bigValues(9, 8<<10), wantReason: ReasonTooLarge},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse([]byte(tc.data))
			if tc.wantReason != "" {
				require.Error(t, err)
				assert.Equal(t, tc.wantReason, Reason(err))
				return
			}
			require.NoError(t, err)
			if tc.want != nil {
				assert.Equal(t, tc.want, got)
			}
		})
	}
}

func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	got, err := ReadFile(filepath.Join(dir, "absent"))
	require.NoError(t, err, "a program that writes no outputs has none")
	assert.Empty(t, got)

	huge := filepath.Join(dir, "huge")
	require.NoError(t, os.WriteFile(huge, []byte(strings.Repeat("A=1\n", 1<<16)), 0o600))
	_, err = ReadFile(huge)
	assert.Equal(t, ReasonTooLarge, Reason(err))
}

// A program chooses what is at the outputs path; anything but a regular file
// is refused at once, without blocking and without reading it.
func TestReadFileRefusesWhatIsNotARegularFile(t *testing.T) {
	tests := []struct {
		name string
		make func(path string) error
	}{
		{name: "a FIFO without a writer does not block", make: func(p string) error { return syscall.Mkfifo(p, 0o600) }},
		{name: "a directory", make: func(p string) error { return os.Mkdir(p, 0o700) }},
		{name: "a symlink to /dev/zero is not followed", make: func(p string) error { return os.Symlink("/dev/zero", p) }},
		{name: "a symlink to a regular file is not followed", make: func(p string) error {
			target := p + ".target"
			if err := os.WriteFile(target, []byte("A=1\n"), 0o600); err != nil {
				return err
			}
			return os.Symlink(target, p)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "outputs")
			require.NoError(t, tc.make(path))
			_, err := ReadFile(path)
			require.Error(t, err)
			assert.Equal(t, ReasonInvalid, Reason(err), "error: %v", err)
		})
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("A=1\nB=2\n"))
	f.Add([]byte("=\n\r\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		out, err := Parse(data)
		if err == nil {
			require.NoError(t, Validate(out), "Parse must only return outputs that pass Validate")
		}
	})
}
