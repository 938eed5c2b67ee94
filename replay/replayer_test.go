package replay_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/memory"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/offload"
	"github.com/geodlq/geodlq/replay"
)

const topic = "spatial.events"

var (
	bowtie  = []byte(`{"event_id":"evt-bowtie","geometry":{"type":"Polygon","coordinates":[[[0,0],[1,1],[1,0],[0,1],[0,0]]]}}`)
	fixed   = []byte(`{"event_id":"evt-bowtie","geometry":{"type":"MultiPolygon","coordinates":[[[[0,0],[0.5,0.5],[1,0],[0,0]]],[[[0.5,0.5],[0,1],[1,1],[0.5,0.5]]]]}}`)
	flaky   = []byte(`{"event_id":"evt-flaky", "geometry": {"type":"Point","coordinates":[1.0,2.0]}}`)
	schema  = []byte(`not json at all`)
	crsBody = []byte(`{"event_id":"evt-3857","crs":"EPSG:3857","geometry":{"type":"Point","coordinates":[1113194.9079327357,6446275.841017158]}}`)
)

// pipeline runs a consumer over topic with a processor, and records side
// effects through the claims store.
type pipeline struct {
	t       *testing.T
	b       *broker.Store
	proc    *broker.Processor
	claims  *replay.MemClaims
	effects map[string]int // event key -> side effects performed
	fail    func(m *broker.Message) error
}

func newPipeline(t *testing.T, b *broker.Store, builder *envelope.Builder) *pipeline {
	p := &pipeline{t: t, b: b, claims: replay.NewMemClaims(nil), effects: map[string]int{}}
	proc, err := broker.NewProcessor(&broker.ProcessorOptions{
		Publisher: b, Builder: builder, Policy: classify.Policy{MaxAttempts: 2},
		Sleep: func(ctx context.Context, _ time.Duration) error { return ctx.Err() },
	})
	require.NoError(t, err)
	p.proc = proc
	return p
}

func (p *pipeline) handle(ctx context.Context, m *broker.Message) error {
	if p.fail != nil {
		if err := p.fail(m); err != nil {
			return err
		}
	}
	key := m.Header(broker.HeaderIdempotencyKey)
	_, err := replay.Once(ctx, p.claims, key, time.Minute, func(context.Context) error {
		p.effects[key]++
		return nil
	})
	return err
}

// drain consumes everything on topic.
func (p *pipeline) drain() {
	ctx := context.Background()
	for {
		recs, err := p.b.Fetch(ctx, topic, broker.Filter{}, 10)
		require.NoError(p.t, err)
		if len(recs) == 0 {
			return
		}
		for _, r := range recs {
			m := r.Message
			m.Source = &envelope.Source{System: "memory", Topic: topic, MessageID: r.ID}
			out, err := p.proc.Process(ctx, m, p.handle)
			require.NoError(p.t, err)
			require.True(p.t, out.Ack)
			require.NoError(p.t, p.b.Ack(ctx, r))
		}
	}
}

func seed(t *testing.T, b *broker.Store, key string, body []byte) {
	require.NoError(t, b.Publish(context.Background(), topic, &broker.Message{
		Body: body, Key: []byte("k-" + key), Headers: map[string]string{broker.HeaderIdempotencyKey: key},
	}))
}

type makeValid struct{}

func (makeValid) Repair(_ context.Context, env *envelope.Envelope, payload []byte) ([]byte, replay.Repair, error) {
	if !bytes.Equal(payload, bowtie) {
		return nil, replay.Repair{}, fmt.Errorf("test repairer knows only the bowtie: %w", replay.ErrNotRepairable)
	}
	return fixed, replay.Repair{Method: "make_valid", Detail: "structure", VerticesBefore: 5, VerticesAfter: 8}, nil
}

