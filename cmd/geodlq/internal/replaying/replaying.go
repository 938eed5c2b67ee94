// Package replaying is what `geodlq replay`, `geodlq triage` and the
// console's replay jobs share about running replay.Replayer: the repairs
// by name (one of them chained: reproject, then MakeValid when the
// reprojected geometry is invalid), replaying a deterministic class
// unchanged, where a replay with no explicit target may re-inject, a rate
// limit, and the one-line reason shown for every record a replay leaves in
// place (or, in a dry run, would fail), naming the control that would
// change it.
package replaying

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"golang.org/x/time/rate"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/replay"
	"github.com/geodlq/geodlq/spatial"
)

// The repairs, by the names the command's --repair and the console take.
const (
	// MakeValid repairs invalid_geometry with GEOS MakeValid.
	MakeValid = "make-valid"
	// Reproject repairs crs_mismatch with a known EPSG code by
	// reprojecting with PROJ to the expected CRS.
	Reproject = "reproject"
	// ReprojectMakeValid reprojects a crs_mismatch record, then applies
	// MakeValid when the reprojected geometry fails the check as invalid
	// (a polygon crossing the antimeridian, say).
	ReprojectMakeValid = "reproject+make-valid"
)

// RepairNames lists the repair names.
func RepairNames() []string { return []string{MakeValid, Reproject, ReprojectMakeValid} }

// ClassOf returns the class a named repair is for.
func ClassOf(name string) (classify.Class, bool) {
	switch name {
	case MakeValid:
		return classify.ClassInvalidGeometry, true
	case Reproject, ReprojectMakeValid:
		return classify.ClassCRSMismatch, true
	}
	return "", false
}

// UnchangedClasses lists the classes that may be replayed unchanged:
// the deterministic ones a repair exists for. (schema_violation and
// resource_exhausted are never replayed.)
func UnchangedClasses() []classify.Class {
	return []classify.Class{classify.ClassInvalidGeometry, classify.ClassCRSMismatch}
}

// ErrConflict is returned by [Repairers] when two choices apply to one
// class.
var ErrConflict = errors.New("conflicting repairs")

// unchangedMethod is the Repair.Method of a replay of a deterministic
// class without a repair: the replayer re-injects a deterministic class
// only through a Repairer, so "unchanged" is a Repairer that changes
// nothing; [Target] takes its marks off the message and [Normalize] off
// the report, so that neither says it was repaired.
const unchangedMethod = "unchanged"

// Validate checks the named repairs and the classes to replay unchanged
// as [Repairers] does, without building anything: unknown names, a class
// named twice (make-valid and unchanged invalid_geometry; reproject and
// reproject+make-valid) and classes that cannot be replayed unchanged are
// errors, for the caller to report as usage errors.
func Validate(names []string, unchanged []classify.Class) error {
	_, err := choose(names, unchanged)
	return err
}

// choose maps each class to the repair name (or "unchanged") chosen for it.
func choose(names []string, unchanged []classify.Class) (map[classify.Class]string, error) {
	by := map[classify.Class]string{}
	claim := func(cl classify.Class, what string) error {
		if prev, ok := by[cl]; ok && prev != what {
			return fmt.Errorf("%w: %s and %s both apply to %s; choose one", ErrConflict, prev, what, cl)
		}
		by[cl] = what
		return nil
	}
	for _, n := range names {
		cl, ok := ClassOf(n)
		if !ok {
			return nil, fmt.Errorf("unknown repair %q: want %s", n, strings.Join(RepairNames(), ", "))
		}
		if err := claim(cl, n); err != nil {
			return nil, err
		}
	}
	for _, cl := range unchanged {
		if !slices.Contains(UnchangedClasses(), cl) {
			return nil, fmt.Errorf("%s cannot be replayed unchanged (want %s): it is never replayed", cl, classList(UnchangedClasses()))
		}
		if err := claim(cl, "unchanged "+cl.String()); err != nil {
			return nil, err
		}
	}
	return by, nil
}

