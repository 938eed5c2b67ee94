//go:build unix

package warehouse

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// lockDataset takes an exclusive lock on path without waiting; the
// returned func releases it. The kernel releases it too when the process
// dies, so a killed sync leaves no stale lock.
func lockDataset(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%s: %w", path, ErrLocked)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() { _ = f.Close() }, nil
}
