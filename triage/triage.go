// Package triage is the operator's policy for a poison destination, as the
// managed-queue design describes it: route each dead-lettered event by its
// failure class.
//
//   - invalid_geometry: repair (GEOS MakeValid), re-validate, and re-enqueue
//     only if it now passes, tagged dlq-repaired with the method and the
//     vertex counts before and after;
//   - crs_mismatch with a known EPSG code: reproject (PROJ) and re-enqueue
//     if it now passes;
//   - resource_exhausted: quarantine — move the envelope, byte for byte, to
//     a quarantine destination and raise an alert carrying the geometry
//     type, source URI and vertex count ([Alerter]; ready-made:
//     [SlogAlerter], [WebhookAlerter]);
//   - schema_violation: never replayed; it stays for an upstream fix (and
//     for export to a warehouse).
//
// The repairs come from package spatial (spatial.Checker.Repairers); triage
// itself has no cgo and runs the [replay.Replayer] for them, so its
// exactly-once guarantee and report are the replayer's.
package triage

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/replay"
)

// Alert describes a quarantined event, without its payload.
type Alert struct {
	EventID        string    `json:"event_id"`
	IdempotencyKey string    `json:"idempotency_key"`
	Class          string    `json:"failure_class"`
	Stage          string    `json:"failed_stage"`
	ReasonKind     string    `json:"reason_kind,omitempty"`
	ErrorMessage   string    `json:"error_message"`
	GeometryType   string    `json:"geometry_type,omitempty"`
	VertexCount    int       `json:"vertex_count,omitempty"`
	SourceURI      string    `json:"source_uri,omitempty"`
	PayloadSize    int64     `json:"payload_size"`
	From           string    `json:"from"`
	Quarantine     string    `json:"quarantine"`
	RecordID       string    `json:"record_id"`
	DeadLetteredAt time.Time `json:"dead_lettered_at"`
}

// Alerter is told about every quarantined event. It must be safe for
// concurrent use.
type Alerter interface {
	Alert(ctx context.Context, a Alert) error
}

// AlertFunc adapts a function to [Alerter].
type AlertFunc func(ctx context.Context, a Alert) error

// Alert calls f.
func (f AlertFunc) Alert(ctx context.Context, a Alert) error { return f(ctx, a) }

// SlogAlerter logs each alert at level Error with its fields as attributes.
func SlogAlerter(log *slog.Logger) Alerter {
	if log == nil {
		log = slog.Default()
	}
	return AlertFunc(func(ctx context.Context, a Alert) error {
		log.ErrorContext(ctx, "geodlq: event quarantined",
			slog.String("event_id", a.EventID), slog.String("idempotency_key", a.IdempotencyKey),
			slog.String("class", a.Class), slog.String("stage", a.Stage), slog.String("reason_kind", a.ReasonKind),
			slog.String("geometry_type", a.GeometryType), slog.Int("vertex_count", a.VertexCount),
			slog.String("source_uri", a.SourceURI), slog.Int64("payload_size", a.PayloadSize),
			slog.String("quarantine", a.Quarantine), slog.String("error", a.ErrorMessage))
		return nil
	})
}

// WebhookAlerter POSTs each alert as JSON to url (a Slack or PagerDuty
// bridge, an incident service). A non-2xx answer is an error, so the event
// is not moved and the alert is retried on the next run. A nil client
// means one with a 10-second timeout.
func WebhookAlerter(url string, client *http.Client) Alerter {
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second}
	}
	return AlertFunc(func(ctx context.Context, a Alert) error {
		body, err := json.Marshal(a)
		if err != nil {
			return err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			return fmt.Errorf("triage: webhook: %w", err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return fmt.Errorf("triage: webhook: %w", err)
		}
		defer resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			return fmt.Errorf("triage: webhook %s answered %s", url, resp.Status)
		}
		return nil
	})
}

