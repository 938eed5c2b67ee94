package main

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/cmd/geodlq/internal/console"
	"github.com/geodlq/geodlq/cmd/geodlq/internal/replaying"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/replay"
	"github.com/geodlq/geodlq/spatial"
)

type replayOptions struct {
	f            filterFlags
	out          *output
	dryRun       bool
	repairs      []string
	unchanged    []string
	target       string
	route        string
	rate         float64
	limit        int
	concurrency  int
	noCheck      bool
	expectedEPSG int
	failIfNone   bool
}

// maxReplayConcurrency bounds --concurrency: each record in flight holds
// its payload, and a store connection.
const maxReplayConcurrency = 64

// outcomeInterrupted labels a record whose replay Ctrl-C cut short: it was
// released untouched (or, if its re-injection had started, re-injected
// or not — its idempotency key makes a later replay harmless) and is
// still pending.
const outcomeInterrupted = "interrupted"

// outcomeWouldQuarantine labels, in a triage dry run, a resource_exhausted
// record that triage would move to quarantine.
const outcomeWouldQuarantine = "would_quarantine"

// outcomeLegend explains each outcome word in one line, for the legend
// under a replay's report (triage has its own words for skipped: see
// triageLegend).
var outcomeLegend = map[string]string{
	string(replay.OutcomeReplayed):        "re-injected unchanged, then acknowledged (removed from the dead letters)",
	string(replay.OutcomeRepaired):        "repaired, re-injected, then acknowledged",
	string(replay.OutcomeWouldReplay):     "dry run: would be re-injected unchanged",
	string(replay.OutcomeWouldRepair):     "dry run: would be repaired and re-injected",
	string(replay.OutcomeWouldFail):       "dry run: would fail its repair or check now",
	string(replay.OutcomeSkipped):         "left in place: its class is never replayed, or no --repair (or --unchanged) was given for it",
	string(replay.OutcomeRepairFailed):    "left in place: the repair failed, or its result still fails the check",
	string(replay.OutcomeStillFails):      "left in place: it still fails the consumer's check",
	string(replay.OutcomeInvalidEnvelope): "left in place: the record is not a dlq.v1 envelope",
	string(replay.OutcomeRestoreFailed):   "left in place: an offloaded blob is missing or fails its hash",
	string(replay.OutcomeNoRoute):         "left in place: nowhere to re-inject it (--route, --target)",
	string(replay.OutcomePublishFailed):   "left in place: the re-injection failed",
	string(replay.OutcomeAckFailed):       "re-injected but not acknowledged: replayed again next time, the idempotency key absorbs it",
	string(replay.OutcomeLeaseLost):       "left to another replayer: its lease was lost (or could not be renewed) before the re-injection",
	outcomeInterrupted:                    "Ctrl-C: released untouched, still pending; run the command again",
	outcomeWouldQuarantine:                "dry run: would be moved to quarantine and alerted",
	"quarantined":                         "moved to <topic>.quarantine.dlt and alerted",
	"quarantine_failed":                   "left in place: the alert or the move failed",
}