func TestReplayEndToEndExactlyOnce(t *testing.T) {
	ctx := context.Background()
	b := memory.New(nil)
	p := newPipeline(t, b, nil)
	downstreamUp := false
	p.fail = func(m *broker.Message) error {
		switch {
		case bytes.Equal(m.Body, bowtie):
			return &classify.Error{Class: classify.ClassInvalidGeometry, Stage: classify.StageTopologyValidation, Err: errors.New("Self-intersection[0.5 0.5]")}
		case bytes.Equal(m.Body, schema):
			return classify.SchemaViolation(errors.New("invalid character 'o'"))
		case bytes.Equal(m.Body, flaky) && !downstreamUp:
			return classify.Transient(errors.New("tile server 503"))
		case bytes.Equal(m.Body, fixed):
			return nil
		}
		return nil
	}
	seed(t, b, "idem:v1:bowtie", bowtie)
	seed(t, b, "idem:v1:flaky", flaky)
	seed(t, b, "idem:v1:schema", schema)
	p.drain()
	require.Equal(t, 2, memory.Len(b, topic+".poison.dlt"))
	require.Equal(t, 1, memory.Len(b, topic+".retry.dlt"))
	require.Empty(t, p.effects, "nothing succeeded yet")

	downstreamUp = true
	r, err := replay.New(&replay.Options{Source: b, Target: b, Repairers: map[classify.Class]replay.Repairer{classify.ClassInvalidGeometry: makeValid{}}})
	require.NoError(t, err)

	// Dry run first: nothing moves.
	rep, err := r.Run(ctx, replay.Request{Destination: topic + ".poison.dlt", DryRun: true})
	require.NoError(t, err)
	require.Equal(t, 1, rep.Counts[replay.OutcomeWouldRepair])
	require.Equal(t, 1, rep.Counts[replay.OutcomeSkipped], "schema violations are never replayed")
	require.Equal(t, 2, memory.Len(b, topic+".poison.dlt"))
	require.Zero(t, memory.Len(b, topic))

	rep, err = r.Run(ctx, replay.Request{Destination: topic + ".poison.dlt"})
	require.NoError(t, err)
	require.Equal(t, 1, rep.Counts[replay.OutcomeRepaired])
	require.Equal(t, 1, rep.Counts[replay.OutcomeSkipped])
	require.Equal(t, 2, rep.Examined)
	rep2, err := r.Run(ctx, replay.Request{Destination: topic + ".retry.dlt"})
	require.NoError(t, err)
	require.Equal(t, 1, rep2.Counts[replay.OutcomeReplayed])

	// Re-injected messages carry the preserved key and the repair tag.
	msgs := memory.Messages(b, topic)
	require.Len(t, msgs, 2)
	for _, m := range msgs {
		require.True(t, strings.HasPrefix(m.Header(broker.HeaderIdempotencyKey), "idem:v1:"))
		if m.Header(broker.HeaderIdempotencyKey) == "idem:v1:bowtie" {
			require.Equal(t, "true", m.Header(broker.HeaderRepaired))
			require.Equal(t, "make_valid:structure 5->8 vertices", m.Header(broker.HeaderRepair))
			require.Equal(t, fixed, m.Body)
			require.Equal(t, []byte("k-idem:v1:bowtie"), m.Key, "re-injected with the original ordering key")
		} else {
			require.Equal(t, flaky, m.Body, "restored byte for byte")
			require.Empty(t, m.Header(broker.HeaderRepaired))
		}
	}
	p.drain()
	require.Equal(t, map[string]int{"idem:v1:bowtie": 1, "idem:v1:flaky": 1}, p.effects)

	// Replaying again finds nothing; re-delivering duplicates does nothing.
	rep, err = r.Run(ctx, replay.Request{Destination: topic + ".retry.dlt"})
	require.NoError(t, err)
	require.Zero(t, rep.Acked())
	for _, m := range msgs {
		require.NoError(t, b.Publish(ctx, topic, m))
	}
	p.drain()
	require.Equal(t, map[string]int{"idem:v1:bowtie": 1, "idem:v1:flaky": 1}, p.effects, "duplicates are harmless")
	require.Equal(t, 1, p.claims.Completions("idem:v1:flaky"))
	require.Equal(t, 1, memory.Len(b, topic+".poison.dlt"), "the schema violation waits for a human")
}

