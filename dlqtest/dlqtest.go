// Package dlqtest lets you assert, in your own tests, what your consumer
// dead-lettered — in the style of River's rivertest.RequireInserted.
//
//	env := dlqtest.RequireDeadLettered(ctx, t, store, "parcels.poison.dlt",
//		&dlqtest.Want{EventID: "evt-9", Class: classify.ClassInvalidGeometry, ReasonContains: "Self-intersection"})
//
// The helpers read through broker.DeadLetterSource, leasing records only
// for the moment of the look and releasing them at once, so they work with
// every adapter (memory, sqlite, kafka, postgis, …) and leave the store as
// they found it.
package dlqtest

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
)

// Want describes the envelope expected. Zero fields match anything.
type Want struct {
	// EventID is the event id.
	EventID string
	// IdempotencyKey is the key, verbatim.
	IdempotencyKey string
	// Class is the failure class.
	Class classify.Class
	// Stage is the failed stage.
	Stage classify.Stage
	// ReasonContains must be a substring of geometry_error.reason (or of
	// error_message when there is no geometry error).
	ReasonContains string
	// EPSG is the EPSG code recorded (broker.EPSGOf).
	EPSG int
	// Attempts is the number of attempts.
	Attempts int
	// Offloaded requires the geometry to have been offloaded (true) or
	// inline (false); nil means either.
	Offloaded *bool
}

func (w *Want) match(e *envelope.Envelope) []string {
	var why []string
	add := func(field string, got, want any) {
		why = append(why, fmt.Sprintf("%s = %v, want %v", field, got, want))
	}
	if w.EventID != "" && e.EventID != w.EventID {
		add("event_id", e.EventID, w.EventID)
	}
	if w.IdempotencyKey != "" && e.IdempotencyKey != w.IdempotencyKey {
		add("idempotency_key", e.IdempotencyKey, w.IdempotencyKey)
	}
	if w.Class != "" && e.FailureClass != w.Class {
		add("failure_class", e.FailureClass, w.Class)
	}
	if w.Stage != "" && e.FailedStage != w.Stage {
		add("failed_stage", e.FailedStage, w.Stage)
	}
	if w.ReasonContains != "" {
		reason := e.ErrorMessage
		if e.GeometryError != nil && e.GeometryError.Reason != "" {
			reason = e.GeometryError.Reason
		}
		if !strings.Contains(reason, w.ReasonContains) {
			add("reason", reason, "…"+w.ReasonContains+"…")
		}
	}
	if w.EPSG != 0 && broker.EPSGOf(e) != w.EPSG {
		add("epsg", broker.EPSGOf(e), w.EPSG)
	}
	if w.Attempts != 0 && e.Attempts != w.Attempts {
		add("attempts", e.Attempts, w.Attempts)
	}
	if w.Offloaded != nil && (e.Geometry.OffloadURI != "") != *w.Offloaded {
		add("geometry offloaded", e.Geometry.OffloadURI != "", *w.Offloaded)
	}
	return why
}

// Envelopes returns every envelope in dest, oldest first, without
// consuming them: records are leased and released at once. Records that
// are not valid envelopes fail tb.
func Envelopes(ctx context.Context, tb testing.TB, src broker.DeadLetterSource, dest string) []*envelope.Envelope {
	tb.Helper()
	var recs []*broker.Record
	defer func() {
		for _, r := range recs {
			if err := src.Release(context.WithoutCancel(ctx), r); err != nil {
				tb.Errorf("dlqtest: releasing %s/%s: %v", dest, r.ID, err)
			}
		}
	}()
	for {
		batch, err := src.Fetch(ctx, dest, broker.Filter{}, 100)
		if err != nil {
			tb.Fatalf("dlqtest: reading %s: %v", dest, err)
		}
		if len(batch) == 0 {
			break
		}
		recs = append(recs, batch...)
	}
	envs := make([]*envelope.Envelope, 0, len(recs))
	for _, r := range recs {
		env := r.Envelope
		if env == nil {
			var err error
			if env, err = envelope.Decode(r.Message.Body); err != nil {
				tb.Fatalf("dlqtest: %s/%s is not a dlq.v1 envelope: %v", dest, r.ID, err)
			}
		}
		envs = append(envs, env)
	}
	return envs
}

// RequireDeadLettered fails tb unless dest holds exactly one envelope
// matching want, and returns it. The failure message lists what dest holds
// and why each envelope did not match.
func RequireDeadLettered(ctx context.Context, tb testing.TB, src broker.DeadLetterSource, dest string, want *Want) *envelope.Envelope {
	tb.Helper()
	if want == nil {
		want = &Want{}
	}
	var found []*envelope.Envelope
	var report []string
	for _, e := range Envelopes(ctx, tb, src, dest) {
		if why := want.match(e); len(why) == 0 {
			found = append(found, e)
		} else {
			report = append(report, fmt.Sprintf("  %s (%s/%s): %s", e.EventID, e.FailureClass, e.FailedStage, strings.Join(why, "; ")))
		}
	}
	switch len(found) {
	case 1:
		return found[0]
	case 0:
		tb.Fatalf("dlqtest: no envelope in %s matches; it holds %d:\n%s", dest, len(report), strings.Join(report, "\n"))
	default:
		tb.Fatalf("dlqtest: %d envelopes in %s match, want exactly one", len(found), dest)
	}
	return nil
}

// RequireNotDeadLettered fails tb if dest holds an envelope for eventID.
func RequireNotDeadLettered(ctx context.Context, tb testing.TB, src broker.DeadLetterSource, dest, eventID string) {
	tb.Helper()
	for _, e := range Envelopes(ctx, tb, src, dest) {
		if e.EventID == eventID {
			tb.Fatalf("dlqtest: %s was dead-lettered to %s (%s at %s: %s)", eventID, dest, e.FailureClass, e.FailedStage, e.ErrorMessage)
		}
	}
}
