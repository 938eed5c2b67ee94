//go:build unix

package offloadtest

import (
	"os"
	"syscall"
	"time"
)

// mkfifo creates a FIFO at path.
func mkfifo(path string) error { return syscall.Mkfifo(path, 0o640) }

// unblockFIFO opens the FIFO at path for writing and closes it a little
// later, so that a reader blocked opening or reading it gets through and
// sees end of file. Opening read-write never waits for a peer on Linux;
// elsewhere it may fail, which is fine.
func unblockFIFO(path string) {
	f, err := os.OpenFile(path, os.O_RDWR|syscall.O_NONBLOCK, 0)
	if err != nil {
		return
	}
	time.AfterFunc(time.Second, func() { _ = f.Close() })
}
