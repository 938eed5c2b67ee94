package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/cmd/geodlq/internal/native"
	"github.com/geodlq/geodlq/offload"
	"github.com/geodlq/geodlq/spatial"
)

// stdio is where a command reads and writes, and whether a person is
// watching.
type stdio struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	// tty is true when stdout is a terminal; progress is true when stderr
	// is one (progress bars go there).
	tty, progress bool
	// width is the terminal's width in columns (stdout's, else $COLUMNS),
	// 0 when unknown: tables are then not fitted.
	width int
}

func newStdio() stdio {
	io := stdio{
		stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr,
		tty:      term.IsTerminal(int(os.Stdout.Fd())),
		progress: term.IsTerminal(int(os.Stderr.Fd())),
	}
	if io.tty {
		if w, _, err := term.GetSize(int(os.Stdout.Fd())); err == nil && w > 0 {
			io.width = w
		}
	}
	if io.width == 0 {
		if w, err := strconv.Atoi(os.Getenv("COLUMNS")); err == nil && w > 0 {
			io.width = w
		}
	}
	return io
}

// app holds the global options every command shares, and opens what they
// name.
type app struct {
	stdio
	storeURL       string
	blobsURL       string
	blobsBase      string
	blobsPrefix    string
	dests          []string
	verbose        bool
	connectTimeout time.Duration
	progressMode   string
	progressEvery  time.Duration
	json           bool // deprecated --json: -o json
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// defaultStore is the store URL without --store or $GEODLQ_STORE: the
// file the quickstart (make demo) writes.
const defaultStore = "sqlite://./geodlq.db"

func newRoot(io stdio) *cobra.Command {
	a := &app{stdio: io}
	root := &cobra.Command{
		Use:   "geodlq",
		Short: "Find, explain, draw, repair, replay and purge dead-lettered geospatial events",
		Long: `geodlq is the operator's tool for geodlq dead-letter stores.

Stores are named by URL: --store (or $GEODLQ_STORE), default ` + defaultStore + `.
Store schemes: ` + strings.Join(broker.StoreSchemes(), ", ") + `.
Blob schemes (--blobs, $GEODLQ_BLOBS): ` + strings.Join(offload.StoreSchemes(), ", ") + `.

Output: -o table (default; fitted to the terminal), -o wide (nothing cut),
-o json (one document), -o jsonl (one object per line) where a command lists
records. Files are positional arguments (render ID FILE, export FILE; "-" is
standard output), written to a temporary name and renamed when complete.
Long commands (replay, triage, verify, purge, export) show a progress bar on a
terminal, and one JSON progress record a second on stderr otherwise.

Exit codes: 0 ok; 1 problems found (check: an event would be dead-lettered,
verify: a blob is missing or altered, replay: a record failed or the run was
incomplete); 2 usage error; 3 store or I/O error; 130 interrupted.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetIn(io.stdin)
	root.SetOut(io.stdout)
	root.SetErr(io.stderr)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return &usageError{err: err, cmd: c.CommandPath()} })
	pf := root.PersistentFlags()
	pf.StringVar(&a.storeURL, "store", envOr("GEODLQ_STORE", defaultStore), "dead-letter store URL ($GEODLQ_STORE)")
	pf.StringVar(&a.blobsURL, "blobs", os.Getenv("GEODLQ_BLOBS"), "blob store URL for offloaded geometries, e.g. file:///var/lib/geodlq/blobs or s3://bucket ($GEODLQ_BLOBS)")
	pf.StringVar(&a.blobsBase, "blobs-base", os.Getenv("GEODLQ_BLOBS_BASE"), "base URI the envelopes' offload URIs were written with, when it was another scheme, bucket or host (default: the blob store's own URI; a blob directory that moved needs none)")
	pf.StringVar(&a.blobsPrefix, "blobs-prefix", "", "blob key prefix (default "+offload.DefaultPrefix+")")
	pf.StringSliceVar(&a.dests, "dest", nil, "dead-letter destinations to look at (default: every destination holding envelopes)")
	pf.BoolVarP(&a.verbose, "verbose", "v", false, "log the library's decisions (and client libraries' own lines) to stderr")
	pf.DurationVar(&a.connectTimeout, "connect-timeout", 10*time.Second, "give up connecting to a store after this long")
	pf.StringVar(&a.progressMode, "progress", envOr("GEODLQ_PROGRESS", "auto"), "progress of long commands: auto (a bar on a terminal, JSON records on stderr otherwise), bar, json or none ($GEODLQ_PROGRESS)")
	pf.DurationVar(&a.progressEvery, "progress-interval", time.Second, "how often a JSON progress record is written")
	pf.BoolVar(&a.json, "json", false, "same as -o json")
	_ = pf.MarkHidden("progress-interval")
	_ = pf.MarkDeprecated("json", "use -o json")
	root.PersistentPreRunE = func(c *cobra.Command, _ []string) error {
		switch a.progressMode {
		case "auto", "bar", "json", "none":
		default:
			return usageFor(c, "--progress %q: want auto, bar, json or none", a.progressMode)
		}
		if a.connectTimeout <= 0 {
			return usageFor(c, "--connect-timeout must be positive")
		}
		quietClientLibraries(a.logger())
		return nil
	}
	root.AddCommand(
		newCheckCmd(a), newListCmd(a), newShowCmd(a), newStatsCmd(a), newRenderCmd(a),
		newExportCmd(a), newReplayCmd(a), newDiscardCmd(a), newTriageCmd(a), newVerifyCmd(a), newPurgeCmd(a),
		newWarehouseCmd(a), newServeCmd(a), newVersionCmd(a),
	)
	return root
}

// logger logs to stderr with -v, else nowhere.
func (a *app) logger() *slog.Logger {
	if !a.verbose {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// newChecker returns a spatial checker for the pipeline's CRS, with GEOS
// and PROJ when the binary links them (internal/native).
func newChecker(expectedEPSG, maxVertices int) (*native.Checker, error) {
	c, err := native.NewChecker(&spatial.Options{ExpectedEPSG: expectedEPSG, MaxVertices: maxVertices})
	if err != nil {
		return nil, fmt.Errorf("spatial checker: %w", err)
	}
	return c, nil
}

// exactArgs is cobra.ExactArgs with a usage error.
func exactArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usageFor(cmd, "%s takes %d argument(s), got %d", cmd.CommandPath(), n, len(args))
		}
		return nil
	}
}

// rangeArgs is cobra.RangeArgs with a usage error.
func rangeArgs(lo, hi int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < lo || len(args) > hi {
			return usageFor(cmd, "%s takes %d to %d argument(s), got %d", cmd.CommandPath(), lo, hi, len(args))
		}
		return nil
	}
}

// maxArgs is cobra.MaximumNArgs with a usage error.
func maxArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) > n {
			return usageFor(cmd, "%s takes at most %d argument(s), got %d", cmd.CommandPath(), n, len(args))
		}
		return nil
	}
}

// noArgs is cobra.NoArgs with a usage error.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageFor(cmd, "%s takes no arguments, got %q", cmd.CommandPath(), args[0])
	}
	return nil
}

// closeWith closes c and keeps the first error.
func closeWith(err *error, c io.Closer) {
	if cerr := c.Close(); cerr != nil && *err == nil {
		*err = cerr
	}
}

var errNoBlobs = errors.New("the payload is offloaded; pass --blobs to restore it")
