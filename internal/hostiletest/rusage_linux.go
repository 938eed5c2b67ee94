package hostiletest

import (
	"os"
	"syscall"
)

// peakRSS is a finished child's peak resident set size in bytes: rusage
// maxrss, which Linux reports in KiB (it is the child's VmHWM).
func peakRSS(ps *os.ProcessState) (int64, bool) {
	ru, ok := ps.SysUsage().(*syscall.Rusage)
	if !ok {
		return 0, false
	}
	return ru.Maxrss << 10, true
}
