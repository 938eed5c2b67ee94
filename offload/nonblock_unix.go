//go:build unix

package offload

import "syscall"

// openNonblock is added to the flags of every open for reading, so that
// opening a FIFO planted at a key returns at once instead of waiting for a
// writer. It has no effect on regular files.
const openNonblock = syscall.O_NONBLOCK