// ackLoser simulates a replayer that crashes after re-injecting but before
// acknowledging: Ack and AckBatch fail.
type ackLoser struct{ *broker.Store }

func (a ackLoser) Ack(context.Context, *broker.Record) error { return errors.New("replayer crashed") }

func (a ackLoser) AckBatch(_ context.Context, rs []*broker.Record) []error {
	errs := make([]error, len(rs))
	for i := range errs {
		errs[i] = errors.New("replayer crashed")
	}
	return errs
}

// oneByOne hides a source's batches (broker.BatchSettler): a replayer
// over it renews, re-injects and acknowledges one record at a time.
type oneByOne struct{ broker.DeadLetterSource }

// sourceModes are the two ways a replayer works on a batch: together
// (one renewal, one PublishBatch and one acknowledgement for the batch)
// over a source with batches, one record at a time over one without.
var sourceModes = []struct {
	name string
	wrap func(broker.DeadLetterSource) broker.DeadLetterSource
}{
	{"together", func(s broker.DeadLetterSource) broker.DeadLetterSource { return s }},
	{"one at a time", func(s broker.DeadLetterSource) broker.DeadLetterSource { return oneByOne{s} }},
}

func TestReplayTwiceSideEffectOnce(t *testing.T) {
	for _, mode := range sourceModes {
		t.Run(mode.name, func(t *testing.T) { testReplayTwiceSideEffectOnce(t, mode.wrap) })
	}
}

func testReplayTwiceSideEffectOnce(t *testing.T, wrap func(broker.DeadLetterSource) broker.DeadLetterSource) {
	ctx := context.Background()
	b := memory.New(&memory.Options{StoreOptions: broker.StoreOptions{LeaseTTL: 30 * time.Millisecond}})
	p := newPipeline(t, b, nil)
	up := false
	p.fail = func(*broker.Message) error {
		if !up {
			return classify.Transient(errors.New("503"))
		}
		return nil
	}
	for i := range 5 {
		seed(t, b, fmt.Sprintf("idem:v1:%d", i), []byte(fmt.Sprintf(`{"event_id":"e%d"}`, i)))
	}
	p.drain()
	require.Equal(t, 5, memory.Len(b, topic+".retry.dlt"))
	up = true

	crashy, err := replay.New(&replay.Options{Source: wrap(ackLoser{b}), Target: b})
	require.NoError(t, err)
	rep, err := crashy.Run(ctx, replay.Request{Destination: topic + ".retry.dlt"})
	require.NoError(t, err)
	require.Equal(t, 5, rep.Counts[replay.OutcomeAckFailed])
	require.Equal(t, 5, memory.Len(b, topic+".retry.dlt"), "nothing was acknowledged")
	time.Sleep(50 * time.Millisecond)

	r, err := replay.New(&replay.Options{Source: wrap(b), Target: b})
	require.NoError(t, err)
	rep, err = r.Run(ctx, replay.Request{Destination: topic + ".retry.dlt"})
	require.NoError(t, err)
	require.Equal(t, 5, rep.Counts[replay.OutcomeReplayed])
	require.Equal(t, 10, memory.Len(b, topic), "every event was re-injected twice")
	p.drain()
	for i := range 5 {
		k := fmt.Sprintf("idem:v1:%d", i)
		require.Equal(t, 1, p.effects[k], "side effect of %s ran once", k)
		require.Equal(t, 1, p.claims.Completions(k))
	}
}

