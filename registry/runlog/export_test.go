package runlog

import (
	"context"

	"k8s.io/apiserver/pkg/storage"

	"kruntimes.io/kruntimes/apis/kruntimes"
)

// AddToCount adds delta to the namespace's count, as a crash between a
// count and its write leaves it.
func (s *Store) AddToCount(ctx context.Context, namespace string, delta int64) error {
	_, err := s.count(ctx, namespace, func(int64) int64 { return delta })
	return err
}

// HasCount reports whether the namespace has a stored count at all.
func (s *Store) HasCount(ctx context.Context, namespace string) (bool, error) {
	err := s.usage.Get(ctx, s.usageKey(namespace), storage.GetOptions{}, &kruntimes.RunLogUsage{})
	if storage.IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}
