//go:build !unix

package offload

// openNonblock is zero where opening a special file cannot wait for a
// peer (there are no FIFOs in the file system).
const openNonblock = 0