func newReplayCmd(a *app) *cobra.Command {
	var o replayOptions
	cmd := &cobra.Command{
		Use:   "replay [ID…]",
		Short: "Re-inject dead-lettered events exactly once, optionally repaired",
		Long: `replay runs geodlq's replayer over the selected records — the ones named as
arguments (record ids, DEST/ID or event ids), or every pending record of the
selected destinations that matches the filters: for each it restores the exact
original payload (offloaded parts fetched from --blobs and verified), applies
the repair named for its class, checks the result as the consumer will (unless
--no-check), re-injects it with its original idempotency key into its source
topic (or --route) on --target, and only then acknowledges the record.

Repairs (--repair, comma-separated):
  make-valid            invalid_geometry: GEOS MakeValid
  reproject             crs_mismatch with a known EPSG code: PROJ, to --expected-epsg
  reproject+make-valid  crs_mismatch: reproject, then MakeValid when the reprojected
                        geometry is invalid (a polygon crossing the antimeridian)
--unchanged invalid_geometry (or crs_mismatch) re-injects that class as it is,
with no repair: for when the consumer now accepts it (the check still runs
unless --no-check). Deterministic classes with neither are skipped;
schema_violation and resource_exhausted are never replayed.

Where to: --target URL is the store or broker the consumer reads (a Kafka
cluster, the quickstart's SQLite file…). Without --target a record is
re-injected into --store itself only when that store's own broker delivered it
(its envelope's source system is the store's: a Kafka dead-letter topic
replayed into the same cluster, the quickstart's SQLite queue). A record that
came from elsewhere — another broker, or geodlq check --dead-letter, whose
events no consumer reads from the dead-letter file — is refused with a usage
error naming --target (exit 2), before anything is re-injected; --target with
the store's own URL re-injects into it anyway.

--dry-run says what would happen now. Resumable: an acknowledged record never
comes back, so running the same command again after an interruption carries on
with what is left; --concurrency N works on N records at once (each under
its own lease; records sharing a key one after another, in order), and
several replay processes, on as many hosts, may work through one store at
once; a run that dies after re-injecting a record but before
acknowledging it re-injects it again next time, and the consumer's idempotency
claim absorbs the duplicate. Ctrl-C stops within a second: the record in flight
is finished or left untouched (reported "interrupted"), and every leased record
is released at once. --rate N re-injects at most N events per second.

The report is a count by outcome with a legend, and a row for every record left
in place (or, in a dry run, that would fail or be skipped) with the reason and
the flag that would change it; -o wide has a row for every record, -o json
everything ("why" is the reason). A progress bar (or JSON records on stderr)
shows the work as it goes. Exit code 1 when a record could not be restored,
re-injected or acknowledged, when the run was incomplete (it lost leases to
another process, so records may be left unexamined: "INCOMPLETE" under the
report, "incomplete" with -o json; run again), or, with --fail-if-none, when
nothing was replayed (a dry run: nothing would be).`,
		RunE: func(cmd *cobra.Command, args []string) error { return a.replay(cmd, args, o) },
	}
	o.f.register(cmd.Flags(), false)
	fs := cmd.Flags()
	fs.BoolVar(&o.dryRun, "dry-run", false, "report what would happen; re-inject and acknowledge nothing")
	fs.StringSliceVar(&o.repairs, "repair", nil, "repairs to apply: make-valid (invalid_geometry), reproject or reproject+make-valid (crs_mismatch)")
	fs.StringSliceVar(&o.unchanged, "unchanged", nil, "re-inject these classes as they are, without a repair: invalid_geometry, crs_mismatch")
	fs.StringVar(&o.target, "target", "", "store or broker URL to re-inject into (default: --store, for the records its own broker delivered)")
	fs.StringVar(&o.route, "route", "", "topic to re-inject into (default: each envelope's source topic)")
	fs.Float64Var(&o.rate, "rate", 0, "re-inject at most this many events per second (0: no limit)")
	fs.IntVar(&o.limit, "limit", 0, "examine at most this many records in all (0: no limit)")
	fs.IntVar(&o.concurrency, "concurrency", 1, "records worked on at once (each under its own lease; records sharing a key stay in order)")
	fs.BoolVar(&o.noCheck, "no-check", false, "do not re-validate payloads before re-injecting them")
	fs.IntVar(&o.expectedEPSG, "expected-epsg", spatial.DefaultExpectedEPSG, "EPSG code the consumer expects (check and reproject target)")
	fs.BoolVar(&o.failIfNone, "fail-if-none", false, "exit 1 when no record was replayed (with --dry-run: when none would be)")
	o.out = addOutput(cmd, fmtTable, fmtWide, fmtJSON)
	return cmd
}

// replayReport is what replay writes with -o json. Field names are stable.
type replayReport struct {
	DryRun       bool                `json:"dry_run"`
	Interrupted  bool                `json:"interrupted"`
	Destinations []replayDestination `json:"destinations"`
	Examined     int                 `json:"examined"`
	Counts       map[string]int      `json:"counts"`
	// Incomplete is set when a destination's run may not have examined
	// every record it was meant to (its own incomplete says why): leases
	// lost to another process, or a run that ended early. The command
	// then exits 1.
	Incomplete bool `json:"incomplete"`
	// LeasesLost counts the records whose leases the runs lost before
	// they were done with them (replay.Report.LeasesLost).
	LeasesLost int `json:"leases_lost"`
	// foreign counts the records left in place because they did not come
	// from the store's own broker (no --target).
	foreign int
}

