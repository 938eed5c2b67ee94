// Package kafkatest runs franz-go's kfake — an in-memory Kafka cluster
// that speaks the real protocol on loopback — for tests of code that uses
// package kafka, geodlq's own included.
//
// kfake is served only at versions that need a newer Go (1.26) and a newer
// franz-go than the floor package kafka requires, so it is not a
// requirement of this module: [NewCluster] runs it in a process of its
// own, built once with the go command from a small program embedded here
// (its go.mod and go.sum pin kfake) and kept in the user cache directory
// ($XDG_CACHE_HOME/geodlq/kafkatest). The first build needs the go command
// (1.26 or newer) and the Go module proxy or a module cache holding kfake;
// later ones reuse the binary. Each cluster is its own process, so tests
// stay isolated; it exits when [Cluster.Close] is called or when the
// process that started it dies.
package kafkatest

import (
	"bufio"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
)

var (
	//go:embed kfakeserver/main.go.txt
	serverMain []byte
	//go:embed kfakeserver/go.mod.txt
	serverMod []byte
	//go:embed kfakeserver/go.sum.txt
	serverSum []byte
)

// Options configure a cluster. The zero value (or nil) is one broker and
// no topics.
type Options struct {
	// Brokers is the number of brokers. Default 1.
	Brokers int
	// Topics are created when the cluster starts, each with Partitions
	// partitions. Default none (clients may create their own).
	Topics []string
	// Partitions is the partition count of each of Topics. Default 1.
	Partitions int
	// GroupMinSessionTimeout is the smallest session timeout a consumer
	// group member may ask for; tests lower it to rebalance quickly.
	// Default: kfake's (6 s).
	GroupMinSessionTimeout time.Duration
}

// Cluster is a running kfake cluster.
type Cluster struct {
	addrs []string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	once  sync.Once
	err   error
}

// StartTimeout bounds how long [NewCluster] waits for a cluster's process
// to print its addresses, after the binary is built.
const StartTimeout = 30 * time.Second

// NewCluster builds the kfake server when it is not built yet, then starts
// a cluster and returns once it listens. ctx bounds the build and the
// start; the cluster outlives it, until [Cluster.Close].
func NewCluster(ctx context.Context, opts *Options) (*Cluster, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Brokers < 0 || o.Partitions < 0 || o.GroupMinSessionTimeout < 0 {
		return nil, errors.New("kafkatest: negative option")
	}
	for _, t := range o.Topics {
		if t == "" || strings.Contains(t, ",") {
			return nil, fmt.Errorf("kafkatest: bad topic name %q", t)
		}
	}
	bin, err := serverBinary(ctx)
	if err != nil {
		return nil, err
	}
	args := []string{"-brokers", strconv.Itoa(max(o.Brokers, 1)), "-partitions", strconv.Itoa(max(o.Partitions, 1))}
	if len(o.Topics) > 0 {
		args = append(args, "-topics", strings.Join(o.Topics, ","))
	}
	if o.GroupMinSessionTimeout > 0 {
		args = append(args, "-group-min-session-timeout", o.GroupMinSessionTimeout.String())
	}
	cmd := exec.Command(bin, args...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("kafkatest: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("kafkatest: %w", err)
	}
	var stderr strings.Builder
	cmd.Stderr = &limitedWriter{w: &stderr, n: 4096}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("kafkatest: starting kfake: %w", err)
	}
	c := &Cluster{cmd: cmd, stdin: stdin}
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(io.LimitReader(stdout, 64<<10)).ReadString('\n')
		line <- strings.TrimSpace(s)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	sctx, cancel := context.WithTimeout(ctx, StartTimeout)
	defer cancel()
	select {
	case l := <-line:
		if l == "" {
			_ = c.Close()
			return nil, fmt.Errorf("kafkatest: kfake exited before listening: %s", strings.TrimSpace(stderr.String()))
		}
		c.addrs = strings.Split(l, ",")
		return c, nil
	case <-sctx.Done():
		_ = c.Close()
		return nil, fmt.Errorf("kafkatest: kfake did not start: %w", sctx.Err())
	}
}

// Addrs returns the brokers' host:port addresses (loopback), for
// kgo.SeedBrokers.
func (c *Cluster) Addrs() []string { return append([]string(nil), c.addrs...) }

// Close stops the cluster and waits for its process (at most 10 seconds,
// then kills it). It is safe to call more than once.
func (c *Cluster) Close() error {
	c.once.Do(func() {
		_ = c.stdin.Close()
		done := make(chan error, 1)
		go func() { done <- c.cmd.Wait() }()
		select {
		case err := <-done:
			c.err = err
		case <-time.After(10 * time.Second):
			_ = c.cmd.Process.Kill()
			c.err = <-done
		}
		if c.err != nil {
			c.err = fmt.Errorf("kafkatest: kfake: %w", c.err)
		}
	})
	return c.err
}

// build caches the server binary's path for the life of the process.
var build struct {
	mu   sync.Mutex
	path string
}

// serverBinary returns the path of the built server, building it into the
// user cache directory (under a name derived from its sources) when it is
// missing.
func serverBinary(ctx context.Context) (string, error) {
	build.mu.Lock()
	defer build.mu.Unlock()
	if build.path != "" {
		return build.path, nil
	}
	h := sha256.New()
	for _, b := range [][]byte{serverMain, serverMod, serverSum, []byte(runtime.GOOS + "/" + runtime.GOARCH)} {
		_, _ = fmt.Fprintf(h, "%d:", len(b))
		h.Write(b)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "geodlq", "kafkatest")
	bin := filepath.Join(dir, "kfakeserver-"+hex.EncodeToString(h.Sum(nil))[:16])
	if fi, err := os.Stat(bin); err == nil && fi.Mode().IsRegular() {
		build.path = bin
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("kafkatest: %w", err)
	}
	unlock, err := lockFile(ctx, bin+".lock")
	if err != nil {
		return "", fmt.Errorf("kafkatest: %w", err)
	}
	defer unlock()
	if fi, err := os.Stat(bin); err == nil && fi.Mode().IsRegular() {
		build.path = bin // another process built it while this one waited
		return bin, nil
	}
	src, err := os.MkdirTemp(dir, "src-")
	if err != nil {
		return "", fmt.Errorf("kafkatest: %w", err)
	}
	defer os.RemoveAll(src)
	for name, b := range map[string][]byte{"main.go": serverMain, "go.mod": serverMod, "go.sum": serverSum} {
		if err := os.WriteFile(filepath.Join(src, name), b, 0o644); err != nil {
			return "", fmt.Errorf("kafkatest: %w", err)
		}
	}
	gocmd, err := exec.LookPath("go")
	if err != nil {
		gocmd = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	tmp := filepath.Join(src, "kfakeserver")
	bctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(bctx, gocmd, "build", "-trimpath", "-o", tmp, ".")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("kafkatest: building kfake (go 1.26 or newer and the module proxy or cache are needed): %w: %s", err, out)
	}
	if err := os.Rename(tmp, bin); err != nil {
		return "", fmt.Errorf("kafkatest: %w", err)
	}
	build.path = bin
	return bin, nil
}

// limitedWriter keeps the first n bytes written to it.
type limitedWriter struct {
	w io.Writer
	n int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if l.n > 0 {
		k := min(len(p), l.n)
		_, _ = l.w.Write(p[:k])
		l.n -= k
	}
	return len(p), nil
}
