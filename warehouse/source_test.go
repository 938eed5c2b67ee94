package warehouse

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSyncSourcePointer: SourcePointer chooses the member the source_uri
// and source_prefix columns read, as list and stats --source-pointer; it
// is part of the dataset's selection; the default pointer is the default.
func TestSyncSourcePointer(t *testing.T) {
	ctx := context.Background()
	s := filled(t, 30)

	dir := t.TempDir()
	_, err := Sync(ctx, s, dir, &SyncOptions{StoreID: "memory://test", Options: Options{SourcePointer: "/event_id"}})
	require.NoError(t, err)
	rows, _ := dataset(t, dir)
	require.Len(t, rows, 30)
	for _, r := range rows {
		require.Equal(t, r.EventID, r.SourceURI, "the source is the event's value at the pointer")
		require.Equal(t, SourcePrefix(r.EventID, 1), r.SourcePrefix)
	}
	_, err = Sync(ctx, s, dir, &SyncOptions{StoreID: "memory://test"})
	require.ErrorIs(t, err, ErrSelectionChanged, "another pointer is another selection")
	require.ErrorContains(t, err, `source_pointer "/event_id", this sync unset (the default)`, "the error names what differs")
	require.NotContains(t, err.Error(), "prefix_depth", "and only what differs")

	def := t.TempDir()
	_, err = Sync(ctx, s, def, &SyncOptions{StoreID: "memory://test"})
	require.NoError(t, err)
	rows, _ = dataset(t, def)
	withURI := 0
	for _, r := range rows {
		require.NotEqual(t, r.EventID, r.SourceURI)
		if r.SourceURI != "" {
			withURI++
		}
	}
	require.Positive(t, withURI, "the default reads source_uri")
	_, err = Sync(ctx, s, def, &SyncOptions{StoreID: "memory://test", Options: Options{SourcePointer: "/source_uri"}})
	require.NoError(t, err, "the default pointer spelled out is the same selection")

	_, err = Sync(ctx, s, t.TempDir(), &SyncOptions{StoreID: "memory://test", Options: Options{SourcePointer: "event_id"}})
	require.ErrorIs(t, err, ErrInvalidOptions)
}
