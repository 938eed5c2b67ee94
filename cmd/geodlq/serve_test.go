package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	_ "github.com/geodlq/geodlq/broker/sqlite"
)

// serving is a `geodlq serve` process.
type serving struct {
	cmd    *exec.Cmd
	url    string // http://127.0.0.1:port/
	token  string // from the printed #token= URL, if any
	stderr *strings.Builder
}

var openLine = regexp.MustCompile(`^open (http://127\.0\.0\.1:\d+/)(?:#token=(\S+))?$`)

// startServe runs geodlq serve on a free loopback port and waits for the
// line that names its address.
func startServe(t *testing.T, env []string, args ...string) *serving {
	t.Helper()
	cmd := exec.Command(raceBinary, append(args, "serve", "--addr", "127.0.0.1:0", "--poll", "100ms")...)
	cmd.Env = append(os.Environ(), env...)
	pr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	s := &serving{cmd: cmd, stderr: &strings.Builder{}}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	found := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			s.stderr.WriteString(line + "\n")
			if m := openLine.FindStringSubmatch(line); m != nil {
				s.url, s.token = m[1], m[2]
				close(found)
			}
		}
	}()
	select {
	case <-found:
	case <-time.After(60 * time.Second):
		t.Fatalf("geodlq serve did not say where it listens")
	}
	return s
}

// TestServe runs the command: read-only by default (actions refused),
// actions with a token from the environment or a generated one, clear
// usage errors, and a clean stop on Ctrl-C.
func TestServe(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	url := "sqlite://" + filepath.Join(dir, "dlq.db")
	s, err := broker.OpenStore(context.Background(), url, &broker.OpenOptions{Create: true})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	store := []string{"--store", url}

	ro := startServe(t, nil, store...)
	require.Contains(t, ro.stderr.String(), "read-only")
	require.Empty(t, ro.token)
	var cfg struct {
		ReadOnly bool `json:"read_only"`
	}
	res, err := http.Get(ro.url + "api/config")
	require.NoError(t, err)
	require.NoError(t, json.NewDecoder(res.Body).Decode(&cfg))
	res.Body.Close()
	require.True(t, cfg.ReadOnly)
	require.Contains(t, res.Header.Get("Content-Security-Policy"), "script-src 'self'")
	req, _ := http.NewRequest("POST", ro.url+"api/jobs", strings.NewReader(`{"action":"discard","dry_run":true}`))
	req.Header.Set("Authorization", "Bearer whatever-token-0123456789")
	req.Header.Set("Content-Type", "application/json")
	res, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusForbidden, res.StatusCode)

	// Ctrl-C stops it cleanly.
	require.NoError(t, ro.cmd.Process.Signal(syscall.SIGINT))
	require.NoError(t, ro.cmd.Wait(), ro.stderr.String())

	// A token from the environment enables actions.
	rw := startServe(t, []string{"GEODLQ_TOKEN=env-token-0123456789abcdef"}, store...)
	require.Contains(t, rw.stderr.String(), "actions enabled")
	require.Empty(t, rw.token, "a given token is not printed")
	req, _ = http.NewRequest("POST", rw.url+"api/jobs", strings.NewReader(`{"action":"discard","dry_run":true,"records":[{"destination":"d","id":"1"}]}`))
	req.Header.Set("Authorization", "Bearer env-token-0123456789abcdef")
	req.Header.Set("Content-Type", "application/json")
	res, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	require.Equal(t, http.StatusAccepted, res.StatusCode, string(b))

	// --read-only=false without a token makes one and prints it once.
	gen := startServe(t, nil, append(store, "--read-only=false")...)
	require.Len(t, gen.token, 32)

	for _, tc := range []struct {
		env  []string
		args []string
		msg  string
	}{
		{[]string{"GEODLQ_TOKEN=short"}, nil, "at least 16 characters"},
		{nil, []string{"--token-file", filepath.Join(dir, "missing")}, "--token-file"},
		{nil, []string{"--tiles", "javascript:alert(1)"}, "tile URL"},
		{nil, []string{"--poll", "1ms"}, "--poll"},
		{nil, []string{"--target", url}, "read-only console"},
		{nil, []string{"extra"}, "takes no arguments"},
	} {
		cmd := exec.Command(raceBinary, append(append(append([]string{}, store...), "serve", "--addr", "127.0.0.1:0"), tc.args...)...)
		cmd.Env = append(os.Environ(), tc.env...)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		require.True(t, errors.As(err, &ee), "%v: %s", tc.args, out)
		require.Contains(t, string(out), tc.msg)
		if tc.msg != "--token-file" {
			require.Equal(t, exitUsage, ee.ExitCode(), string(out))
		}
	}

	// A store that is not there is an error, not an empty console.
	out, err := exec.Command(raceBinary, "--store", "sqlite://"+filepath.Join(dir, "nope.db"), "serve", "--addr", "127.0.0.1:0").CombinedOutput()
	require.Error(t, err, string(out))
	require.Contains(t, string(out), "no geodlq store")
}
