package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/spf13/cobra"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/spatial"
	"github.com/geodlq/geodlq/triage"
)

type triageOptions struct {
	f            filterFlags
	dryRun       bool
	webhook      string
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

--dry-run moves, alerts and re-enqueues nothing.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return a.triage(cmd.Context(), o) },
	}
	o.f.register(cmd.Flags(), false)
	cmd.Flags().BoolVar(&o.dryRun, "dry-run", false, "report what would happen; change nothing")
	cmd.Flags().StringVar(&o.webhook, "webhook", "", "POST each quarantine alert as JSON to this URL (default: log to stderr)")
	cmd.Flags().IntVar(&o.expectedEPSG, "expected-epsg", spatial.DefaultExpectedEPSG, "EPSG code the consumer expects")
	return cmd
}

func (a *app) triage(ctx context.Context, o triageOptions) (err error) {
	sel, err := o.f.parse(time.Now())
	if err != nil {
		return err
	}
	s, err := a.openStore(ctx, false)
	if err != nil {
		return err
	}
	defer closeWith(&err, s)
	dests, err := a.destinations(ctx, s)
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
	repairers, err := checker.Repairers(nil)
	if err != nil {
		return err
	}
	alerter := triage.SlogAlerter(slog.New(slog.NewTextHandler(a.stderr, nil)))
	if o.webhook != "" {
		alerter = triage.WebhookAlerter(o.webhook, nil)
	}
	rep := triageReport{DryRun: o.dryRun, Quarantines: map[string]string{},
		Replay: replayReport{DryRun: o.dryRun, Counts: map[string]int{}, Destinations: []replayDestination{}}}
	var runErr error
	for _, d := range dests {
		var src broker.DeadLetterSource = s
		var held *holdingSource
		if sel.clientSide() {
			held = &holdingSource{DeadLetterSource: s, sel: sel}
			src = held
		}
		opts := triage.Options{Source: src, Target: s, Repairers: repairers, Check: checker.ReplayCheck(),
			Alerter: alerter, Logger: a.logger()}
		if off != nil {
			opts.Fetcher = off
		}
		p, err := triage.New(opts)
		if err != nil {
			return err
		}
		res, err := p.Run(ctx, d, sel.filter, o.dryRun)
		if held != nil {
			held.releaseAll(ctx)
		}
		rep.Quarantines[d] = triage.DefaultQuarantine(d)
		rep.Quarantined += res.Quarantined
		rep.QuarantineFailed += res.QuarantineFailed
		for _, e := range res.Errors {
			rep.Errors = append(rep.Errors, e.Error())
		}
		rep.Replay.add(d, res.Replay)
		if err != nil {
			runErr = err
			break
		}
	}
	rep.Replay.Interrupted = ctx.Err() != nil
	if a.json {
		if err := writeJSON(a.stdout, rep); err != nil {
			return err
		}
	} else {
		if err := a.replayText(rep.Replay); err != nil {
			return err
		}
		if o.dryRun {
			fmt.Fprintln(a.stdout, "dry run: nothing quarantined, alerted or re-enqueued")
		} else {
			fmt.Fprintf(a.stdout, "quarantined %d resource_exhausted events (alerted); %d left in place after a failed alert or move\n",
				rep.Quarantined, rep.QuarantineFailed)
		}
		for _, e := range rep.Errors {
			fmt.Fprintf(a.stdout, "  %s\n", e)
		}
	}
	if runErr != nil {
		return runErr
	}
	if rep.QuarantineFailed > 0 {
		return &problemsError{}
	}
	return nil
}
