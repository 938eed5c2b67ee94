//go:build !linux

package hostiletest

import "os"

// peakRSS is not measured outside Linux, whose rusage units this package
// knows.
func peakRSS(*os.ProcessState) (int64, bool) { return 0, false }
