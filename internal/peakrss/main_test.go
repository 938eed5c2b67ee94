package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// bin is peakrss, built by TestMain.
var bin string

// TestMain builds peakrss, or, when GEODLQ_PEAKRSS_CHILD is set, is the
// child the tests measure: "alloc:N" touches N bytes and exits 0,
// "exit:N" exits N, "kill" kills itself.
func TestMain(m *testing.M) {
	if mode, ok := os.LookupEnv("GEODLQ_PEAKRSS_CHILD"); ok {
		child(mode)
	}
	dir, err := os.MkdirTemp("", "peakrss-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	bin = filepath.Join(dir, "peakrss")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building peakrss:", err)
		os.RemoveAll(dir)
		os.Exit(2)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func child(mode string) {
	name, arg, _ := strings.Cut(mode, ":")
	n, _ := strconv.Atoi(arg)
	switch name {
	case "alloc":
		b := make([]byte, n)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		fmt.Println(b[len(b)/2])
		os.Exit(0)
	case "exit":
		fmt.Fprintln(os.Stderr, "exiting with", n)
		os.Exit(n)
	case "kill":
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	case "interrupt":
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, os.Interrupt)
		fmt.Println("ready")
		<-sigs
		os.Exit(7)
	}
	os.Exit(99)
}

// measure runs this test binary as the child in mode under peakrss and
// returns peakrss's exit code, its stdout and the figure it wrote (-1
// when it wrote none).
func measure(t *testing.T, mode string) (code int, stdout string, peak int64) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "peak")
	cmd := exec.Command(bin, "-o", out, os.Args[0])
	cmd.Env = append(os.Environ(), "GEODLQ_PEAKRSS_CHILD="+mode)
	var so strings.Builder
	cmd.Stdout = &so
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil {
		require.ErrorAs(t, err, &exit)
	}
	b, err := os.ReadFile(out)
	if errors.Is(err, os.ErrNotExist) {
		return cmd.ProcessState.ExitCode(), so.String(), -1
	}
	require.NoError(t, err)
	peak, err = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	require.NoError(t, err)
	return cmd.ProcessState.ExitCode(), so.String(), peak
}

// TestPeakIsTheCommandsOwn holds the reason peakrss exists: run from a
// process that holds 512 MiB, a small command's peak measured directly
// counts the parent's pages, and measured through peakrss does not.
func TestPeakIsTheCommandsOwn(t *testing.T) {
	const held = 512 << 20
	big := make([]byte, held)
	for i := 0; i < len(big); i += 4096 {
		big[i] = 1
	}

	direct := exec.Command(os.Args[0])
	direct.Env = append(os.Environ(), "GEODLQ_PEAKRSS_CHILD=alloc:1024")
	require.NoError(t, direct.Run())
	directPeak := direct.ProcessState.SysUsage().(*syscall.Rusage).Maxrss << 10
	require.GreaterOrEqual(t, directPeak, int64(held), "measured directly, the child counts this process's pages (vfork)")

	code, stdout, peak := measure(t, "alloc:1024")
	require.Equal(t, 0, code)
	require.Equal(t, "0\n", stdout, "the command's output is passed through")
	require.Positive(t, peak)
	require.Less(t, peak, int64(held/4), "through peakrss only the command's own pages count")
	big[len(big)-1] = 2 // held until here
}

func TestPeakFollowsTheCommand(t *testing.T) {
	for _, n := range []int{64 << 20, 256 << 20} {
		t.Run(strconv.Itoa(n>>20)+"MiB", func(t *testing.T) {
			code, _, peak := measure(t, "alloc:"+strconv.Itoa(n))
			require.Equal(t, 0, code)
			require.GreaterOrEqual(t, peak, int64(n))
			require.Less(t, peak, int64(n)+64<<20)
		})
	}
}

func TestExitCodes(t *testing.T) {
	for _, tc := range []struct {
		mode     string
		code     int
		measured bool
	}{
		{mode: "exit:0", code: 0, measured: true},
		{mode: "exit:3", code: 3, measured: true},
		{mode: "kill", code: 128 + int(syscall.SIGKILL), measured: true},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			code, _, peak := measure(t, tc.mode)
			require.Equal(t, tc.code, code)
			require.Equal(t, tc.measured, peak > 0)
		})
	}
}

func TestUsageAndStartErrors(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "peak")
	for _, tc := range []struct {
		name string
		args []string
		code int
	}{
		{name: "no file", args: []string{os.Args[0]}, code: 2},
		{name: "no command", args: []string{"-o", out}, code: 2},
		{name: "no such command", args: []string{"-o", out, filepath.Join(dir, "missing")}, code: 127},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(bin, tc.args...)
			err := cmd.Run()
			var exit *exec.ExitError
			require.ErrorAs(t, err, &exit)
			require.Equal(t, tc.code, exit.ExitCode())
			require.NoFileExists(t, out, "nothing ran, nothing is written")
		})
	}
}

// TestSignalsReachTheCommand: SIGINT to peakrss stops the command as it
// would have stopped it alone, and the figure is still written.
func TestSignalsReachTheCommand(t *testing.T) {
	out := filepath.Join(t.TempDir(), "peak")
	cmd := exec.Command(bin, "-o", out, os.Args[0])
	cmd.Env = append(os.Environ(), "GEODLQ_PEAKRSS_CHILD=interrupt")
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	line := make([]byte, 6)
	_, err = io.ReadFull(stdout, line)
	require.NoError(t, err)
	require.Equal(t, "ready\n", string(line))
	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	err = cmd.Wait()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	require.Equal(t, 7, exit.ExitCode(), "the command's own exit, after its handler ran")
	require.FileExists(t, out)
}
