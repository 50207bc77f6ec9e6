// Package tombstone unwraps the objects informers hand to delete handlers.
package tombstone

import "k8s.io/client-go/tools/cache"

// As returns obj as a T. A delete handler may be given a
// cache.DeletedFinalStateUnknown instead of the object when its watch missed
// the delete; As unwraps it. ok is false when obj (or the object in the
// tombstone) is not a T.
func As[T any](obj any) (T, bool) {
	if t, isTombstone := obj.(cache.DeletedFinalStateUnknown); isTombstone {
		obj = t.Obj
	}
	v, ok := obj.(T)
	return v, ok
}