func TestReplayFiltersAndLimit(t *testing.T) {
	ctx := context.Background()
	b := memory.New(nil)
	p := newPipeline(t, b, nil)
	p.fail = func(m *broker.Message) error { return errors.New("unknown " + string(m.Body)) }
	for i := range 6 {
		seed(t, b, fmt.Sprintf("idem:v1:f%d", i), []byte(fmt.Sprintf(`{"event_id":"f%d"}`, i)))
	}
	p.drain()
	r, err := replay.New(&replay.Options{Source: b, Target: b})
	require.NoError(t, err)
	rep, err := r.Run(ctx, replay.Request{Destination: topic + ".retry.dlt", Filter: broker.Filter{EventIDs: []string{"f1", "f4"}}})
	require.NoError(t, err)
	require.Equal(t, 2, rep.Counts[replay.OutcomeReplayed])
	rep, err = r.Run(ctx, replay.Request{Destination: topic + ".retry.dlt", Limit: 3})
	require.NoError(t, err)
	require.Equal(t, 3, rep.Examined)
	require.Equal(t, 1, memory.Len(b, topic+".retry.dlt"))
}

func TestTamperedBlobIsRefused(t *testing.T) {
	ctx := context.Background()
	store := offload.NewMemStore()
	off, err := offload.New(store, &offload.Options{BaseURI: "mem://dlq", Threshold: 16})
	require.NoError(t, err)
	builder, err := envelope.NewBuilder(&envelope.BuilderOptions{Offloader: off})
	require.NoError(t, err)
	b := memory.New(nil)
	p := newPipeline(t, b, builder)
	p.fail = func(*broker.Message) error { return classify.Transient(errors.New("503")) }
	seed(t, b, "idem:v1:big", flaky)
	p.drain()
	env, err := envelope.Decode(memory.Messages(b, topic+".retry.dlt")[0].Body)
	require.NoError(t, err)
	require.NotEmpty(t, env.Geometry.OffloadURI)

	key, err := off.KeyFor(env.Geometry.OffloadURI)
	require.NoError(t, err)
	tampered := `{"type":"Point","coordinates":[9.0,9.0]}`
	require.NoError(t, store.Put(ctx, key, strings.NewReader(tampered), int64(len(tampered))))

	r, err := replay.New(&replay.Options{Source: b, Target: b, Fetcher: off})
	require.NoError(t, err)
	rep, err := r.Run(ctx, replay.Request{Destination: topic + ".retry.dlt"})
	require.NoError(t, err)
	require.Equal(t, 1, rep.Counts[replay.OutcomeRestoreFailed])
	require.ErrorIs(t, rep.Items[0].Err, offload.ErrIntegrity)
	require.Zero(t, memory.Len(b, topic), "nothing re-injected")
	require.Equal(t, 1, memory.Len(b, topic+".retry.dlt"), "the record stays")
}

func TestRepairFailureAndCheck(t *testing.T) {
	ctx := context.Background()
	b := memory.New(nil)
	p := newPipeline(t, b, nil)
	p.fail = func(m *broker.Message) error {
		return classify.CRSMismatch(errors.New("EPSG:3857 but pipeline expects EPSG:4326"), 3857)
	}
	seed(t, b, "idem:v1:crs", crsBody)
	p.drain()
	dest := topic + ".poison.dlt"

	noRepair, err := replay.New(&replay.Options{Source: b, Target: b})
	require.NoError(t, err)
	rep, err := noRepair.Run(ctx, replay.Request{Destination: dest})
	require.NoError(t, err)
	require.Equal(t, 1, rep.Counts[replay.OutcomeSkipped])

	broken := replay.RepairFunc(func(context.Context, *envelope.Envelope, []byte) ([]byte, replay.Repair, error) {
		return crsBody, replay.Repair{Method: "reproject"}, nil
	})
	stillBad := func(context.Context, []byte) error {
		return classify.CRSMismatch(errors.New("still EPSG:3857"), 3857)
	}
	r, err := replay.New(&replay.Options{Source: b, Target: b, Repairers: map[classify.Class]replay.Repairer{classify.ClassCRSMismatch: broken}, Check: stillBad})
	require.NoError(t, err)
	rep, err = r.Run(ctx, replay.Request{Destination: dest})
	require.NoError(t, err)
	require.Equal(t, 1, rep.Counts[replay.OutcomeRepairFailed], "a repair that does not pass the check is not re-injected")
	rep, err = r.Run(ctx, replay.Request{Destination: dest, DryRun: true})
	require.NoError(t, err)
	require.Equal(t, 1, rep.Counts[replay.OutcomeWouldFail])
	require.Zero(t, memory.Len(b, topic))
	require.Equal(t, 1, memory.Len(b, dest))
}