type replayDestination struct {
	Destination string         `json:"destination"`
	Examined    int            `json:"examined"`
	Counts      map[string]int `json:"counts"`
	// LeasesLost and Incomplete are the run's (replay.Report): Incomplete
	// says why the run may not have examined every record it was meant
	// to, or is empty.
	LeasesLost int          `json:"leases_lost"`
	Incomplete string       `json:"incomplete,omitempty"`
	Items      []replayItem `json:"items"`
}

type replayItem struct {
	RecordID       string `json:"record_id"`
	EventID        string `json:"event_id,omitempty"`
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	Class          string `json:"failure_class,omitempty"`
	Outcome        string `json:"outcome"`
	Target         string `json:"target,omitempty"`
	Repair         string `json:"repair,omitempty"`
	Error          string `json:"error,omitempty"`
	// Why says, for a record left in place (or that a dry run found would
	// fail or be skipped), why, and what would change it.
	Why string `json:"why,omitempty"`
}

// replayPlan is what a replay or triage runs on: per destination, the
// filter (with the named records' ids when IDs were given).
type replayPlan struct {
	dests   []string
	filters map[string]broker.Filter
	notes   []string // named records that are not pending
}

// plan resolves the command's arguments (record ids, DEST/ID, event ids)
// and filters into destinations and filters.
func (a *app) plan(ctx context.Context, cmd *cobra.Command, s *broker.Store, sel selection, refs []string) (replayPlan, error) {
	p := replayPlan{filters: map[string]broker.Filter{}}
	if len(refs) == 0 {
		dests, err := a.destinations(ctx, s)
		if err != nil {
			return p, err
		}
		p.dests = dests
		for _, d := range dests {
			p.filters[d] = sel.filter
		}
		return p, nil
	}
	for _, ref := range refs {
		its, err := a.findRecords(ctx, s, ref)
		if err != nil {
			return p, err
		}
		if len(its) == 0 {
			return p, usageFor(cmd, "%q: %v (give record ids, DEST/ID or event ids; geodlq list shows them)", ref, errNotFound)
		}
		pending := 0
		for _, it := range its {
			if it.Status == broker.StatusReplayed {
				p.notes = append(p.notes, fmt.Sprintf("%s/%s (%s) was already replayed at %s", it.Record.Destination, it.Record.ID,
					orDash(eventOf(it)), shortTime(stamp(it.ReplayedAt))))
				continue
			}
			pending++
			d := it.Record.Destination
			f, ok := p.filters[d]
			if !ok {
				p.dests = append(p.dests, d)
				f = sel.filter
				f.IDs = nil
			}
			if !slices.Contains(f.IDs, it.Record.ID) {
				f.IDs = append(f.IDs, it.Record.ID)
			}
			p.filters[d] = f
		}
	}
	return p, nil
}

func eventOf(it item) string {
	if it.env != nil {
		return it.env.EventID
	}
	if it.Record.Message != nil {
		return it.Record.Message.Header(broker.HeaderEventID)
	}
	return ""
}

