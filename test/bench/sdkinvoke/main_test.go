package main

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestPrintTable pins the summary's arithmetic: percentiles of all rounds
// together, the range of the rounds' p50s, and each round's p50 against
// Go's in the same round.
func TestPrintTable(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		var d []time.Duration
		for _, x := range v {
			d = append(d, time.Duration(x)*time.Millisecond)
		}
		return d
	}
	samples := map[string]map[string][][]time.Duration{"direct": {
		"go":     {ms(2, 2, 2), ms(4, 4, 4)},
		"python": {ms(3, 3, 3), ms(4, 4, 5)},
	}}
	var out bytes.Buffer
	printTable(&out, []string{"direct"}, []string{"go", "python"}, samples)
	assert.Contains(t, out.String(), "| direct | Go clientset | 2.00–4.00 ms | 2.00 ms | 4.00 ms | 4.00 ms | — | — | 6 |")
	assert.Contains(t, out.String(), "| direct | Python SDK | 3.00–4.00 ms | 3.00 ms | 4.00 ms | 4.00 ms | 1.50 | +0.00 … +1.00 ms | 6 |")
}
