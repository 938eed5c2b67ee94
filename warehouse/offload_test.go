package warehouse

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker/memory"
	"github.com/geodlq/geodlq/offload"
	"github.com/geodlq/geodlq/warehouse/internal/fixture"
)

// Offloaded geometries get their bounding box and payload from the blob
// store, verified; without one, or with a blob that was altered, the row
// says so and the sync goes on.
func TestSyncOffloadedGeometries(t *testing.T) {
	ctx := context.Background()
	blobs := offload.NewMemStore()
	off, err := offload.New(blobs, &offload.Options{Threshold: 64})
	require.NoError(t, err)
	s := memory.New(nil)
	require.NoError(t, fixture.Fill(ctx, s, "vector-dlq", 12, &fixture.Options{Offloader: off}))

	byStatus := func(rows []Row) (geom, payload map[string]int, offloaded int) {
		geom, payload = map[string]int{}, map[string]int{}
		for _, r := range rows {
			geom[r.GeometryStatus]++
			payload[r.PayloadStatus]++
			if r.GeometryOffloaded {
				offloaded++
			}
		}
		return geom, payload, offloaded
	}

	// With the blobs: every parseable geometry has its box, every payload
	// is restored byte for byte.
	dir := t.TempDir()
	_, err = Sync(ctx, s, dir, &SyncOptions{Options: Options{WithPayload: true, Fetcher: off}})
	require.NoError(t, err)
	rows, _ := dataset(t, dir)
	geom, payload, offloaded := byStatus(rows)
	require.Positive(t, offloaded)
	require.Equal(t, map[string]int{GeometryOK: 10, GeometryUnparseable: 2}, geom)
	require.Equal(t, map[string]int{PayloadOK: 12}, payload)
	for _, r := range rows {
		require.EqualValues(t, r.PayloadSize, len(r.Payload))
		if r.GeometryStatus == GeometryOK {
			require.NotNil(t, r.BBox)
		}
	}

	// Without them: no box for offloaded geometries, no offloaded payloads.
	dir = t.TempDir()
	_, err = Sync(ctx, s, dir, &SyncOptions{Options: Options{WithPayload: true}})
	require.NoError(t, err)
	rows, _ = dataset(t, dir)
	geom, payload, _ = byStatus(rows)
	require.Equal(t, offloaded, geom[GeometryNotFetched])
	require.Equal(t, offloaded, payload[PayloadNotFetched])

	// An altered blob is refused, not exported.
	for _, k := range blobs.Keys() {
		require.NoError(t, blobs.Put(ctx, k, strings.NewReader(`{"type":"Point","coordinates":[0,0]}`), 36))
	}
	dir = t.TempDir()
	_, err = Sync(ctx, s, dir, &SyncOptions{Options: Options{WithPayload: true, Fetcher: off}})
	require.NoError(t, err)
	rows, _ = dataset(t, dir)
	geom, payload, _ = byStatus(rows)
	require.Equal(t, offloaded, payload[PayloadIntegrity]+payload[PayloadFetchFailed], "%v", payload)
	require.Equal(t, offloaded, geom[GeometryFetchFailed], "%v", geom)
	for _, r := range rows {
		if r.GeometryOffloaded {
			require.Nil(t, r.Payload)
			require.Equal(t, GeometryFetchFailed, r.GeometryStatus)
		}
	}
}
