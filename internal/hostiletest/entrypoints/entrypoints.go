// Package entrypoints runs the library's entry points on a hostile
// family ([corpus.Hostile]) as stages: CheckEvent, the ingress function and
// middleware, Builder → Decode → Restore (or Decode → Restore for a forged
// envelope), replay with the checker's repairers, and triage. Each stage
// is set up apart from its call, so that a test can time or measure the
// call alone ([Stage.Act]) and then check what it did ([Stage.Verify]).
//
// It is test support, shared by the two hostile tests that need every
// entry point: internal/hostiletest's TestHostileEntryPoints, which runs
// them under the race detector (where their concurrency is), and this
// package's TestHostileMemory, which measures their peak memory without it
// (where the memory budget is the real one).
package entrypoints

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"net/http/httptest"
	"runtime/debug"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/memory"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/ingress"
	"github.com/geodlq/geodlq/internal/corpus"
	"github.com/geodlq/geodlq/internal/hostiletest"
	"github.com/geodlq/geodlq/offload"
	"github.com/geodlq/geodlq/replay"
	"github.com/geodlq/geodlq/spatial"
	"github.com/geodlq/geodlq/spatial/geos"
	"github.com/geodlq/geodlq/spatial/proj"
	"github.com/geodlq/geodlq/triage"
)

// The library's entry points, as stages of one family's run (the names
// of the stages' subtests and of the memory test's lines).
const (
	StageCheck      = "check_event"
	StageGate       = "ingress_validate"
	StageMiddleware = "ingress_middleware"
	StageRoundTrip  = "build_decode_restore"
	StageDecode     = "decode_restore"
	StageReplay     = "replay_repairers"
	StageTriage     = "triage"
)

// RaceSize is the size the families that scale are generated at under
// the race detector (and with -short), which multiplies time and memory
// several-fold: 4 MiB and 64 KiB, just over the 4 MiB of a document's rest
// from which CheckEvent parses a MultiPolygon's coordinates on several
// goroutines (internal/geojson), so that large_valid takes that parse
// where the detector watches it. The depth that overflows the capped stack
// is reached at this size too (see [Run]).
const RaceSize = 4<<20 + 64<<10

// topic is where events come from and are replayed to.
const topic = "hostile"

// Env is what every stage uses: one checker (default options, so the
// families' verdicts apply), its repairers, and the gate configured with
// the same limits and checkers, so that its verdict must agree. It is safe
// for concurrent use, as the checker is.
type Env struct {
	// Checker is the checker every stage uses (with GEOS and PROJ).
	Checker   *spatial.Checker
	repairers map[classify.Class]replay.Repairer
	gate      *ingress.Options
}

// NewEnv makes an Env whose checker, GEOS and PROJ close when t's test
// ends.
func NewEnv(t *testing.T) *Env {
	t.Helper()
	g, err := geos.New()
	require.NoError(t, err)
	t.Cleanup(func() { _ = g.Close() })
	p, err := proj.New(nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	c, err := spatial.NewChecker(&spatial.Options{GEOS: g, ResolveCRS: p.ResolveCRS, Reprojector: p})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	reps, err := c.Repairers(nil)
	require.NoError(t, err)
	o := c.Options()
	return &Env{Checker: c, repairers: reps, gate: &ingress.Options{
		MaxBytes: int64(o.MaxBytes), MaxVertices: o.MaxVertices, MaxParts: o.MaxParts, MaxHoles: o.MaxHoles, ExpectedEPSG: o.ExpectedEPSG,
		CRSChecker: c, GeometryChecker: c,
	}}
}

// offloader serves a sample's blobs at corpus.HostileBaseURI, and stores
// what builders offload (anything over 64 KiB), in a directory: blobs live
// outside the process, as they would in a real store, and do not count
// towards its memory.
func offloader(t *testing.T, s corpus.Sample) *offload.Offloader {
	t.Helper()
	store, err := offload.NewDirStore(t.TempDir())
	require.NoError(t, err)
	for k, v := range s.Blobs {
		require.NoError(t, store.Put(context.Background(), k, bytes.NewReader(v), int64(len(v))))
	}
	o, err := offload.New(store, &offload.Options{BaseURI: corpus.HostileBaseURI, Threshold: 64 << 10})
	require.NoError(t, err)
	return o
}

// requireTyped fails unless err is nil or a *classify.Error a dead-letter
// path can route: a valid class and stage, a reason and a reason kind.
func requireTyped(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		return
	}
	var ce *classify.Error
	require.ErrorAs(t, err, &ce, "untyped error %v", err)
	require.True(t, ce.Class.Valid(), "class %v of %v", ce.Class, err)
	require.True(t, ce.Stage.Valid(), "stage %v of %v", ce.Stage, err)
	require.NotNil(t, ce.Geometry, "no detail in %v", err)
	require.NotEmpty(t, ce.Geometry.Kind, "no kind in %v", err)
	require.NotEmpty(t, ce.Geometry.Reason, "no reason in %v", err)
}

