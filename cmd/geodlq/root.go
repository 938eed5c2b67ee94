package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/geodlq/geodlq/cmd/geodlq/internal/stores"
	"github.com/geodlq/geodlq/offload"
	"github.com/geodlq/geodlq/spatial"
)

// stdio is where a command reads and writes, and whether a person is
// watching.
type stdio struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	// tty is true when stdout is a terminal; progress is true when stderr
	// is one (progress lines go there).
	tty, progress bool
}

func newStdio() stdio {
	return stdio{
		stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr,
		tty:      term.IsTerminal(int(os.Stdout.Fd())),
		progress: term.IsTerminal(int(os.Stderr.Fd())),
	}
}

// app holds the global options every command shares, and opens what they
// name.
type app struct {
	stdio
	storeURL    string
	blobsURL    string
	blobsBase   string
	blobsPrefix string
	json        bool
	dests       []string
	verbose     bool
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func newRoot(io stdio) *cobra.Command {
	a := &app{stdio: io}
	root := &cobra.Command{
		Use:   "geodlq",
		Short: "Find, explain, draw, repair, replay and purge dead-lettered geospatial events",
		Long: `geodlq is the operator's tool for geodlq dead-letter stores.

Stores are named by URL: --store (or $GEODLQ_STORE), default sqlite://./geodlq.db.
Known store schemes: ` + strings.Join(stores.Schemes(), ", ") + `; blob schemes (--blobs, $GEODLQ_BLOBS): ` +
			strings.Join(stores.BlobSchemes(), ", ") + `.

Exit codes: 0 ok; 1 problems found (check: an event would be dead-lettered,
verify: a blob is missing or altered); 2 usage error; 3 store or I/O error;
130 interrupted.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetIn(io.stdin)
	root.SetOut(io.stdout)
	root.SetErr(io.stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err} })
	pf := root.PersistentFlags()
	pf.StringVar(&a.storeURL, "store", envOr("GEODLQ_STORE", "sqlite://./geodlq.db"), "dead-letter store URL ($GEODLQ_STORE)")
	pf.StringVar(&a.blobsURL, "blobs", os.Getenv("GEODLQ_BLOBS"), "blob store URL for offloaded geometries, e.g. file:///var/lib/geodlq/blobs ($GEODLQ_BLOBS)")
	pf.StringVar(&a.blobsBase, "blobs-base", os.Getenv("GEODLQ_BLOBS_BASE"), "base URI the envelopes' offload URIs were written with, when the blobs moved (default: the blob store's own URI)")
	pf.StringVar(&a.blobsPrefix, "blobs-prefix", "", "blob key prefix (default "+offload.DefaultPrefix+")")
	pf.BoolVar(&a.json, "json", false, "write one JSON document (stable field names) instead of a table")
	pf.StringSliceVar(&a.dests, "dest", nil, "dead-letter destinations to look at (default: every destination holding envelopes, for stores that can list them)")
	pf.BoolVarP(&a.verbose, "verbose", "v", false, "log the library's decisions to stderr")
	root.AddCommand(
		newCheckCmd(a), newListCmd(a), newShowCmd(a), newStatsCmd(a), newRenderCmd(a),
		newExportCmd(a), newReplayCmd(a), newTriageCmd(a), newVerifyCmd(a), newPurgeCmd(a),
		newWarehouseCmd(a), newServeCmd(a),
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

// openStore opens --store. create allows creating it.
func (a *app) openStore(ctx context.Context, create bool) (stores.Store, error) {
	return stores.Open(ctx, a.storeURL, stores.Options{Create: create, Logger: a.logger()})
}

// openBlobs opens --blobs, or returns nil (and a no-op closer) when it is
// not set.
func (a *app) openBlobs(ctx context.Context, create bool) (*offload.Offloader, func(), error) {
	if a.blobsURL == "" {
		return nil, func() {}, nil
	}
	off, c, err := stores.OpenBlobs(ctx, a.blobsURL, stores.BlobOptions{BaseURI: a.blobsBase, Prefix: a.blobsPrefix, Create: create})
	if err != nil {
		return nil, nil, err
	}
	return off, func() { _ = c.Close() }, nil
}

// destinations returns --dest, or every destination the store lists.
func (a *app) destinations(ctx context.Context, s stores.Store) ([]string, error) {
	if len(a.dests) > 0 {
		return a.dests, nil
	}
	l, ok := s.(stores.Lister)
	if !ok {
		return nil, usagef("this store cannot list its destinations: name them with --dest")
	}
	return l.Destinations(ctx)
}

// checker returns a spatial checker for the pipeline's CRS.
func newChecker(expectedEPSG, maxVertices int) (*spatial.Checker, error) {
	c, err := spatial.NewChecker(&spatial.Options{ExpectedEPSG: expectedEPSG, MaxVertices: maxVertices})
	if err != nil {
		return nil, fmt.Errorf("spatial checker: %w", err)
	}
	return c, nil
}

// writeJSON writes v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// table writes rows under a header, aligned.
func table(w io.Writer, header []string, rows [][]string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

// exactArgs is cobra.ExactArgs with a usage error.
func exactArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usagef("%s takes %d argument(s), got %d", cmd.CommandPath(), n, len(args))
		}
		return nil
	}
}

// maxArgs is cobra.MaximumNArgs with a usage error.
func maxArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) > n {
			return usagef("%s takes at most %d argument(s), got %d", cmd.CommandPath(), n, len(args))
		}
		return nil
	}
}

// noArgs is cobra.NoArgs with a usage error.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usagef("%s takes no arguments, got %q", cmd.CommandPath(), args[0])
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
