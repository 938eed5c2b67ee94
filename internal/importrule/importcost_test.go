package importrule_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// maxCoreCost bounds what importing and using the core adds to a service
// binary, stripped and built with CGO_ENABLED=0 (issue 21: 13.8 → 24.2 MB
// when envelope linked go-playground/validator).
const maxCoreCost = 3 << 20

// serviceBase is a small HTTP service as a team would write it before
// adopting geodlq: JSON over HTTP, structured logs, a signal-aware
// shutdown.
const serviceBase = `package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"time"
)

type event struct {
	ID       string          ` + "`json:\"event_id\"`" + `
	Geometry json.RawMessage ` + "`json:\"geometry\"`" + `
}

func handle(w http.ResponseWriter, r *http.Request) {
	var ev event
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&ev); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if err := process(r.Context(), ev, r); err != nil {
		slog.Error("process", "event", ev.ID, "err", err)
		http.Error(w, "dead-lettered", http.StatusAccepted)
		return
	}
	_ = json.NewEncoder(w).Encode(map[string]string{"ok": ev.ID})
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	srv := &http.Server{Addr: "127.0.0.1:0", Handler: http.HandlerFunc(handle), ReadHeaderTimeout: 5 * time.Second}
	go func() { <-ctx.Done(); _ = srv.Shutdown(context.Background()) }()
	if err := srv.ListenAndServe(); err != nil && err != http.ErrServerClosed {
		slog.Error("serve", "err", err)
		os.Exit(1)
	}
}
`

// processPlain is the base service's processing step.
const processPlain = `package main

import (
	"context"
	"errors"
	"net/http"
)

func process(_ context.Context, ev event, _ *http.Request) error {
	if len(ev.Geometry) == 0 {
		return errors.New("no geometry")
	}
	return nil
}
`

// processCore is the same step through geodlq's core: classify the
// failure, retry it, build a dlq.v1 envelope (offloading a large geometry
// to a directory), publish it to a store, decode it back, and replay.
const processCore = `package main

import (
	"context"
	"errors"
	"net/http"
	"os"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/memory"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/offload"
	"github.com/geodlq/geodlq/replay"
)

var store = memory.New(nil)

func process(ctx context.Context, ev event, r *http.Request) error {
	blobs, err := offload.NewDirStore(os.TempDir())
	if err != nil {
		return err
	}
	off, err := offload.New(blobs, nil)
	if err != nil {
		return err
	}
	b, err := envelope.NewBuilder(&envelope.BuilderOptions{Offloader: off})
	if err != nil {
		return err
	}
	proc, err := broker.NewProcessor(&broker.ProcessorOptions{Publisher: store, Builder: b})
	if err != nil {
		return err
	}
	m := &broker.Message{Key: []byte(ev.ID), Body: []byte(ev.Geometry), Headers: map[string]string{"source": r.URL.Path}}
	out, err := proc.Process(ctx, m, func(context.Context, *broker.Message) error {
		if len(ev.Geometry) == 0 {
			return classify.SchemaViolation(errors.New("no geometry"))
		}
		return nil
	})
	if err != nil || !out.Ack {
		return errors.Join(err, errors.New(string(classify.Classify(err))))
	}
	dest := broker.DefaultDestination(m, classify.RoutePoison)
	rec, err := store.Fetch(ctx, dest, broker.Filter{}, 1)
	if err == nil && len(rec) > 0 {
		if _, err := envelope.Decode(rec[0].Message.Body); err != nil {
			return err
		}
	}
	rp, err := replay.New(&replay.Options{Source: store, Target: store, Fetcher: off})
	if err != nil {
		return err
	}
	_, err = rp.Run(ctx, replay.Request{Destination: dest})
	return err
}
`

// reflectMethod matches the linker's -dumpdep lines for a function that
// calls reflect.Value.MethodByName (or Method) with a name it cannot see:
// the linker then keeps every exported method of every type whose methods
// might be called, in the whole program.
var reflectMethod = regexp.MustCompile(`(?m)^(\S+) <ReflectMethod> `)

// TestCoreImportCost builds the service above twice, stripped and with
// CGO_ENABLED=0 — plain, and with its processing step through classify,
// envelope, offload, broker (and broker/memory) and replay — and checks
// that the core adds at most maxCoreCost bytes, and that no function of
// the second keeps reflect's method lookup live (-ldflags=-dumpdep marks
// such a function <ReflectMethod>).
func TestCoreImportCost(t *testing.T) {
	if testing.Short() {
		t.Skip("builds three binaries with the go command (runs in make test)")
	}
	dir := t.TempDir()
	mod := fmt.Sprintf("module example.com/service\n\ngo 1.25.0\n\nrequire github.com/geodlq/geodlq %s\n\nreplace github.com/geodlq/geodlq => %s\n", unpublished, repoRoot(t))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(mod), 0o644))
	for name, process := range map[string]string{"plain": processPlain, "core": processCore} {
		require.NoError(t, os.MkdirAll(filepath.Join(dir, name), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, name, "main.go"), []byte(serviceBase), 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(dir, name, "process.go"), []byte(process), 0o644))
	}
	goCmd(t, dir, "mod", "tidy")

	deps := goCmdEnv(t, dir, []string{"CGO_ENABLED=0"}, "build", "-ldflags=-dumpdep", "-o", os.DevNull, "./core")
	require.Contains(t, deps, "main.process ->", "the linker printed no dependency graph")
	var live []string
	for _, m := range reflectMethod.FindAllStringSubmatch(deps, -1) {
		live = append(live, m[1])
	}
	live = slices.Compact(slices.Sorted(slices.Values(live)))
	require.Empty(t, live, "these functions keep reflect.Value.MethodByName live, which turns off dead-method elimination for the whole program")

	size := func(pkg string) int64 {
		bin := filepath.Join(dir, pkg+".bin")
		goCmdEnv(t, dir, []string{"CGO_ENABLED=0"}, "build", "-trimpath", "-ldflags=-s -w", "-o", bin, "./"+pkg)
		fi, err := os.Stat(bin)
		require.NoError(t, err)
		return fi.Size()
	}
	plain, core := size("plain"), size("core")
	t.Logf("stripped CGO_ENABLED=0 service: %.2f MB plain, %.2f MB with the core (+%.2f MB; at most %.2f)",
		mb(plain), mb(core), mb(core-plain), mb(maxCoreCost))
	require.LessOrEqual(t, core-plain, int64(maxCoreCost), "importing the core makes the service %.2f MB bigger", mb(core-plain))
}

// TestReflectMethodDetected checks that the test above would see a
// MethodByName call: a program making one is marked.
func TestReflectMethodDetected(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a binary with the go command (runs in make test)")
	}
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module example.com/m\n\ngo 1.25.0\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(`package main

import (
	"os"
	"reflect"
)

type T struct{}

func (T) Hello() {}

func main() { _ = reflect.ValueOf(T{}).MethodByName(os.Args[0]) }
`), 0o644))
	deps := goCmdEnv(t, dir, []string{"CGO_ENABLED=0"}, "build", "-ldflags=-dumpdep", "-o", os.DevNull, ".")
	require.Regexp(t, reflectMethod, deps)
	require.Equal(t, "main.main", reflectMethod.FindStringSubmatch(deps)[1])
}

func mb(n int64) float64 { return float64(n) / (1 << 20) }

// goCmdEnv is goCmd with extra environment, returning standard output and
// standard error together (the linker's -dumpdep writes to the latter).
func goCmdEnv(t *testing.T, dir string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), args...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod"), env...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go %s in %s: %s", strings.Join(args, " "), dir, lastLines(string(out), 40))
	return string(out)
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