func (a *app) replay(cmd *cobra.Command, args []string, o replayOptions) (err error) {
	if err := o.out.resolve(a, cmd); err != nil {
		return err
	}
	sel, err := o.f.parse(cmd, time.Now())
	if err != nil {
		return err
	}
	if o.rate < 0 || o.limit < 0 {
		return usageFor(cmd, "--rate and --limit must not be negative")
	}
	if o.concurrency < 1 || o.concurrency > maxReplayConcurrency {
		return usageFor(cmd, "--concurrency must be between 1 and %d", maxReplayConcurrency)
	}
	unchanged, err := parseClasses(cmd, "--unchanged", o.unchanged)
	if err != nil {
		return err
	}
	if err := replaying.Validate(o.repairs, unchanged); err != nil {
		return usageFor(cmd, "--repair/--unchanged: %v", err)
	}
	ctx := cmd.Context()
	src, err := a.openStore(ctx, readWrite)
	if err != nil {
		return err
	}
	defer closeWith(&err, src)
	var target broker.Publisher = src
	intoStore := src.Name() // no --target: only what the store's own broker delivered
	if o.target != "" {
		t, err := a.openStoreURL(ctx, o.target, create)
		if err != nil {
			return err
		}
		defer closeWith(&err, t)
		target, intoStore = t, ""
	}
	p, err := a.plan(ctx, cmd, src, sel, args)
	if err != nil {
		return err
	}
	for _, n := range p.notes {
		fmt.Fprintln(a.stderr, "geodlq: "+n)
	}
	if intoStore != "" {
		if err := a.checkIntoStore(ctx, cmd, src, p, sel); err != nil {
			return err
		}
	}
	off, closeBlobs, err := a.openBlobs(ctx, readOnly)
	if err != nil {
		return err
	}
	defer closeBlobs()
	checker, err := newChecker(o.expectedEPSG, 0)
	if err != nil {
		return err
	}
	defer checker.Close()
	repairers, err := replaying.Repairers(checker.Checker, o.repairs, unchanged)
	if err != nil {
		return err
	}

	total := a.planTotal(ctx, src, p, sel)
	if o.limit > 0 && (total < 0 || total > int64(o.limit)) {
		total = int64(o.limit)
	}
	m := a.startMeter("replay", "records", total)
	defer m.finish()
	tr := &tracker{m: m}
	opts := replay.Options{Target: &replaying.Target{Publisher: target, Limiter: replaying.NewLimiter(o.rate), OnPublish: func() { m.count("reinjected", 1) }},
		Repairers: repairers, Logger: a.logger(), Route: replaying.Route(o.route, intoStore, "--target URL"), Concurrency: o.concurrency}
	if o.rate > 0 {
		opts.BatchSize = max(1, min(100, int(o.rate*10)))
	}
	if off != nil {
		opts.Fetcher = off
	}
	if !o.noCheck {
		opts.Check = checker.ReplayCheck()
	}

	rep := replayReport{DryRun: o.dryRun, Counts: map[string]int{}, Destinations: []replayDestination{}}
	var runErr error
	for _, d := range p.dests {
		if o.limit > 0 && rep.Examined >= o.limit {
			break
		}
		var source broker.DeadLetterSource = &trackingSource{DeadLetterSource: src, t: tr}
		var held *holdingSource
		if sel.clientSide() {
			held = &holdingSource{DeadLetterSource: source, sel: sel}
			source = held
		}
		ro := opts
		ro.Source = source
		r, err := replay.New(&ro)
		if err != nil {
			return err
		}
		req := replay.Request{Destination: d, Filter: p.filters[d], DryRun: o.dryRun}
		if o.limit > 0 {
			req.Limit = o.limit - rep.Examined
		}
		res, err := r.Run(ctx, req)
		tr.batchDone()
		if held != nil {
			held.releaseAll(ctx)
			held.lostInto(&res)
		}
		rep.add(d, res, replaying.CLIHints)
		if err != nil {
			runErr = err
			break
		}
	}
	m.finish()
	rep.Interrupted = ctx.Err() != nil
	if o.out.json() {
		if err := writeJSON(a.stdout, rep); err != nil {
			return err
		}
	} else if err := a.replayText(o.out, rep, "replay", outcomeLegend); err != nil {
		return err
	}
	if runErr != nil {
		return runErr
	}
	if n := rep.foreign; n > 0 {
		// Records that arrived after the check above.
		return usageFor(cmd, "%d records did not come from this store's broker (%s) and were left in place: "+
			"name where their consumer reads with --target URL", n, src.Name())
	}
	if rep.Incomplete {
		return problems("replay incomplete: %d records examined, %d leases lost to another process or lapsed; "+
			"records may have been left unexamined: run the same command again", rep.Examined, rep.LeasesLost)
	}
	for _, bad := range []replay.Outcome{replay.OutcomeRestoreFailed, replay.OutcomePublishFailed, replay.OutcomeAckFailed, replay.OutcomeInvalidEnvelope, replay.OutcomeLeaseLost} {
		if rep.Counts[string(bad)] > 0 {
			return &problemsError{}
		}
	}
	if o.failIfNone {
		done := rep.Counts[string(replay.OutcomeReplayed)] + rep.Counts[string(replay.OutcomeRepaired)]
		if o.dryRun {
			done = rep.Counts[string(replay.OutcomeWouldReplay)] + rep.Counts[string(replay.OutcomeWouldRepair)]
		}
		if done == 0 {
			return problems("--fail-if-none: no record was replayed")
		}
	}
	return nil
}