func classOf(err error) classify.Class {
	var none classify.Class
	if err == nil {
		return none
	}
	return classify.Classify(err)
}

// Stage is one entry point run on one family: Act calls the library (and
// is all that is timed and measured), Verify then checks what it did.
type Stage struct {
	Act, Verify func()
	// Stored counts the hostile bytes the setup put in the process besides
	// the sample: a dead-letter record in the in-process store, or the
	// client's copy of a request body.
	Stored int
}

// checkEvent: CheckEvent reaches the family's verdict, typed.
func (e *Env) checkEvent(t *testing.T, f corpus.Family, payload []byte) Stage {
	var err error
	return Stage{
		Act:    func() { _, err = e.Checker.CheckEvent(payload) },
		Verify: func() { verifyCheck(t, f, err) },
	}
}

// verifyCheck: err, CheckEvent's answer, is the family's verdict, typed.
func verifyCheck(t *testing.T, f corpus.Family, err error) {
	t.Helper()
	requireTyped(t, err)
	require.Equal(t, f.Class, classOf(err), "CheckEvent: %v", err)
	if f.Kind != "" {
		require.Equal(t, f.Kind, classify.DetailOf(err).Kind, "CheckEvent: %v", err)
	}
}

// memberKinds are the gate's own checks of members CheckEvent does not
// read.
var memberKinds = []classify.ReasonKind{ingress.KindRequired, ingress.KindWrongType, ingress.KindInvalidURI, ingress.KindUnknownMode}

// checkGate: the gate, with the checker's limits and checkers, reaches the
// same verdict on the geometry and CRS as CheckEvent (its first violation
// of another kind than the event's own members has CheckEvent's class),
// and leaves its input alone.
func (e *Env) checkGate(t *testing.T, payload []byte, want classify.Class) Stage {
	orig := sha256.Sum256(payload)
	var vs []ingress.Violation
	return Stage{
		Act: func() { vs = ingress.Validate(payload, e.gate) },
		Verify: func() {
			require.Equal(t, orig, sha256.Sum256(payload), "Validate modified its input")
			var got classify.Class
			for _, v := range vs {
				require.True(t, v.Class.Valid(), "%v", v)
				require.NotEmpty(t, v.Kind, "%v", v)
				require.NotEmpty(t, v.Message, "%v", v)
				require.True(t, v.Pointer == "" || strings.HasPrefix(v.Pointer, "/"), "%v", v)
				if !slices.Contains(memberKinds, v.Kind) && !got.Valid() {
					got = v.Class
				}
			}
			require.Equal(t, want, got, "gate %v", vs)
		},
	}
}

// checkMiddleware: the middleware refuses every corpus event (none has the
// members the gate requires) without calling next: 413 when the verdict
// is resource_exhausted, else 400, with a problem document. The client's
// copy of the body (the sample) counts as Stored: it would be in another
// process.
func (e *Env) checkMiddleware(t *testing.T, payload []byte, want classify.Class) Stage {
	called := false
	h := ingress.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { called = true }), e.gate)
	rec := httptest.NewRecorder()
	return Stage{
		Act: func() { h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/events", bytes.NewReader(payload))) },
		Verify: func() {
			require.False(t, called, "next called for an event without source_uri")
			status := http.StatusBadRequest
			if want == classify.ClassResourceExhausted {
				status = http.StatusRequestEntityTooLarge
			}
			require.Equal(t, status, rec.Code)
			require.Equal(t, ingress.ContentTypeProblem, rec.Header().Get("Content-Type"))
			var p ingress.Problem
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &p))
			require.Equal(t, status, p.Status)
			require.NotEmpty(t, p.Errors)
		},
		Stored: len(payload),
	}
}

