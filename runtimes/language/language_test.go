package language

import (
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
)

func TestTruncate(t *testing.T) {
	tests := []struct {
		name     string
		s        string
		n        int
		keepTail bool
		want     string
	}{
		{name: "short strings are untouched", s: "abc", n: 3, want: "abc"},
		{name: "head keeps the beginning", s: "abcdef", n: 3, want: "abc"},
		{name: "tail keeps the end", s: "abcdef", n: 3, keepTail: true, want: "def"},
		{name: "head never splits a rune", s: "aé", n: 2, want: "a"},
		{name: "tail never splits a rune", s: "éa", n: 2, keepTail: true, want: "a"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Truncate(tc.s, tc.n, tc.keepTail)
			assert.Equal(t, tc.want, got)
			assert.True(t, utf8.ValidString(got))
		})
	}
}
