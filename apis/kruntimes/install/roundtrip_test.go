package install

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/apitesting/roundtrip"

	kruntimesfuzzer "kruntimes.io/kruntimes/apis/kruntimes/fuzzer"
)

// TestRoundTripTypes fuzzes every field through internal ↔ v1alpha1 ↔ JSON:
// a field that does not survive is found here before a user loses it.
func TestRoundTripTypes(t *testing.T) {
	roundtrip.RoundTripTestForAPIGroup(t, Install, kruntimesfuzzer.Funcs)
}