// build wraps a failed event the way a consumer does.
func build(t *testing.T, off *offload.Offloader, payload []byte, cause error) (*envelope.Envelope, []byte) {
	b, err := envelope.NewBuilder(&envelope.BuilderOptions{Offloader: off})
	require.NoError(t, err)
	env, data, err := b.Build(context.Background(), envelope.Input{Payload: payload, Err: cause, IdempotencyKey: "hostile-key",
		Source: &envelope.Source{System: "memory", Topic: topic}})
	require.NoError(t, err, "Build must produce an envelope for any payload")
	return env, data
}

// checkRoundTrip: Builder → Decode → Restore gives back the payload byte
// for byte, whatever it is.
func (e *Env) checkRoundTrip(t *testing.T, payload []byte, cause error, off *offload.Offloader) Stage {
	var restored []byte
	var err error
	return Stage{
		Act: func() {
			_, data := build(t, off, payload, cause)
			var dec *envelope.Envelope
			if dec, err = envelope.Decode(data); err == nil {
				restored, err = dec.Restore(context.Background(), off)
			}
		},
		Verify: func() {
			require.NoError(t, err)
			require.True(t, bytes.Equal(payload, restored), "restored payload differs")
		},
	}
}

// checkDecode: a forged envelope gets the family's verdict from Decode and
// Restore, typed.
func checkDecode(t *testing.T, f corpus.Family, data []byte, off *offload.Offloader) Stage {
	var env *envelope.Envelope
	var payload []byte
	var decErr, resErr error
	return Stage{
		Act: func() {
			if env, decErr = envelope.Decode(data); decErr == nil {
				payload, resErr = env.Restore(context.Background(), off)
			}
		},
		Verify: func() {
			if f.DecodeErr != nil {
				require.ErrorIs(t, decErr, f.DecodeErr)
				return
			}
			require.NoError(t, decErr)
			if f.RestoreErr != nil {
				require.ErrorIs(t, resErr, f.RestoreErr)
				return
			}
			require.NoError(t, resErr)
			require.Equal(t, env.PayloadSize, int64(len(payload)))
		},
	}
}

// replayOutcomes are the outcomes a record of each class may have with
// the checker's repairers and check; a valid event is dead-lettered as
// transient and replays.
func replayOutcomes(class classify.Class) []replay.Outcome {
	switch class {
	case classify.ClassSchemaViolation, classify.ClassResourceExhausted:
		return []replay.Outcome{replay.OutcomeSkipped}
	case classify.ClassInvalidGeometry, classify.ClassCRSMismatch:
		return []replay.Outcome{replay.OutcomeRepaired, replay.OutcomeRepairFailed}
	}
	return []replay.Outcome{replay.OutcomeReplayed}
}

// target stands for the queue events are re-injected into, another
// system: it keeps what it is given (the replayer's own buffer) without
// copying it.
type target struct{ got map[string][]*broker.Message }

func (p *target) Publish(_ context.Context, dest string, m *broker.Message) error {
	if p.got == nil {
		p.got = map[string][]*broker.Message{}
	}
	p.got[dest] = append(p.got[dest], m)
	return nil
}

// Family is one family's sample on its way through the stages, with what
// its replay and triage stages share: the dead-letter record both start
// from, built once (the Builder's run on the payload is the round-trip
// stage's to check; building the record again for the second would only
// repeat it), and the offload store its blobs are in.
type Family struct {
	e     *Env
	f     corpus.Family
	s     corpus.Sample
	cause error
	off   *offload.Offloader
	dead  *broker.Message // built by the first stage that needs it
	dlt   string
}

// Family sets family f's run up on its sample s; cause is what CheckEvent
// returned for an event family (the error a consumer would wrap), nil for
// a valid event or an envelope family. Its offload store lives as long as
// t's test; its stages are prepared one after the other ([Family.Prepare]).
func (e *Env) Family(t *testing.T, f corpus.Family, s corpus.Sample, cause error) *Family {
	return &Family{e: e, f: f, s: s, cause: cause, off: offloader(t, s)}
}

