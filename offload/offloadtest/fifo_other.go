//go:build !unix

package offloadtest

import "errors"

// mkfifo reports that this system has no FIFOs in its file system.
func mkfifo(string) error { return errors.ErrUnsupported }

// unblockFIFO does nothing: there are no FIFOs.
func unblockFIFO(string) {}
