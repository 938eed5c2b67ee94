package blobstore_test

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/memory"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/offload"
	"github.com/geodlq/geodlq/offload/blobstore"
	"github.com/geodlq/geodlq/offload/gcref"
)

// gcStores are the stores the garbage-collection scenarios run against: the
// three bucket kinds of this package, and offload's own DirStore through
// offload.DirLister.
func gcStores() []struct {
	name string
	open func(t *testing.T) (offload.Store, offload.Lister)
} {
	return []struct {
		name string
		open func(t *testing.T) (offload.Store, offload.Lister)
	}{
		{"mem", func(t *testing.T) (offload.Store, offload.Lister) {
			s, err := blobstore.Open(context.Background(), "mem://", nil)
			require.NoError(t, err)
			t.Cleanup(func() { _ = s.Close() })
			return s, nil
		}},
		{"file", func(t *testing.T) (offload.Store, offload.Lister) {
			s, err := blobstore.Open(context.Background(), "file://"+filepath.ToSlash(t.TempDir()), nil)
			require.NoError(t, err)
			t.Cleanup(func() { _ = s.Close() })
			return s, nil
		}},
		{"s3", func(t *testing.T) (offload.Store, offload.Lister) {
			s, _ := newFakeS3(t).store(t, nil)
			return s, nil
		}},
		{"dirstore", func(t *testing.T) (offload.Store, offload.Lister) {
			s, err := offload.NewDirStore(t.TempDir())
			require.NoError(t, err)
			t.Cleanup(func() { _ = s.Close() })
			return s, offload.DirLister(s)
		}},
	}
}

// gcWorld is a pipeline's dead-letter side: an offloader that offloads
// every geometry, an envelope builder, and an in-memory dead-letter store.
type gcWorld struct {
	t       *testing.T
	off     *offload.Offloader
	builder *envelope.Builder
	dlq     *broker.Store
	lister  offload.Lister
}

const gcDest = "spatial.events.poison.dlt"

func newGCWorld(t *testing.T, open func(*testing.T) (offload.Store, offload.Lister)) *gcWorld {
	s, l := open(t)
	off, err := offload.New(s, &offload.Options{Threshold: 1, Prefix: "dlq/geom"})
	require.NoError(t, err)
	b, err := envelope.NewBuilder(&envelope.BuilderOptions{Offloader: off})
	require.NoError(t, err)
	return &gcWorld{t: t, off: off, builder: b, dlq: memory.New(nil), lister: l}
}

// build makes the envelope of a failed event whose geometry is geom.
func (w *gcWorld) build(eventID, geom string) *envelope.Envelope {
	payload := `{"event_id":"` + eventID + `","geometry":` + geom + `}`
	env, _, err := w.builder.Build(context.Background(), envelope.Input{Payload: []byte(payload), Err: errors.New("boom")})
	require.NoError(w.t, err)
	require.NotEmpty(w.t, env.Geometry.OffloadURI)
	return env
}

func (w *gcWorld) publish(env *envelope.Envelope) {
	body, err := env.Encode()
	require.NoError(w.t, err)
	require.NoError(w.t, w.dlq.Publish(context.Background(), gcDest, &broker.Message{Body: body}))
}

// purge removes an event's dead-letter record for good.
func (w *gcWorld) purge(eventID string) {
	ctx := context.Background()
	recs, err := w.dlq.Fetch(ctx, gcDest, broker.Filter{EventIDs: []string{eventID}}, 10)
	require.NoError(w.t, err)
	require.Len(w.t, recs, 1)
	require.NoError(w.t, w.dlq.Ack(ctx, recs[0]))
}

func (w *gcWorld) sweep(now time.Time, dryRun bool) offload.SweepReport {
	w.t.Helper()
	rep, err := w.off.Sweep(context.Background(), gcref.FromMessages(slices.Values(memory.Messages(w.dlq, gcDest))),
		&offload.SweepOptions{MinAge: time.Hour, DryRun: dryRun, Lister: w.lister, Now: func() time.Time { return now }})
	require.NoError(w.t, err)
	return rep
}

func (w *gcWorld) exists(uri string) bool {
	key, err := w.off.KeyFor(uri)
	require.NoError(w.t, err)
	ok, err := w.off.Store().Exists(context.Background(), key)
	require.NoError(w.t, err)
	return ok
}

// keys lists every key in the store under the offloader's prefix.
func (w *gcWorld) keys() []string {
	l := w.lister
	if l == nil {
		l = w.off.Store().(offload.Lister)
	}
	var keys []string
	require.NoError(w.t, l.List(context.Background(), "dlq/", func(o offload.ObjectInfo) error {
		keys = append(keys, o.Key)
		return nil
	}))
	slices.Sort(keys)
	return keys
}

const (
	geomShared = `{"type":"Polygon","coordinates":[[[0,0],[1,1],[1,0],[0,1],[0,0]]]}`
	geomOther  = `{"type":"Point","coordinates":[12.5,41.9]}`
)

