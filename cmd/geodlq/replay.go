package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/time/rate"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/replay"
	"github.com/geodlq/geodlq/spatial"
)

type replayOptions struct {
	f            filterFlags
	out          *output
	dryRun       bool
	repairs      []string
	target       string
	route        string
	rate         float64
	limit        int
	noCheck      bool
	expectedEPSG int
	failIfNone   bool
}

// repairNames maps --repair names to the classes whose repairer they
// enable (spatial.Checker.Repairers).
var repairNames = map[string]classify.Class{
	"make-valid": classify.ClassInvalidGeometry,
	"reproject":  classify.ClassCRSMismatch,
}

// outcomeInterrupted labels a record whose replay Ctrl-C cut short: it was
// released untouched (or, if its re-injection had started, re-injected
// or not — its idempotency key makes a later replay harmless) and is
// still pending.
const outcomeInterrupted = "interrupted"

// outcomeWouldQuarantine labels, in a triage dry run, a resource_exhausted
// record that triage would move to quarantine.
const outcomeWouldQuarantine = "would_quarantine"

// outcomeLegend explains each outcome word in one line, for the legend
// under a report.
var outcomeLegend = map[string]string{
	string(replay.OutcomeReplayed):        "re-injected unchanged, then acknowledged (removed from the dead letters)",
	string(replay.OutcomeRepaired):        "repaired, re-injected, then acknowledged",
	string(replay.OutcomeWouldReplay):     "dry run: would be re-injected unchanged",
	string(replay.OutcomeWouldRepair):     "dry run: would be repaired and re-injected",
	string(replay.OutcomeWouldFail):       "dry run: would fail its repair or check now",
	string(replay.OutcomeSkipped):         "left in place: its class is never replayed, or has no --repair",
	string(replay.OutcomeRepairFailed):    "left in place: the repair failed, or its result still fails the check",
	string(replay.OutcomeStillFails):      "left in place: it still fails the consumer's check",
	string(replay.OutcomeInvalidEnvelope): "left in place: the record is not a dlq.v1 envelope",
	string(replay.OutcomeRestoreFailed):   "left in place: an offloaded blob is missing or fails its hash",
	string(replay.OutcomeNoRoute):         "left in place: no topic to re-inject into (--route)",
	string(replay.OutcomePublishFailed):   "left in place: the re-injection failed",
	string(replay.OutcomeAckFailed):       "re-injected but not acknowledged: replayed again next time, the idempotency key absorbs it",
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
the repair named for its class (--repair make-valid for invalid_geometry,
reproject for crs_mismatch with a known EPSG code), checks the result as the
consumer will (unless --no-check), re-injects it with its original idempotency
key into its source topic (or --route) on --target (default: the store
itself), and only then acknowledges the record.

Deterministic classes without a named repair are skipped; schema_violation and
resource_exhausted are never replayed. --dry-run says what would happen now.

Resumable: an acknowledged record never comes back, so running the same command
again after an interruption carries on with what is left; a run that dies
after re-injecting a record but before acknowledging it re-injects it again
next time, and the consumer's idempotency claim absorbs the duplicate. Ctrl-C
stops within a second: the record in flight is finished or left untouched
(reported "interrupted"), and every leased record is released at once. --rate N
re-injects at most N events per second.

The report is a count by outcome with a legend; -o wide adds one row per
record, -o json everything. A progress bar (or JSON records on stderr) shows
the work as it goes. Exit code 1 when a record could not be restored,
re-injected or acknowledged, or, with --fail-if-none, when nothing was
replayed (a dry run: nothing would be).`,
		RunE: func(cmd *cobra.Command, args []string) error { return a.replay(cmd, args, o) },
	}
	o.f.register(cmd.Flags(), false)
	fs := cmd.Flags()
	fs.BoolVar(&o.dryRun, "dry-run", false, "report what would happen; re-inject and acknowledge nothing")
	fs.StringSliceVar(&o.repairs, "repair", nil, "repairs to apply: make-valid (invalid_geometry), reproject (crs_mismatch)")
	fs.StringVar(&o.target, "target", "", "store URL to re-inject into (default: --store)")
	fs.StringVar(&o.route, "route", "", "topic to re-inject into (default: each envelope's source topic)")
	fs.Float64Var(&o.rate, "rate", 0, "re-inject at most this many events per second (0: no limit)")
	fs.IntVar(&o.limit, "limit", 0, "examine at most this many records in all (0: no limit)")
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
}

type replayDestination struct {
	Destination string         `json:"destination"`
	Examined    int            `json:"examined"`
	Counts      map[string]int `json:"counts"`
	Items       []replayItem   `json:"items"`
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
	wanted := map[classify.Class]bool{}
	for _, r := range o.repairs {
		c, ok := repairNames[r]
		if !ok {
			return usageFor(cmd, "--repair %q: want make-valid or reproject", r)
		}
		wanted[c] = true
	}
	ctx := cmd.Context()
	src, err := a.openStore(ctx, readWrite)
	if err != nil {
		return err
	}
	defer closeWith(&err, src)
	var target broker.Publisher = src
	if o.target != "" {
		t, err := a.openStoreURL(ctx, o.target, create)
		if err != nil {
			return err
		}
		defer closeWith(&err, t)
		target = t
	}
	p, err := a.plan(ctx, cmd, src, sel, args)
	if err != nil {
		return err
	}
	for _, n := range p.notes {
		fmt.Fprintln(a.stderr, "geodlq: "+n)
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
	all, err := checker.Repairers(nil)
	if err != nil {
		return err
	}
	repairers := map[classify.Class]replay.Repairer{}
	for c := range wanted {
		repairers[c] = all[c]
	}

	total := a.planTotal(ctx, src, p, sel)
	if o.limit > 0 && (total < 0 || total > int64(o.limit)) {
		total = int64(o.limit)
	}
	m := a.startMeter("replay", "records", total)
	defer m.finish()
	tr := &tracker{m: m}
	opts := replay.Options{Target: &countingTarget{Publisher: target, t: tr}, Repairers: repairers, Logger: a.logger()}
	if o.rate > 0 {
		opts.Target.(*countingTarget).lim = rate.NewLimiter(rate.Limit(o.rate), 1)
		opts.BatchSize = max(1, min(100, int(o.rate*10)))
	}
	if off != nil {
		opts.Fetcher = off
	}
	if !o.noCheck {
		opts.Check = checker.ReplayCheck()
	}
	if o.route != "" {
		opts.Route = func(*envelope.Envelope) (string, error) { return o.route, nil }
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
		r, err := replay.New(ro)
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
		}
		rep.add(d, res)
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
	} else if err := a.replayText(o.out, rep, "replay"); err != nil {
		return err
	}
	if runErr != nil {
		return runErr
	}
	for _, bad := range []replay.Outcome{replay.OutcomeRestoreFailed, replay.OutcomePublishFailed, replay.OutcomeAckFailed, replay.OutcomeInvalidEnvelope} {
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

func (r *replayReport) add(dest string, res replay.Report) {
	d := replayDestination{Destination: dest, Examined: res.Examined, Counts: map[string]int{}, Items: []replayItem{}}
	for _, it := range res.Items {
		ri := replayItem{RecordID: it.RecordID, EventID: it.EventID, IdempotencyKey: it.IdempotencyKey,
			Outcome: string(it.Outcome), Target: it.Target}
		if it.Class.Valid() {
			ri.Class = it.Class.String()
		}
		if it.Repair != nil {
			ri.Repair = it.Repair.String()
		}
		if it.Err != nil {
			ri.Error = it.Err.Error()
			if errors.Is(it.Err, context.Canceled) && it.Outcome != replay.OutcomeAckFailed {
				// Ctrl-C cut this record short: it was released untouched,
				// not failed.
				ri.Outcome = outcomeInterrupted
			}
		}
		d.Counts[ri.Outcome]++
		r.Counts[ri.Outcome]++
		d.Items = append(d.Items, ri)
	}
	r.Examined += res.Examined
	r.Destinations = append(r.Destinations, d)
}

// replayText writes a replay or triage report for people: the count by
// outcome, a legend of the words used, and, with -o wide, one row per
// record.
func (a *app) replayText(o *output, rep replayReport, what string) error {
	if o.wide() {
		var rows [][]string
		for _, d := range rep.Destinations {
			for _, it := range d.Items {
				detail := it.Repair
				if detail == "" {
					detail = it.Error
				}
				rows = append(rows, []string{d.Destination + "/" + it.RecordID, orDash(it.EventID), orDash(it.Class), it.Outcome, orDash(it.Target), orDash(detail)})
			}
		}
		if len(rows) > 0 {
			if err := a.table(o, []string{"RECORD", "EVENT", "CLASS", "OUTCOME", "TARGET", "REPAIR / WHY LEFT"}, rows, 5); err != nil {
				return err
			}
			fmt.Fprintln(a.stdout)
		}
	}
	if rep.DryRun {
		what += " (dry run)"
	}
	fmt.Fprintf(a.stdout, "%s: %d examined\n", what, rep.Examined)
	if len(rep.Counts) > 0 {
		var rows [][]string
		for _, k := range outcomeOrder(rep.Counts) {
			rows = append(rows, []string{k, strconv.Itoa(rep.Counts[k]), outcomeLegend[k]})
		}
		if err := a.table(o, []string{"OUTCOME", "RECORDS", "MEANING"}, rows, 2); err != nil {
			return err
		}
	}
	if rep.Interrupted {
		fmt.Fprintln(a.stdout, "interrupted: unfinished records were released untouched; run the same command again to carry on")
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
}

func (t *tracker) fetched(recs []*broker.Record) {
	t.batchDone()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.batch = t.batch[:0]
	for _, r := range recs {
		t.batch = append(t.batch, r.ID)
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
type trackingSource struct {
	broker.DeadLetterSource
	t *tracker
}

func (s *trackingSource) Fetch(ctx context.Context, dest string, f broker.Filter, n int) ([]*broker.Record, error) {
	recs, err := s.DeadLetterSource.Fetch(ctx, dest, f, n)
	s.t.fetched(recs)
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

// countingTarget rate-limits and counts re-injections.
type countingTarget struct {
	broker.Publisher
	lim *rate.Limiter
	t   *tracker
}

func (c *countingTarget) Publish(ctx context.Context, dest string, m *broker.Message) error {
	if c.lim != nil {
		if err := c.lim.Wait(ctx); err != nil {
			return fmt.Errorf("rate limit: %w", err)
		}
	}
	if err := c.Publisher.Publish(ctx, dest, m); err != nil {
		return err
	}
	c.t.m.count("reinjected", 1)
	return nil
}

// holdingSource applies the client-side filter (source prefix) for the
// replayer: records that do not match are kept leased — so that the store
// does not hand them out again — and released when the run ends.
type holdingSource struct {
	broker.DeadLetterSource
	sel  selection
	mu   sync.Mutex
	held map[string]*broker.Record
}

func (h *holdingSource) Fetch(ctx context.Context, dest string, f broker.Filter, n int) ([]*broker.Record, error) {
	for {
		recs, err := h.DeadLetterSource.Fetch(ctx, dest, f, n)
		if err != nil || len(recs) == 0 {
			return recs, err
		}
		var out []*broker.Record
		fresh := 0
		h.mu.Lock()
		if h.held == nil {
			h.held = map[string]*broker.Record{}
		}
		for _, r := range recs {
			env, err := envelope.Decode(r.Message.Body)
			if err == nil && h.sel.match(env) {
				out = append(out, r)
				continue
			}
			if _, ok := h.held[r.ID]; !ok {
				fresh++
			}
			h.held[r.ID] = r // a lapsed lease came back: hold the new one
		}
		h.mu.Unlock()
		if len(out) > 0 || fresh == 0 {
			return out, nil
		}
	}
}

func (h *holdingSource) releaseAll(ctx context.Context) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.held {
		_ = h.DeadLetterSource.Release(rctx, r)
	}
	h.held = nil
}