// Repairers returns replay.Options.Repairers for the named repairs and
// the classes to replay unchanged (see [Validate] for what is refused).
func Repairers(c *spatial.Checker, names []string, unchanged []classify.Class) (map[classify.Class]replay.Repairer, error) {
	by, err := choose(names, unchanged)
	if err != nil {
		return nil, err
	}
	out := map[classify.Class]replay.Repairer{}
	if len(names) == 0 {
		// Only unchanged classes: no GEOS or PROJ needed (a build
		// without cgo replays them too).
		for cl := range by {
			out[cl] = replay.RepairFunc(func(_ context.Context, _ *envelope.Envelope, payload []byte) ([]byte, replay.Repair, error) {
				return payload, replay.Repair{Method: unchangedMethod}, nil
			})
		}
		return out, nil
	}
	all, err := c.Repairers(nil)
	if err != nil {
		return nil, err
	}
	for cl, what := range by {
		switch what {
		case ReprojectMakeValid:
			out[cl] = chain(c, all[classify.ClassCRSMismatch], all[classify.ClassInvalidGeometry])
		case MakeValid, Reproject:
			out[cl] = all[cl]
		default: // unchanged
			out[cl] = replay.RepairFunc(func(_ context.Context, _ *envelope.Envelope, payload []byte) ([]byte, replay.Repair, error) {
				return payload, replay.Repair{Method: unchangedMethod}, nil
			})
		}
	}
	return out, nil
}

func classList(cs []classify.Class) string {
	var s []string
	for _, c := range cs {
		s = append(s, c.String())
	}
	return strings.Join(s, ", ")
}

// chain reprojects, then applies MakeValid when the reprojected payload
// fails the check as an invalid geometry.
func chain(c *spatial.Checker, reproject, makeValid replay.Repairer) replay.Repairer {
	return replay.RepairFunc(func(ctx context.Context, env *envelope.Envelope, payload []byte) ([]byte, replay.Repair, error) {
		moved, rp, err := reproject.Repair(ctx, env, payload)
		if err != nil {
			return nil, rp, err
		}
		_, cerr := c.CheckEventContext(ctx, moved)
		if cerr == nil || classify.Classify(cerr) != classify.ClassInvalidGeometry {
			return moved, rp, nil
		}
		fixed, mv, err := makeValid.Repair(ctx, env, moved)
		if err != nil {
			return nil, rp, fmt.Errorf("after %s: %w", rp, err)
		}
		return fixed, replay.Repair{Method: rp.Method + "+" + mv.Method, Detail: rp.Detail + ", " + mv.Detail,
			VerticesBefore: mv.VerticesBefore, VerticesAfter: mv.VerticesAfter}, nil
	})
}

// Unchanged reports whether an item was replayed (or would be) by the
// unchanged "repair", before [Normalize].
func unchanged(it *replay.Item) bool { return it.Repair != nil && it.Repair.Method == unchangedMethod }

// Normalize reports an item of an unchanged replay as what it is:
// replayed (would_replay), not repaired, with no repair.
func Normalize(it *replay.Item) {
	if !unchanged(it) {
		return
	}
	switch it.Outcome {
	case replay.OutcomeRepaired:
		it.Outcome = replay.OutcomeReplayed
	case replay.OutcomeWouldRepair:
		it.Outcome = replay.OutcomeWouldReplay
	}
	if it.Err == nil {
		it.Repair = nil
	}
}

// Target is the publisher a replay re-injects through: it waits for its
// rate limit, takes the repair marks off an unchanged replay's message,
// and tells OnPublish about each re-injection.
type Target struct {
	broker.Publisher
	// Limiter, when set, is waited on before each re-injection.
	Limiter *rate.Limiter
	// OnPublish, when set, is called after each re-injection.
	OnPublish func()
}

