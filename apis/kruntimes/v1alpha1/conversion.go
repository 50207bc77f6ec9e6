package v1alpha1

import (
	"strconv"

	"k8s.io/apimachinery/pkg/conversion"
)

// Convert_Slice_string_To_Pointer_int32 decodes an int32 query parameter
// (runs/log's attempt); k8s.io/apimachinery has the int64 one only. The
// last value wins, an empty one leaves the field unset.
func Convert_Slice_string_To_Pointer_int32(in *[]string, out **int32, _ conversion.Scope) error {
	if len(*in) == 0 {
		return nil
	}
	s := (*in)[len(*in)-1]
	if s == "" {
		*out = nil
		return nil
	}
	n, err := strconv.ParseInt(s, 10, 32)
	if err != nil {
		return err
	}
	v := int32(n)
	*out = &v
	return nil
}
