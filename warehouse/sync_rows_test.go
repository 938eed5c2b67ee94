package warehouse

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/memory"
	"github.com/geodlq/geodlq/internal/dlqgen"
	"github.com/geodlq/geodlq/offload"
)

// bodyLister lists its store's records as a SQL store does: bodies only,
// no envelope decoded beforehand, so that a sync decodes every one.
type bodyLister struct{ s *broker.Store }

func (l bodyLister) List(ctx context.Context, opts broker.ListOptions) (broker.Page, error) {
	p, err := l.s.List(ctx, opts)
	for i, e := range p.Entries {
		if e.Record != nil {
			p.Entries[i].Record = bodyOnly(e.Record)
		}
	}
	return p, err
}

// bodyOnly returns a copy of r without its decoded envelope.
func bodyOnly(r *broker.Record) *broker.Record {
	c := *r
	c.Envelope = nil
	if r.Message != nil {
		m := *r.Message
		m.Envelope = nil
		c.Message = &m
	}
	return &c
}

// realistic fills a store with n dlqgen dead letters (every failure
// class, geometries of 4 to 20,000 vertices, those over 4 KiB offloaded to
// the returned offloader's blobs), large ones of about 300 KB each, and
// records that are not envelopes.
func realistic(t testing.TB, n, large int) (*broker.Store, *offload.Offloader) {
	t.Helper()
	ctx := context.Background()
	off, err := offload.New(offload.NewMemStore(), &offload.Options{Threshold: 4096})
	require.NoError(t, err)
	g, err := dlqgen.New(&dlqgen.Options{Offloader: off})
	require.NoError(t, err)
	s := memory.New(nil)
	require.NoError(t, dlqgen.Fill(ctx, s, "spatial.events.poison.dlt", g, n, nil))
	gi, err := dlqgen.New(nil) // large records with their geometry inline
	require.NoError(t, err)
	for i := range large {
		gen := g
		if i%2 == 0 {
			gen = gi
		}
		m, err := gen.Large(ctx, i, 300_000)
		require.NoError(t, err)
		require.NoError(t, s.Publish(ctx, "spatial.events.poison.dlt", m))
	}
	for _, body := range []string{`{"not":"an envelope"}`, `{"schema_version":"dlq.v1"}`, "\x00binary"} {
		require.NoError(t, s.Publish(ctx, "spatial.events.retry.dlt", &broker.Message{Body: []byte(body)}))
	}
	return s, off
}

// dataFiles returns the dataset's data files by path.
func dataFiles(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == MetaDir {
			return filepath.SkipDir
		}
		if !d.IsDir() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(dir, p)
			out[filepath.ToSlash(rel)] = b
		}
		return nil
	}))
	return out
}

// Every row a sync writes is the row the one-record path (Writer.Write)
// makes of the record: on a realistic corpus with every failure class,
// offloaded and large geometries and bodies that are not envelopes,
// decoded from their bodies as a SQL store lists them, with and without
// payloads and blobs, in pages small and large. The guard of any faster
// sync (issue 23: a partial decode, a pipeline).
func TestSyncRowsMatchOneRecordPath(t *testing.T) {
	ctx := context.Background()
	s, off := realistic(t, 1500, 4)
	src := bodyLister{s}
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		opts Options
		page int
	}{
		{name: "default", opts: Options{}},
		{name: "blobs", opts: Options{Fetcher: off}, page: 97},
		{name: "payloads", opts: Options{Fetcher: off, WithPayload: true, SourcePointer: "/properties/provider"}},
		{name: "payloads without blobs", opts: Options{WithPayload: true}, page: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.Now = func() time.Time { return now }
			dir := t.TempDir()
			res, err := Sync(ctx, src, dir, &SyncOptions{Options: tc.opts, PageSize: tc.page})
			require.NoError(t, err)
			require.EqualValues(t, 1504, res.Rows)
			require.EqualValues(t, 3, res.Skipped)
			rows, _ := dataset(t, dir)

			w, err := NewWriter(&bytes.Buffer{}, &tc.opts)
			require.NoError(t, err)
			var want []Row
			require.NoError(t, s.ScanAll(ctx, broker.ListOptions{IncludeReplayed: true, Limit: broker.MaxListLimit}, func(e broker.Entry) error {
				e.Record = bodyOnly(e.Record)
				env, err := envelopeOf(e)
				if err != nil {
					return nil
				}
				var row Row
				w.conv.row(ctx, &row, e, env, now)
				want = append(want, row)
				return nil
			}))
			byID := map[string]Row{}
			for _, r := range throughParquet(t, want) {
				byID[r.RecordID] = r
			}
			require.Len(t, rows, len(byID))
			statuses, classes := map[string]bool{}, map[string]bool{}
			for _, r := range rows {
				require.Equal(t, byID[r.RecordID], r, r.RecordID)
				statuses[r.GeometryStatus] = true
				classes[r.FailureClass] = true
			}
			require.Len(t, classes, 5, "every failure class: %v", classes)
			if tc.opts.Fetcher != nil {
				require.True(t, statuses[GeometryOK] && statuses[GeometryOutsideCRS], "%v", statuses)
			} else {
				require.True(t, statuses[GeometryNotFetched], "%v", statuses)
			}
		})
	}
}

// throughParquet returns rows as a Parquet file holds them (times in
// microseconds, UTC).
func throughParquet(t *testing.T, rows []Row) []Row {
	t.Helper()
	var b bytes.Buffer
	w := parquet.NewGenericWriter[Row](&b)
	_, err := w.Write(rows)
	require.NoError(t, err)
	require.NoError(t, w.Close())
	rs, err := parquet.Read[Row](bytes.NewReader(b.Bytes()), int64(b.Len()))
	require.NoError(t, err)
	return rs
}
