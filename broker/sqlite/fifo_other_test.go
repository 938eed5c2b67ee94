//go:build !unix

package sqlite_test

import "testing"

// mkfifo returns nil: there are no FIFOs in the file system here.
func mkfifo(*testing.T) func(t *testing.T, dir string) string { return nil }
