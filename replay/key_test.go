package replay_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/memory"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/internal/corpus"
	"github.com/geodlq/geodlq/offload"
	"github.com/geodlq/geodlq/replay"
)

// TestEventKeyThroughReplay follows every event of the keyed corpus — every
// failure kind, with and without the producer's own idempotency_key —
// through a consumer, the dead-letter store, a replay and a second failure:
// the handler, the envelope and the re-injected message all carry the
// event's own key (or a header's, which wins), not derived; an event
// without one gets a key derived once, marked derived in the envelope, on
// the re-injected message and in the envelope of its second failure.
func TestEventKeyThroughReplay(t *testing.T) {
	ctx := context.Background()
	const src = "spatial.events"
	b := memory.New(nil)
	off, err := offload.New(offload.NewMemStore(), &offload.Options{BaseURI: "mem://keys"})
	require.NoError(t, err)
	builder, err := envelope.NewBuilder(&envelope.BuilderOptions{Offloader: off})
	require.NoError(t, err)
	proc, err := broker.NewProcessor(&broker.ProcessorOptions{Publisher: b, Builder: builder, Policy: classify.Policy{MaxAttempts: 1}})
	require.NoError(t, err)

	type want struct {
		name    string
		key     string // "" until the first consumption derives it
		derived bool
	}
	wants := map[string]*want{} // by event name
	byBody := map[string]*want{}
	for _, ev := range corpus.Keyed() {
		w := &want{name: ev.Name, key: ev.Key}
		m := &broker.Message{Body: ev.Item.Payload}
		if strings.HasSuffix(ev.Name, "/uuid-first") || strings.HasPrefix(ev.Name, "valid_") && strings.HasSuffix(ev.Name, "/none") {
			// A key given with the message wins over the event's own.
			w.key = "header:" + ev.Name
			m.Headers = map[string]string{broker.HeaderIdempotencyKey: w.key}
		}
		w.derived = w.key == ""
		require.NoError(t, b.Publish(ctx, src, m))
		require.Nil(t, byBody[string(ev.Item.Payload)], "%s: bodies are distinct", ev.Name)
		byBody[string(ev.Item.Payload)] = w
		wants[ev.Name] = w
	}

	// consume fails every message of src once, as transient, so that its
	// envelope goes to the retry destination, and returns the keys the
	// handler saw by body.
	consume := func() map[string]string {
		seen := map[string]string{}
		for {
			recs, err := b.Fetch(ctx, src, broker.Filter{}, 50)
			require.NoError(t, err)
			if len(recs) == 0 {
				return seen
			}
			for _, r := range recs {
				m := r.Message
				m.Source = &envelope.Source{System: "memory", Topic: src, MessageID: r.ID}
				res, err := proc.Process(ctx, m, func(_ context.Context, hm *broker.Message) error {
					seen[string(hm.Body)] = hm.Header(broker.HeaderIdempotencyKey)
					require.Equal(t, byBody[string(hm.Body)].derived, hm.Header(broker.HeaderIdempotencyKeyDerived) == "true")
					return classify.Transient(errors.New("downstream unavailable"))
				})
				require.NoError(t, err)
				require.True(t, res.DeadLettered)
				require.Equal(t, byBody[string(m.Body)].derived, res.IdempotencyKeyDerived)
				require.NoError(t, b.Ack(ctx, r))
			}
		}
	}
	dest := src + ".retry.dlt"
	envelopes := func() map[string]*envelope.Envelope {
		out := map[string]*envelope.Envelope{}
		for _, e := range list(t, b, dest) {
			env, err := broker.EnvelopeOf(e.Record.Message)
			require.NoError(t, err)
			payload, err := env.Restore(ctx, off)
			require.NoError(t, err)
			out[string(payload)] = env
		}
		return out
	}

	seen := consume()
	first := envelopes()
	require.Len(t, first, len(wants))
	for body, w := range byBody {
		env := first[body]
		require.NotNil(t, env, w.name)
		if w.key == "" {
			// Derived once, from the source and the body.
			w.key = broker.DeriveIdempotencyKey(&broker.Message{Body: []byte(body), Source: &envelope.Source{System: "memory", Topic: src}})
		}
		require.Equal(t, w.key, env.IdempotencyKey, w.name)
		require.Equal(t, w.derived, env.IdempotencyKeyDerived, w.name)
		require.Equal(t, w.key, seen[body], "%s: the handler saw the envelope's key", w.name)
	}

	// Replay re-injects exactly that key, and says when it was derived.
	r, err := replay.New(&replay.Options{Source: b, Target: b, Fetcher: off})
	require.NoError(t, err)
	rep, err := r.Run(ctx, replay.Request{Destination: dest})
	require.NoError(t, err)
	require.Equal(t, len(wants), rep.Counts[replay.OutcomeReplayed], rep.Summary())
	reinjected := list(t, b, src)
	require.Len(t, reinjected, len(wants))
	for _, e := range reinjected {
		rec := e.Record
		w := byBody[string(rec.Message.Body)]
		require.NotNil(t, w, "re-injected byte for byte")
		require.Equal(t, w.key, rec.Message.Header(broker.HeaderIdempotencyKey), w.name)
		require.Equal(t, w.derived, rec.Message.Header(broker.HeaderIdempotencyKeyDerived) == "true", w.name)
	}

	// A second failure keeps the key and its mark.
	seen = consume()
	second := envelopes()
	require.Len(t, second, len(wants))
	for body, w := range byBody {
		require.Equal(t, w.key, second[body].IdempotencyKey, w.name)
		require.Equal(t, w.derived, second[body].IdempotencyKeyDerived, w.name)
		require.Equal(t, w.key, seen[body], w.name)
	}
}

// list returns every pending record of dest.
func list(t *testing.T, b *broker.Store, dest string) []broker.Entry {
	var all []broker.Entry
	opts := broker.ListOptions{Destination: dest, Limit: broker.MaxListLimit}
	for {
		p, err := b.List(context.Background(), opts)
		require.NoError(t, err)
		all = append(all, p.Entries...)
		if p.Next == "" {
			return all
		}
		opts.After = p.Next
	}
}
