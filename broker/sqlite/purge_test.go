package sqlite_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/sqlite"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/offload"
)

// purgeFixture is a store holding, in "t.poison.dlt":
//
//	1 shared-a   invalid_geometry, offloaded geometry G (replayed)
//	2 shared-b   invalid_geometry, the same geometry G  (pending)
//	3 own        schema_violation, offloaded geometry H (pending)
//	4 small      invalid_geometry, inline               (replayed)
//	5 leased     invalid_geometry, inline               (pending, leased)
//
// and one non-envelope message in "t" (record 6).
type purgeFixture struct {
	store *broker.Store
	path  string
	g, h  string // offload URIs
}

func newPurgeFixture(t *testing.T) purgeFixture {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "purge.db")
	store, err := sqlite.Open(ctx, path, &sqlite.Options{StoreOptions: broker.StoreOptions{LeaseTTL: time.Hour}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	off, err := offload.New(offload.NewMemStore(), &offload.Options{BaseURI: "mem://purge", Threshold: 40})
	require.NoError(t, err)
	b, err := envelope.NewBuilder(&envelope.BuilderOptions{Offloader: off})
	require.NoError(t, err)
	const big = `{"type":"Polygon","coordinates":[[[0,0],[1,1],[1,0],[0,1],[0,0]]]}`
	const other = `{"type":"Polygon","coordinates":[[[0,0],[2,2],[2,0],[0,2],[0,0]]]}`
	var f purgeFixture
	f.store, f.path = store, path
	publish := func(id, geom string, err error) *envelope.Envelope {
		env, body, berr := b.Build(ctx, envelope.Input{
			Payload: []byte(`{"event_id":"` + id + `","geometry":` + geom + `}`), Err: err, Attempts: 1,
			IdempotencyKey: "k-" + id, Source: &envelope.Source{System: "test", Topic: "t"},
		})
		require.NoError(t, berr)
		require.NoError(t, store.Publish(ctx, "t.poison.dlt", &broker.Message{Body: body}))
		return env
	}
	invalid := classify.InvalidGeometry(errors.New("Self-intersection[0.5 0.5]"))
	f.g = publish("shared-a", big, invalid).Geometry.OffloadURI
	require.Equal(t, f.g, publish("shared-b", big, invalid).Geometry.OffloadURI)
	f.h = publish("own", other, classify.SchemaViolation(errors.New("bad"))).Geometry.OffloadURI
	require.NotEmpty(t, f.g)
	require.NotEmpty(t, f.h)
	publish("small", `{"type":"Point","coordinates":[0,0]}`, invalid)
	publish("leased", `{"type":"Point","coordinates":[1,1]}`, invalid)
	require.NoError(t, store.Publish(ctx, "t", &broker.Message{Body: []byte(`not an envelope`)}))

	// Replay records 1 and 4; keep record 5 leased.
	recs, err := store.Fetch(ctx, "t.poison.dlt", broker.Filter{}, 5)
	require.NoError(t, err)
	require.Len(t, recs, 5)
	require.NoError(t, store.Ack(ctx, recs[0]))
	require.NoError(t, store.Ack(ctx, recs[3]))
	require.NoError(t, store.Release(ctx, recs[1]))
	require.NoError(t, store.Release(ctx, recs[2]))
	return f
}

func remainingIDs(t *testing.T, s *broker.Store) []string {
	t.Helper()
	p, err := s.List(context.Background(), broker.ListOptions{IncludeReplayed: true})
	require.NoError(t, err)
	require.Empty(t, p.Next)
	var ids []string
	for _, e := range p.Entries {
		ids = append(ids, e.Record.ID)
	}
	return ids
}

func TestPurge(t *testing.T) {
	ctx := context.Background()
	invalid := []classify.Class{classify.ClassInvalidGeometry}
	future := time.Now().Add(time.Hour)
	tests := []struct {
		name         string
		req          broker.PurgeRequest
		wantIDs      []string
		wantBlobs    func(f purgeFixture) []string
		wantOrphaned func(f purgeFixture) []string
		wantLeft     []string
	}{
		{
			name:         "replayed only by default; a blob still referenced by a pending record is not orphaned",
			req:          broker.PurgeRequest{Destination: "t.poison.dlt", Filter: broker.Filter{Until: future}},
			wantIDs:      []string{"1", "4"},
			wantBlobs:    func(f purgeFixture) []string { return []string{f.g} },
			wantOrphaned: func(purgeFixture) []string { return nil },
			wantLeft:     []string{"2", "3", "5", "6"},
		},
		{
			name:         "pending too, by class: the shared blob is orphaned once both references are gone; leased records stay",
			req:          broker.PurgeRequest{Destination: "t.poison.dlt", Filter: broker.Filter{Until: future, Classes: invalid}, IncludePending: true},
			wantIDs:      []string{"1", "2", "4"},
			wantBlobs:    func(f purgeFixture) []string { return []string{f.g} },
			wantOrphaned: func(f purgeFixture) []string { return []string{f.g} },
			wantLeft:     []string{"3", "5", "6"},
		},
		{
			name:         "dry run reports the same and deletes nothing",
			req:          broker.PurgeRequest{Destination: "t.poison.dlt", Filter: broker.Filter{Until: future, Classes: invalid}, IncludePending: true, DryRun: true},
			wantIDs:      []string{"1", "2", "4"},
			wantBlobs:    func(f purgeFixture) []string { return []string{f.g} },
			wantOrphaned: func(f purgeFixture) []string { return []string{f.g} },
			wantLeft:     []string{"1", "2", "3", "4", "5", "6"},
		},
		{
			name:         "dry run: a record outside the selection keeps its blob",
			req:          broker.PurgeRequest{Destination: "t.poison.dlt", Filter: broker.Filter{Until: future}, DryRun: true},
			wantIDs:      []string{"1", "4"},
			wantBlobs:    func(f purgeFixture) []string { return []string{f.g} },
			wantOrphaned: func(purgeFixture) []string { return nil },
			wantLeft:     []string{"1", "2", "3", "4", "5", "6"},
		},
		{
			name:         "nothing older than the cutoff",
			req:          broker.PurgeRequest{Filter: broker.Filter{Until: time.Now().Add(-time.Hour)}, IncludePending: true},
			wantBlobs:    func(purgeFixture) []string { return nil },
			wantOrphaned: func(purgeFixture) []string { return nil },
			wantLeft:     []string{"1", "2", "3", "4", "5", "6"},
		},
		{
			name:         "a non-zero filter never touches messages that are not envelopes",
			req:          broker.PurgeRequest{Filter: broker.Filter{Until: future}, IncludePending: true},
			wantIDs:      []string{"t.poison.dlt/1", "t.poison.dlt/2", "t.poison.dlt/3", "t.poison.dlt/4"},
			wantBlobs:    func(f purgeFixture) []string { return sorted(f.g, f.h) },
			wantOrphaned: func(f purgeFixture) []string { return sorted(f.g, f.h) },
			wantLeft:     []string{"5", "6"},
		},
		{
			name:         "by record id, a message that is not an envelope too",
			req:          broker.PurgeRequest{Destination: "t", Filter: broker.Filter{IDs: []string{"6", "1", "x", "-1"}}, IncludePending: true},
			wantIDs:      []string{"6"},
			wantBlobs:    func(purgeFixture) []string { return nil },
			wantOrphaned: func(purgeFixture) []string { return nil },
			wantLeft:     []string{"1", "2", "3", "4", "5"},
		},
		{
			name:         "by record id: a leased record is never deleted",
			req:          broker.PurgeRequest{Destination: "t.poison.dlt", Filter: broker.Filter{IDs: []string{"5", "3"}}, IncludePending: true},
			wantIDs:      []string{"3"},
			wantBlobs:    func(f purgeFixture) []string { return []string{f.h} },
			wantOrphaned: func(f purgeFixture) []string { return []string{f.h} },
			wantLeft:     []string{"1", "2", "4", "5", "6"},
		},
		{
			name: "by event id and reason kind",
			req: broker.PurgeRequest{Destination: "t.poison.dlt", Filter: broker.Filter{EventIDs: []string{"small", "own"},
				ReasonKinds: []classify.ReasonKind{classify.KindSelfIntersection}}, IncludePending: true},
			wantIDs:      []string{"4"},
			wantBlobs:    func(purgeFixture) []string { return nil },
			wantOrphaned: func(purgeFixture) []string { return nil },
			wantLeft:     []string{"1", "2", "3", "5", "6"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newPurgeFixture(t)
			res, err := f.store.Purge(ctx, tt.req)
			require.NoError(t, err)
			require.Equal(t, tt.wantIDs, res.IDs)
			require.Equal(t, tt.wantBlobs(f), res.BlobURIs)
			require.Equal(t, tt.wantOrphaned(f), res.Orphaned)
			require.Equal(t, tt.wantLeft, remainingIDs(t, f.store))
		})
	}
}

func TestPurgeCanceled(t *testing.T) {
	f := newPurgeFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := f.store.Purge(ctx, broker.PurgeRequest{Filter: broker.Filter{Until: time.Now().Add(time.Hour)}, IncludePending: true})
	require.ErrorIs(t, err, context.Canceled)
	require.Len(t, remainingIDs(t, f.store), 6)
}

// TestPurgeReadOnly: a read-only handle answers a dry run and refuses a
// purge.
func TestPurgeReadOnly(t *testing.T) {
	f := newPurgeFixture(t)
	ro, err := sqlite.Open(context.Background(), f.path, &sqlite.Options{StoreOptions: broker.StoreOptions{ReadOnly: true}})
	require.NoError(t, err)
	defer ro.Close()
	req := broker.PurgeRequest{Destination: "t.poison.dlt", Filter: broker.Filter{Until: time.Now().Add(time.Hour)}, DryRun: true}
	res, err := ro.Purge(context.Background(), req)
	require.NoError(t, err)
	require.Equal(t, []string{"1", "4"}, res.IDs)
	req.DryRun = false
	_, err = ro.Purge(context.Background(), req)
	require.ErrorIs(t, err, broker.ErrReadOnly)
	require.Len(t, remainingIDs(t, f.store), 6)
}

func sorted(a, b string) []string {
	if a > b {
		a, b = b, a
	}
	return []string{a, b}
}
