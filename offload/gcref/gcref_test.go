package gcref_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/memory"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/internal/corpus"
	"github.com/geodlq/geodlq/offload"
	"github.com/geodlq/geodlq/offload/gcref"
)

func collect(t *testing.T, seq func(func(string, error) bool)) ([]string, error) {
	t.Helper()
	var out []string
	for u, err := range seq {
		if err != nil {
			return out, err
		}
		out = append(out, u)
	}
	return out, nil
}

// build returns the envelope of a failed payload, offloading through off
// so that the destination limit is respected.
func build(t *testing.T, off *offload.Offloader, payload []byte, maxBytes int) *envelope.Envelope {
	t.Helper()
	b, err := envelope.NewBuilder(&envelope.BuilderOptions{Offloader: off})
	require.NoError(t, err)
	env, _, err := b.Build(context.Background(), envelope.Input{Payload: payload, Err: errors.New("boom"), MaxBytes: maxBytes})
	require.NoError(t, err)
	return env
}

func TestReferences(t *testing.T) {
	require.Nil(t, gcref.References(nil))
	off, err := offload.New(offload.NewMemStore(), &offload.Options{Threshold: 1 << 20})
	require.NoError(t, err)

	inline := build(t, off, []byte(`{"geometry":{"type":"Point","coordinates":[1,2]}}`), 0)
	require.Empty(t, gcref.References(inline), "an inline geometry refers to no blob")

	big := corpus.LargeEvent(2 << 20)
	geomOnly := build(t, off, big, 0)
	require.Equal(t, []string{geomOnly.Geometry.OffloadURI}, gcref.References(geomOnly))

	// A destination limit below the rest of the payload forces the whole
	// payload out too.
	padded := append([]byte(`{"pad":"`), []byte(fmt.Sprintf("%0300000d", 0))...)
	padded = append(padded, []byte(`","geometry":{"type":"Point","coordinates":[1,2]}}`)...)
	both := build(t, off, padded, 64<<10)
	require.NotEmpty(t, both.RawPayloadOffloadURI)
	require.Equal(t, []string{both.Geometry.OffloadURI, both.RawPayloadOffloadURI}, gcref.References(both))
}

func TestFromMessagesAndRecords(t *testing.T) {
	ctx := context.Background()
	off, err := offload.New(offload.NewMemStore(), &offload.Options{Threshold: 1})
	require.NoError(t, err)
	dlq := memory.New(nil)
	var want []string
	for _, id := range []string{"a", "b"} {
		env := build(t, off, []byte(`{"event_id":"`+id+`","geometry":{"type":"Point","coordinates":[1,2]}}`), 0)
		body, err := env.Encode()
		require.NoError(t, err)
		require.NoError(t, dlq.Publish(ctx, "dlt", &broker.Message{Body: body}))
		want = append(want, env.Geometry.OffloadURI)
	}
	got, err := collect(t, gcref.FromMessages(slices.Values(memory.Messages(dlq, "dlt"))))
	require.NoError(t, err)
	require.Equal(t, want, got, "one URI per envelope, duplicates included")

	recs, err := dlq.Fetch(ctx, "dlt", broker.Filter{}, 10)
	require.NoError(t, err)
	recs[0].Envelope = nil // the source did not decode it
	got, err = collect(t, gcref.FromRecords(func(yield func(*broker.Record, error) bool) {
		for _, r := range recs {
			if !yield(r, nil) {
				return
			}
		}
	}))
	require.NoError(t, err)
	require.Equal(t, want, got)

	// Something that is not an envelope makes the live set fail: its
	// references cannot be known.
	require.NoError(t, dlq.Publish(ctx, "dlt", &broker.Message{Body: []byte("not an envelope")}))
	_, err = collect(t, gcref.FromMessages(slices.Values(memory.Messages(dlq, "dlt"))))
	require.ErrorContains(t, err, "not a dlq.v1 envelope")
	boom := errors.New("store down")
	_, err = collect(t, gcref.FromRecords(func(yield func(*broker.Record, error) bool) { yield(nil, boom) }))
	require.ErrorIs(t, err, boom)
	_, err = collect(t, gcref.FromRecords(func(yield func(*broker.Record, error) bool) { yield(&broker.Record{ID: "x"}, nil) }))
	require.ErrorContains(t, err, "neither envelope nor message")
}

// Example: purging one of two envelopes that share a blob keeps the blob.
func Example() {
	ctx := context.Background()
	dir := tempDir()
	defer os.RemoveAll(dir)
	store, _ := offload.NewDirStore(dir)
	defer store.Close()
	off, _ := offload.New(store, &offload.Options{BaseURI: "s3://dlq-geom", Threshold: 1})
	builder, _ := envelope.NewBuilder(&envelope.BuilderOptions{Offloader: off})
	dlq := memory.New(nil)
	for _, id := range []string{"evt-1", "evt-2"} { // same geometry, one blob
		payload := `{"event_id":"` + id + `","geometry":{"type":"Point","coordinates":[12.5,41.9]}}`
		env, _, _ := builder.Build(ctx, envelope.Input{Payload: []byte(payload), Err: errors.New("join failed")})
		body, _ := env.Encode()
		_ = dlq.Publish(ctx, "dlt", &broker.Message{Body: body})
	}
	recs, _ := dlq.Fetch(ctx, "dlt", broker.Filter{EventIDs: []string{"evt-1"}}, 1)
	_ = dlq.Ack(ctx, recs[0]) // evt-1 purged

	live := gcref.FromMessages(slices.Values(memory.Messages(dlq, "dlt")))
	rep, err := off.Sweep(ctx, live, &offload.SweepOptions{
		Lister: offload.DirLister(store),
		Now:    func() time.Time { return time.Now().Add(48 * time.Hour) },
	})
	fmt.Println(err, "referenced:", rep.Referenced, "quarantined:", len(rep.Quarantined))
	// Output: <nil> referenced: 1 quarantined: 0
}
