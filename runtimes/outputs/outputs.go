package outputs

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"

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
// A missing file means no outputs. Reading stops past the total bound so a
// runaway writer cannot exhaust memory.
func ReadFile(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return map[string]string{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open outputs file: %w", err)
	}
	defer f.Close()
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