// NewLimiter returns the limiter of perSecond re-injections a second, nil
// for none (perSecond ≤ 0).
func NewLimiter(perSecond float64) *rate.Limiter {
	if perSecond <= 0 {
		return nil
	}
	return rate.NewLimiter(rate.Limit(perSecond), 1)
}

// Publish implements broker.Publisher.
func (t *Target) Publish(ctx context.Context, dest string, m *broker.Message) error {
	if t.Limiter != nil {
		if err := t.Limiter.Wait(ctx); err != nil {
			return fmt.Errorf("rate limit: %w", err)
		}
	}
	if err := t.Publisher.Publish(ctx, dest, unmarked(m)); err != nil {
		return err
	}
	if t.OnPublish != nil {
		t.OnPublish()
	}
	return nil
}

// PublishBatch implements broker.Batcher: one batched write
// (broker.Batcher) when the publisher has one and no rate limit applies,
// otherwise one Publish per message, in order, stopping at the first
// error.
func (t *Target) PublishBatch(ctx context.Context, dest string, ms []*broker.Message) error {
	b, ok := t.Publisher.(broker.Batcher)
	if !ok || t.Limiter != nil {
		for _, m := range ms {
			if err := t.Publish(ctx, dest, m); err != nil {
				return err
			}
		}
		return nil
	}
	out := make([]*broker.Message, len(ms))
	for i, m := range ms {
		out[i] = unmarked(m)
	}
	if err := b.PublishBatch(ctx, dest, out); err != nil {
		return err
	}
	if t.OnPublish != nil {
		for range ms {
			t.OnPublish()
		}
	}
	return nil
}

// unmarked is m without the repair marks when its repair left it
// unchanged.
func unmarked(m *broker.Message) *broker.Message {
	if m.Header(broker.HeaderRepair) != unchangedMethod {
		return m
	}
	h := make(map[string]string, len(m.Headers))
	for k, v := range m.Headers {
		if k != broker.HeaderRepair && k != broker.HeaderRepaired {
			h[k] = v
		}
	}
	c := *m
	c.Headers = h
	return &c
}

// ErrForeignSource is wrapped by the error of a record a replay with no
// target would re-inject into the dead-letter store although it came from
// another system: the outcome is no_route, and nothing is re-injected.
var ErrForeignSource = errors.New("the record did not come from this store's broker")

// Route returns replay.Options.Route: every record to topic when it is
// set, else to its source topic. When the replay re-injects into the
// dead-letter store itself (intoStore, the store's adapter name: a replay
// with no explicit target), only the records the store's own broker
// delivered are re-injected: an event dead-lettered from Kafka or by
// `geodlq check` into a SQLite file would otherwise be written into that
// file, which no consumer reads. Such records fail with
// [ErrForeignSource], whose message names targetHint (the control that
// says where to re-inject: "--target URL").
func Route(topic, intoStore, targetHint string) func(*envelope.Envelope) (string, error) {
	return func(env *envelope.Envelope) (string, error) {
		if intoStore != "" {
			if err := FromStore(env, intoStore, targetHint); err != nil {
				return "", err
			}
		}
		if topic != "" {
			return topic, nil
		}
		if env.Source == nil || env.Source.Topic == "" {
			return "", fmt.Errorf("the envelope names no source topic to re-inject into: %w", errNoTopic)
		}
		return env.Source.Topic, nil
	}
}

var errNoTopic = errors.New("no source topic")

// systems maps a store's adapter name to the source systems its own
// consumers write into envelopes.
var systems = map[string][]string{
	"jetstream": {"jetstream", "nats"},
}

// FromStore checks that env came from the broker of the store named
// store (its adapter name), into which a replay with no target would
// re-inject it.
func FromStore(env *envelope.Envelope, store, targetHint string) error {
	sys := ""
	if env.Source != nil {
		sys = env.Source.System
	}
	known := append([]string{store}, systems[store]...)
	if sys != "" && slices.Contains(known, sys) {
		return nil
	}
	from := "an unknown system"
	if sys != "" {
		from = fmt.Sprintf("%q", sys)
	}
	return fmt.Errorf("%w: it came from %s, and this store (%s) is not that broker: name where its consumer reads with %s "+
		"(this store's own URL re-injects into it anyway)", ErrForeignSource, from, store, targetHint)
}

