package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/internal/corpus"
)

// TestCheckDeadLetterEventKeys runs the keyed corpus — every failure kind,
// events with and without their own idempotency_key — through check
// --dead-letter: every stored envelope carries the event's own key, not
// derived, or, for an event without one, the key a consumer of the topic
// derives, marked derived; show says so; and replay re-injects exactly
// that key with its mark.
func TestCheckDeadLetterEventKeys(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	c := cli{t: t, store: "sqlite://" + filepath.Join(dir, "dlq.db"), blobs: "file://" + filepath.Join(dir, "blobs")}
	events := map[string]corpus.KeyedEvent{} // by payload SHA-256
	var in bytes.Buffer
	failing := 0
	for _, ev := range corpus.Keyed() {
		line := bytes.TrimRight(ev.Item.Payload, "\n")
		require.NotContains(t, string(line), "\n", ev.Name)
		sum := sha256.Sum256(line)
		events[hex.EncodeToString(sum[:])] = ev
		in.Write(line)
		in.WriteByte('\n')
		if !ev.Item.Valid() || ev.Name[:6] == "large/" {
			failing++
		}
	}
	c.must(exitProblems, in.Bytes(), "check", "--dead-letter", "parcels", "--max-vertices", "5000", "-o", "json")

	views := listViews(t, c, "--limit", "1000")
	require.Len(t, views, failing, "every failing event dead-lettered once")
	byID := map[string]view{}
	keyed, derived := 0, 0
	for _, v := range views {
		byID[v.ID] = v
		ev, ok := events[v.PayloadSHA256]
		require.True(t, ok, "record %s: payload of an input event", v.ID)
		if ev.Key != "" {
			keyed++
			require.Equal(t, ev.Key, v.IdempotencyKey, ev.Name)
			require.False(t, v.KeyDerived, ev.Name)
			continue
		}
		derived++
		want := broker.DeriveIdempotencyKey(&broker.Message{Body: bytes.TrimRight(ev.Item.Payload, "\n"),
			Source: &envelope.Source{System: "geodlq-check", Topic: "parcels"}})
		require.Equal(t, want, v.IdempotencyKey, ev.Name)
		require.True(t, v.KeyDerived, ev.Name)
	}
	require.Positive(t, keyed)
	require.Positive(t, derived)

	// show marks a derived key.
	for _, v := range views {
		if v.KeyDerived {
			r := c.must(exitOK, nil, "show", v.Destination+"/"+v.ID)
			require.Contains(t, r.stdout, v.IdempotencyKey+" (derived)")
			break
		}
	}

	// Replay re-injects exactly that key, and marks a derived one.
	target := filepath.Join(t.TempDir(), "target.db")
	rep := replayJSON(t, c, exitOK, "--repair", "make-valid", "--class", "invalid_geometry", "--target", "sqlite://"+target)
	require.Positive(t, rep.Counts["repaired"])
	got := reinjected(t, target, "parcels")
	require.Len(t, got, rep.Counts["repaired"])
	marked := 0
	for ref, msgs := range got {
		require.Len(t, msgs, 1, ref)
		v := byID[ref[len("parcels.poison.dlt/"):]]
		require.Equal(t, v.IdempotencyKey, msgs[0].Header(broker.HeaderIdempotencyKey), ref)
		require.Equal(t, v.KeyDerived, msgs[0].Header(broker.HeaderIdempotencyKeyDerived) == "true", ref)
		if v.KeyDerived {
			marked++
		}
	}
	require.Positive(t, marked)
}

// TestCheckIdempotencyKeyPath: --idempotency-key-path names the member the
// event's own key is read from; a malformed one is a usage error that
// creates no store.
func TestCheckIdempotencyKeyPath(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "dlq.db")
	c := cli{t: t, store: "sqlite://" + db}
	ev := `{"idempotency_key":"top","properties":{"idempotency_key":"nested-9"},"geometry":{"type":"Polygon","coordinates":[[[0,0],[1,1],[1,0],[0,1],[0,0]]]}}` + "\n"
	c.must(exitUsage, []byte(ev), "check", "--dead-letter", "parcels", "--idempotency-key-path", "properties")
	require.NoFileExists(t, db)
	c.must(exitProblems, []byte(ev), "check", "--dead-letter", "parcels", "--idempotency-key-path", "/properties/idempotency_key")
	views := listViews(t, c)
	require.Len(t, views, 1)
	require.Equal(t, "nested-9", views[0].IdempotencyKey)
	require.False(t, views[0].KeyDerived)
}