// Options configures a [Policy].
type Options struct {
	// Source is the dead-letter store. Required.
	Source broker.DeadLetterSource
	// Target receives re-enqueued (repaired) events and quarantined
	// envelopes. Required.
	Target broker.Publisher
	// Fetcher verifies offloaded blobs (an *offload.Offloader).
	Fetcher envelope.Fetcher
	// Repairers repair invalid_geometry and crs_mismatch events; typically
	// spatial.Checker.Repairers. Nil: those classes stay.
	Repairers map[classify.Class]replay.Repairer
	// Check re-validates a repaired payload (spatial.Checker.ReplayCheck);
	// strongly recommended, so nothing is re-enqueued that would fail again.
	Check func(ctx context.Context, payload []byte) error
	// Alerter is told about quarantined events. Nil: SlogAlerter(Logger).
	Alerter Alerter
	// Quarantine names the quarantine destination for a dead-letter
	// destination. Nil: "<topic>.quarantine.dlt" for "<topic>.poison.dlt"
	// (or dest + ".quarantine").
	Quarantine func(dest string) string
	// Logger receives the replayer's records. Nil discards.
	Logger *slog.Logger
}

// Policy applies the triage rules to a dead-letter destination.
type Policy struct {
	opts     Options
	replayer *replay.Replayer
}

// New returns a policy. It fails if opts, opts.Source or opts.Target is
// nil; opts is copied.
func New(opts *Options) (*Policy, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Source == nil || o.Target == nil {
		return nil, errors.New("triage: Options.Source and Options.Target are required")
	}
	if o.Alerter == nil {
		o.Alerter = SlogAlerter(o.Logger)
	}
	if o.Quarantine == nil {
		o.Quarantine = DefaultQuarantine
	}
	r, err := replay.New(&replay.Options{
		Source: o.Source, Target: o.Target, Fetcher: o.Fetcher,
		Repairers: o.Repairers, Check: o.Check, Logger: o.Logger,
	})
	if err != nil {
		return nil, err
	}
	return &Policy{opts: o, replayer: r}, nil
}

// DefaultQuarantine maps "<topic>.poison.dlt" to "<topic>.quarantine.dlt"
// and any other name to name + ".quarantine".
func DefaultQuarantine(dest string) string {
	if t, ok := strings.CutSuffix(dest, ".poison.dlt"); ok {
		return t + ".quarantine.dlt"
	}
	return dest + ".quarantine"
}

// Report is what a triage run did.
type Report struct {
	// Replay is the repair-and-replay pass's report (quarantine-class
	// records are examined there too and reported skipped).
	Replay replay.Report
	// Quarantined counts envelopes moved to quarantine (and alerted).
	Quarantined int
	// QuarantineFailed counts resource_exhausted records left in place
	// because the alert or the move failed; they are retried next run.
	QuarantineFailed int
	// Errors lists why, for QuarantineFailed.
	Errors []error
}

// Run triages dest: quarantines resource_exhausted events first, then
// repairs and re-enqueues what can be repaired. Schema violations and
// unrepairable events stay in dest. With dryRun, nothing is moved,
// alerted, re-enqueued or acknowledged; the replay report says what would
// pass.
func (p *Policy) Run(ctx context.Context, dest string, filter broker.Filter, dryRun bool) (Report, error) {
	var rep Report
	if !dryRun && (len(filter.Classes) == 0 || containsClass(filter.Classes, classify.ClassResourceExhausted)) {
		if err := p.quarantine(ctx, dest, filter, &rep); err != nil {
			return rep, err
		}
	}
	r, err := p.replayer.Run(ctx, replay.Request{Destination: dest, Filter: filter, DryRun: dryRun})
	rep.Replay = r
	return rep, err
}

func containsClass(cs []classify.Class, c classify.Class) bool {
	for _, x := range cs {
		if x == c {
			return true
		}
	}
	return false
}