// Hints name, for the reasons [Why] writes, the controls that would
// change an outcome: the command's flags or the console's labels.
type Hints struct {
	// Repair returns how to ask for a named repair ("--repair make-valid").
	Repair func(name string) string
	// Unchanged returns how to replay a class unchanged ("--unchanged
	// invalid_geometry").
	Unchanged func(class classify.Class) string
	// NoCheck is how to skip the consumer's check ("--no-check").
	NoCheck string
	// Route is how to name the topic ("--route TOPIC").
	Route string
}

// CLIHints are the command's flags.
var CLIHints = Hints{
	Repair:    func(n string) string { return "--repair " + n },
	Unchanged: func(c classify.Class) string { return "--unchanged " + c.String() },
	NoCheck:   "--no-check",
	Route:     "--route TOPIC",
}

// Why returns the reason shown with an item that was not (or would not
// be) replayed: why it was left in place, with the repair it got and the
// control that would change it; "" for an item that was replayed or
// would be. It reads the item before [Normalize].
func Why(it replay.Item, h Hints) string {
	msg := ""
	if it.Err != nil {
		msg = strings.TrimSuffix(it.Err.Error(), ": "+replay.ErrNotRepairable.Error())
	}
	repaired := it.Repair != nil && !unchanged(&it)
	switch it.Outcome {
	case replay.OutcomeReplayed, replay.OutcomeRepaired, replay.OutcomeWouldReplay, replay.OutcomeWouldRepair:
		return ""
	case replay.OutcomeSkipped:
		switch it.Class {
		case classify.ClassSchemaViolation:
			return "schema_violation is never replayed: the payload itself is wrong; fix the producer, then discard the record"
		case classify.ClassResourceExhausted:
			return "resource_exhausted is never replayed: it is over a size or vertex budget; triage quarantines it for a person"
		case classify.ClassInvalidGeometry:
			return "no repair was given for invalid_geometry: " + h.Repair(MakeValid) + " repairs it (" +
				h.Unchanged(classify.ClassInvalidGeometry) + " re-injects it as it is)"
		case classify.ClassCRSMismatch:
			return "no repair was given for crs_mismatch: " + h.Repair(Reproject) + " (or " + h.Repair(ReprojectMakeValid) + ") repairs it"
		}
		return "its class is never replayed"
	case replay.OutcomeWouldFail, replay.OutcomeRepairFailed, replay.OutcomeStillFails:
		switch {
		case unchanged(&it) || it.Repair == nil && (it.Class.Replayable() || !it.Class.Valid()):
			return "fails the consumer's check as it is: " + msg + "; " + h.NoCheck + " re-injects it anyway"
		case repaired:
			why := "after " + it.Repair.String() + " it still fails the consumer's check: " + msg
			if it.Repair.Method == "reproject" && classify.Classify(it.Err) == classify.ClassInvalidGeometry {
				why += "; " + h.Repair(ReprojectMakeValid) + " also makes it valid"
			}
			return why
		default:
			return "the repair cannot fix it: " + msg
		}
	case replay.OutcomeNoRoute:
		if errors.Is(it.Err, errNoTopic) {
			return msg + "; name one with " + h.Route
		}
		return msg
	case replay.OutcomeRestoreFailed:
		return "its payload cannot be restored (an offloaded blob is missing or altered): " + msg
	case replay.OutcomeInvalidEnvelope:
		return "not a dlq.v1 envelope: " + msg
	case replay.OutcomePublishFailed:
		return "the re-injection failed: " + msg
	case replay.OutcomeAckFailed:
		return "re-injected, but not acknowledged (it comes back; its idempotency key absorbs the duplicate): " + msg
	}
	return msg
}