// TestSweepSharedBlob is the reference-safety scenario: two envelopes
// share one content-addressed blob; purging one keeps it, purging both
// quarantines it after MinAge and deletes it a grace period later, while
// another envelope's blob is never touched.
func TestSweepSharedBlob(t *testing.T) {
	for _, st := range gcStores() {
		t.Run(st.name, func(t *testing.T) {
			w := newGCWorld(t, st.open)
			a, b, c := w.build("evt-a", geomShared), w.build("evt-b", geomShared), w.build("evt-c", geomOther)
			require.Equal(t, a.Geometry.OffloadURI, b.Geometry.OffloadURI, "identical geometries share one blob")
			require.Equal(t, []string{a.Geometry.OffloadURI}, gcref.References(a))
			w.publish(a)
			w.publish(b)
			w.publish(c)
			later := time.Now().Add(2 * time.Hour) // every blob is past MinAge

			rep := w.sweep(later, false)
			require.Equal(t, 2, rep.Referenced)
			require.Empty(t, rep.Quarantined)

			w.purge("evt-a")
			rep = w.sweep(later, false)
			require.Equal(t, 2, rep.Referenced, "evt-b still refers to the shared blob")
			require.Empty(t, rep.Quarantined)
			require.True(t, w.exists(b.Geometry.OffloadURI))
			_, err := b.Restore(context.Background(), w.off)
			require.NoError(t, err, "evt-b still restores")

			w.purge("evt-b")
			sharedKey, err := w.off.KeyFor(a.Geometry.OffloadURI)
			require.NoError(t, err)
			rep = w.sweep(later, false)
			require.Equal(t, []string{sharedKey}, rep.Quarantined)
			require.Equal(t, 1, rep.Referenced, "evt-c's blob")
			require.False(t, w.exists(a.Geometry.OffloadURI), "quarantined: no longer readable under its key")
			require.True(t, w.exists(c.Geometry.OffloadURI))

			rep = w.sweep(later.Add(30*time.Minute), false)
			require.Equal(t, 1, rep.Pending, "kept restorable for MinAge")
			require.Empty(t, rep.Deleted)

			rep = w.sweep(later.Add(2*time.Hour), false)
			require.Len(t, rep.Deleted, 1)
			require.True(t, strings.HasPrefix(rep.Deleted[0], "dlq/geom/gc-trash/"), rep.Deleted[0])
			cKey, err := w.off.KeyFor(c.Geometry.OffloadURI)
			require.NoError(t, err)
			require.Equal(t, []string{cKey}, w.keys(), "only evt-c's blob is left")
			_, err = c.Restore(context.Background(), w.off)
			require.NoError(t, err)
		})
	}
}

// TestSweepKeepsYoungBlobs: a blob written for an envelope not yet
// published has no reference, and survives while younger than MinAge.
func TestSweepKeepsYoungBlobs(t *testing.T) {
	for _, st := range gcStores() {
		t.Run(st.name, func(t *testing.T) {
			w := newGCWorld(t, st.open)
			env := w.build("evt-unpublished", geomShared)
			rep := w.sweep(time.Now(), false)
			require.Equal(t, 1, rep.Young)
			require.Empty(t, rep.Quarantined)
			require.True(t, w.exists(env.Geometry.OffloadURI))
			w.publish(env)
			rep = w.sweep(time.Now().Add(3*time.Hour), false)
			require.Equal(t, 1, rep.Referenced)
			require.True(t, w.exists(env.Geometry.OffloadURI))
		})
	}
}

// TestSweepDryRun: a dry run reports what a sweep would do and changes
// nothing.
func TestSweepDryRun(t *testing.T) {
	for _, st := range gcStores() {
		t.Run(st.name, func(t *testing.T) {
			w := newGCWorld(t, st.open)
			env := w.build("evt-orphan", geomShared)
			before := w.keys()
			later := time.Now().Add(2 * time.Hour)
			rep := w.sweep(later, true)
			require.True(t, rep.DryRun)
			require.Len(t, rep.Quarantined, 1)
			require.Equal(t, before, w.keys())
			require.True(t, w.exists(env.Geometry.OffloadURI))

			w.sweep(later, false) // quarantine for real
			rep = w.sweep(later.Add(2*time.Hour), true)
			require.Len(t, rep.Deleted, 1)
			require.Len(t, w.keys(), 1, "the quarantined copy is still there")
		})
	}
}

// TestSweepRestoresDeduplicatedBlob reproduces the race every
// content-addressed collector has: an envelope is built while its blob is
// old and unreferenced (the offloader deduplicates, writing nothing), the
// sweep quarantines the blob, and the envelope is published afterwards.
// The next sweep sees the reference and restores the blob.
func TestSweepRestoresDeduplicatedBlob(t *testing.T) {
	for _, st := range gcStores() {
		t.Run(st.name, func(t *testing.T) {
			w := newGCWorld(t, st.open)
			w.build("evt-old", geomShared) // its record was purged long ago
			late := w.build("evt-late", geomShared)
			later := time.Now().Add(2 * time.Hour)
			rep := w.sweep(later, false) // evt-late not yet published
			require.Len(t, rep.Quarantined, 1)
			_, err := late.Restore(context.Background(), w.off)
			require.ErrorIs(t, err, offload.ErrNotFound, "until the next sweep the blob is unreadable")

			w.publish(late)
			rep = w.sweep(later.Add(10*time.Minute), false)
			require.Len(t, rep.Restored, 1)
			got, err := late.Restore(context.Background(), w.off)
			require.NoError(t, err)
			require.Contains(t, string(got), "evt-late")
			require.Len(t, w.keys(), 1, "the quarantined copy is gone")

			rep = w.sweep(later.Add(5*time.Hour), false)
			require.Empty(t, rep.Deleted)
			require.Equal(t, 1, rep.Referenced)
		})
	}
}
