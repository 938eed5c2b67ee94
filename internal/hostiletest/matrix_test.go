package hostiletest_test

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/memory"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/ingress"
	"github.com/geodlq/geodlq/internal/corpus"
	"github.com/geodlq/geodlq/internal/geojson"
	"github.com/geodlq/geodlq/internal/hostiletest"
	"github.com/geodlq/geodlq/offload"
	"github.com/geodlq/geodlq/replay"
	"github.com/geodlq/geodlq/spatial"
	"github.com/geodlq/geodlq/spatial/geos"
	"github.com/geodlq/geodlq/spatial/proj"
	"github.com/geodlq/geodlq/triage"
)

// The library's entry points, as stages of one family's run.
const (
	stageCheck      = "check_event"
	stageGate       = "ingress_validate"
	stageMiddleware = "ingress_middleware"
	stageRoundTrip  = "build_decode_restore"
	stageDecode     = "decode_restore"
	stageReplay     = "replay_repairers"
	stageTriage     = "triage"
)

// topic is where events come from and are replayed to.
const topic = "hostile"

// env is what every stage uses: one checker (default options, so the
// families' verdicts apply), its repairers, and the gate configured with
// the same limits and checkers, so that its verdict must agree.
type env struct {
	checker   *spatial.Checker
	repairers map[classify.Class]replay.Repairer
	gate      *ingress.Options
}

