package metrics

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"kruntimes.io/kruntimes/apis/lifecycle"
)

func TestReasonLabel(t *testing.T) {
	assert.Equal(t, lifecycle.ReasonOutputsInvalid, ReasonLabel(lifecycle.ReasonOutputsInvalid), "kruntimes' own reasons label metrics")
	assert.Equal(t, ReasonOther, ReasonLabel("QuotaExceeded"), "a Runtime Server's own reason must not become a label value")
}
