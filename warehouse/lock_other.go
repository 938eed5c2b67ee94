//go:build !unix

package warehouse

import "os"

// lockDataset creates path; on this platform it does not lock it, so two
// syncs of one dataset must not run at once.
func lockDataset(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	return func() { _ = f.Close() }, nil
}