// planTotal counts the pending records a plan covers (-1: unknown).
func (a *app) planTotal(ctx context.Context, s *broker.Store, p replayPlan, sel selection) int64 {
	if sel.clientSide() {
		return -1
	}
	var n int64
	for _, d := range p.dests {
		f := p.filters[d]
		if len(f.IDs) > 0 {
			n += int64(len(f.IDs))
			continue
		}
		counts, err := s.Stats(ctx, broker.StatsOptions{Destination: d, Filter: f})
		if err != nil {
			return -1
		}
		for _, c := range counts {
			n += int64(c.Pending + c.Leased)
		}
	}
	return n
}

func (r *replayReport) add(dest string, res replay.Report, h replaying.Hints) {
	d := replayDestination{Destination: dest, Examined: res.Examined, Counts: map[string]int{}, Items: []replayItem{},
		LeasesLost: res.LeasesLost, Incomplete: res.Incomplete}
	for _, it := range res.Items {
		why := replaying.Why(it, h)
		replaying.Normalize(&it)
		ri := replayItem{RecordID: it.RecordID, EventID: it.EventID, IdempotencyKey: it.IdempotencyKey,
			Outcome: string(it.Outcome), Target: it.Target, Why: why}
		if it.Class.Valid() {
			ri.Class = it.Class.String()
		}
		if it.Repair != nil {
			ri.Repair = it.Repair.String()
		}
		if it.Err != nil {
			ri.Error = it.Err.Error()
			if h := console.BlobsHint(it.Err); h != "" {
				ri.Error += "; " + h
			}
			if errors.Is(it.Err, context.Canceled) && it.Outcome != replay.OutcomeAckFailed {
				// Ctrl-C cut this record short: it was released untouched,
				// not failed.
				ri.Outcome, ri.Why = outcomeInterrupted, "interrupted before its re-injection: released untouched, still pending"
			}
			if errors.Is(it.Err, replaying.ErrForeignSource) {
				r.foreign++
			}
		}
		d.Counts[ri.Outcome]++
		r.Counts[ri.Outcome]++
		d.Items = append(d.Items, ri)
	}
	r.Examined += res.Examined
	r.LeasesLost += res.LeasesLost
	r.Incomplete = r.Incomplete || res.Incomplete != ""
	r.Destinations = append(r.Destinations, d)
}

// leftInPlace reports whether an outcome is one a person needs the
// reason of: not replayed, nor (in a dry run) would be.
func leftInPlace(outcome string) bool {
	switch replay.Outcome(outcome) {
	case replay.OutcomeReplayed, replay.OutcomeRepaired, replay.OutcomeWouldReplay, replay.OutcomeWouldRepair:
		return false
	}
	return outcome != "quarantined"
}

// replayText writes a replay or triage report for people: one row per
// record left in place (or, in a dry run, that would fail or be skipped)
// with the reason and what would change it — every record with -o wide —
// then the count by outcome with a legend of the words used.
func (a *app) replayText(o *output, rep replayReport, what string, legend map[string]string) error {
	var rows [][]string
	for _, d := range rep.Destinations {
		for _, it := range d.Items {
			if !o.wide() && !leftInPlace(it.Outcome) {
				continue
			}
			why := it.Why
			if why == "" {
				why = it.Error
			}
			rows = append(rows, []string{d.Destination + "/" + it.RecordID, orDash(it.EventID), orDash(it.Class), it.Outcome,
				orDash(it.Target), orDash(it.Repair), orDash(why)})
		}
	}
	if len(rows) > 0 {
		// Records that need a look first: the ones left in place, in the
		// order of the legend.
		rank := map[string]int{}
		for i, k := range outcomeOrder(rep.Counts) {
			rank[k] = i
		}
		slices.SortStableFunc(rows, func(x, y []string) int {
			lx, ly := leftInPlace(x[3]), leftInPlace(y[3])
			switch {
			case lx && !ly:
				return -1
			case !lx && ly:
				return 1
			}
			return rank[x[3]] - rank[y[3]]
		})
		if err := a.table(o, []string{"RECORD", "EVENT", "CLASS", "OUTCOME", "TARGET", "REPAIR", "WHY"}, rows, 6, 1, 5); err != nil {
			return err
		}
		fmt.Fprintln(a.stdout)
	}
	if rep.DryRun {
		what += " (dry run)"
	}
	fmt.Fprintf(a.stdout, "%s: %d examined\n", what, rep.Examined)
	if len(rep.Counts) > 0 {
		var rows [][]string
		for _, k := range outcomeOrder(rep.Counts) {
			rows = append(rows, []string{k, strconv.Itoa(rep.Counts[k]), legend[k]})
		}
		if err := a.table(o, []string{"OUTCOME", "RECORDS", "MEANING"}, rows, 2); err != nil {
			return err
		}
	}
	if rep.Interrupted {
		fmt.Fprintln(a.stdout, "interrupted: unfinished records were released untouched; run the same command again to carry on")
	} else {
		for _, d := range rep.Destinations {
			if d.Incomplete != "" {
				fmt.Fprintf(a.stdout, "INCOMPLETE: %s: %s\n", d.Destination, d.Incomplete)
			}
		}
	}
	return nil
}

