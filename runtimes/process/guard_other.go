//go:build !linux

package process

import (
	"context"
	"errors"
)

// GuardOrphans needs Linux's child subreapers.
func GuardOrphans(context.Context) error {
	return errors.New("guarding orphans needs Linux")
}