func (p *Policy) quarantine(ctx context.Context, dest string, filter broker.Filter, rep *Report) error {
	f := filter
	f.Classes = []classify.Class{classify.ClassResourceExhausted}
	qdest := p.opts.Quarantine(dest)
	// The leases of the batch being moved are renewed, and each move is
	// fenced by its record's lease (see replay.LeaseKeeper): two triage
	// runs never both move one record.
	keeper := replay.NewLeaseKeeper(p.opts.Source, &replay.LeaseKeeperOptions{Logger: p.opts.Logger})
	defer keeper.Close()
	var held []*broker.Record
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		for _, r := range held {
			_ = p.opts.Source.Release(rctx, r)
		}
	}()
	seen := map[string]bool{}
	for {
		fetched := time.Now()
		recs, err := p.opts.Source.Fetch(ctx, dest, f, 100)
		if err != nil {
			return fmt.Errorf("triage: fetching %q: %w", dest, err)
		}
		keeper.Hold(fetched, recs...)
		fresh := 0
		for _, rec := range recs {
			if seen[rec.ID] {
				held = append(held, rec)
				keeper.Drop(rec)
				continue
			}
			seen[rec.ID] = true
			fresh++
			if rec.Message != nil && rec.Message.Header(broker.HeaderQuarantinedFrom) != "" {
				// Already quarantined (dest is a quarantine destination,
				// or the record was copied back by hand): it waits for a
				// human, not for another move.
				held = append(held, rec)
				keeper.Drop(rec)
				continue
			}
			if err := p.move(ctx, keeper, rec, dest, qdest); err != nil {
				rep.QuarantineFailed++
				rep.Errors = append(rep.Errors, err)
				if !errors.Is(err, replay.ErrNotHeld) {
					held = append(held, rec)
				}
				keeper.Drop(rec)
				continue
			}
			rep.Quarantined++
		}
		if fresh == 0 {
			return nil
		}
	}
}

// move alerts, copies the envelope (byte for byte, its headers plus
// HeaderQuarantinedFrom) to quarantine, then acknowledges it in dest. A
// failure before the copy leaves the record where it was.
func (p *Policy) move(ctx context.Context, keeper *replay.LeaseKeeper, rec *broker.Record, from, to string) error {
	env := rec.Envelope
	if env == nil {
		var err error
		if env, err = envelope.Decode(rec.Message.Body); err != nil {
			return fmt.Errorf("triage: record %s: %w", rec.ID, err)
		}
	}
	a := Alert{
		EventID: env.EventID, IdempotencyKey: env.IdempotencyKey,
		Class: env.FailureClass.String(), Stage: env.FailedStage.String(), ErrorMessage: env.ErrorMessage,
		GeometryType: env.GeometryType, VertexCount: env.VertexCount, SourceURI: broker.SourceOf(env, ""),
		PayloadSize: env.PayloadSize, From: from, Quarantine: to, RecordID: rec.ID, DeadLetteredAt: env.DeadLetteredAt,
	}
	if env.GeometryError != nil {
		a.ReasonKind = env.GeometryError.Kind
	}
	msg := rec.Message.Clone()
	if msg.Headers == nil {
		msg.Headers = map[string]string{}
	}
	msg.Headers[broker.HeaderQuarantinedFrom] = from
	// The alert and the copy happen only while the record's lease is
	// provably held.
	if err := keeper.Act(ctx, rec, func(ctx context.Context) error {
		if err := p.opts.Alerter.Alert(ctx, a); err != nil {
			return fmt.Errorf("triage: alert for %s: %w", env.EventID, err)
		}
		if err := p.opts.Target.Publish(ctx, to, msg); err != nil {
			return fmt.Errorf("triage: quarantining %s: %w", env.EventID, err)
		}
		return nil
	}); err != nil {
		if errors.Is(err, replay.ErrNotHeld) {
			return fmt.Errorf("triage: %s left to whoever holds it now: %w", env.EventID, err)
		}
		return err
	}
	if err := keeper.Ack(ctx, rec); err != nil {
		return fmt.Errorf("triage: %s quarantined but not removed from %s: %w", env.EventID, from, err)
	}
	return nil
}