func TestInvalidEnvelopeLeftInPlace(t *testing.T) {
	ctx := context.Background()
	b := memory.New(nil)
	require.NoError(t, b.Publish(ctx, "junk.dlt", &broker.Message{Body: []byte(`{"schema_version":"dlq.v9"}`)}))
	r, err := replay.New(&replay.Options{Source: b, Target: b})
	require.NoError(t, err)
	rep, err := r.Run(ctx, replay.Request{Destination: "junk.dlt"})
	require.NoError(t, err)
	require.Equal(t, 1, rep.Counts[replay.OutcomeInvalidEnvelope])
	require.Equal(t, 1, memory.Len(b, "junk.dlt"))
	_, err = replay.New(&replay.Options{})
	require.Error(t, err)
	_, err = replay.New(nil)
	require.Error(t, err)
}

func TestNewKey(t *testing.T) {
	k := replay.NewKey("parcels", []byte("provider-7"), []byte(`{"a":1}`))
	require.True(t, replay.ValidKey(k))
	require.True(t, strings.HasPrefix(k, replay.KeyPrefix))
	require.Equal(t, k, replay.NewKey("parcels", []byte("provider-7"), []byte(`{"a":1}`)), "stable")
	require.NotEqual(t, k, replay.NewKey("parcels", []byte("provider-7"), []byte(`{"a": 1}`)), "exact bytes")
	require.NotEqual(t, replay.NewKey("ab", []byte("c")), replay.NewKey("a", []byte("bc")), "length-prefixed")
}

