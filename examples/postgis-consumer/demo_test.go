package main

// The demo: sample.jsonl loaded into a schema of its own on the local
// PostgreSQL, the dead-letter table as PostGIS sees it, a dry run, a
// replay that crashes before acknowledging and the one after it, and the
// parcels table that shows every event written once. Run it with
//
//	go test -v -run TestDemo ./examples/postgis-consumer [-args -keep]
//
// It lives in a test file so that main.go stays what a service copies.

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/postgis"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/replay"
)

var keep = flag.Bool("keep", false, "keep TestDemo's schema, to look at it")

// demoOutput is where TestDemo prints its walkthrough: the terminal too
// with -v, and the test's log if it fails.
func demoOutput(t *testing.T) io.Writer {
	var buf bytes.Buffer
	t.Cleanup(func() {
		if t.Failed() && !testing.Verbose() {
			t.Log(buf.String())
		}
	})
	if testing.Verbose() {
		return io.MultiWriter(&buf, os.Stdout)
	}
	return &buf
}

// sampleEvents are what a producer sent, one per line: a valid parcel, a
// bowtie, an unparseable CRS, a line that is not JSON, an event whose tile
// server fails twice and then answers, and one whose tile server is down
// until the replay.
//
//go:embed sample.jsonl
var sampleEvents []byte

// demoResult is what the demo did, for its test.
type demoResult struct {
	// outcomes are the load outcomes by line of sample.jsonl.
	outcomes map[int]broker.Result
	// dry, crashed and replayed are the reports of the dry run, the replay
	// that crashed before acknowledging, and the replay after it, by
	// destination.
	dry, crashed, replayed map[string]replay.Report
}

// demo loads the sample events into c.schema, shows the dead-letter
// table as PostGIS sees it, replays twice — the first replayer crashing
// before it acknowledges — and shows from the parcels table that every
// event was written exactly once.
func demo(ctx context.Context, c config, out io.Writer, log *slog.Logger) (*demoResult, error) {
	c.lease = time.Second // the crashed replayer's leases lapse quickly
	p, err := newPipeline(ctx, c, log)
	if err != nil {
		return nil, err
	}
	defer p.close()
	tiles := newTileServer()
	p.enrich = tiles.Enrich
	res := &demoResult{outcomes: map[int]broker.Result{}}

	fmt.Fprintf(out, "geodlq postgis-consumer demo: dead-letter table %s, parcels %s\n\n", postgis.Table(p.store), p.parcels())
	fmt.Fprintln(out, "1. Loading the sample events (JSON lines):")
	lines := bytes.Split(sampleEvents, []byte("\n"))
	st, err := p.readLines(ctx, bytes.NewReader(sampleEvents), "sample.jsonl", func(line int, o broker.Result) {
		res.outcomes[line] = o
		if o.Processed {
			fmt.Fprintf(out, "   line %d %s: loaded after %d attempt(s)\n", line, eventName(lines[line-1]), o.Attempts)
			return
		}
		fmt.Fprintf(out, "   line %d %s\n", line, describe(o))
	})
	if err != nil {
		return res, err
	}
	fmt.Fprintf(out, "   %d events: %d loaded, %d dead-lettered\n\n", st.lines, st.loaded, st.retry+st.poison)

	if err := printDeadLetters(ctx, out, p); err != nil {
		return res, err
	}

	tiles.EndOutage()
	fmt.Fprintln(out, "\n3. The tile server is back. Replaying with repairs (GEOS MakeValid, PROJ reprojection):")
	r, err := p.replayer(p.store)
	if err != nil {
		return res, err
	}
	dry := c
	dry.dryRun = true
	if res.dry, err = replayDestinations(ctx, r, dry, "   ", "dry run", out); err != nil {
		return res, err
	}
	crashing, err := p.replayer(crashBeforeAck{DeadLetterSource: p.store})
	if err != nil {
		return res, err
	}
	if res.crashed, err = replayDestinations(ctx, crashing, c, "   ", "replay #1 (crashes before acknowledging)", out); err != nil {
		return res, err
	}
	time.Sleep(c.lease + 300*time.Millisecond) // the crashed replayer's leases lapse
	if res.replayed, err = replayDestinations(ctx, r, c, "   ", "replay #2", out); err != nil {
		return res, err
	}

	fmt.Fprintln(out, "\n4. The parcels table (each replayed event was re-injected twice):")
	return res, printParcels(ctx, out, p)
}

