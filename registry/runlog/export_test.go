package runlog

import "context"

// AddToCount adds delta to the namespace's count, as a crash between a
// count and its write leaves it.
func (s *Store) AddToCount(ctx context.Context, namespace string, delta int64) error {
	_, err := s.count(ctx, namespace, func(int64) int64 { return delta })
	return err
}
