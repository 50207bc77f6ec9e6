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

func TestNestingDepth(t *testing.T) {
	for _, tc := range []struct {
		json string
		want int
	}{
		{`1`, 0},
		{`"[{"`, 0},
		{`[]`, 1},
		{`{"a":[1,{"b":"]}\"[["}]}`, 3},
		{`[[["\\"],[]]]`, 3},
		{strings.Repeat("[", 1000) + strings.Repeat("]", 1000), 1000},
	} {
		assert.Equal(t, tc.want, NestingDepth([]byte(tc.json)), tc.json)
	}
}
