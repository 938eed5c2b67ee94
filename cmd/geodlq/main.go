// Command geodlq is the operator's side of geodlq: it finds, explains,
// draws, repairs, replays, verifies and purges dead-lettered geospatial
// events in any geodlq dead-letter store, and checks events the way a
// consumer would before they ever reach a broker.
//
//	go install github.com/geodlq/geodlq/cmd/geodlq@latest
//
// Stores are named by URL (--store, or $GEODLQ_STORE; default
// sqlite://./geodlq.db) and opened with broker.OpenStore: sqlite://PATH
// for the embedded store, postgres://… for PostGIS, mysql://… for MySQL
// and MariaDB, redis://host:6379 for Redis Streams, kafka://host:9092 for
// Kafka dead-letter topics, nats://host:4222 for JetStream and
// amqp://host:5672 for RabbitMQ (which cannot be listed without leasing:
// replay, triage and discard work on it). Commands that only read open
// the store read-only: nothing is created or migrated. Offloaded blobs
// are read through --blobs ($GEODLQ_BLOBS), opened with offload.OpenStore:
// file:///dir, s3://bucket, gs://bucket, azblob://container.
//
// Commands:
//
//	check [FILE|-]      validate events (JSON lines or a FeatureCollection) as the consumer would
//	list                dead-lettered records, filtered, paged, sorted; --follow tails new ones
//	show ID             one record: the envelope and the verified, restored payload
//	stats               counts by class, stage, EPSG, reason kind, source prefix, time bucket
//	render ID [FILE]    draw the geometry with the faults marked (SVG, PNG)
//	export [FILE]       JSON lines, CSV, GeoJSON (EPSG:4326) or GeoPackage for QGIS, GeoParquet
//	replay [ID…]        re-inject, optionally repaired, exactly once; resumable; Ctrl-C safe
//	discard ID…         delete given records for good
//	triage              the triage policy: repair and re-enqueue, quarantine with alerts
//	verify              re-hash every offloaded blob the store references
//	purge               delete old records and the blobs no remaining record references
//	warehouse sync DIR  keep a GeoParquet dataset of the dead letters
//
// Output is chosen with -o: table (fitted to the terminal), wide (nothing
// cut), json or jsonl. Exit codes: 0 success; 1 problems found (check: an
// event would be dead-lettered; verify: a blob is missing or altered;
// show/render: the payload fails its hash; replay: a record failed, or
// the run was incomplete);
// 2 usage error; 3 store, network or file error; 130 interrupted (Ctrl-C,
// SIGTERM).
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

	"github.com/spf13/cobra"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/offload"
	"github.com/geodlq/geodlq/spatial"
)

// The exit codes.
const (
	exitOK          = 0
	exitProblems    = 1
	exitUsage       = 2
	exitStore       = 3
	exitNeedsCGO    = 4
	exitInterrupted = 130
)

func main() {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sigs
		cancel() // the command stops: records in flight are finished or released
		<-sigs
		fmt.Fprintln(os.Stderr, "geodlq: interrupted again; exiting at once")
		os.Exit(exitInterrupted)
	}()
	code := run(ctx, os.Args[1:], newStdio())
	// The signals stay handled until the process exits: with
	// signal.Stop here, a Ctrl-C between the end of the work and the exit
	// would kill the process (exit 130) after the work was done, telling
	// a script that a completed export or replay was interrupted.
	cancel()
	os.Exit(code)
}

// run executes the command line args and returns the exit code.
func run(ctx context.Context, args []string, io stdio) int {
	root := newRoot(io)
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return exitOK
	}
	code := exitCode(ctx, err)
	var pe *problemsError
	if !errors.As(err, &pe) || pe.msg != "" {
		// One line: a client library's error may carry newlines (joined
		// errors), and scripts read the first line.
		fmt.Fprintf(io.stderr, "geodlq: %s\n", strings.Join(strings.Fields(err.Error()), " "))
	}
	if code == exitUsage {
		path := "geodlq"
		var ue *usageError
		switch {
		case errors.As(err, &ue) && ue.cmd != "":
			path = ue.cmd
		case cmd != nil:
			path = cmd.CommandPath()
		}
		fmt.Fprintf(io.stderr, "Run '%s --help' for usage.\n", path)
	}
	return code
}

func exitCode(ctx context.Context, err error) int {
	var ue *usageError
	var pe *problemsError
	switch {
	case ctx.Err() != nil:
		return exitInterrupted
	case errors.As(err, &ue), errors.Is(err, broker.ErrUnknownScheme), errors.Is(err, offload.ErrUnknownScheme):
		return exitUsage
	case errors.As(err, &pe):
		return exitProblems
	case errors.Is(err, spatial.ErrNeedsCGO):
		return exitNeedsCGO
	case strings.HasPrefix(err.Error(), "unknown command"), strings.HasPrefix(err.Error(), "unknown shorthand flag"),
		strings.HasPrefix(err.Error(), "unknown flag"):
		// cobra's own command lookup errors carry no type.
		return exitUsage
	}
	return exitStore
}

// usageError is a command line the command cannot act on: exit 2. cmd is
// the command's path, whose --help the message points to.
type usageError struct {
	err error
	cmd string
}

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error {
	return &usageError{err: fmt.Errorf(format, args...)}
}

// usageFor is usagef for cmd: the message points to cmd's help.
func usageFor(cmd *cobra.Command, format string, args ...any) error {
	return &usageError{err: fmt.Errorf(format, args...), cmd: cmd.CommandPath()}
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