// outcomeOrder lists the outcomes of counts in replay.Outcomes' order,
// then the command's own.
func outcomeOrder(counts map[string]int) []string {
	var ks []string
	for _, o := range replay.Outcomes() {
		if counts[string(o)] > 0 {
			ks = append(ks, string(o))
		}
	}
	var rest []string
	for k, n := range counts {
		if n > 0 && !slices.Contains(ks, k) {
			rest = append(rest, k)
		}
	}
	slices.Sort(rest)
	return append(ks, rest...)
}

func countsLine(m map[string]int) string {
	var parts []string
	for _, k := range outcomeOrder(m) {
		parts = append(parts, k+"="+strconv.Itoa(m[k]))
	}
	return strings.Join(parts, " ")
}

// tracker turns what the replayer does with its source and target into
// progress: the replayer examines the records of a batch in order, so
// when it re-injects or acknowledges one, every record fetched before it
// is done; the rest of a batch is done when it fetches the next one.
type tracker struct {
	m        *meter
	mu       sync.Mutex
	batch    []string // record ids of the current batch, in order
	doneUpTo int      // records of the batch counted done
	// counted are the records of earlier batches: one whose lease lapsed
	// comes back in a later batch (the replayer holds it again) and is
	// not counted twice.
	counted map[string]bool
}

func (t *tracker) fetched(recs []*broker.Record) {
	t.batchDone()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.counted == nil {
		t.counted = map[string]bool{}
	}
	t.batch = t.batch[:0]
	for _, r := range recs {
		if !t.counted[r.ID] {
			t.counted[r.ID] = true
			t.batch = append(t.batch, r.ID)
		}
	}
	t.doneUpTo = 0
}

// reached counts the records up to and including id done.
func (t *tracker) reached(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if i := slices.Index(t.batch, id); i >= 0 && i+1 > t.doneUpTo {
		t.m.add(int64(i + 1 - t.doneUpTo))
		t.doneUpTo = i + 1
	}
}

// batchDone counts the rest of the current batch done.
func (t *tracker) batchDone() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n := len(t.batch) - t.doneUpTo; n > 0 {
		t.m.add(int64(n))
	}
	t.batch, t.doneUpTo = t.batch[:0], 0
}

// trackingSource feeds a tracker.
// It also collects the garbage of a batch whose bodies held releaseBytes
// or more before the next batch is fetched (the replayer is done with a
// batch's bodies by then: see releasingLister).
type trackingSource struct {
	broker.DeadLetterSource
	t    *tracker
	held int // body bytes of the batch fetched last
}

func (s *trackingSource) Fetch(ctx context.Context, dest string, f broker.Filter, n int) ([]*broker.Record, error) {
	if s.held >= releaseBytes {
		runtime.GC()
	}
	recs, err := s.DeadLetterSource.Fetch(ctx, dest, f, n)
	s.t.fetched(recs)
	s.held = 0
	for _, r := range recs {
		if r.Message != nil {
			s.held += len(r.Message.Body)
		}
	}
	return recs, err
}

// Ack acknowledges r even when ctx has ended: it is called once r's side
// effect (a re-injection, a move to quarantine) happened, and a record
// left unacknowledged then would have it happen again on the next run.
func (s *trackingSource) Ack(ctx context.Context, r *broker.Record) error {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	err := s.DeadLetterSource.Ack(actx, r)
	if err == nil {
		s.t.m.count("acked", 1)
	}
	s.t.reached(r.ID)
	return err
}