// printDeadLetters lists the dead-letter table with PostGIS's own verdict
// on each stored geometry (ST_IsValidReason).
func printDeadLetters(ctx context.Context, out io.Writer, p *pipeline) error {
	fmt.Fprintln(out, "2. The dead-letter table, with PostGIS's verdict on each stored geometry:")
	page, err := p.store.List(ctx, broker.ListOptions{Limit: broker.MaxListLimit})
	if err != nil {
		return err
	}
	entries := page.Entries
	type row struct {
		verdict, geomStatus string
		srid                int
	}
	verdicts := map[int64]row{}
	rows, err := p.pool.Query(ctx, `SELECT id, COALESCE(ST_IsValidReason(geom), '-'), geom_status, COALESCE(ST_SRID(geom), ST_SRID(location), 0)
		FROM `+postgis.Table(p.store))
	if err != nil {
		return err
	}
	for rows.Next() {
		var id int64
		var r row
		if err := rows.Scan(&id, &r.verdict, &r.geomStatus, &r.srid); err != nil {
			return err
		}
		verdicts[id] = r
	}
	if err := rows.Err(); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "   ID\tDESTINATION\tEVENT\tCLASS\tSTAGE\tREASON\tSRID\tGEOM\tPOSTGIS SAYS")
	for _, e := range entries {
		env, err := envelope.Decode(e.Record.Message.Body)
		if err != nil {
			return err
		}
		reason := env.ErrorMessage
		if ge := env.GeometryError; ge != nil && ge.Reason != "" {
			reason = ge.Reason
		}
		id, _ := strconv.ParseInt(e.Record.ID, 10, 64)
		v := verdicts[id]
		fmt.Fprintf(tw, "   %s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", e.Record.ID, e.Record.Destination, shorten(env.EventID, 16),
			env.FailureClass, env.FailedStage, shorten(reason, 40), v.srid, v.geomStatus, v.verdict)
	}
	return tw.Flush()
}

// printParcels lists the parcels table and fails if any event was
// written more than once.
func printParcels(ctx context.Context, out io.Writer, p *pipeline) error {
	rows, err := p.pool.Query(ctx, `SELECT event_id, writes, coalesce(repair, '-'), ST_GeometryType(geom), ST_IsValid(geom)
		FROM `+p.parcels()+` ORDER BY event_id`)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "   EVENT\tWRITES\tREPAIR\tTYPE\tVALID")
	twice := 0
	for rows.Next() {
		var id, repair, typ string
		var writes int
		var valid bool
		if err := rows.Scan(&id, &writes, &repair, &typ, &valid); err != nil {
			return err
		}
		if writes > 1 {
			twice++
		}
		fmt.Fprintf(tw, "   %s\t%d\t%s\t%s\t%t\n", id, writes, repair, typ, valid)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	left, err := p.store.List(ctx, broker.ListOptions{Limit: broker.MaxListLimit})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\n   %d records wait in the dead-letter table for a human (no repair applies).\n", len(left.Entries))
	if twice > 0 {
		return fmt.Errorf("%d parcels were written more than once", twice)
	}
	fmt.Fprintln(out, "   Every parcel was written exactly once.")
	return nil
}

// eventName is the event_id of a JSON event, for display.
func eventName(body []byte) string {
	var ev struct {
		EventID string `json:"event_id"`
	}
	if json.Unmarshal(body, &ev) != nil || ev.EventID == "" {
		return "(no event_id)"
	}
	return ev.EventID
}

// dropSchema drops the demo's schema and everything in it.
func dropSchema(ctx context.Context, c config) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, c.db)
	if err != nil {
		return err
	}
	defer pool.Close()
	if !strings.HasPrefix(c.schema, "geodlq_demo_") {
		return fmt.Errorf("refusing to drop schema %q: not a demo schema", c.schema)
	}
	_, err = pool.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{c.schema}.Sanitize()+` CASCADE`)
	return err
}
