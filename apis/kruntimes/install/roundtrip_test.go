package install

import (
	"bytes"
	"testing"

	"k8s.io/apimachinery/pkg/api/apitesting/roundtrip"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"

	kruntimesfuzzer "kruntimes.io/kruntimes/apis/kruntimes/fuzzer"
	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
)

// TestRoundTripTypes fuzzes every field through internal ↔ v1alpha1 ↔ JSON:
// a field that does not survive is found here before a user loses it.
func TestRoundTripTypes(t *testing.T) {
	roundtrip.RoundTripTestForAPIGroup(t, Install, kruntimesfuzzer.Funcs)
}

// TestRoundTripProtobuf does the same through the protobuf encoding
// (generated.pb.go), which RoundTripTestForAPIGroup skips: a field missing
// from generated.proto, or a stale generated.pb.go, fails here.
func TestRoundTripProtobuf(t *testing.T) {
	roundtrip.RoundTripProtobufTestForAPIGroup(t, Install, kruntimesfuzzer.Funcs)
}

// TestProtobufEncodable makes sure the round trip above really went through
// protobuf: every served kind encodes with the protobuf serializer (the
// round-trip helper only logs kinds it cannot encode).
func TestProtobufEncodable(t *testing.T) {
	scheme := runtime.NewScheme()
	Install(scheme)
	serializer := protobuf.NewSerializer(scheme, scheme)
	for kind := range scheme.KnownTypes(v1alpha1.SchemeGroupVersion) {
		if roundtrip.GlobalNonRoundTrippableTypes().Has(kind) {
			continue
		}
		obj, err := scheme.New(v1alpha1.SchemeGroupVersion.WithKind(kind))
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if err := serializer.Encode(obj, &buf); err != nil {
			t.Errorf("%s does not encode as protobuf: %v", kind, err)
		}
	}
}
