// Package hostiletest runs the hostile-input corpus ([corpus.Hostile])
// against an entry point the way issue 9 asks: every family, each call
// under a deadline (a hang aborts the test binary with every goroutine's
// stack, since a goroutine cannot be stopped from outside), and peak
// memory measured in a child process against [Budget].
//
// It is test support, imported only by tests: the library's hostile
// tests (this package's and package entrypoints', which run every library
// entry point, the first under the race detector and the second without)
// and those of the geodlq command and the JSON-Schema contract.
//
// A memory test re-executes the test binary with [RunChild]:
//
//	func TestHostileMemory(t *testing.T) {
//		if name, size, ok := hostiletest.Child(); ok {
//			f, _ := corpus.HostileFamily(name)
//			s := f.Generate(size)
//			debug.FreeOSMemory()
//			hostiletest.ResetPeak()
//			runTheEntryPoint(t, s)
//			peak, _ := hostiletest.Peak()
//			fmt.Printf("peak=%d input=%d\n", peak, len(s.Data))
//			return
//		}
//		for _, f := range corpus.Hostile() {
//			out, _ := hostiletest.RunChild(t, "TestHostileMemory", f, size)
//			// parse peak and input from out; peak <= hostiletest.Budget(input)
//		}
//	}
package hostiletest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/geodlq/geodlq/internal/corpus"
)

// Deadline is the default bound on one family at one entry point. The
// slowest families (a million-position ring repaired by GEOS under the
// race detector) take a few seconds; a hang takes forever.
const Deadline = 2 * time.Minute

// Budget is the peak-memory target for an input of n bytes: 4n + 64 MiB,
// for the whole process (the Go runtime, the test binary, GEOS and PROJ
// included).
func Budget(n int) int64 { return 4*int64(n) + 64<<20 }

// GEOSPerPart and GEOSPerVertex are what GEOS 3.11 keeps, beyond the
// input, per ring, line or collection member and per position of a
// geometry while it checks its validity: a GEOS object and a noding
// structure per ring (measured at about a kilobyte), and three doubles per
// position, however few bytes either took in the input ("[0,0]," is six).
// An entry point that hands a geometry to GEOS may use this much beyond
// [Budget]; spatial.Options.MaxParts, MaxHoles and MaxVertices bound it.
const (
	GEOSPerPart   = 1 << 10
	GEOSPerVertex = 24
)

// Within runs fn and aborts the whole test binary, printing every
// goroutine's stack, if it has not returned after d: the failure of a
// hang, which no test can recover from in-process.
func Within(t testing.TB, d time.Duration, what string, fn func()) {
	t.Helper()
	timer := time.AfterFunc(d, func() {
		debug.SetTraceback("all")
		panic(fmt.Sprintf("hostiletest: %s did not return within %v (hang)", what, d))
	})
	defer timer.Stop()
	fn()
}

// Environment of a child started by RunChild.
const (
	envFamily = "GEODLQ_HOSTILE_FAMILY"
	envSize   = "GEODLQ_HOSTILE_SIZE"
)

// Child reports whether this process is a child started by [RunChild],
// and if so for which family and size.
func Child() (family string, size int, ok bool) {
	family, ok = os.LookupEnv(envFamily)
	if !ok {
		return "", 0, false
	}
	size, _ = strconv.Atoi(os.Getenv(envSize))
	return family, size, true
}

// RunChild runs test (the name of the calling top-level test) again in a
// child process, which finds the family and size with [Child], and returns
// the child's output and its peak resident set size over its whole life
// (rusage maxrss). The child must pass; its output is in the failure
// message when it does not.
func RunChild(t *testing.T, test string, f corpus.Family, size int) (output []byte, peak int64) {
	t.Helper()
	args := []string{"-test.run=^" + test + "$", "-test.count=1", "-test.v", "-test.timeout=" + (4 * Deadline).String()}
	cmd := exec.Command(os.Args[0], args...)
	// One malloc arena: the C memory (GEOS, PROJ) one entry point frees is
	// then what the next one reuses, so that each is measured as if alone
	// rather than with the arenas of the threads before it.
	cmd.Env = append(os.Environ(), envFamily+"="+f.Name, envSize+"="+strconv.Itoa(size), "MALLOC_ARENA_MAX=1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil || !bytes.Contains(out.Bytes(), []byte("\nPASS")) {
		t.Fatalf("child for %s failed: %v\n%s", f.Name, err, out.String())
	}
	peak, ok := peakRSS(cmd.ProcessState)
	if !ok {
		t.Fatalf("cannot measure the peak RSS of a child process on this system")
	}
	return out.Bytes(), peak
}

// ResetPeak resets this process's peak resident set size (VmHWM) to its
// current size (Linux: /proc/self/clear_refs). Return freed memory to the
// system first (debug.FreeOSMemory) to measure what follows alone.
func ResetPeak() error {
	return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
}

// Peak returns this process's peak resident set size in bytes since it
// started or since [ResetPeak] (Linux: VmHWM in /proc/self/status).
func Peak() (int64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("hostiletest: no VmHWM in /proc/self/status")
}