// RenewBatch renews rs in one call when the source has batches
// (broker.BatchSettler); otherwise every entry wraps
// errors.ErrUnsupported.
func (s *trackingSource) RenewBatch(ctx context.Context, rs []*broker.Record) []error {
	return renewBatch(ctx, s.DeadLetterSource, rs)
}

// AckBatch is Ack for several records, in one call when the source has
// batches; otherwise every entry wraps errors.ErrUnsupported.
func (s *trackingSource) AckBatch(ctx context.Context, rs []*broker.Record) []error {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	errs := ackBatch(actx, s.DeadLetterSource, rs)
	for i, r := range rs {
		if errs[i] == nil {
			s.t.m.count("acked", 1)
		}
		if !errors.Is(errs[i], errors.ErrUnsupported) {
			s.t.reached(r.ID)
		}
	}
	return errs
}

// renewBatch is src's RenewBatch, or errors.ErrUnsupported for every
// record when src has no batches.
func renewBatch(ctx context.Context, src broker.DeadLetterSource, rs []*broker.Record) []error {
	if b, ok := src.(broker.BatchSettler); ok {
		return b.RenewBatch(ctx, rs)
	}
	return unsupportedBatch(rs)
}

// ackBatch is src's AckBatch, or errors.ErrUnsupported for every record
// when src has no batches.
func ackBatch(ctx context.Context, src broker.DeadLetterSource, rs []*broker.Record) []error {
	if b, ok := src.(broker.BatchSettler); ok {
		return b.AckBatch(ctx, rs)
	}
	return unsupportedBatch(rs)
}

func unsupportedBatch(rs []*broker.Record) []error {
	errs := make([]error, len(rs))
	for i := range errs {
		errs[i] = fmt.Errorf("settling records in batches: %w", errors.ErrUnsupported)
	}
	return errs
}

// holdingSource applies the client-side filter (source prefix) for the
// replayer: records that do not match are kept leased — their leases
// renewed by a replay.LeaseKeeper, so that the store hands them out
// neither to this run again nor to another process — and released when
// the run ends. A lease it loses meanwhile (a renewal or the release
// refused, or the record back in a later fetch) is counted in lost.
type holdingSource struct {
	broker.DeadLetterSource
	sel selection
	// intoStore, when set, also holds the records that did not come from
	// the broker of the store named so (triage with no --target), and
	// counts them in foreign.
	intoStore string
	foreign   int
	mu        sync.Mutex
	held      map[string]*broker.Record
	keeper    *replay.LeaseKeeper
	lost      map[string]bool // ids of the held records whose leases were lost
}

func (h *holdingSource) Fetch(ctx context.Context, dest string, f broker.Filter, n int) ([]*broker.Record, error) {
	for {
		fetched := time.Now()
		recs, err := h.DeadLetterSource.Fetch(ctx, dest, f, n)
		if err != nil || len(recs) == 0 {
			return recs, err
		}
		var out []*broker.Record
		fresh := 0
		h.mu.Lock()
		if h.held == nil {
			h.held, h.lost = map[string]*broker.Record{}, map[string]bool{}
			h.keeper = replay.NewLeaseKeeper(h.DeadLetterSource, nil)
		}
		for _, r := range recs {
			env, err := envelope.Decode(r.Message.Body)
			foreign := err == nil && h.intoStore != "" && reinjectable(env) && replaying.FromStore(env, h.intoStore, "") != nil
			if err == nil && h.sel.match(env) && !foreign {
				out = append(out, r)
				continue
			}
			if prev, ok := h.held[r.ID]; !ok {
				fresh++
				if foreign {
					h.foreign++
				}
			} else {
				// A lease lapsed (its renewals failed) and the record came
				// back: hold the new one, and count the old one lost.
				h.keeper.Drop(prev)
				h.lost[r.ID] = true
			}
			// Only the lease is held, not the body: renewing and
			// releasing need no more.
			lo := &broker.Record{ID: r.ID, Destination: r.Destination, Deliveries: r.Deliveries, Lease: r.Lease, LeaseExpires: r.LeaseExpires}
			h.held[r.ID] = lo
			h.keeper.Hold(fetched, lo)
		}
		h.mu.Unlock()
		if len(out) > 0 || fresh == 0 {
			return out, nil
		}
	}
}

// RenewBatch is the source's (see trackingSource.RenewBatch).
func (h *holdingSource) RenewBatch(ctx context.Context, rs []*broker.Record) []error {
	return renewBatch(ctx, h.DeadLetterSource, rs)
}