// deadLetter stores an event family's envelope, or an envelope family's
// forged bytes, in a fresh memory store, and returns it with the
// destination and the bytes stored. The envelope is built once, for the
// first stage that asks; each store gets a message of its own.
func (r *Family) deadLetter(t *testing.T) (*broker.Store, string, int) {
	if r.dead == nil {
		r.dlt = topic + ".dlt"
		r.dead = &broker.Message{Body: r.s.Data}
		if r.f.Input == corpus.InputEvent {
			cause := r.cause
			if cause == nil {
				cause = classify.Transient(errors.New("downstream timed out"))
			}
			env, data := build(t, r.off, r.s.Data, cause)
			r.dead = &broker.Message{Body: data, Headers: broker.Headers(env)}
			r.dlt = topic + "." + string(env.Route) + ".dlt"
		}
	}
	b := memory.New(nil)
	msg := &broker.Message{Body: r.dead.Body, Headers: maps.Clone(r.dead.Headers)}
	require.NoError(t, b.Publish(context.Background(), r.dlt, msg))
	return b, r.dlt, len(msg.Body)
}

// checkReplay: the replayer with the checker's repairers and check handles
// the record: an outcome its class allows, and whatever it re-injects is
// the payload (replayed) or passes CheckEvent (repaired).
func (r *Family) checkReplay(t *testing.T) Stage {
	e, f, s, cause, off := r.e, r.f, r.s, r.cause, r.off
	b, dlt, stored := r.deadLetter(t)
	out := &target{}
	rp, err := replay.New(&replay.Options{Source: b, Target: out, Fetcher: off, Repairers: e.repairers, Check: e.Checker.ReplayCheck()})
	require.NoError(t, err)
	var rep replay.Report
	return Stage{
		Act: func() { rep, err = rp.Run(context.Background(), replay.Request{Destination: dlt}) },
		Verify: func() {
			require.NoError(t, err)
			require.Equal(t, 1, rep.Examined, "%s", rep.Summary())
			it := rep.Items[0]
			switch {
			case f.Input == corpus.InputEvent:
				require.Contains(t, replayOutcomes(classOf(cause)), it.Outcome, "%s: %v", rep.Summary(), it.Err)
			case f.DecodeErr != nil:
				require.Equal(t, replay.OutcomeInvalidEnvelope, it.Outcome, "%v", it.Err)
			case f.RestoreErr != nil:
				require.Equal(t, replay.OutcomeRestoreFailed, it.Outcome, "%v", it.Err)
				require.ErrorIs(t, it.Err, f.RestoreErr)
			default:
				require.Contains(t, []replay.Outcome{replay.OutcomeRepaired, replay.OutcomeRepairFailed}, it.Outcome, "%v", it.Err)
			}
			switch it.Outcome {
			case replay.OutcomeReplayed:
				require.Len(t, out.got[topic], 1)
				require.True(t, bytes.Equal(s.Data, out.got[topic][0].Body), "replayed other bytes")
			case replay.OutcomeRepaired:
				require.Len(t, out.got[topic], 1)
				_, err := e.Checker.CheckEvent(out.got[topic][0].Body)
				require.NoError(t, err, "re-injected a repair that fails")
			default:
				require.Empty(t, out.got, "%s", it.Outcome)
			}
		},
		Stored: stored,
	}
}

// checkTriage: triage quarantines resource_exhausted records and replays
// the others as the replayer does.
func (r *Family) checkTriage(t *testing.T) Stage {
	e, f, cause, off := r.e, r.f, r.cause, r.off
	b, dlt, stored := r.deadLetter(t)
	out := &target{}
	alerts := 0
	p, err := triage.New(&triage.Options{Source: b, Target: out, Fetcher: off, Repairers: e.repairers, Check: e.Checker.ReplayCheck(),
		Alerter: triage.AlertFunc(func(context.Context, triage.Alert) error { alerts++; return nil })})
	require.NoError(t, err)
	var rep triage.Report
	return Stage{
		Act: func() { rep, err = p.Run(context.Background(), dlt, broker.Filter{}, false) },
		Verify: func() {
			require.NoError(t, err)
			if f.Input == corpus.InputEvent && classOf(cause) == classify.ClassResourceExhausted {
				require.Equal(t, 1, rep.Quarantined)
				require.Equal(t, 1, alerts)
				require.Len(t, out.got[triage.DefaultQuarantine(dlt)], 1)
				return
			}
			require.Zero(t, rep.Quarantined)
			require.Equal(t, 1, rep.Replay.Examined, "%s", rep.Replay.Summary())
		},
		Stored: stored,
	}
}

