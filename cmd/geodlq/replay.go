package main

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/time/rate"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/cmd/geodlq/internal/stores"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/replay"
	"github.com/geodlq/geodlq/spatial"
)

type replayOptions struct {
	f            filterFlags
	dryRun       bool
	repairs      []string
	target       string
	route        string
	rate         float64
	limit        int
	noCheck      bool
	expectedEPSG int
}

// repairNames maps --repair names to the classes whose repairer they
// enable (spatial.Checker.Repairers).
var repairNames = map[string]classify.Class{
	"make-valid": classify.ClassInvalidGeometry,
	"reproject":  classify.ClassCRSMismatch,
}

func newReplayCmd(a *app) *cobra.Command {
	var o replayOptions
	cmd := &cobra.Command{
		Use:   "replay",
		Short: "Re-inject dead-lettered events exactly once, optionally repaired",
		Long: `replay runs geodlq's replayer over the selected destinations: for each record it
restores the exact original payload (offloaded parts fetched from --blobs and
verified), applies the repair named for its class (--repair make-valid for
invalid_geometry, reproject for crs_mismatch with a known EPSG code), checks
the result as the consumer will (unless --no-check), re-injects it with its
original idempotency key into its source topic (or --route) on --target
(default: the store itself), and only then acknowledges the record.

Deterministic classes without a named repair are skipped; schema_violation and
resource_exhausted are never replayed. --dry-run says what would happen now.

Resumable: an acknowledged record never comes back, so running the same command
again after an interruption carries on with what is left; a run that dies
after re-injecting a record but before acknowledging it re-injects it again
next time, and the consumer's idempotency claim absorbs the duplicate. Ctrl-C
stops cleanly: the record in flight is finished or left untouched, and every
leased record is released at once. --rate N re-injects at most N events per
second (fetching about 10 seconds' worth at a time, so leases do not lapse).

Exit code 1 when a record could not be restored, re-injected or acknowledged.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return a.replay(cmd.Context(), o) },
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
	return cmd
}

// replayReport is what replay writes with --json. Field names are stable.
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

func (a *app) replay(ctx context.Context, o replayOptions) (err error) {
	sel, err := o.f.parse(time.Now())
	if err != nil {
		return err
	}
	if o.rate < 0 || o.limit < 0 {
		return usagef("--rate and --limit must not be negative")
	}
	wanted := map[classify.Class]bool{}
	for _, r := range o.repairs {
		c, ok := repairNames[r]
		if !ok {
			return usagef("--repair %q: want make-valid or reproject", r)
		}
		wanted[c] = true
	}
	src, err := a.openStore(ctx, false)
	if err != nil {
		return err
	}
	defer closeWith(&err, src)
	var target broker.Publisher = src
	if o.target != "" {
		t, err := stores.Open(ctx, o.target, stores.Options{Create: true, Logger: a.logger()})
		if err != nil {
			return err
		}
		defer closeWith(&err, t)
		target = t
	}
	dests, err := a.destinations(ctx, src)
	if err != nil {
		return err
	}
	off, closeBlobs, err := a.openBlobs(ctx, false)
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

	prog := &progress{start: time.Now()}
	counted := &countingSource{DeadLetterSource: src, p: prog}
	pub := &countingTarget{Publisher: target, p: prog}
	if o.rate > 0 {
		pub.lim = rate.NewLimiter(rate.Limit(o.rate), 1)
	}
	opts := replay.Options{Source: counted, Target: pub, Repairers: repairers, Logger: a.logger()}
	if off != nil {
		opts.Fetcher = off
	}
	if !o.noCheck {
		opts.Check = checker.ReplayCheck()
	}
	if o.route != "" {
		opts.Route = func(*envelope.Envelope) (string, error) { return o.route, nil }
	}
	if o.rate > 0 {
		opts.BatchSize = max(1, min(100, int(o.rate*10)))
	}

	stopProgress := func() {}
	if a.progress && !a.json {
		stopProgress = prog.show(a, o.dryRun)
	}
	rep := replayReport{DryRun: o.dryRun, Counts: map[string]int{}, Destinations: []replayDestination{}}
	var runErr error
	for _, d := range dests {
		if o.limit > 0 && rep.Examined >= o.limit {
			break
		}
		prog.dest.Store(&d)
		var source broker.DeadLetterSource = counted
		var held *holdingSource
		if sel.clientSide() {
			held = &holdingSource{DeadLetterSource: counted, sel: sel}
			source = held
		}
		ro := opts
		ro.Source = source
		r, err := replay.New(ro)
		if err != nil {
			return err
		}
		req := replay.Request{Destination: d, Filter: sel.filter, DryRun: o.dryRun}
		if o.limit > 0 {
			req.Limit = o.limit - rep.Examined
		}
		res, err := r.Run(ctx, req)
		if held != nil {
			held.releaseAll(ctx)
		}
		rep.add(d, res)
		if err != nil {
			runErr = err
			break
		}
	}
	stopProgress()
	rep.Interrupted = ctx.Err() != nil
	if a.json {
		if err := writeJSON(a.stdout, rep); err != nil {
			return err
		}
	} else if err := a.replayText(rep); err != nil {
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
	return nil
}

func (r *replayReport) add(dest string, res replay.Report) {
	d := replayDestination{Destination: dest, Examined: res.Examined, Counts: map[string]int{}, Items: []replayItem{}}
	for o, n := range res.Counts {
		d.Counts[string(o)] += n
		r.Counts[string(o)] += n
	}
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
		}
		d.Items = append(d.Items, ri)
	}
	r.Examined += res.Examined
	r.Destinations = append(r.Destinations, d)
}

func (a *app) replayText(rep replayReport) error {
	var rows [][]string
	for _, d := range rep.Destinations {
		for _, it := range d.Items {
			detail := it.Repair
			if detail == "" {
				detail = it.Error
			}
			rows = append(rows, []string{d.Destination + "/" + it.RecordID, orDash(it.EventID), orDash(it.Class), it.Outcome, orDash(it.Target), clip(orDash(detail), 60)})
		}
	}
	if len(rows) > 0 {
		if err := table(a.stdout, []string{"RECORD", "EVENT", "CLASS", "OUTCOME", "TARGET", "REPAIR / WHY LEFT"}, rows); err != nil {
			return err
		}
		fmt.Fprintln(a.stdout)
	}
	what := "replay"
	if rep.DryRun {
		what = "dry run"
	}
	fmt.Fprintf(a.stdout, "%s: %d examined", what, rep.Examined)
	if len(rep.Counts) > 0 {
		fmt.Fprintf(a.stdout, ": %s", countsLine(rep.Counts))
	}
	fmt.Fprintln(a.stdout)
	if rep.Interrupted {
		fmt.Fprintln(a.stdout, "interrupted: unfinished records were released untouched; run the same command again to carry on")
	}
	return nil
}

func countsLine(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + strconv.Itoa(m[k])
	}
	return strings.Join(parts, " ")
}

// progress counts what a replay did so far, for the terminal line.
type progress struct {
	start                     time.Time
	dest                      atomic.Pointer[string]
	leased, reinjected, acked atomic.Int64
}

// show prints the progress line to stderr every 200ms until stopped.
func (p *progress) show(a *app, dry bool) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	line := func() {
		d := ""
		if s := p.dest.Load(); s != nil {
			d = *s
		}
		secs := time.Since(p.start).Seconds()
		verb := "re-injected"
		if dry {
			verb = "checked"
		}
		n := p.reinjected.Load()
		if dry {
			n = p.leased.Load()
		}
		fmt.Fprintf(a.stderr, "\r\033[K%s: leased %d · %s %d · acked %d · %.1f/s · %s",
			d, p.leased.Load(), verb, n, p.acked.Load(), float64(n)/max(secs, 0.001), time.Since(p.start).Truncate(time.Second))
	}
	go func() {
		defer wg.Done()
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				line()
				fmt.Fprintln(a.stderr)
				return
			case <-t.C:
				line()
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// countingSource counts leases and acknowledgements.
type countingSource struct {
	broker.DeadLetterSource
	p *progress
}

func (s *countingSource) Fetch(ctx context.Context, dest string, f broker.Filter, n int) ([]*broker.Record, error) {
	recs, err := s.DeadLetterSource.Fetch(ctx, dest, f, n)
	s.p.leased.Add(int64(len(recs)))
	return recs, err
}

func (s *countingSource) Ack(ctx context.Context, r *broker.Record) error {
	err := s.DeadLetterSource.Ack(ctx, r)
	if err == nil {
		s.p.acked.Add(1)
	}
	return err
}

// countingTarget rate-limits and counts re-injections.
type countingTarget struct {
	broker.Publisher
	lim *rate.Limiter
	p   *progress
}

func (t *countingTarget) Publish(ctx context.Context, dest string, m *broker.Message) error {
	if t.lim != nil {
		if err := t.lim.Wait(ctx); err != nil {
			return fmt.Errorf("rate limit: %w", err)
		}
	}
	if err := t.Publisher.Publish(ctx, dest, m); err != nil {
		return err
	}
	t.p.reinjected.Add(1)
	return nil
}

// holdingSource applies the client-side filters (reason kind, source
// prefix) for the replayer: records that do not match are kept leased —
// so that the store does not hand them out again — and released when the
// run ends.
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
		if err := h.DeadLetterSource.Release(rctx, r); err != nil && !errors.Is(err, broker.ErrLeaseLost) {
			continue
		}
	}
	h.held = nil
}