// AckBatch is the source's (see trackingSource.AckBatch).
func (h *holdingSource) AckBatch(ctx context.Context, rs []*broker.Record) []error {
	return ackBatch(ctx, h.DeadLetterSource, rs)
}

// releaseAll releases every record held, counting in lost those whose
// release is refused because their leases were lost, and stops renewing.
func (h *holdingSource) releaseAll(ctx context.Context) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.keeper == nil {
		return
	}
	// Eight at once: the records a filter left out can be thousands.
	recs := make(chan *broker.Record)
	var lost sync.Mutex
	var wg sync.WaitGroup
	for range min(8, len(h.held)) {
		wg.Go(func() {
			for r := range recs {
				if err := h.keeper.Release(rctx, r); errors.Is(err, broker.ErrLeaseLost) {
					lost.Lock()
					h.lost[r.ID] = true
					lost.Unlock()
				}
			}
		})
	}
	for _, r := range h.held {
		recs <- r
	}
	close(recs)
	wg.Wait()
	h.keeper.Close()
	h.held, h.keeper = nil, nil
}

// lostInto adds the leases lost of the records held for a run (after
// releaseAll) to its report, which is then incomplete: a record the
// client-side filter left out whose lease was lost may have come back to
// the run in the place of a record it had not examined yet.
func (h *holdingSource) lostInto(rep *replay.Report) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.lost) == 0 {
		return
	}
	rep.LeasesLost += len(h.lost)
	if rep.Incomplete == "" {
		rep.Incomplete = fmt.Sprintf("%d records' leases were lost during the run (another process took them over, or they lapsed): "+
			"records may have been left unexamined; run again", rep.LeasesLost)
	}
	h.lost = nil
}

// parseClasses reads the class names of flag.
func parseClasses(cmd *cobra.Command, flag string, names []string) ([]classify.Class, error) {
	var out []classify.Class
	for _, n := range names {
		c, err := classify.ParseClass(n)
		if err != nil {
			return nil, usageFor(cmd, "%s %q: want one of %s", flag, n, strings.Join(classNames(), ", "))
		}
		out = append(out, c)
	}
	return out, nil
}

// checkIntoStore refuses, before anything is re-injected, a replay with no
// --target of records that did not come from the store's own broker: it
// looks at the first records of each destination of the plan (the run
// itself refuses any later one the same way).
func (a *app) checkIntoStore(ctx context.Context, cmd *cobra.Command, s *broker.Store, p replayPlan, sel selection) error {
	const look = 1000
	rl := &releasingLister{l: s}
	defer rl.release() // before the run fetches its first record
	for _, d := range p.dests {
		pg, err := rl.List(ctx, broker.ListOptions{Destination: d, Filter: p.filters[d], Limit: look})
		if errors.Is(err, errors.ErrUnsupported) {
			return nil // a queue that cannot be read without leasing: the run checks
		}
		if err != nil {
			return fmt.Errorf("reading %q: %w", d, err)
		}
		foreign, systems := 0, map[string]int{}
		for _, e := range pg.Entries {
			if e.Record == nil {
				continue
			}
			it := itemOf(e)
			if it.env == nil || !sel.keep(it) || !reinjectable(it.env) {
				continue
			}
			if replaying.FromStore(it.env, s.Name(), "") != nil {
				foreign++
				sys := "(none)"
				if it.env.Source != nil && it.env.Source.System != "" {
					sys = it.env.Source.System
				}
				systems[sys]++
			}
		}
		if foreign > 0 {
			var from []string
			for k, n := range systems {
				from = append(from, fmt.Sprintf("%s (%d)", k, n))
			}
			slices.Sort(from)
			return usageFor(cmd, "%s: %d of the records to replay came from %s, not from this store's broker (%s): "+
				"without --target they would be written into the dead-letter store, where no consumer reads them; "+
				"name where the consumer reads with --target URL (this store's own URL re-injects into it anyway)",
				d, foreign, strings.Join(from, ", "), s.Name())
		}
	}
	return nil
}

// reinjectable reports whether a record's class may ever be re-injected
// (schema_violation and resource_exhausted never are).
func reinjectable(env *envelope.Envelope) bool {
	return env.FailureClass != classify.ClassSchemaViolation && env.FailureClass != classify.ClassResourceExhausted
}
