// Command geodlq is the operator's side of geodlq: it finds, explains,
// draws, repairs, replays, verifies and purges dead-lettered geospatial
// events in any geodlq dead-letter store, and checks events the way a
// consumer would before they ever reach a broker.
//
//	go install github.com/geodlq/geodlq/cmd/geodlq@latest
//
// Stores are named by URL (--store, or $GEODLQ_STORE; default
// sqlite://./geodlq.db): sqlite://PATH for the embedded store,
// postgres://… for PostGIS, redis://host:6379 for Redis Streams,
// kafka://host:9092 for Kafka dead-letter topics.
// Offloaded blobs are read through --blobs ($GEODLQ_BLOBS): file:///dir or
// s3://bucket.
//
// Commands:
//
//	check [FILE|-]   validate events (JSON lines or a FeatureCollection) as the consumer would
//	list             dead-lettered records, filtered
//	show ID          one record: the envelope and the verified, restored payload
//	stats            counts by class, stage, EPSG, reason kind, source prefix, time bucket
//	render ID        draw the geometry with the offending vertex or segment marked (SVG, PNG)
//	export           JSON lines, CSV, or a GeoJSON FeatureCollection for QGIS
//	replay           re-inject, optionally repaired, exactly once; resumable; Ctrl-C safe
//	triage           the triage policy: repair and re-enqueue, quarantine with alerts
//	verify           re-hash every offloaded blob the store references
//	purge            delete old records and the blobs no remaining record references
//
// Output is a table for people, or one JSON document with --json for
// scripts. Exit codes: 0 success; 1 problems found (check: an event would
// be dead-lettered; verify: a blob is missing or altered; show/render: the
// payload fails its hash); 2 usage error; 3 store, network or file error;
// 130 interrupted (Ctrl-C, SIGTERM).
//
// See docs/cli.md for every command with a transcript, and
// docs/operator-guide.md for a walk through a bowtie's life.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/geodlq/geodlq/cmd/geodlq/internal/stores"
)

// The exit codes.
const (
	exitOK          = 0
	exitProblems    = 1
	exitUsage       = 2
	exitStore       = 3
	exitInterrupted = 130
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], newStdio())
	stop()
	os.Exit(code)
}

// run executes the command line args and returns the exit code.
func run(ctx context.Context, args []string, io stdio) int {
	root := newRoot(io)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	code := exitCode(ctx, err)
	var pe *problemsError
	if !errors.As(err, &pe) || pe.msg != "" {
		fmt.Fprintf(io.stderr, "geodlq: %v\n", err)
	}
	if code == exitUsage {
		fmt.Fprintln(io.stderr, "Run 'geodlq --help' for usage.")
	}
	return code
}

func exitCode(ctx context.Context, err error) int {
	var ue *usageError
	var pe *problemsError
	switch {
	case ctx.Err() != nil:
		return exitInterrupted
	case errors.As(err, &ue), errors.Is(err, stores.ErrUnknownScheme):
		return exitUsage
	case errors.As(err, &pe):
		return exitProblems
	case strings.HasPrefix(err.Error(), "unknown command"), strings.HasPrefix(err.Error(), "unknown shorthand flag"),
		strings.HasPrefix(err.Error(), "unknown flag"):
		// cobra's own command lookup errors carry no type.
		return exitUsage
	}
	return exitStore
}

// usageError is a command line the command cannot act on: exit 2.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error {
	return &usageError{fmt.Errorf(format, args...)}
}

// problemsError reports that the command worked and found problems: exit
// 1. An empty msg prints nothing more (the report said it all).
type problemsError struct{ msg string }

func (e *problemsError) Error() string {
	if e.msg == "" {
		return "problems found"
	}
	return e.msg
}

func problems(format string, args ...any) error {
	return &problemsError{msg: fmt.Sprintf(format, args...)}
}
