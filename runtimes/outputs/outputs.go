package outputs

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"regexp"
	"strings"
	"syscall"
	"unicode/utf8"

	"kruntimes.io/kruntimes/apis/kruntimes/validation"
	"kruntimes.io/kruntimes/apis/lifecycle"
)

// Bounds of Run.status.outputs, as the API validates them.
const (
	MaxKeys       = validation.MaxOutputs
	MaxKeyBytes   = validation.MaxOutputKeyBytes
	MaxValueBytes = validation.MaxOutputValueBytes
	MaxTotalBytes = validation.MaxOutputsTotalBytes
)

// Reasons a set of outputs is rejected; they are Run reasons.
const (
	ReasonInvalid  = lifecycle.ReasonOutputsInvalid
	ReasonTooLarge = lifecycle.ReasonOutputsTooLarge
)

// keyPattern accepts the keys that are safe as environment variable names and
// as JSON keys alike.
var keyPattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.-]*$`)

// Error says why outputs were rejected.
type Error struct {
	// Reason is ReasonInvalid or ReasonTooLarge.
	Reason  string
	Message string
}

func (e *Error) Error() string { return e.Reason + ": " + e.Message }

func invalid(format string, args ...any) error {
	return &Error{Reason: ReasonInvalid, Message: fmt.Sprintf(format, args...)}
}

func tooLarge(format string, args ...any) error {
	return &Error{Reason: ReasonTooLarge, Message: fmt.Sprintf(format, args...)}
}

// Reason returns the Error reason of err, or "" when err is not an *Error.
func Reason(err error) string {
	var oe *Error
	if errors.As(err, &oe) {
		return oe.Reason
	}
	return ""
}

// Validate checks a map of outputs against the Run bounds.
func Validate(out map[string]string) error {
	if len(out) > MaxKeys {
		return tooLarge("%d keys, at most %d are allowed", len(out), MaxKeys)
	}
	total := 0
	for k, v := range out {
		if err := validateKey(k); err != nil {
			return err
		}
		if len(v) > MaxValueBytes {
			return tooLarge("value of %q has %d bytes, at most %d are allowed", k, len(v), MaxValueBytes)
		}
		// Outputs travel as protobuf and JSON strings, which must be UTF-8.
		if !utf8.ValidString(v) {
			return invalid("value of %q is not valid UTF-8", k)
		}
		total += len(k) + len(v)
	}
	if total > MaxTotalBytes {
		return tooLarge("outputs total %d bytes, at most %d are allowed", total, MaxTotalBytes)
	}
	return nil
}

func validateKey(k string) error {
	if len(k) > MaxKeyBytes {
		return tooLarge("key %.32q… has %d bytes, at most %d are allowed", k, len(k), MaxKeyBytes)
	}
	if !keyPattern.MatchString(k) {
		return invalid("key %q must start with a letter or '_' and contain only letters, digits, '_', '.', '-'", k)
	}
	return nil
}

// ReadFile parses the KEY=VALUE file a program wrote to $KRUNTIMES_OUTPUTS.
// A missing file means no outputs. Only a regular file is read: the program
// chooses what is at path, and a FIFO would block the open and the read, a
// symlink could point anywhere (/dev/zero). Reading stops past the total
// bound so a runaway writer cannot exhaust memory.
func ReadFile(path string) (map[string]string, error) {
	// O_NONBLOCK makes opening a FIFO return at once instead of waiting for
	// a writer; O_NOFOLLOW refuses a symlink.
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, syscall.ENOENT):
		return map[string]string{}, nil
	case errors.Is(err, syscall.ELOOP):
		return nil, invalid("the outputs file is a symbolic link; write a regular file")
	case err != nil:
		return nil, fmt.Errorf("open outputs file: %w", err)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat outputs file: %w", err)
	}
	if !info.Mode().IsRegular() {
		return nil, invalid("the outputs file is a %s, not a regular file; write a regular file", fileKind(info.Mode()))
	}
	// One byte past the limit per line of separators is plenty to detect excess.
	data, err := io.ReadAll(io.LimitReader(f, MaxTotalBytes+MaxKeys*2+1))
	if err != nil {
		return nil, fmt.Errorf("read outputs file: %w", err)
	}
	if len(data) > MaxTotalBytes+MaxKeys*2 {
		return nil, tooLarge("outputs file exceeds %d bytes", MaxTotalBytes)
	}
	return Parse(data)
}

func fileKind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "directory"
	case m&fs.ModeNamedPipe != 0:
		return "named pipe"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeDevice != 0:
		return "device"
	default:
		return "special file"
	}
}

// Parse parses KEY=VALUE lines. Blank lines are ignored; a later duplicate
// key wins, as with environment files.
func Parse(data []byte) (map[string]string, error) {
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), MaxTotalBytes+MaxKeys*2+1)
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSuffix(sc.Text(), "\r")
		if strings.TrimSpace(text) == "" {
			continue
		}
		k, v, ok := strings.Cut(text, "=")
		if !ok {
			return nil, invalid("line %d is not KEY=VALUE", line)
		}
		if err := validateKey(k); err != nil {
			return nil, err
		}
		out[k] = v
		if len(out) > MaxKeys {
			return nil, tooLarge("more than %d keys", MaxKeys)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, tooLarge("outputs line too long: %v", err)
	}
	if err := Validate(out); err != nil {
		return nil, err
	}
	return out, nil
}
