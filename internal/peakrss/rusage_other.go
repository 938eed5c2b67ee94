//go:build !linux

package main

import (
	"os"
	"syscall"
)

// procAttr has no parent-death signal to ask for outside Linux.
func procAttr() *syscall.SysProcAttr { return nil }

// maxRSS is not measured outside Linux, whose rusage units peakrss knows.
func maxRSS(*os.ProcessState) (int64, bool) { return 0, false }
