package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/internal/corpus"
)

// The tests run the built binary end to end, as an operator would.

var (
	// binary is geodlq built without the race detector: what operators
	// run, and what most tests run (a race-built geodlq takes ~1.5 s to
	// start on this 2-core machine, against ~0.2 s, and the package's
	// tests start it hundreds of times).
	binary = "" // set by TestMain
	// raceBinary is geodlq built with -race when the tests are (else
	// binary): the commands that run goroutines of their own (raceCommands)
	// run it, so the detector watches the concurrency where it lives.
	raceBinary = "" // set by TestMain
	update     = flag.Bool("update", false, "rewrite the golden files in testdata/")
)

// raceCommands are the commands that start goroutines of their own:
// check's parallel verdicts (check_stream.go), replay's workers and lease
// keeper, triage (replay's dry run), serve's HTTP server and the console's
// readers. cli.run gives them raceBinary; the rest of the commands run one
// goroutine over the store and run binary. (Their library code — broker,
// replay, warehouse, offload — is tested with -race in its own package.)
var raceCommands = map[string]bool{"check": true, "replay": true, "triage": true, "serve": true}

// binaryFor returns the binary a command line runs: raceBinary when any
// argument names a command in raceCommands (a flag's value that happens
// to be one of those words only costs a slower start), else binary.
func binaryFor(args []string) string {
	for _, a := range args {
		if raceCommands[a] {
			return raceBinary
		}
	}
	return binary
}

func TestMain(m *testing.M) {
	flag.Parse()
	dir, err := os.MkdirTemp("", "geodlq-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	binary = filepath.Join(dir, "geodlq")
	raceBinary = binary
	peakrssBin = filepath.Join(dir, "peakrss")
	builds := [][]string{{"build", "-o", binary, "."}, {"build", "-o", peakrssBin, "github.com/geodlq/geodlq/internal/peakrss"}}
	if raceEnabled {
		raceBinary = filepath.Join(dir, "geodlq-race")
		builds = append(builds, []string{"build", "-race", "-o", raceBinary, "."})
	}
	for _, args := range builds {
		build := exec.Command("go", args...)
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "building geodlq:", err)
			os.RemoveAll(dir)
			os.Exit(2)
		}
	}
	for _, bin := range []string{binary, peakrssBin} {
		if err := evictPageCache(bin); err != nil {
			fmt.Fprintln(os.Stderr, "evicting the built binary from the page cache:", err)
			os.RemoveAll(dir)
			os.Exit(2)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// result is one run of the binary.
type result struct {
	stdout, stderr string
	code           int
}

// cli runs the binary against one store and blob directory.
type cli struct {
	t     *testing.T
	store string // URL
	blobs string // URL, or ""
	env   []string
	bin   string // the binary, default binaryFor(args)
}

func (c cli) base() []string {
	a := []string{"--store", c.store}
	if c.blobs != "" {
		a = append(a, "--blobs", c.blobs)
	}
	return a
}

// run runs geodlq with the store flags and args; stdin may be nil.
func (c cli) run(stdin []byte, args ...string) result {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	bin := binaryFor(args)
	if c.bin != "" {
		bin = c.bin
	}
	cmd := exec.CommandContext(ctx, bin, append(c.base(), args...)...)
	cmd.Env = append(os.Environ(), c.env...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	default:
		c.t.Fatalf("running geodlq %v: %v", args, err)
	}
	return r
}

// must runs and requires the exit code.
func (c cli) must(code int, stdin []byte, args ...string) result {
	c.t.Helper()
	r := c.run(stdin, args...)
	require.Equal(c.t, code, r.code, "geodlq %s\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.stdout, r.stderr)
	return r
}

// Events of the seed beyond the corpus: two providers' bowties, and two
// events sharing one large geometry (offloaded once, to one blob).
var (
	bowtieGeom = `{"type":"Polygon","coordinates":[[[0,0],[1,1],[1,0],[0,1],[0,0]]]}`
	providerA  = `{"event_id":"evt-provider-a","source_uri":"s3://provider-a/tiles/7.geojson","crs":"EPSG:4326","geometry":` + bowtieGeom + `}`
	providerB  = `{"event_id":"evt-provider-b","source_uri":"s3://provider-b/parcels/1.geojson","crs":"EPSG:4326","geometry":{"type":"Polygon","coordinates":[[[10,10],[12,12],[12,10],[10,12],[10,10]]]}}`
)

func largeEvent(id string) string {
	return `{"event_id":"` + id + `","source_uri":"s3://provider-b/continent.geojson","crs":"EPSG:4326","geometry":` +
		string(corpus.LargeMultiPolygon(300<<10)) + `}`
}

// seedLines returns the seed as JSON lines: every corpus item, then the
// extra events above.
func seedLines() []byte {
	var b bytes.Buffer
	for _, it := range corpus.All() {
		b.Write(bytes.TrimRight(it.Payload, "\n"))
		b.WriteByte('\n')
	}
	for _, l := range []string{providerA, providerB, largeEvent("evt-big-1"), largeEvent("evt-big-2")} {
		b.WriteString(l + "\n")
	}
	return b.Bytes()
}

// seeded returns a cli on a fresh SQLite store and blob directory into
// which `geodlq check --dead-letter parcels` dead-lettered the seed, the
// way a consumer of topic "parcels" would have.
func seeded(t *testing.T) cli {
	t.Helper()
	dir := t.TempDir()
	c := cli{t: t, store: "sqlite://" + filepath.Join(dir, "dlq.db"), blobs: "file://" + filepath.Join(dir, "blobs")}
	c.must(exitProblems, seedLines(), "check", "--dead-letter", "parcels", "--max-vertices", "5000", "-")
	return c
}

func writeFile(path, s string) error { return os.WriteFile(path, []byte(s), 0o644) }