// TestItemString renders items as one line of space-separated fields,
// whatever the producer put in the event id or the error.
func TestItemString(t *testing.T) {
	repair := &replay.Repair{Method: "make_valid", Detail: "structure", VerticesBefore: 5, VerticesAfter: 7}
	cases := []struct {
		name string
		it   replay.Item
		want string
	}{
		{"repaired", replay.Item{RecordID: "7", EventID: "evt-bowtie", Class: classify.ClassInvalidGeometry, Outcome: replay.OutcomeRepaired, Target: topic, Repair: repair},
			"7 evt-bowtie invalid_geometry repaired -> spatial.events make_valid:structure 5->7 vertices"},
		{"left in place", replay.Item{RecordID: "9", EventID: "evt-3857", Class: classify.ClassCRSMismatch, Outcome: replay.OutcomeRepairFailed, Err: errors.New("no EPSG code")},
			"9 evt-3857 crs_mismatch repair_failed: no EPSG code"},
		{"skipped", replay.Item{RecordID: "3", EventID: "evt-x", Class: classify.ClassSchemaViolation, Outcome: replay.OutcomeSkipped},
			"3 evt-x schema_violation skipped"},
		{"empty fields", replay.Item{RecordID: "1", Outcome: replay.OutcomeInvalidEnvelope, Err: errors.New("not an envelope")},
			"1 - - invalid_envelope: not an envelope"},
		{"an event id with a space and a newline", replay.Item{RecordID: "2", EventID: "evt 1\nforged line", Class: classify.ClassTransient, Outcome: replay.OutcomeReplayed},
			`2 "evt 1\nforged line" transient replayed`},
		{"an event id that is not UTF-8", replay.Item{RecordID: "4", EventID: "evt-\xff", Class: classify.ClassTransient, Outcome: replay.OutcomeReplayed},
			`4 "evt-\xff" transient replayed`},
		{"an invalid class", replay.Item{RecordID: "5", Class: "nonsense", Outcome: replay.OutcomeSkipped}, `5 - Class("nonsense") skipped`},
		{"an error over two lines", replay.Item{RecordID: "6", EventID: "e", Class: classify.ClassUnknown, Outcome: replay.OutcomePublishFailed, Err: errors.Join(errors.New("a"), errors.New("b"))},
			`6 e unknown publish_failed: "a\nb"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.it.String()
			require.Equal(t, tc.want, got)
			require.NotContains(t, got, "\n")
		})
	}
}

func TestReportSummary(t *testing.T) {
	seen := map[replay.Outcome]bool{}
	for _, o := range replay.Outcomes() {
		require.NotEmpty(t, string(o))
		require.False(t, seen[o], "outcome %q listed twice", o)
		seen[o] = true
		require.Equal(t, string(o)+"=1", replay.Report{Counts: map[replay.Outcome]int{o: 1}}.Summary())
	}
	require.Equal(t, "", replay.Report{}.Summary())
	rep := replay.Report{Counts: map[replay.Outcome]int{
		replay.OutcomeAckFailed: 1, replay.OutcomeSkipped: 2, replay.OutcomeReplayed: 3, replay.OutcomeRepaired: 0,
	}}
	require.Equal(t, "replayed=3 skipped=2 ack_failed=1", rep.Summary(), "Outcomes order, zero counts left out")
}

func TestNoRepairIsMatchable(t *testing.T) {
	b := memory.New(nil)
	ctx := context.Background()
	proc, err := broker.NewProcessor(&broker.ProcessorOptions{Publisher: b,
		Destination: func(*broker.Message, classify.Route) string { return "dlq" }})
	require.NoError(t, err)
	_, err = proc.Process(ctx, &broker.Message{Body: schema}, func(context.Context, *broker.Message) error {
		return classify.SchemaViolation(errors.New("not json"))
	})
	require.NoError(t, err)
	r, err := replay.New(&replay.Options{Source: b, Target: b})
	require.NoError(t, err)
	rep, err := r.Run(ctx, replay.Request{Destination: "dlq"})
	require.NoError(t, err)
	require.Len(t, rep.Items, 1)
	require.Equal(t, replay.OutcomeSkipped, rep.Items[0].Outcome)
	require.ErrorIs(t, rep.Items[0].Err, replay.ErrNoRepair)
	require.EqualError(t, rep.Items[0].Err, "replay: schema_violation is deterministic and no repair is configured for it")
}

// orderTarget records, per message key, the event ids in the order they
// were re-injected, sleeping a little on each publish so that lanes
// interleave.
type orderTarget struct {
	mu    sync.Mutex
	byKey map[string][]string
	n     atomic.Int64
}

func (o *orderTarget) Publish(ctx context.Context, _ string, m *broker.Message) error {
	time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond)
	o.mu.Lock()
	defer o.mu.Unlock()
	o.byKey[string(m.Key)] = append(o.byKey[string(m.Key)], m.Header(broker.HeaderEventID))
	o.n.Add(1)
	return nil
}

// TestConcurrency: a replayer working on records of a batch at once
// re-injects each record once, keeps the order of records sharing a key,
// reports every record in the order fetched, and reports the same as a
// replayer working on one record at a time.
func TestConcurrency(t *testing.T) {
	ctx := context.Background()
	const n = 120
	builder, err := envelope.NewBuilder(nil)
	require.NoError(t, err)
	run := func(conc int) (replay.Report, *orderTarget, []string) {
		b := memory.New(nil)
		var fetched []string
		for i := range n {
			key := fmt.Sprintf("parcel-%d", i%7)
			payload := []byte(fmt.Sprintf(`{"event_id":"e%03d","geometry":{"type":"Point","coordinates":[%d,1]}}`, i, i))
			class := classify.Transient(errors.New("503"))
			if i%5 == 0 {
				class = classify.SchemaViolation(errors.New("missing field"))
			}
			env, body, err := builder.Build(ctx, envelope.Input{Payload: payload, Err: class, EventID: fmt.Sprintf("e%03d", i),
				IdempotencyKey: fmt.Sprintf("idem:v1:%03d", i), Source: &envelope.Source{System: "memory", Topic: topic, Key: []byte(key)}})
			require.NoError(t, err)
			require.NoError(t, b.Publish(ctx, topic+".dlt", &broker.Message{Key: []byte(key), Body: body, Headers: broker.Headers(env), Envelope: env}))
			fetched = append(fetched, fmt.Sprintf("e%03d", i))
		}
		target := &orderTarget{byKey: map[string][]string{}}
		r, err := replay.New(&replay.Options{Source: b, Target: target, BatchSize: 50, Concurrency: conc})
		require.NoError(t, err)
		rep, err := r.Run(ctx, replay.Request{Destination: topic + ".dlt"})
		require.NoError(t, err)
		return rep, target, fetched
	}
	one, _, _ := run(1)
	for _, conc := range []int{2, 8, 200} {
		t.Run(fmt.Sprint(conc), func(t *testing.T) {
			rep, target, fetched := run(conc)
			require.Equal(t, n, rep.Examined)
			require.Equal(t, one.Counts, rep.Counts)
			require.Equal(t, n-n/5, rep.Counts[replay.OutcomeReplayed])
			require.EqualValues(t, n-n/5, target.n.Load(), "each record re-injected once")
			var ids []string
			for _, it := range rep.Items {
				ids = append(ids, it.EventID)
			}
			require.Equal(t, fetched, ids, "the report lists records in the order fetched")
			for key, got := range target.byKey {
				var want []string
				for i := range n {
					if fmt.Sprintf("parcel-%d", i%7) == key && i%5 != 0 {
						want = append(want, fmt.Sprintf("e%03d", i))
					}
				}
				require.Equal(t, want, got, "records sharing key %s re-injected in order", key)
			}
		})
	}
}

// recordingSource records what Fetch was asked for and what Release was
// given.
type recordingSource struct {
	broker.DeadLetterSource
	asked    []int
	mu       sync.Mutex // a run releases several records at once
	released []*broker.Record
}

func (s *recordingSource) Fetch(ctx context.Context, dest string, f broker.Filter, n int) ([]*broker.Record, error) {
	s.asked = append(s.asked, n)
	return s.DeadLetterSource.Fetch(ctx, dest, f, n)
}

func (s *recordingSource) Release(ctx context.Context, r *broker.Record) error {
	s.mu.Lock()
	s.released = append(s.released, r)
	s.mu.Unlock()
	return s.DeadLetterSource.Release(ctx, r)
}

// TestReplayBatchBytes checks that batches follow Options.BatchBytes (the
// first one record, the next as many as BatchBytes holds at the largest
// body seen, at most BatchSize), and that the records a dry run leaves in
// place are held, and released, by their lease alone.
func TestReplayBatchBytes(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name       string
		batchBytes int
		want       []int
	}{
		{"records larger than the budget: one at a time", 1, []int{1, 1, 1, 1, 1, 1, 1}},
		{"small records: BatchSize after the first", 1 << 20, []int{1, 3, 3, 3}},
		{"default budget", 0, []int{1, 3, 3, 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := memory.New(nil)
			p := newPipeline(t, b, nil)
			p.fail = func(m *broker.Message) error { return errors.New("unknown " + string(m.Body)) }
			for i := range 6 {
				seed(t, b, fmt.Sprintf("idem:v1:b%d", i), []byte(fmt.Sprintf(`{"event_id":"b%d"}`, i)))
			}
			p.drain()
			src := &recordingSource{DeadLetterSource: b}
			r, err := replay.New(&replay.Options{Source: src, Target: b, BatchSize: 3, BatchBytes: tc.batchBytes})
			require.NoError(t, err)
			rep, err := r.Run(ctx, replay.Request{Destination: topic + ".retry.dlt", DryRun: true})
			require.NoError(t, err)
			require.Equal(t, 6, rep.Examined)
			require.Equal(t, 6, rep.Counts[replay.OutcomeWouldReplay])
			require.Equal(t, tc.want, src.asked)
			require.Len(t, src.released, 6, "every record left in place is released when the run ends")
			for _, rec := range src.released {
				require.Nil(t, rec.Message, "record %s held by its lease alone", rec.ID)
				require.NotEmpty(t, rec.Lease)
			}
			require.Equal(t, 6, memory.Len(b, topic+".retry.dlt"))
		})
	}
}
