package main

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/cmd/geodlq/internal/replaying"
	"github.com/geodlq/geodlq/replay"
	"github.com/geodlq/geodlq/spatial"
	"github.com/geodlq/geodlq/triage"
)

type triageOptions struct {
	f            filterFlags
	out          *output
	dryRun       bool
	webhook      string
	target       string
	expectedEPSG int
}

// triageReport is what triage writes with --json. Field names are stable.
type triageReport struct {
	DryRun           bool              `json:"dry_run"`
	Quarantined      int               `json:"quarantined"`
	QuarantineFailed int               `json:"quarantine_failed"`
	Errors           []string          `json:"errors,omitempty"`
	Replay           replayReport      `json:"replay"`
	Quarantines      map[string]string `json:"quarantines"`
}

func newTriageCmd(a *app) *cobra.Command {
	var o triageOptions
	cmd := &cobra.Command{
		Use:   "triage",
		Short: "Apply the triage policy: repair and re-enqueue, quarantine with alerts",
		Long: `triage applies geodlq's triage policy (package triage) to the selected
destinations:

  invalid_geometry    GEOS MakeValid, re-validate, re-enqueue only if it now passes
                      (tagged dlq-repaired, with the method and vertex counts)
  crs_mismatch        reproject from its known EPSG code to --expected-epsg, re-enqueue
                      if it now passes
  resource_exhausted  move to <topic>.quarantine.dlt and alert: to the log (stderr),
                      or POSTed as JSON to --webhook
  schema_violation    never replayed; left for an upstream fix
  transient, unknown  replayed as they are

Re-enqueued events go to --target (the store or broker the consumer reads);
without it, into the store itself, and then only the events the store's own
broker delivered, as for geodlq replay: others are refused with a usage error
naming --target (exit 2). Quarantined records always stay in the store.

--dry-run moves, alerts and re-enqueues nothing, and reports what would
happen: would_quarantine, would_repair, would_replay, would_fail. The report is
a count by outcome with a legend (-o wide: one row per record; -o json:
everything); a progress bar (or JSON records on stderr) shows the work.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return a.triage(cmd, o) },
	}
	o.f.register(cmd.Flags(), false)
	cmd.Flags().BoolVar(&o.dryRun, "dry-run", false, "report what would happen; change nothing")
	cmd.Flags().StringVar(&o.webhook, "webhook", "", "POST each quarantine alert as JSON to this URL (default: log to stderr)")
	cmd.Flags().StringVar(&o.target, "target", "", "store or broker URL to re-enqueue repaired events into (default: --store, for the events its own broker delivered)")
	cmd.Flags().IntVar(&o.expectedEPSG, "expected-epsg", spatial.DefaultExpectedEPSG, "EPSG code the consumer expects")
	o.out = addOutput(cmd, fmtTable, fmtWide, fmtJSON)
	return cmd
}

func (a *app) triage(cmd *cobra.Command, o triageOptions) (err error) {
	if err := o.out.resolve(a, cmd); err != nil {
		return err
	}
	sel, err := o.f.parse(cmd, time.Now())
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	s, err := a.openStore(ctx, readWrite)
	if err != nil {
		return err
	}
	defer closeWith(&err, s)
	var target broker.Publisher = s
	intoStore := s.Name()
	if o.target != "" {
		t, err := a.openStoreURL(ctx, o.target, create)
		if err != nil {
			return err
		}
		defer closeWith(&err, t)
		target, intoStore = &splitTarget{store: s, target: t}, ""
	}
	p, err := a.plan(ctx, cmd, s, sel, nil)
	if err != nil {
		return err
	}
	if len(a.dests) == 0 {
		// Quarantined records wait for a human: "triage everything" does
		// not triage the quarantine destinations it fills (triage itself
		// never moves a quarantined record again, see
		// broker.HeaderQuarantinedFrom).
		p.dests = slices.DeleteFunc(p.dests, isQuarantine)
	}
	if intoStore != "" {
		if err := a.checkIntoStore(ctx, cmd, s, p, sel); err != nil {
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
	repairers, err := checker.Repairers(nil)
	if err != nil {
		return err
	}
	alerter := triage.SlogAlerter(slog.New(slog.NewTextHandler(a.stderr, nil)))
	if o.webhook != "" {
		alerter = triage.WebhookAlerter(o.webhook, nil)
	}
	m := a.startMeter("triage", "records", a.planTotal(ctx, s, p, sel))
	defer m.finish()
	tr := &tracker{m: m}
	rep := triageReport{DryRun: o.dryRun, Quarantines: map[string]string{},
		Replay: replayReport{DryRun: o.dryRun, Counts: map[string]int{}, Destinations: []replayDestination{}}}
	var runErr error
	foreign := 0
	for _, d := range p.dests {
		var src broker.DeadLetterSource = &trackingSource{DeadLetterSource: s, t: tr}
		var held *holdingSource
		if sel.clientSide() || intoStore != "" {
			held = &holdingSource{DeadLetterSource: src, sel: sel, intoStore: intoStore}
			src = held
		}
		opts := triage.Options{Source: src, Target: &replaying.Target{Publisher: target, OnPublish: func() { m.count("reinjected", 1) }}, Repairers: repairers,
			Check: checker.ReplayCheck(), Alerter: alerter, Logger: a.logger()}
		if off != nil {
			opts.Fetcher = off
		}
		pol, err := triage.New(&opts)
		if err != nil {
			return err
		}
		res, err := pol.Run(ctx, d, p.filters[d], o.dryRun)
		tr.batchDone()
		if held != nil {
			held.releaseAll(ctx)
			held.lostInto(&res.Replay)
			foreign += held.foreign
		}
		rep.Quarantines[d] = triage.DefaultQuarantine(d)
		rep.Quarantined += res.Quarantined
		rep.QuarantineFailed += res.QuarantineFailed
		for _, e := range res.Errors {
			rep.Errors = append(rep.Errors, e.Error())
		}
		rep.Replay.add(d, res.Replay, triageHints)
		if err != nil {
			runErr = err
			break
		}
	}
	m.finish()
	if o.dryRun {
		// Triage quarantines resource_exhausted records before replaying
		// the rest; a dry run's replay pass saw them and skipped them.
		for i := range rep.Replay.Destinations {
			d := &rep.Replay.Destinations[i]
			for j := range d.Items {
				it := &d.Items[j]
				if it.Class == classify.ClassResourceExhausted.String() && it.Outcome == string(replay.OutcomeSkipped) {
					it.Outcome, it.Error = outcomeWouldQuarantine, "would be moved to "+triage.DefaultQuarantine(d.Destination)+" and alerted"
					it.Why = it.Error
					d.Counts[string(replay.OutcomeSkipped)]--
					d.Counts[outcomeWouldQuarantine]++
					rep.Replay.Counts[string(replay.OutcomeSkipped)]--
					rep.Replay.Counts[outcomeWouldQuarantine]++
				}
			}
		}
		for k, n := range rep.Replay.Counts {
			if n == 0 {
				delete(rep.Replay.Counts, k)
			}
		}
		for i := range rep.Replay.Destinations {
			for k, n := range rep.Replay.Destinations[i].Counts {
				if n == 0 {
					delete(rep.Replay.Destinations[i].Counts, k)
				}
			}
		}
	} else {
		if rep.Quarantined > 0 {
			rep.Replay.Counts["quarantined"] += rep.Quarantined
		}
		if rep.QuarantineFailed > 0 {
			rep.Replay.Counts["quarantine_failed"] += rep.QuarantineFailed
		}
	}
	rep.Replay.Interrupted = ctx.Err() != nil
	if o.out.json() {
		if err := writeJSON(a.stdout, rep); err != nil {
			return err
		}
	} else {
		if err := a.replayText(o.out, rep.Replay, "triage", triageLegend); err != nil {
			return err
		}
		if o.dryRun {
			fmt.Fprintln(a.stdout, "dry run: nothing quarantined, alerted or re-enqueued")
		}
		for _, e := range rep.Errors {
			fmt.Fprintf(a.stdout, "  %s\n", e)
		}
	}
	if runErr != nil {
		return runErr
	}
	if foreign > 0 {
		return usageFor(cmd, "%d records did not come from this store's broker (%s) and were left in place: "+
			"name where their consumer reads with --target URL", foreign, s.Name())
	}
	if rep.Replay.Incomplete {
		return problems("triage incomplete: %d records examined, %d leases lost to another process or lapsed; "+
			"records may have been left unexamined: run the same command again", rep.Replay.Examined, rep.Replay.LeasesLost)
	}
	if rep.QuarantineFailed > 0 {
		return &problemsError{}
	}
	return nil
}

// isQuarantine reports whether dest is named as triage.DefaultQuarantine
// names a quarantine destination.
func isQuarantine(dest string) bool {
	return strings.HasSuffix(dest, ".quarantine.dlt") || strings.HasSuffix(dest, ".quarantine")
}

// triageHints name what would change a triage outcome: triage repairs
// with every repair it has and always checks, so the other choices are
// geodlq replay's.
var triageHints = replaying.Hints{
	Repair:    func(n string) string { return "geodlq replay --repair " + n },
	Unchanged: func(c classify.Class) string { return "geodlq replay --unchanged " + c.String() },
	NoCheck:   "geodlq replay --no-check",
	Route:     "geodlq replay --route TOPIC",
}

// triageLegend is the legend under a triage report: replay's, in the
// words of triage's own flags (it has no --repair: it repairs what it
// can).
var triageLegend = func() map[string]string {
	m := maps.Clone(outcomeLegend)
	m[string(replay.OutcomeSkipped)] = "left in place: schema_violation is never replayed; fix the producer"
	m[string(replay.OutcomeWouldFail)] = "dry run: its repair would fail, or the result would still fail the check"
	m[string(replay.OutcomeNoRoute)] = "left in place: the envelope names no source topic to re-enqueue into"
	return m
}()

// splitTarget re-enqueues into target and quarantines into the store:
// triage publishes both through one publisher.
type splitTarget struct {
	store, target broker.Publisher
}

func (t *splitTarget) Publish(ctx context.Context, dest string, m *broker.Message) error {
	if isQuarantine(dest) {
		return t.store.Publish(ctx, dest, m)
	}
	return t.target.Publish(ctx, dest, m)
}