// Prepare sets the stage name (one of [Stages]) of the family up. The
// round trip and Decode → Restore get an offload store of their own.
func (r *Family) Prepare(t *testing.T, name string) Stage {
	e, f, s, cause := r.e, r.f, r.s, r.cause
	switch name {
	case StageCheck:
		return e.checkEvent(t, f, s.Data)
	case StageGate:
		return e.checkGate(t, s.Data, classOf(cause))
	case StageMiddleware:
		return e.checkMiddleware(t, s.Data, classOf(cause))
	case StageRoundTrip:
		return e.checkRoundTrip(t, s.Data, cause, offloader(t, s))
	case StageDecode:
		return checkDecode(t, f, s.Data, offloader(t, s))
	case StageReplay:
		return r.checkReplay(t)
	case StageTriage:
		return r.checkTriage(t)
	}
	t.Fatalf("unknown stage %q", name)
	return Stage{}
}

// Stages returns the names of the stages a family goes through: the
// envelope stages for a forged envelope, the event stages for an event.
func Stages(f corpus.Family) []string {
	if f.Input == corpus.InputEnvelope {
		return []string{StageDecode, StageReplay, StageTriage}
	}
	return []string{StageCheck, StageGate, StageMiddleware, StageRoundTrip, StageReplay, StageTriage}
}

// Concurrent reports whether a stage's calls start goroutines of their
// own, which is what the race detector has to watch: Builder hashes and
// offloads a large payload's geometry on other goroutines, CheckEvent
// parses and checks a large MultiPolygon on several, the replayer
// re-injects in lanes and renews leases beside them (and triage replays
// through it). The gate and the middleware start none of their own: the
// geometry they check goes to the same checker CheckEvent's stage runs on
// the same bytes. Decode and Restore (from a store read in place) start
// none either.
func Concurrent(stage string) bool {
	switch stage {
	case StageCheck, StageRoundTrip, StageReplay, StageTriage:
		return true
	}
	return false
}

// Run answers every hostile family at the stages keep selects, in a
// subtest per family (with parallel, the families at once, all on e's
// checker, as a service's requests would be), the family generated once
// at size and shared by its stages, each stage's calls bounded by
// [hostiletest.Deadline], and the goroutine stack capped at 4 MiB, so that
// nothing may recurse with the input (a million nested collections need a
// thousand times that): the verdict is the family's, every error is
// typed, nothing panics.
func Run(t *testing.T, e *Env, size int, parallel bool, keep func(stage string) bool) {
	t.Helper()
	// Restored once every family's subtest has finished (parallel ones
	// run after the calling test's function returns).
	prev := debug.SetMaxStack(4 << 20)
	t.Cleanup(func() { debug.SetMaxStack(prev) })
	for _, f := range corpus.Hostile() {
		t.Run(f.Name, func(t *testing.T) {
			if parallel {
				t.Parallel()
			}
			s := f.Generate(size)
			// CheckEvent's answer is the cause a consumer wraps in the
			// later stages; when the check_event stage is kept, this call
			// is its call, verified in its subtest.
			var cause error
			if f.Input == corpus.InputEvent {
				hostiletest.Within(t, hostiletest.Deadline, t.Name()+"/"+StageCheck, func() { _, cause = e.Checker.CheckEvent(s.Data) })
			}
			r := e.Family(t, f, s, cause)
			for _, name := range Stages(f) {
				if !keep(name) {
					continue
				}
				t.Run(name, func(t *testing.T) {
					if name == StageCheck {
						verifyCheck(t, f, cause)
						return
					}
					hostiletest.Within(t, hostiletest.Deadline, t.Name(), func() {
						st := r.Prepare(t, name)
						st.Act()
						st.Verify()
					})
				})
			}
		})
	}
}