func newEnv(t *testing.T) *env {
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
	return &env{checker: c, repairers: reps, gate: &ingress.Options{
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

// stage is one entry point run on one family: act calls the library (and
// is all that is timed and measured), verify then checks what it did.
type stage struct {
	act, verify func()
	// stored counts the hostile bytes the setup put in the process besides
	// the sample: a dead-letter record in the in-process store, or the
	// client's copy of a request body.
	stored int
}

// checkEvent: CheckEvent reaches the family's verdict, typed.
func (e *env) checkEvent(t *testing.T, f corpus.Family, payload []byte) stage {
	var err error
	return stage{
		act: func() { _, err = e.checker.CheckEvent(payload) },
		verify: func() {
			requireTyped(t, err)
			require.Equal(t, f.Class, classOf(err), "CheckEvent: %v", err)
			if f.Kind != "" {
				require.Equal(t, f.Kind, classify.DetailOf(err).Kind, "CheckEvent: %v", err)
			}
		},
	}
}

// memberKinds are the gate's own checks of members CheckEvent does not
// read.
var memberKinds = []classify.ReasonKind{ingress.KindRequired, ingress.KindWrongType, ingress.KindInvalidURI, ingress.KindUnknownMode}

// checkGate: the gate, with the checker's limits and checkers, reaches the
// same verdict on the geometry and CRS as CheckEvent (its first violation
// of another kind than the event's own members has CheckEvent's class),
// and leaves its input alone.
func (e *env) checkGate(t *testing.T, payload []byte, want classify.Class) stage {
	orig := sha256.Sum256(payload)
	var vs []ingress.Violation
	return stage{
		act: func() { vs = ingress.Validate(payload, e.gate) },
		verify: func() {
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
// copy of the body (the sample) counts as stored: it would be in another
// process.
func (e *env) checkMiddleware(t *testing.T, payload []byte, want classify.Class) stage {
	called := false
	h := ingress.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { called = true }), e.gate)
	rec := httptest.NewRecorder()
	return stage{
		act: func() { h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/events", bytes.NewReader(payload))) },
		verify: func() {
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
		stored: len(payload),
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
func (e *env) checkRoundTrip(t *testing.T, payload []byte, cause error, off *offload.Offloader) stage {
	var restored []byte
	var err error
	return stage{
		act: func() {
			_, data := build(t, off, payload, cause)
			var dec *envelope.Envelope
			if dec, err = envelope.Decode(data); err == nil {
				restored, err = dec.Restore(context.Background(), off)
			}
		},
		verify: func() {
			require.NoError(t, err)
			require.True(t, bytes.Equal(payload, restored), "restored payload differs")
		},
	}
}

// checkDecode: a forged envelope gets the family's verdict from Decode and
// Restore, typed.
func checkDecode(t *testing.T, f corpus.Family, data []byte, off *offload.Offloader) stage {
	var env *envelope.Envelope
	var payload []byte
	var decErr, resErr error
	return stage{
		act: func() {
			if env, decErr = envelope.Decode(data); decErr == nil {
				payload, resErr = env.Restore(context.Background(), off)
			}
		},
		verify: func() {
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

// deadLetter stores an event family's envelope, or an envelope family's
// forged bytes, in a fresh memory store, and returns it with the
// destination and the bytes stored.
func (e *env) deadLetter(t *testing.T, f corpus.Family, s corpus.Sample, cause error, off *offload.Offloader) (*broker.Store, string, int) {
	b := memory.New(nil)
	dlt := topic + ".dlt"
	msg := &broker.Message{Body: s.Data}
	if f.Input == corpus.InputEvent {
		if cause == nil {
			cause = classify.Transient(errors.New("downstream timed out"))
		}
		env, data := build(t, off, s.Data, cause)
		msg = &broker.Message{Body: data, Headers: broker.Headers(env)}
		dlt = topic + "." + string(env.Route) + ".dlt"
	}
	require.NoError(t, b.Publish(context.Background(), dlt, msg))
	return b, dlt, len(msg.Body)
}

// checkReplay: the replayer with the checker's repairers and check handles
// the record: an outcome its class allows, and whatever it re-injects is
// the payload (replayed) or passes CheckEvent (repaired).
func (e *env) checkReplay(t *testing.T, f corpus.Family, s corpus.Sample, cause error, off *offload.Offloader) stage {
	b, dlt, stored := e.deadLetter(t, f, s, cause, off)
	out := &target{}
	r, err := replay.New(&replay.Options{Source: b, Target: out, Fetcher: off, Repairers: e.repairers, Check: e.checker.ReplayCheck()})
	require.NoError(t, err)
	var rep replay.Report
	return stage{
		act: func() { rep, err = r.Run(context.Background(), replay.Request{Destination: dlt}) },
		verify: func() {
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
				_, err := e.checker.CheckEvent(out.got[topic][0].Body)
				require.NoError(t, err, "re-injected a repair that fails")
			default:
				require.Empty(t, out.got, "%s", it.Outcome)
			}
		},
		stored: stored,
	}
}

// checkTriage: triage quarantines resource_exhausted records and replays
// the others as the replayer does.
func (e *env) checkTriage(t *testing.T, f corpus.Family, s corpus.Sample, cause error, off *offload.Offloader) stage {
	b, dlt, stored := e.deadLetter(t, f, s, cause, off)
	out := &target{}
	alerts := 0
	p, err := triage.New(&triage.Options{Source: b, Target: out, Fetcher: off, Repairers: e.repairers, Check: e.checker.ReplayCheck(),
		Alerter: triage.AlertFunc(func(context.Context, triage.Alert) error { alerts++; return nil })})
	require.NoError(t, err)
	var rep triage.Report
	return stage{
		act: func() { rep, err = p.Run(context.Background(), dlt, broker.Filter{}, false) },
		verify: func() {
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
		stored: stored,
	}
}

// prepare sets a stage of a family up.
func (e *env) prepare(t *testing.T, name string, f corpus.Family, s corpus.Sample, cause error) stage {
	off := offloader(t, s)
	switch name {
	case stageCheck:
		return e.checkEvent(t, f, s.Data)
	case stageGate:
		return e.checkGate(t, s.Data, classOf(cause))
	case stageMiddleware:
		return e.checkMiddleware(t, s.Data, classOf(cause))
	case stageRoundTrip:
		return e.checkRoundTrip(t, s.Data, cause, off)
	case stageDecode:
		return checkDecode(t, f, s.Data, off)
	case stageReplay:
		return e.checkReplay(t, f, s, cause, off)
	case stageTriage:
		return e.checkTriage(t, f, s, cause, off)
	}
	t.Fatalf("unknown stage %q", name)
	return stage{}
}

func stages(f corpus.Family) []string {
	if f.Input == corpus.InputEnvelope {
		return []string{stageDecode, stageReplay, stageTriage}
	}
	return []string{stageCheck, stageGate, stageMiddleware, stageRoundTrip, stageReplay, stageTriage}
}

// familySize is the size the scaling families are generated at: the
// default, 32 MiB, half the checker's byte budget; 4 MiB with -short and
// under the race detector (which multiplies time and memory several-fold;
// the depth it takes to overflow a stack is reached at either size with
// the stack capped, see TestHostileEntryPoints).
func familySize() int {
	if testing.Short() || raceEnabled {
		return 4 << 20
	}
	return corpus.DefaultHostileSize
}

// TestHostileEntryPoints answers every hostile family at every library
// entry point — CheckEvent, the ingress function and middleware, Builder →
// Decode → Restore (or Decode → Restore for forged envelopes), replay with
// the checker's repairers, and triage — each call under a deadline: the
// verdict is the family's, every error is typed, nothing panics, and with
// the goroutine's stack capped at 4 MiB nothing recurses with the input
// (a million nested collections need a thousand times that).
func TestHostileEntryPoints(t *testing.T) {
	defer debug.SetMaxStack(debug.SetMaxStack(4 << 20))
	e := newEnv(t)
	hostiletest.Each(t, corpus.Hostile(), familySize(), hostiletest.Deadline, func(t *testing.T, f corpus.Family, s corpus.Sample) {
		var cause error
		if f.Input == corpus.InputEvent {
			_, cause = e.checker.CheckEvent(s.Data)
		}
		for _, name := range stages(f) {
			t.Run(name, func(t *testing.T) {
				st := e.prepare(t, name, f, s, cause)
				st.act()
				st.verify()
			})
		}
	})
}

// TestHostileMemory measures each family's peak memory at each entry
// point in a child process (the parent re-executes this test binary once
// per family; the child runs the stages in turn, returning freed memory to
// the system and resetting the high-water mark before each, and prints
// VmHWM after each): at most 4× the hostile bytes in the process (the
// input, and for replay and triage the dead-letter record in the
// in-process store) plus 64 MiB, for the whole process; and for an entry
// point that hands the geometry to GEOS, what GEOS itself keeps per part
// and per position (hostiletest.GEOSPerPart, GEOSPerVertex).
func TestHostileMemory(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Fatalf("peak RSS is measured through /proc; run this test on Linux")
	}
	if name, size, ok := hostiletest.Child(); ok {
		memoryChild(t, name, size)
		return
	}
	for _, f := range corpus.Hostile() {
		t.Run(f.Name, func(t *testing.T) {
			peaks := childPeaks(t, f, familySize())
			require.Len(t, peaks, len(stages(f)), "a peak for every stage")
			for _, p := range peaks {
				budget := hostiletest.Budget(int(p.input)) + p.parts*hostiletest.GEOSPerPart + p.vertices*hostiletest.GEOSPerVertex
				if raceEnabled {
					// The race detector's shadow memory: "memory usage may
					// increase by 5-10x" (Go's race detector documentation).
					// A 1 GiB allocation from a claimed size still fails.
					budget *= 10
				}
				t.Logf("%-32s %-22s peak %4d MiB for %4d MiB of input; to GEOS %6d parts, %7d positions (budget %4d MiB)",
					f.Name, p.stage, p.peak>>20, p.input>>20, p.parts, p.vertices, budget>>20)
				require.LessOrEqual(t, p.peak, budget, "%s: peak RSS %d bytes for %d input bytes, %d parts and %d positions", p.stage, p.peak, p.input, p.parts, p.vertices)
			}
		})
	}
}

type stagePeak struct {
	stage                        string
	peak, input, parts, vertices int64
}

var peakLine = regexp.MustCompile(`hostile-peak stage=(\S+) peak=(\d+) input=(\d+) parts=(\d+) vertices=(\d+)`)

func childPeaks(t *testing.T, f corpus.Family, size int) []stagePeak {
	out, _ := hostiletest.RunChild(t, "TestHostileMemory", f, size)
	var peaks []stagePeak
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if m := peakLine.FindStringSubmatch(sc.Text()); m != nil {
			peak, _ := strconv.ParseInt(m[2], 10, 64)
			input, _ := strconv.ParseInt(m[3], 10, 64)
			parts, _ := strconv.ParseInt(m[4], 10, 64)
			vertices, _ := strconv.ParseInt(m[5], 10, 64)
			peaks = append(peaks, stagePeak{m[1], peak, input, parts, vertices})
		}
	}
	return peaks
}

// geosSize counts the rings, lines and collection members, and the
// positions, of a family's geometry that GEOS may be handed: none when the
// checker refuses the event before topology (its verdict is not
// invalid_geometry or valid).
func geosSize(f corpus.Family, s corpus.Sample) (parts, vertices int) {
	if f.Input != corpus.InputEvent || f.Class.Valid() && f.Class != classify.ClassInvalidGeometry {
		return 0, 0
	}
	ev, err := geojson.ParseEvent(s.Data, geojson.Limits{MaxVertices: -1, MaxParts: -1, MaxHoles: -1})
	if err != nil {
		return 0, 0
	}
	geojson.Components(ev.Geometry.Geom, func(geojson.Component) bool { parts++; return true })
	return parts, ev.Geometry.Vertices
}

// memoryChild runs one family's stages, printing each one's peak.
func memoryChild(t *testing.T, name string, size int) {
	f, ok := corpus.HostileFamily(name)
	require.True(t, ok, name)
	e := newEnv(t)
	s := f.Generate(size)
	// The family's verdict stands for CheckEvent's error (which
	// TestHostileEntryPoints checks): running CheckEvent here would leave
	// its GEOS memory in the process before the first measurement.
	var cause error
	if f.Input == corpus.InputEvent && f.Class.Valid() {
		reason := "hostile: " + f.Name
		cause = &classify.Error{Class: f.Class, Stage: classify.StageParse, Err: errors.New(reason),
			Geometry: &classify.GeometryDetail{Reason: reason, Kind: cmp.Or(f.Kind, classify.KindOther)}}
	}
	blobs := 0
	for _, b := range s.Blobs {
		blobs += len(b)
	}
	parts, vertices := geosSize(f, s)
	for _, name := range stages(f) {
		st := e.prepare(t, name, f, s, cause)
		runtime.GC()
		debug.FreeOSMemory()
		require.NoError(t, hostiletest.ResetPeak())
		hostiletest.Within(t, hostiletest.Deadline, f.Name+"/"+name, st.act)
		peak, err := hostiletest.Peak()
		require.NoError(t, err)
		st.verify()
		p, v := parts, vertices
		if name == stageRoundTrip || name == stageDecode {
			p, v = 0, 0 // no GEOS
		}
		fmt.Printf("hostile-peak stage=%s peak=%d input=%d parts=%d vertices=%d\n", name, peak, len(s.Data)+blobs+st.stored, p, v)
	}
	_ = os.Stdout.Sync()
}
