// Command peakrss runs a command and writes the peak resident set size of
// that command alone, in bytes, to a file: what the tests that bound a
// command's memory assert.
//
//	peakrss -o FILE COMMAND [ARG...]
//
// A test cannot read the figure from the child it starts itself. Go starts
// a child as a vfork of the test process, and when the child execs, Linux
// folds the high-water mark of the address space it leaves — the test
// process's, which under -race or after a large fixture is hundreds of MiB
// — into the child's rusage maxrss. peakrss is a small process: the
// command it starts inherits only its few MiB, so maxrss is the command's
// own peak (max(peakrss's, the command's)).
//
// Standard input, output and error are the command's, and so are the
// signals peakrss gets to stop it (SIGINT, SIGTERM, SIGHUP, SIGQUIT: passed
// on, and peakrss waits). peakrss exits with the command's exit code, or
// 128 + the signal that ended it, as a shell does; the command is killed
// when peakrss is (a test's deadline kills peakrss). The file is written to a temporary name and renamed, and only
// when the command ran.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"syscall"

	"github.com/geodlq/geodlq/internal/atomicfile"
)

func main() {
	out := flag.String("o", "", "the file the peak RSS, in bytes, is written to")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: peakrss -o FILE COMMAND [ARG...]")
		flag.PrintDefaults()
	}
	flag.Parse()
	if *out == "" || flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	os.Exit(run(*out, flag.Args()))
}

// run runs args, writes its peak RSS to out and returns the exit code
// peakrss exits with.
func run(out string, args []string) int {
	// The parent-death signal is sent when the thread that started the
	// child ends: start it from this one, which lives until exit.
	runtime.LockOSThread()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = procAttr()
	// The signals a caller stops a command with are the command's: it
	// gets them, and peakrss waits for it to end.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	defer signal.Stop(sigs)
	err := cmd.Start()
	if err == nil {
		done := make(chan struct{})
		go func() {
			for {
				select {
				case sig := <-sigs:
					_ = cmd.Process.Signal(sig)
				case <-done:
					return
				}
			}
		}()
		err = cmd.Wait()
		close(done)
	}
	ps := cmd.ProcessState
	var exit *exec.ExitError
	if ps == nil || (err != nil && !errors.As(err, &exit)) {
		fmt.Fprintln(os.Stderr, "peakrss:", err)
		return 127
	}
	peak, ok := maxRSS(ps)
	if !ok {
		fmt.Fprintln(os.Stderr, "peakrss: this system reports no peak RSS")
		return 125
	}
	if err := atomicfile.WriteFile(out, []byte(strconv.FormatInt(peak, 10)+"\n")); err != nil {
		fmt.Fprintln(os.Stderr, "peakrss:", err)
		return 125
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}
