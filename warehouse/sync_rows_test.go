package warehouse

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/memory"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/internal/corpus"
	"github.com/geodlq/geodlq/internal/dlqgen"
	"github.com/geodlq/geodlq/offload"
)

// bodyLister lists its store's records as a SQL store does: bodies only,
// no envelope decoded beforehand, so that a sync decodes every one; and
// the records in replayed, which the memory store would have forgotten,
// as replayed records with the time of their acknowledgement.
type bodyLister struct {
	s        *broker.Store
	replayed map[string]time.Time
}

func (l bodyLister) List(ctx context.Context, opts broker.ListOptions) (broker.Page, error) {
	p, err := l.s.List(ctx, opts)
	for i, e := range p.Entries {
		p.Entries[i] = l.entry(e)
	}
	return p, err
}

// entry is e as the lister lists it.
func (l bodyLister) entry(e broker.Entry) broker.Entry {
	if e.Record == nil {
		return e
	}
	e.Record = bodyOnly(e.Record)
	if at, ok := l.replayed[e.Record.ID]; ok {
		e.Status, e.ReplayedAt = broker.StatusReplayed, at
	}
	return e
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

// mixed is realistic with the rest of what a dead-letter store holds:
// records replayed after their repair (acknowledged: repair_status
// "replayed", replayed_at), repaired events that failed again
// (dlq-repaired, dlq-replay-of), the hostile corpus's forged envelopes
// (claimed sizes, tampered hashes, deep payloads, duplicate members,
// trailing bytes) and its hostile events as the Builder wraps them.
func mixed(t testing.TB, n, large int) (bodyLister, *offload.Offloader) {
	t.Helper()
	ctx := context.Background()
	s, off := realistic(t, n, large)
	p, err := s.List(ctx, broker.ListOptions{Destination: "spatial.events.poison.dlt", Limit: 25})
	require.NoError(t, err)
	require.Len(t, p.Entries, 25)
	src := bodyLister{s: s, replayed: map[string]time.Time{}}
	var recs []*broker.Record
	for i, e := range p.Entries {
		src.replayed[e.Record.ID] = time.Date(2026, 12, 1, 0, 0, i, 1234567, time.UTC)
		recs = append(recs, e.Record)
	}
	g, err := dlqgen.New(&dlqgen.Options{Seed: 7, Offloader: off})
	require.NoError(t, err)
	for i := range 10 {
		m, err := g.Message(ctx, i)
		require.NoError(t, err)
		if m.Headers == nil {
			m.Headers = map[string]string{}
		}
		m.Headers[broker.HeaderRepaired], m.Headers[broker.HeaderReplayOf] = "true", recs[i].ID
		require.NoError(t, s.Publish(ctx, "spatial.events.retry.dlt", m))
	}
	b, err := envelope.NewBuilder(&envelope.BuilderOptions{Offloader: off})
	require.NoError(t, err)
	for _, f := range corpus.Hostile() {
		if f.Large {
			continue
		}
		body := f.Generate(corpus.MinHostileSize).Data
		if f.Input == corpus.InputEvent {
			if _, body, err = b.Build(ctx, envelope.Input{Payload: body, Err: classify.InvalidGeometry(errors.New("hostile: " + f.Name))}); err != nil {
				continue // too large for an envelope: the Processor would say so
			}
		}
		require.NoError(t, s.Publish(ctx, "spatial.events.poison.dlt", &broker.Message{Body: body}), f.Name)
	}
	return src, off
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

// Every row a sync writes is the row the one-record path (Writer.Write,
// envelope.Decode) makes of the record: on a realistic corpus with every
// failure class, offloaded and large geometries, replayed and repaired
// records, hostile envelopes and bodies that are not envelopes, decoded
// from their bodies as a SQL store lists them, with and without payloads
// and blobs, in pages small and large. The guard of any faster sync
// (issue 23: the sync decodes with envelope.DecodeFast).
func TestSyncRowsMatchOneRecordPath(t *testing.T) {
	ctx := context.Background()
	src, off := mixed(t, 1500, 4)
	s := src.s
	total, envelopes := 0, 0
	require.NoError(t, s.ScanAll(ctx, broker.ListOptions{IncludeReplayed: true, Limit: broker.MaxListLimit}, func(e broker.Entry) error {
		e = src.entry(e)
		total++
		want, werr := envelopeOf(e)
		got, gerr := fastEnvelopeOf(e)
		require.Equal(t, werr == nil, gerr == nil, "record %s: %v / %v", e.Record.ID, werr, gerr)
		if werr != nil {
			require.Equal(t, werr.Error(), gerr.Error())
			return nil
		}
		envelopes++
		require.Equal(t, want, got, e.Record.ID)
		return nil
	}))
	require.Greater(t, total-envelopes, 3, "hostile records that are not envelopes")
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
			require.EqualValues(t, envelopes, res.Rows)
			require.EqualValues(t, total-envelopes, res.Skipped)
			rows, _ := dataset(t, dir)

			w, err := NewWriter(&bytes.Buffer{}, &tc.opts)
			require.NoError(t, err)
			var want []Row
			require.NoError(t, s.ScanAll(ctx, broker.ListOptions{IncludeReplayed: true, Limit: broker.MaxListLimit}, func(e broker.Entry) error {
				e = src.entry(e)
				env, err := envelopeOf(e)
				if err != nil {
					return nil
				}
				var row Row
				w.conv.row(ctx, &row, e, env, now)
				want = append(want, row)
				return nil
			}))
			byID := map[[2]string]Row{} // record ids are per destination
			for _, r := range throughParquet(t, want) {
				byID[[2]string{r.DLQDestination, r.RecordID}] = r
			}
			require.Len(t, byID, len(want))
			require.Len(t, rows, len(byID))
			statuses, classes, repair := map[string]bool{}, map[string]bool{}, map[string]bool{}
			for _, r := range rows {
				require.Equal(t, byID[[2]string{r.DLQDestination, r.RecordID}], r, r.RecordID)
				statuses[r.GeometryStatus] = true
				classes[r.FailureClass] = true
				repair[r.RepairStatus] = true
			}
			require.Len(t, classes, 5, "every failure class: %v", classes)
			require.True(t, repair["replayed"] && repair["pending"], "%v", repair)
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

// FuzzSyncRow feeds arbitrary bytes, as the body of a listed record, to
// the sync's decoder (envelope.DecodeFast) and to the one-record path's
// (envelope.Decode), and fails on any difference: error or not, the
// error, the envelope, or the row made of it.
func FuzzSyncRow(f *testing.F) {
	ctx := context.Background()
	src, off := mixed(f, 60, 0)
	require.NoError(f, src.s.ScanAll(ctx, broker.ListOptions{IncludeReplayed: true, Limit: broker.MaxListLimit}, func(e broker.Entry) error {
		if len(e.Record.Message.Body) <= 64<<10 {
			f.Add(e.Record.Message.Body)
		}
		return nil
	}))
	conv := converter{o: (&Options{Fetcher: off, WithPayload: true}).rowOptions()}
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, body []byte) {
		e := broker.Entry{Record: &broker.Record{ID: "1", Destination: "d", Message: &broker.Message{Body: body}}, Status: broker.StatusPending}
		want, werr := envelopeOf(e)
		got, gerr := fastEnvelopeOf(e)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("reference error %v, fast error %v", werr, gerr)
		}
		if werr != nil {
			require.Equal(t, werr.Error(), gerr.Error())
			require.ErrorIs(t, gerr, ErrNotEnvelope)
			return
		}
		require.Equal(t, want, got)
		var wr, gr Row
		conv.row(ctx, &wr, e, want, now)
		conv.row(ctx, &gr, e, got, now)
		require.Equal(t, wr, gr)
	})
}
