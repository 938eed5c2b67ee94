package stores

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/memory"
)

// memStore is a Store without Lister or Purger.
type memStore struct{ *broker.Store }

func (memStore) Close() error { return nil }

// TestScanFallback proves that a store that cannot list is read by
// leasing and releasing: every pending record is seen once, and all are
// fetchable again at once afterwards.
func TestScanFallback(t *testing.T) {
	ctx := context.Background()
	s := memStore{memory.New(nil)}
	for range 250 {
		require.NoError(t, s.Publish(ctx, "d", &broker.Message{Body: []byte("x")}))
	}
	seen := map[string]bool{}
	require.NoError(t, Scan(ctx, s, "d", broker.Filter{}, true, func(e Entry) error {
		require.False(t, seen[e.Record.ID])
		seen[e.Record.ID] = true
		require.Equal(t, StatusPending, e.Status)
		return nil
	}))
	require.Len(t, seen, 250)
	recs, err := s.Fetch(ctx, "d", broker.Filter{}, 1000)
	require.NoError(t, err)
	require.Len(t, recs, 250, "every lease was released")

	stop := errors.New("stop")
	require.NoError(t, Scan(ctx, s, "e", broker.Filter{}, false, func(Entry) error { return stop }), "an empty destination calls fn never")
	require.ErrorContains(t, Scan(ctx, s, "", broker.Filter{}, false, func(Entry) error { return nil }), "--dest")
}

func TestOpenErrors(t *testing.T) {
	ctx := context.Background()
	_, err := Open(ctx, "mongodb://h/x", Options{})
	require.ErrorIs(t, err, ErrUnknownScheme)
	_, err = Open(ctx, "dlq.db", Options{})
	require.ErrorIs(t, err, ErrUnknownScheme)
	_, _, err = OpenBlobs(ctx, "gs://bucket", BlobOptions{})
	require.ErrorIs(t, err, ErrUnknownScheme)
	_, err = Open(ctx, "sqlite://"+t.TempDir()+"/missing.db", Options{})
	require.ErrorContains(t, err, "no such file")
	require.Contains(t, Schemes(), "sqlite")
	require.Contains(t, Schemes(), "postgres")
	require.Equal(t, "postgres://u:xxxxx@h/db", Redact("postgres://u:secret@h/db"))
	require.Equal(t, "sqlite://./a.db", Redact("sqlite://./a.db"))
}

// TestScanByID: pages of scanPage rows after the last id, until a short
// page; an error from fn or from list stops the scan.
func TestScanByID(t *testing.T) {
	const total = 2*scanPage + 7
	var calls []int64
	list := func(after int64, limit int) ([]int64, error) {
		calls = append(calls, after)
		var ids []int64
		for id := after + 1; id <= total && len(ids) < limit; id++ {
			ids = append(ids, id)
		}
		return ids, nil
	}
	entry := func(id int64) Entry {
		return Entry{Record: &broker.Record{ID: strconv.FormatInt(id, 10)}}
	}
	var seen int
	require.NoError(t, scanByID(list, entry, func(Entry) error { seen++; return nil }))
	require.Equal(t, total, seen)
	require.Equal(t, []int64{0, scanPage, 2 * scanPage}, calls)

	calls, seen = nil, 0
	stop := errors.New("stop")
	err := scanByID(list, entry, func(Entry) error {
		if seen++; seen == 3 {
			return stop
		}
		return nil
	})
	require.ErrorIs(t, err, stop)
	require.Equal(t, []int64{0}, calls)

	failed := errors.New("list failed")
	require.ErrorIs(t, scanByID(func(int64, int) ([]int64, error) { return nil, failed }, entry, func(Entry) error { return nil }), failed)
}

func TestDestinationsOf(t *testing.T) {
	require.Nil(t, destinationsOf([]string(nil), func(s string) string { return s }))
	require.Equal(t, []string{"a", "b", "c"}, destinationsOf([]string{"c", "a", "c", "b", "a"}, func(s string) string { return s }))
}
