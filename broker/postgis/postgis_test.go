package postgis_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/paulmach/orb"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/brokertest"
	"github.com/geodlq/geodlq/broker/memory"
	"github.com/geodlq/geodlq/broker/postgis"
	"github.com/geodlq/geodlq/broker/postgis/internal/pgtest"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/internal/testenv"
	"github.com/geodlq/geodlq/offload"
)

var src = &envelope.Source{System: "kafka", Topic: "spatial.events"}

// invalid returns an invalid_geometry error located at loc (nil: no
// location).
func invalid(loc *orb.Point) error {
	reason := "Self-intersection"
	if loc != nil {
		reason += fmt.Sprintf("[%v %v]", loc[0], loc[1])
	}
	return &classify.Error{Class: classify.ClassInvalidGeometry, Stage: classify.StageTopologyValidation, Err: errors.New(reason),
		Geometry: &classify.GeometryDetail{Reason: reason, Kind: classify.KindSelfIntersection, Location: loc}}
}

// message builds the dead-letter message of an event.
func message(t *testing.T, payload, key string, err error, at time.Time) *broker.Message {
	t.Helper()
	return brokertest.Message(t, brokertest.Input{Payload: []byte(payload), IdempotencyKey: key, Err: err, At: at, Source: src})
}

func bowtie(t *testing.T, key string) *broker.Message {
	return message(t, `{"event_id":"evt-`+key+`","crs":"EPSG:4326","geometry":{"type":"Polygon","coordinates":[[[0,0],[1,1],[1,0],[0,1],[0,0]]]}}`,
		key, invalid(&orb.Point{0.5, 0.5}), time.Time{})
}

func ids(recs []*broker.Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r.ID
	}
	return out
}

func TestNewValidatesArguments(t *testing.T) {
	ctx := context.Background()
	_, err := postgis.New(ctx, nil, nil)
	require.ErrorIs(t, err, broker.ErrInvalidArgument, "a pool is required")
	pool := &pgxpool.Pool{} // never used: New does no I/O without Create
	for _, o := range []postgis.Options{
		{Schema: "Geodlq"}, {Schema: "1abc"}, {Schema: `a"b`}, {Table: "dead-letters"},
		{Table: "t_" + string(bytes.Repeat([]byte("x"), 40))},
	} {
		_, err := postgis.New(ctx, pool, &o)
		require.ErrorIs(t, err, broker.ErrInvalidArgument, "%+v", o)
	}
	s, err := postgis.New(ctx, pool, nil)
	require.NoError(t, err)
	require.Equal(t, "postgis", s.Name())
	require.Equal(t, `"geodlq"."dead_letters"`, postgis.Table(s), "defaults")
	require.Equal(t, 64<<20, s.MaxMessageBytes("any"), "64 MiB by default")
	var p *pgxpool.Pool
	require.True(t, s.As(&p))
	require.Same(t, pool, p)
	var other *int
	require.False(t, s.As(&other))
	require.Empty(t, postgis.Table(nil))
	require.Empty(t, postgis.Table(memory.New(nil)), "not a PostGIS store")
	require.NoError(t, s.Close(), "closing the store leaves the caller's pool alone")

	s, err = postgis.New(ctx, pool, &postgis.Options{Schema: "s1", Table: "t1", StoreOptions: broker.StoreOptions{MaxMessageBytes: 1000}})
	require.NoError(t, err)
	require.Equal(t, `"s1"."t1"`, postgis.Table(s))
	require.Equal(t, 1000, s.MaxMessageBytes("x"))
}

// TestMigrate: migrations are versioned, idempotent and safe to run
// concurrently; the table has a real geometry column and GiST indexes.
func TestMigrate(t *testing.T) {
	ctx := context.Background()
	schema := pgtest.Schema(t)
	pool := pgtest.NewPool(t, 8)
	s, err := postgis.New(ctx, pool, &postgis.Options{Schema: schema})
	require.NoError(t, err)
	v, err := postgis.VersionForTest(ctx, s)
	require.NoError(t, err)
	require.Zero(t, v, "nothing applied yet")

	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() { _, errs[i] = postgis.New(ctx, pool, &postgis.Options{Schema: schema, Create: true}) })
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err, "concurrent first migrations serialise")
	}
	_, err = postgis.New(ctx, pool, &postgis.Options{Schema: schema, Create: true})
	require.NoError(t, err, "migrating again is a no-op")
	v, err = postgis.VersionForTest(ctx, s)
	require.NoError(t, err)
	ms := postgis.Migrations()
	require.Equal(t, len(ms), v)
	for i, m := range ms {
		require.Equal(t, i+1, m.Version)
		require.NotEmpty(t, m.Name)
		require.NotEmpty(t, m.SQL)
	}
	ms[0].SQL = "changed"
	require.NotEqual(t, "changed", postgis.Migrations()[0].SQL, "Migrations returns a copy")
	var applied int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM "`+schema+`".dead_letters_migrations`).Scan(&applied))
	require.Equal(t, len(ms), applied, "each step recorded once")

	types := map[string]string{}
	rows, err := pool.Query(ctx, `SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute
		WHERE attrelid = to_regclass($1) AND attname IN ('geom', 'location', 'body', 'envelope', 'headers')`, postgis.Table(s))
	require.NoError(t, err)
	for rows.Next() {
		var n, ty string
		require.NoError(t, rows.Scan(&n, &ty))
		types[n] = ty
	}
	require.NoError(t, rows.Err())
	require.Equal(t, map[string]string{"geom": "geometry", "location": "geometry(Point)", "body": "bytea", "envelope": "jsonb", "headers": "jsonb"}, types)
	var gist int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_indexes WHERE schemaname = $1 AND tablename = 'dead_letters'
		AND indexdef LIKE '%USING gist%'`, schema).Scan(&gist))
	require.Equal(t, 2, gist, "GiST on geom and ST_SetSRID(location, 0)")
	var purgeIdx int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_indexes WHERE schemaname = $1 AND tablename = 'dead_letters'
		AND indexname IN ('dead_letters_offload_uri', 'dead_letters_raw_offload_uri', 'dead_letters_opaque')`, schema).Scan(&purgeIdx))
	require.Equal(t, 3, purgeIdx, "migration 2: the reference check's indexes")

	// Another table in the same schema has its own version history.
	other, err := postgis.New(ctx, pool, &postgis.Options{Schema: schema, Table: "other_dlq", Create: true})
	require.NoError(t, err)
	v, err = postgis.VersionForTest(ctx, other)
	require.NoError(t, err)
	require.Equal(t, len(ms), v)
	require.NoError(t, other.Publish(ctx, "d", bowtie(t, "idem:migrate")))
	require.Zero(t, count(t, s, "true"), "tables are separate")
}

// TestNoStoredContext: the store keeps no context of New's: cancelling it
// afterwards changes nothing (pgx would abandon every query on it).
func TestNoStoredContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	s, err := postgis.New(ctx, pgtest.NewPool(t, 2), &postgis.Options{Schema: pgtest.Schema(t), Create: true})
	require.NoError(t, err)
	cancel()
	bg := context.Background()
	require.NoError(t, s.Publish(bg, "d", bowtie(t, "idem:ctx")))
	recs, err := s.Fetch(bg, "d", broker.Filter{}, 10)
	require.NoError(t, err)
	require.Len(t, recs, 1)
	require.NoError(t, s.Ack(bg, recs[0]))
}

// TestSkipLocked: Fetch skips rows another transaction holds instead of
// waiting for them, and several workers fetching at once never hold the
// same record.
func TestSkipLocked(t *testing.T) {
	ctx := context.Background()
	schema := pgtest.Schema(t)
	s := newStore(t, &postgis.Options{Schema: schema, StoreOptions: broker.StoreOptions{LeaseTTL: time.Minute}})
	const d = "skiplocked"

	t.Run("rows locked elsewhere are skipped, not waited for", func(t *testing.T) {
		for i := range 10 {
			require.NoError(t, s.Publish(ctx, d, bowtie(t, "idem:lock:"+strconv.Itoa(i))))
		}
		tx, err := poolOf(t, s).Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		rows, err := tx.Query(ctx, `SELECT id FROM `+postgis.Table(s)+` WHERE destination = $1 ORDER BY id LIMIT 3 FOR UPDATE`, d)
		require.NoError(t, err)
		var locked []string
		for rows.Next() {
			var id int64
			require.NoError(t, rows.Scan(&id))
			locked = append(locked, strconv.FormatInt(id, 10))
		}
		require.NoError(t, rows.Err())
		require.Len(t, locked, 3)

		fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		start := time.Now()
		got, err := s.Fetch(fctx, d, broker.Filter{}, 10)
		require.NoError(t, err, "Fetch does not block on locked rows")
		require.Less(t, time.Since(start), 3*time.Second)
		require.Len(t, got, 7)
		for _, id := range ids(got) {
			require.NotContains(t, locked, id)
		}
		require.NoError(t, tx.Rollback(ctx))
		rest, err := s.Fetch(ctx, d, broker.Filter{}, 10)
		require.NoError(t, err)
		require.Equal(t, locked, ids(rest), "the rows come back once the lock is gone")
		for _, r := range append(got, rest...) {
			require.NoError(t, s.Ack(ctx, r))
		}
	})

	t.Run("workers never share a record", func(t *testing.T) {
		const n, workers = 600, 6
		msgs := make([]*broker.Message, n)
		for i := range msgs {
			msgs[i] = bowtie(t, "idem:workers:"+strconv.Itoa(i))
		}
		publishAll(t, s, d, msgs)
		var (
			mu     sync.Mutex
			holder = map[string]int{}
			acked  = map[string]int{}
			per    = make([]int, workers)
			wg     sync.WaitGroup
		)
		for w := range workers {
			st, err := postgis.New(ctx, pgtest.NewPool(t, 2), &postgis.Options{Schema: schema, StoreOptions: broker.StoreOptions{LeaseTTL: time.Minute}})
			require.NoError(t, err)
			wg.Go(func() {
				for {
					recs, err := st.Fetch(ctx, d, broker.Filter{}, 5)
					if err != nil {
						t.Errorf("worker %d: Fetch: %v", w, err)
						return
					}
					if len(recs) == 0 {
						return
					}
					mu.Lock()
					for _, r := range recs {
						if h, ok := holder[r.ID]; ok {
							t.Errorf("record %s fetched by worker %d while worker %d holds it", r.ID, w, h)
						}
						holder[r.ID] = w
					}
					per[w] += len(recs)
					mu.Unlock()
					time.Sleep(time.Millisecond)
					for _, r := range recs {
						mu.Lock()
						delete(holder, r.ID)
						mu.Unlock()
						if err := st.Ack(ctx, r); err != nil {
							t.Errorf("worker %d: Ack %s: %v", w, r.ID, err)
							return
						}
						mu.Lock()
						acked[r.ID]++
						mu.Unlock()
					}
				}
			})
		}
		wg.Wait()
		require.Len(t, acked, n, "every record acknowledged")
		for id, c := range acked {
			require.Equal(t, 1, c, "record %s", id)
		}
		busy := 0
		for _, c := range per {
			if c > 0 {
				busy++
			}
		}
		require.Greater(t, busy, 1, "the work was shared: %v", per)
	})
}

// TestLeases: leases are timestamps on the database clock; an expired
// lease makes the record fetchable again, and its old holder has lost it.
func TestLeases(t *testing.T) {
	ctx := context.Background()
	const ttl = 400 * time.Millisecond
	s := newStore(t, &postgis.Options{StoreOptions: broker.StoreOptions{LeaseTTL: ttl}})
	const d = "leases"
	require.NoError(t, s.Publish(ctx, d, bowtie(t, "idem:lease:1")))
	first, err := s.Fetch(ctx, d, broker.Filter{}, 10)
	require.NoError(t, err)
	require.Len(t, first, 1)
	require.Equal(t, 1, first[0].Deliveries)
	require.Equal(t, 1, first[0].Message.DeliveryAttempt)

	var left time.Duration
	require.NoError(t, poolOf(t, s).QueryRow(ctx, `SELECT EXTRACT(EPOCH FROM lease_until - now()) * 1e9 FROM `+postgis.Table(s)+` WHERE id = $1`,
		mustID(t, first[0])).Scan(&left))
	require.True(t, left > 0 && left <= ttl, "lease_until = now() + LeaseTTL on the database clock (%v left)", left)

	none, err := s.Fetch(ctx, d, broker.Filter{}, 10)
	require.NoError(t, err)
	require.Empty(t, none, "a live lease hides the record")
	time.Sleep(ttl + 200*time.Millisecond)
	again, err := s.Fetch(ctx, d, broker.Filter{}, 10)
	require.NoError(t, err)
	require.Len(t, again, 1, "the expired lease makes it fetchable")
	require.Equal(t, first[0].ID, again[0].ID)
	require.Equal(t, 2, again[0].Deliveries)
	require.NotEqual(t, first[0].Lease, again[0].Lease, "a new lease token fences the old holder")
	require.ErrorIs(t, s.Ack(ctx, first[0]), broker.ErrLeaseLost)
	require.ErrorIs(t, s.Release(ctx, first[0]), broker.ErrLeaseLost)
	require.NoError(t, s.Ack(ctx, again[0]))
	require.ErrorIs(t, s.Ack(ctx, again[0]), broker.ErrLeaseLost, "acking twice")
	require.ErrorIs(t, s.Ack(ctx, &broker.Record{ID: "x", Destination: d, Lease: "y"}), broker.ErrLeaseLost, "a record not from this store")

	// An expired lease nobody took over still acknowledges.
	require.NoError(t, s.Publish(ctx, d, bowtie(t, "idem:lease:2")))
	late, err := s.Fetch(ctx, d, broker.Filter{}, 10)
	require.NoError(t, err)
	require.Len(t, late, 1)
	time.Sleep(ttl + 200*time.Millisecond)
	require.NoError(t, s.Ack(ctx, late[0]))
	require.Equal(t, 2, count(t, s, "status = 'replayed' AND replayed_at IS NOT NULL AND lease_token IS NULL"))
}

func mustID(t *testing.T, r *broker.Record) int64 {
	t.Helper()
	id, err := strconv.ParseInt(r.ID, 10, 64)
	require.NoError(t, err)
	return id
}

// TestDuplicatePublish: a second write of an idempotency key to the same
// destination, while the first record is pending or leased, is a no-op
// that succeeds; once replayed, the key is free again.
func TestDuplicatePublish(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, &postgis.Options{StoreOptions: broker.StoreOptions{LeaseTTL: time.Minute}})
	const d = "dups"
	m := bowtie(t, "idem:dup:1")
	first, err := postgis.WriteForTest(ctx, s, d, m)
	require.NoError(t, err)
	require.False(t, first.Duplicate)
	again, err := postgis.WriteForTest(ctx, s, d, m)
	require.NoError(t, err)
	require.Equal(t, first.ID, again.ID)
	require.True(t, again.Duplicate, "the same write retried after a timeout")

	// The processor rebuilds the envelope when the source redelivers after
	// a failed write: later dead_lettered_at, same key. Still a duplicate.
	rebuilt := message(t, `{"event_id":"evt-x","geometry":{"type":"Point","coordinates":[1,2]}}`, "idem:dup:1",
		invalid(&orb.Point{1, 2}), time.Now())
	require.NotEqual(t, m.Body, rebuilt.Body)
	res, err := postgis.WriteForTest(ctx, s, d, rebuilt)
	require.NoError(t, err)
	require.True(t, res.Duplicate)
	require.Equal(t, 1, count(t, s, "destination = $1", d))
	require.Equal(t, 1, count(t, s, "destination = $1 AND duplicates = 2", d), "both duplicates are counted on the row")
	list, err := s.List(ctx, broker.ListOptions{Destination: d})
	require.NoError(t, err)
	require.Len(t, list.Entries, 1)
	require.Equal(t, m.Body, list.Entries[0].Record.Message.Body, "the first write is kept")

	// Another destination is another store.
	res, err = postgis.WriteForTest(ctx, s, d+".other", m)
	require.NoError(t, err)
	require.False(t, res.Duplicate)

	// Concurrent writers of one new key: one row.
	var wg sync.WaitGroup
	var mu sync.Mutex
	var inserted int
	for range 8 {
		wg.Go(func() {
			r, err := postgis.WriteForTest(ctx, s, d, bowtie(t, "idem:dup:race"))
			if err != nil {
				t.Errorf("Write: %v", err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if !r.Duplicate {
				inserted++
			}
		})
	}
	wg.Wait()
	require.Equal(t, 1, inserted)
	require.Equal(t, 1, count(t, s, "destination = $1 AND idempotency_key = 'idem:dup:race'", d))

	// Through the portable store too: Publish succeeds, one row.
	require.NoError(t, s.Publish(ctx, d, m))
	require.Equal(t, 1, count(t, s, "destination = $1 AND duplicates = 3", d))

	// Bodies that are not envelopes are keyed by their header, if any.
	raw := &broker.Message{Body: []byte("not an envelope"), Headers: map[string]string{broker.HeaderIdempotencyKey: "idem:dup:raw"}}
	r1, err := postgis.WriteForTest(ctx, s, d, raw)
	require.NoError(t, err)
	r2, err := postgis.WriteForTest(ctx, s, d, raw)
	require.NoError(t, err)
	require.Equal(t, r1.ID, r2.ID)
	require.True(t, r2.Duplicate)
	bare := &broker.Message{Body: []byte("no key")}
	b1, err := postgis.WriteForTest(ctx, s, d, bare)
	require.NoError(t, err)
	b2, err := postgis.WriteForTest(ctx, s, d, bare)
	require.NoError(t, err)
	require.NotEqual(t, b1.ID, b2.ID, "without a key nothing is a duplicate")

	// Replayed: the key is free, a new failure is a new record.
	recs, err := s.Fetch(ctx, d, broker.Filter{EventIDs: []string{"evt-idem:dup:1"}}, 10)
	require.NoError(t, err)
	require.Len(t, recs, 1)
	require.NoError(t, s.Ack(ctx, recs[0]))
	after, err := postgis.WriteForTest(ctx, s, d, m)
	require.NoError(t, err)
	require.False(t, after.Duplicate, "a replayed record frees its key")
	require.NotEqual(t, first.ID, after.ID)

	// A duplicate during the lease: the event failed again (perhaps as the
	// replayed copy), so Ack must not mark the record replayed.
	recs, err = s.Fetch(ctx, d, broker.Filter{EventIDs: []string{"evt-idem:dup:1"}}, 10)
	require.NoError(t, err)
	require.Len(t, recs, 1)
	res, err = postgis.WriteForTest(ctx, s, d, m)
	require.NoError(t, err)
	require.True(t, res.Duplicate)
	err = s.Ack(ctx, recs[0])
	require.ErrorIs(t, err, postgis.ErrDeadLetteredAgain)
	require.ErrorIs(t, err, broker.ErrLeaseLost)
	recs2, err := s.Fetch(ctx, d, broker.Filter{EventIDs: []string{"evt-idem:dup:1"}}, 10)
	require.NoError(t, err)
	require.Equal(t, ids(recs), ids(recs2), "the record is pending again")
	require.NoError(t, s.Ack(ctx, recs2[0]))
}

// TestGeometryColumns: what geom, geom_status, the SRID and location hold
// for each kind of geometry.
func TestGeometryColumns(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, nil)
	off, err := offload.New(offload.NewMemStore(), &offload.Options{Threshold: 64})
	require.NoError(t, err)
	offBuilder, err := envelope.NewBuilder(&envelope.BuilderOptions{Offloader: off})
	require.NoError(t, err)
	offloaded := func(t *testing.T) *broker.Message {
		env, body, err := offBuilder.Build(ctx, envelope.Input{
			Payload:        []byte(`{"event_id":"evt-big","crs":"EPSG:4326","geometry":{"type":"Polygon","coordinates":[[[0,0],[1,1],[1,0],[0,1],[0,0]]]}}`),
			IdempotencyKey: "idem:geom:offloaded", Err: invalid(&orb.Point{0.5, 0.5}), Source: src,
		})
		require.NoError(t, err)
		require.NotEmpty(t, env.Geometry.OffloadURI)
		return &broker.Message{Body: body, Headers: broker.Headers(env)}
	}
	crsErr := func(epsg int) error {
		return &classify.Error{Class: classify.ClassCRSMismatch, Stage: classify.StageCRSTransform, Err: errors.New("crs"),
			Geometry: &classify.GeometryDetail{Reason: "crs", Kind: classify.KindCRSDiffers, EPSG: epsg}}
	}
	type want struct {
		status     string
		srid       int
		valid      *bool
		dims       int
		loc        *orb.Point
		offloadURI bool
	}
	no, yes := false, true
	tests := []struct {
		name string
		msg  func(t *testing.T) *broker.Message
		want want
	}{
		{"invalid polygon is stored", func(t *testing.T) *broker.Message { return bowtie(t, "idem:geom:bowtie") },
			want{status: postgis.GeomParsed, srid: 4326, valid: &no, dims: 2, loc: &orb.Point{0.5, 0.5}}},
		{"no crs means CRS84: SRID 4326, Z kept", func(t *testing.T) *broker.Message {
			return message(t, `{"geometry":{"type":"Point","coordinates":[1,2,3]}}`, "idem:geom:3d", invalid(nil), time.Time{})
		}, want{status: postgis.GeomParsed, srid: 4326, valid: &yes, dims: 3}},
		{"CRS mismatch keeps the payload's SRID", func(t *testing.T) *broker.Message {
			return message(t, `{"crs":"EPSG:3857","geometry":{"type":"Point","coordinates":[1113194.9,6446275.8]}}`, "idem:geom:3857", crsErr(3857), time.Time{})
		}, want{status: postgis.GeomParsed, srid: 3857, valid: &yes, dims: 2}},
		{"unresolvable CRS: SRID 0", func(t *testing.T) *broker.Message {
			return message(t, `{"crs":"EPSG:43x6","geometry":{"type":"Point","coordinates":[10,50]}}`, "idem:geom:unknown", crsErr(0), time.Time{})
		}, want{status: postgis.GeomParsed, srid: 0, valid: &yes, dims: 2}},
		{"EPSG code beyond PostGIS's SRIDs: SRID 0", func(t *testing.T) *broker.Message {
			return message(t, `{"crs":"EPSG:1999999","geometry":{"type":"Point","coordinates":[10,50]}}`, "idem:geom:huge", crsErr(1999999), time.Time{})
		}, want{status: postgis.GeomParsed, srid: 0, valid: &yes, dims: 2}},
		{"NaN is parsed by PostGIS and stored", func(t *testing.T) *broker.Message {
			return message(t, `{"geometry":{"type":"Point","coordinates":[NaN,1]}}`, "idem:geom:nan", invalid(nil), time.Time{})
		}, want{status: postgis.GeomParsed, srid: 4326, valid: &no, dims: 2}},
		{"unparseable geometry: NULL, row stored", func(t *testing.T) *broker.Message {
			return message(t, `{"geometry":{"type":"Polygon","coordinates":[[0,0],[1,0],[1,1],[0,0]]}}`, "idem:geom:nesting", invalid(&orb.Point{1, 1}), time.Time{})
		}, want{status: postgis.GeomUnparseable, loc: &orb.Point{1, 1}}},
		{"missing geometry: NULL", func(t *testing.T) *broker.Message {
			return message(t, `{"event_id":"x"}`, "idem:geom:missing", classify.SchemaViolation(errors.New("no geometry")), time.Time{})
		}, want{status: postgis.GeomMissing}},
		{"geometry that is not UTF-8: NULL", func(t *testing.T) *broker.Message {
			return message(t, "{\"geometry\":{\"type\":\"Point\",\"coordinates\":[1,2],\"name\":\"caf\xe9\"}}", "idem:geom:latin1", invalid(nil), time.Time{})
		}, want{status: postgis.GeomNotText}},
		{"offloaded geometry keeps only the pointer", offloaded,
			want{status: postgis.GeomOffloaded, loc: &orb.Point{0.5, 0.5}, offloadURI: true}},
		{"not an envelope", func(*testing.T) *broker.Message { return &broker.Message{Body: []byte("plain")} },
			want{status: postgis.GeomNone}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := tc.msg(t)
			res, err := postgis.WriteForTest(ctx, s, "geoms", m)
			require.NoError(t, err)
			require.Equal(t, tc.want.status, res.GeometryStatus)
			var (
				status, geomErr, uri string
				hasGeom              bool
				srid, dims           int
				valid                *bool
				lx, ly               *float64
				lsrid                *int
			)
			require.NoError(t, poolOf(t, s).QueryRow(ctx, `SELECT geom_status, COALESCE(geom_error, ''), COALESCE(offload_uri, ''),
				geom IS NOT NULL, COALESCE(ST_SRID(geom), 0), COALESCE(ST_NDims(geom), 0), ST_IsValid(geom),
				ST_X(location), ST_Y(location), ST_SRID(location)
				FROM `+postgis.Table(s)+` WHERE id = $1`, res.ID).Scan(&status, &geomErr, &uri, &hasGeom, &srid, &dims, &valid, &lx, &ly, &lsrid))
			w := tc.want
			require.Equal(t, w.status, status, geomErr)
			require.Equal(t, w.status == postgis.GeomParsed, hasGeom)
			require.Equal(t, w.status == postgis.GeomUnparseable, geomErr != "", "PostGIS's message is kept: %q", geomErr)
			if hasGeom {
				require.Equal(t, w.srid, srid)
				require.Equal(t, w.dims, dims)
				require.Equal(t, *w.valid, *valid)
			}
			if w.loc != nil {
				require.NotNil(t, lx)
				require.Equal(t, w.loc[0], *lx)
				require.Equal(t, w.loc[1], *ly)
				if hasGeom {
					require.Equal(t, srid, *lsrid, "the location is in the geometry's SRID")
				}
			} else {
				require.Nil(t, lx)
			}
			if w.offloadURI {
				env, err := envelope.Decode(m.Body)
				require.NoError(t, err)
				require.Equal(t, env.Geometry.OffloadURI, uri)
			} else {
				require.Empty(t, uri)
			}
		})
	}
}

// TestFilterBBoxMatchesFilterMatch: the BBox filter in SQL selects exactly
// what broker.Filter.Match selects, edges, huge values, degenerate,
// inverted, infinite and NaN bounds included, whatever the SRID. It asks
// the driver itself, so the portable store's filter cannot mask the SQL.
func TestFilterBBoxMatchesFilterMatch(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, nil)
	const d = "bbox"
	vals := []float64{-math.MaxFloat64, -1e300, -1e200, -1, 0, 5e-324, 0.25, 0.5, 1, 1e200, 1e300, math.MaxFloat64}
	var msgs []*broker.Message
	for i, x := range vals {
		for j, y := range vals {
			key := fmt.Sprintf("idem:bbox:%d:%d", i, j)
			m := message(t, `{"event_id":"`+key+`","crs":"EPSG:4326","geometry":{"type":"Point","coordinates":[0.5,0.5]}}`, key, invalid(&orb.Point{x, y}), time.Time{})
			if (i+j)%3 == 0 {
				// The same coordinates in another SRID: BBox ignores SRIDs.
				m = message(t, `{"event_id":"`+key+`","crs":"EPSG:3857","geometry":{"type":"Point","coordinates":[0.5,0.5]}}`, key,
					&classify.Error{Class: classify.ClassCRSMismatch, Stage: classify.StageCRSTransform, Err: errors.New("crs"),
						Geometry: &classify.GeometryDetail{Reason: "crs", Location: &orb.Point{x, y}, EPSG: 3857}}, time.Time{})
			}
			msgs = append(msgs, m)
		}
	}
	msgs = append(msgs, message(t, `{"event_id":"noloc","geometry":{"type":"Point","coordinates":[0.5,0.5]}}`, "idem:bbox:noloc", invalid(nil), time.Time{}))
	msgs = append(msgs, &broker.Message{Body: []byte("not an envelope")})
	publishAll(t, s, d, msgs)
	envs := map[string]*envelope.Envelope{}
	for _, m := range msgs {
		if e, err := envelope.Decode(m.Body); err == nil {
			envs[e.EventID] = e
		}
	}

	inf, nan := math.Inf(1), math.NaN()
	b := func(x0, y0, x1, y1 float64) orb.Bound {
		return orb.Bound{Min: orb.Point{x0, y0}, Max: orb.Point{x1, y1}}
	}
	bounds := []orb.Bound{
		b(0, 0, 1, 1), b(0.25, 0.25, 0.5, 0.5), b(-1, -1, 0, 0), b(0.5, 0.5, 0.5, 0.5), b(0, 0.5, 1, 0.5),
		b(1, 1, 0, 0), b(0, 0, 1e300, 1e300), b(-1e300, -1e300, 1e300, 1e300), b(-inf, -inf, inf, inf),
		b(-inf, 0, 0.5, inf), b(nan, 0, 1, 1), b(nan, nan, nan, nan), b(0, nan, nan, 1),
		b(-math.MaxFloat64, -math.MaxFloat64, math.MaxFloat64, math.MaxFloat64), b(5e-324, 0, 1, 5e-324),
		b(0, 0, 5e-324, 5e-324), b(math.MaxFloat64, math.MaxFloat64, inf, inf), b(2, 2, 3, 3),
		b(-1e200, -1e200, 1e200, 1e200), b(0, -1e200, 1e200, 0), b(-1e200, 0.5, 0.5, 1e200),
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 40 {
		p := func() float64 { return vals[rng.IntN(len(vals))] }
		x0, y0, x1, y1 := p(), p(), p(), p()
		bounds = append(bounds, b(min(x0, x1), min(y0, y1), max(x0, x1), max(y0, y1)))
	}
	for _, bb := range bounds {
		f := broker.Filter{BBox: &bb}
		var want []string
		for id, e := range envs {
			if f.Match(e) {
				want = append(want, id)
			}
		}
		// The driver's own List: what the SQL selects, with no filter after
		// it (the portable store's would hide a mistake; it also refuses
		// the NaN and infinite bounds tested here).
		list, err := lister(t, s).List(ctx, broker.ListOptions{Destination: d, Filter: f, Limit: 1000})
		require.NoError(t, err)
		var got []string
		for _, e := range list.Entries {
			env, err := envelope.Decode(e.Record.Message.Body)
			require.NoError(t, err)
			got = append(got, env.EventID)
		}
		slices.Sort(want)
		slices.Sort(got)
		require.Equal(t, want, got, "bound %v", bb)
	}
	// Why the filter does not use ST_Intersects: for a tiny box its
	// side-of-edge products underflow, and a point outside counts as on
	// the boundary.
	var stIntersects bool
	require.NoError(t, poolOf(t, s).QueryRow(ctx, `SELECT ST_Intersects('POINT(0 0)'::geometry, ST_MakeEnvelope(5e-324, 0, 1, 5e-324, 0))`).Scan(&stIntersects))
	require.True(t, stIntersects, "PostGIS's ST_Intersects misjudges this point")
	require.False(t, b(5e-324, 0, 1, 5e-324).Contains(orb.Point{0, 0}), "Filter.Match does not")

	// Fetch uses the same conditions.
	f := broker.Filter{BBox: &bounds[0]}
	recs, err := s.Driver().Fetch(ctx, d, f, 1000)
	require.NoError(t, err)
	n := 0
	for _, e := range envs {
		if f.Match(e) {
			n++
		}
	}
	require.Len(t, recs, n)
}

// TestTimeFiltersAreExact: dead-letter times are compared to the
// nanosecond, though timestamptz keeps microseconds.
func TestTimeFiltersAreExact(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, nil)
	const d = "times"
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 123456500, time.UTC)
	offsets := []time.Duration{-time.Microsecond, -501, -1, 0, 1, 499, 500, time.Microsecond, time.Hour}
	envs := map[string]*envelope.Envelope{}
	for i, off := range offsets {
		key := "idem:time:" + strconv.Itoa(i)
		m := message(t, `{"event_id":"`+key+`","geometry":{"type":"Point","coordinates":[1,2]}}`, key, invalid(nil), t0.Add(off))
		require.NoError(t, s.Publish(ctx, d, m))
		e, err := envelope.Decode(m.Body)
		require.NoError(t, err)
		require.Equal(t, t0.Add(off), e.DeadLetteredAt, "the envelope keeps nanoseconds")
		envs[e.EventID] = e
	}
	for _, f := range []broker.Filter{
		{Since: t0}, {Until: t0}, {Since: t0.Add(1)}, {Until: t0.Add(1)}, {Since: t0.Add(-1), Until: t0.Add(500)},
		{Since: t0.Add(-501), Until: t0.Add(-500)}, {Since: t0.Add(time.Microsecond)}, {Until: t0.Add(-time.Microsecond + 1)},
		{Since: t0.Truncate(time.Microsecond)}, {Since: t0, Until: t0},
	} {
		var want []string
		for id, e := range envs {
			if f.Match(e) {
				want = append(want, id)
			}
		}
		// The driver's own List: what the SQL selects, with no filter after
		// it (the portable store's would hide a mistake; it also refuses
		// the NaN and infinite bounds tested here).
		list, err := lister(t, s).List(ctx, broker.ListOptions{Destination: d, Filter: f, Limit: 1000})
		require.NoError(t, err)
		var got []string
		for _, e := range list.Entries {
			env, err := envelope.Decode(e.Record.Message.Body)
			require.NoError(t, err)
			got = append(got, env.EventID)
		}
		slices.Sort(want)
		slices.Sort(got)
		require.Equal(t, want, got, "since %v until %v", f.Since, f.Until)
	}
}

// TestVerbatim: bodies, keys and headers come back byte for byte, even
// what text and jsonb columns cannot hold.
func TestVerbatim(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, nil)
	const d = "verbatim"
	withNUL := message(t, `{"event_id":"evt-nul","note":"a\u0000b","geometry":{"type":"Point","coordinates":[1,2]}}`,
		"idem:verbatim:nul\x00key", invalid(nil), time.Time{})
	msgs := []*broker.Message{
		{Body: []byte{0, 1, 2, 0xff, 0xfe}, Key: []byte{0, 0xff}},
		{Body: []byte{}, Key: []byte{}},
		{Body: nil, Key: nil, Headers: nil},
		{Body: []byte("h"), Headers: map[string]string{"nul": "a\x00b", "latin1": "caf\xe9", "k\xff": "v", "plain": "<&>"}},
		{Body: []byte("prefix"), Headers: map[string]string{broker.HeaderIdempotencyKey: "geodlq-hex:00"}},
		withNUL,
	}
	for _, m := range msgs {
		require.NoError(t, s.Publish(ctx, d, m))
	}
	// The envelope with \u0000 in its raw payload: jsonb refuses it, the
	// row is stored with a NULL envelope column and exact body, and its
	// NUL-bearing key still deduplicates.
	require.Equal(t, 1, count(t, s, "is_envelope AND envelope IS NULL AND event_id = 'evt-nul'"))
	res, err := postgis.WriteForTest(ctx, s, d, withNUL)
	require.NoError(t, err)
	require.True(t, res.Duplicate)
	got, err := s.Fetch(ctx, d, broker.Filter{}, 100)
	require.NoError(t, err)
	require.Len(t, got, len(msgs))
	for i, r := range got {
		want := msgs[i]
		require.True(t, bytes.Equal(want.Body, r.Message.Body), "body %d", i)
		require.Equal(t, want.Key == nil, r.Message.Key == nil, "key %d: nil stays nil, empty stays empty", i)
		require.True(t, bytes.Equal(want.Key, r.Message.Key), "key %d", i)
		require.Len(t, r.Message.Headers, len(want.Headers), "headers %d", i)
		for k, v := range want.Headers {
			require.Equal(t, v, r.Message.Headers[k], "header %q of %d", k, i)
		}
	}
	// Other envelopes are queryable as jsonb.
	normal, err := postgis.WriteForTest(ctx, s, d, bowtie(t, "idem:verbatim:jsonb"))
	require.NoError(t, err)
	var eventID string
	require.NoError(t, poolOf(t, s).QueryRow(ctx, `SELECT envelope->>'event_id' FROM `+postgis.Table(s)+` WHERE id = $1`, normal.ID).Scan(&eventID))
	require.Equal(t, "evt-idem:verbatim:jsonb", eventID)
	ackAll(t, s, got)
}

func ackAll(t *testing.T, s *broker.Store, recs []*broker.Record) {
	t.Helper()
	for _, r := range recs {
		require.NoError(t, s.Ack(context.Background(), r))
	}
}

// TestTooLarge: a body over the limit is refused with the typed error,
// and nothing is stored; the limit is the store's Limiter.
func TestTooLarge(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, &postgis.Options{StoreOptions: broker.StoreOptions{MaxMessageBytes: 1024}})
	require.Equal(t, 1024, s.MaxMessageBytes("big"))
	big := &broker.Message{Body: bytes.Repeat([]byte("x"), 1025)}
	err := s.Publish(ctx, "big", big)
	var tl *classify.TooLargeError
	require.ErrorAs(t, err, &tl)
	require.Equal(t, "big", tl.Destination)
	require.Equal(t, 1025, tl.Size)
	require.Equal(t, 1024, tl.Limit)
	require.Zero(t, count(t, s, "true"), "nothing stored")
	require.NoError(t, s.Publish(ctx, "big", &broker.Message{Body: big.Body[:1024]}))
}

// TestListPaging: List pages through every record once in both
// directions, across destinations, replayed ones on request, with the
// status the row has (an expired lease is pending again).
func TestListPaging(t *testing.T) {
	ctx := context.Background()
	// The lease must outlive the scans below, which list every page
	// eight times (CI: past 300 ms on a loaded machine, the leased record
	// listed as pending); the test then waits for it to lapse.
	const ttl = 5 * time.Second
	s := newStore(t, &postgis.Options{StoreOptions: broker.StoreOptions{LeaseTTL: ttl}})
	var want []string // "destination/id", oldest first
	for i := range 12 {
		d := "page." + strconv.Itoa(i%3)
		res := write(t, s, d, bowtie(t, "idem:page:"+strconv.Itoa(i)))
		want = append(want, d+"/"+strconv.FormatInt(res.ID, 10))
	}
	fetched := time.Now()
	leased, err := s.Fetch(ctx, "page.0", broker.Filter{}, 1)
	require.NoError(t, err)
	require.Len(t, leased, 1)
	replayed, err := s.Fetch(ctx, "page.1", broker.Filter{}, 1)
	require.NoError(t, err)
	require.NoError(t, s.Ack(ctx, replayed[0]))

	scan := func(opts broker.ListOptions) (keys []string, status map[string]broker.Status) {
		status = map[string]broker.Status{}
		require.NoError(t, s.ScanAll(ctx, opts, func(e broker.Entry) error {
			require.Empty(t, e.Record.Lease)
			require.False(t, e.PublishedAt.IsZero())
			k := e.Record.Destination + "/" + e.Record.ID
			keys = append(keys, k)
			status[k] = e.Status
			return nil
		}))
		return keys, status
	}
	for _, limit := range []int{1, 2, 5, 100} {
		got, st := scan(broker.ListOptions{IncludeReplayed: true, Limit: limit})
		require.Equal(t, want, got, "oldest first, pages of %d", limit)
		require.Equal(t, broker.StatusLeased, st["page.0/"+leased[0].ID])
		require.Equal(t, broker.StatusReplayed, st["page.1/"+replayed[0].ID])
		rev, _ := scan(broker.ListOptions{IncludeReplayed: true, Limit: limit, Descending: true})
		slices.Reverse(rev)
		require.Equal(t, want, rev, "newest first, pages of %d", limit)
	}
	live, _ := scan(broker.ListOptions{Limit: 4})
	require.Len(t, live, len(want)-1, "replayed records are left out by default")
	one, _ := scan(broker.ListOptions{Destination: "page.2", Limit: 2, Descending: true})
	require.Len(t, one, 4)
	require.True(t, strings.HasPrefix(one[0], "page.2/"))

	p, err := s.List(ctx, broker.ListOptions{Limit: len(want)})
	require.NoError(t, err)
	require.Empty(t, p.Next, "the last page has no cursor")
	_, err = s.List(ctx, broker.ListOptions{After: "not-a-cursor"})
	require.ErrorIs(t, err, broker.ErrInvalidArgument)

	time.Sleep(time.Until(fetched.Add(ttl + 100*time.Millisecond)))
	_, st := scan(broker.ListOptions{Destination: "page.0"})
	require.Equal(t, broker.StatusPending, st["page.0/"+leased[0].ID], "an expired lease is pending again")

	ds, err := s.Destinations(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"page.0", "page.1", "page.2"}, ds)
	// A destination whose every record was replayed still holds records.
	require.NoError(t, s.Publish(ctx, "page.done", bowtie(t, "idem:page:done")))
	done, err := s.Fetch(ctx, "page.done", broker.Filter{}, 10)
	require.NoError(t, err)
	require.NoError(t, s.Ack(ctx, done[0]))
	ds, err = s.Destinations(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"page.0", "page.1", "page.2", "page.done"}, ds)
}

// TestFiltersInSQL: record ids and reason kinds are SQL conditions too,
// selecting exactly what Filter.MatchRecord does, envelopes or not.
func TestFiltersInSQL(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, nil)
	const d = "sqlfilters"
	msgs := brokertest.Messages(t, brokertest.FilterInputs())
	msgs = append(msgs, &broker.Message{Body: []byte("not an envelope")}, &broker.Message{Body: []byte{0xff, 0}})
	var recIDs []string
	for _, m := range msgs {
		recIDs = append(recIDs, strconv.FormatInt(write(t, s, d, m).ID, 10))
	}
	filters := map[string]broker.Filter{
		"one id":             {IDs: []string{recIDs[0]}},
		"ids of any body":    {IDs: []string{recIDs[1], recIDs[len(recIDs)-1], recIDs[len(recIDs)-2]}},
		"no such id":         {IDs: []string{"abc", "0" + recIDs[0], "+" + recIDs[0], "99999999999999999999"}},
		"self-intersections": {ReasonKinds: []classify.ReasonKind{classify.KindSelfIntersection}},
		"crs kinds":          {ReasonKinds: []classify.ReasonKind{classify.KindCRSDiffers, classify.KindSelfIntersection}},
		"ids and a class":    {IDs: recIDs, Classes: []classify.Class{classify.ClassCRSMismatch}},
		"kind and epsg":      {ReasonKinds: []classify.ReasonKind{classify.KindSelfIntersection}, EPSG: []int{4326}},
	}
	for name, f := range filters {
		t.Run(name, func(t *testing.T) {
			require.NoError(t, f.Validate())
			var want []string
			for i, m := range msgs {
				if f.MatchRecord(&broker.Record{ID: recIDs[i], Destination: d, Message: m}) {
					want = append(want, recIDs[i])
				}
			}
			// The driver's own List and Fetch: what the SQL selects.
			p, err := lister(t, s).List(ctx, broker.ListOptions{Destination: d, Filter: f, Limit: 1000})
			require.NoError(t, err)
			var got []string
			for _, e := range p.Entries {
				got = append(got, e.Record.ID)
			}
			require.Equal(t, want, got)
			recs, err := s.Driver().Fetch(ctx, d, f, 1000)
			require.NoError(t, err)
			var fetched []string
			for _, r := range recs {
				fetched = append(fetched, r.ID)
			}
			require.Equal(t, want, fetched, "Fetch selects the same")
			for _, r := range recs {
				require.NoError(t, s.Release(ctx, r))
			}
		})
	}
}

// TestStats: one GROUP BY counts every record by destination, class,
// stage, EPSG and reason kind, and by status; time buckets start at
// multiples of the bucket since the Unix epoch.
func TestStats(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, &postgis.Options{StoreOptions: broker.StoreOptions{LeaseTTL: time.Minute}})
	const d = "triage"
	msgs := brokertest.Messages(t, brokertest.FilterInputs())
	publishAll(t, s, d, msgs)
	require.NoError(t, s.Publish(ctx, d+".other", bowtie(t, "idem:triage:other")))
	require.NoError(t, s.Publish(ctx, d, &broker.Message{Body: []byte("not an envelope")}))
	all, err := s.List(ctx, broker.ListOptions{Destination: d, Limit: 1000})
	require.NoError(t, err)
	require.Len(t, all.Entries, len(msgs)+1)

	// Lease two records and replay one.
	recs, err := s.Fetch(ctx, d, broker.Filter{Classes: []classify.Class{classify.ClassInvalidGeometry}}, 2)
	require.NoError(t, err)
	require.Len(t, recs, 2)
	require.NoError(t, s.Ack(ctx, recs[0]))

	stats, err := s.Stats(ctx, broker.StatsOptions{Destination: d})
	require.NoError(t, err)
	want := map[string][3]int{"//0/": {1, 0, 0}} // the body that is not an envelope
	for i, m := range msgs {
		e, err := envelope.Decode(m.Body)
		require.NoError(t, err)
		k := fmt.Sprintf("%s/%s/%d/%s", string(e.FailureClass), string(e.FailedStage), broker.EPSGOf(e), kindOf(e))
		c := want[k]
		switch all.Entries[i].Record.ID {
		case recs[0].ID:
			c[2]++
		case recs[1].ID:
			c[1]++
		default:
			c[0]++
		}
		want[k] = c
	}
	got := map[string][3]int{}
	for _, c := range stats {
		require.Equal(t, d, c.Destination)
		require.True(t, c.Bucket.IsZero())
		got[fmt.Sprintf("%s/%s/%d/%s", string(c.Class), string(c.Stage), c.EPSG, string(c.ReasonKind))] = [3]int{c.Pending, c.Leased, c.Replayed}
	}
	require.Equal(t, want, got)

	everywhere, err := s.Stats(ctx, broker.StatsOptions{})
	require.NoError(t, err)
	total := 0
	for _, c := range everywhere {
		total += c.Total()
	}
	require.Equal(t, len(msgs)+2, total, "every record of every destination")

	buckets, err := s.Stats(ctx, broker.StatsOptions{Destination: d, Filter: broker.Filter{Classes: []classify.Class{classify.ClassInvalidGeometry}}, Bucket: 2 * time.Hour})
	require.NoError(t, err)
	perBucket := map[time.Time]int{}
	for _, c := range buckets {
		require.Equal(t, classify.ClassInvalidGeometry, c.Class)
		perBucket[c.Bucket] += c.Total()
	}
	t0 := brokertest.FilterBaseTime // 12:00, hours 0, 1, 2 and 8 are invalid_geometry
	require.Equal(t, map[time.Time]int{t0: 2, t0.Add(2 * time.Hour): 1, t0.Add(8 * time.Hour): 1}, perBucket)

	// A week does not divide the time since year 1 that Go's Truncate
	// counts from: the buckets start at multiples since the Unix epoch
	// (a Thursday), as StatsOptions says.
	week := 7 * 24 * time.Hour
	weekly, err := s.Stats(ctx, broker.StatsOptions{Destination: d, Bucket: week})
	require.NoError(t, err)
	secs := int64(week / time.Second)
	epochWeek := time.Unix(t0.Unix()/secs*secs, 0).UTC()
	require.NotEqual(t, t0.Truncate(week), epochWeek)
	n := 0
	for _, c := range weekly {
		if c.Class != "" {
			require.Equal(t, epochWeek, c.Bucket)
			n += c.Total()
		}
	}
	require.Equal(t, len(msgs), n)
}

// TestListIntersecting: records whose stored geometry intersects a bound,
// by ST_Intersects, among geometries of one SRID.
func TestListIntersecting(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, nil)
	const d = "intersects"
	msgs := brokertest.Messages(t, brokertest.FilterInputs())
	publishAll(t, s, d, msgs)
	list := func(opts broker.ListOptions, b orb.Bound, srid int) []broker.Entry {
		t.Helper()
		var out []broker.Entry
		for range 100 {
			p, err := postgis.ListIntersecting(ctx, s, opts, b, srid)
			require.NoError(t, err)
			out = append(out, p.Entries...)
			if p.Next == "" {
				return out
			}
			opts.After = p.Next
		}
		t.Fatal("no last page")
		return nil
	}
	// Every FilterInputs geometry is POINT(0.5 0.5), in SRID 4326 except
	// the EPSG:3857 one. Mixed SRIDs do not break ST_Intersects.
	unit := orb.Bound{Max: orb.Point{1, 1}}
	require.Len(t, list(broker.ListOptions{}, unit, 0), len(msgs)-1, "SRID 0 means 4326")
	require.Len(t, list(broker.ListOptions{Limit: 2}, unit, 4326), len(msgs)-1, "pages")
	in3857 := list(broker.ListOptions{}, unit, 3857)
	require.Len(t, in3857, 1)
	env, err := envelope.Decode(in3857[0].Record.Message.Body)
	require.NoError(t, err)
	require.Equal(t, 3857, broker.EPSGOf(env))
	require.Empty(t, list(broker.ListOptions{}, orb.Bound{Min: orb.Point{2, 2}, Max: orb.Point{3, 3}}, 0))
	classed := list(broker.ListOptions{Filter: broker.Filter{Classes: []classify.Class{classify.ClassInvalidGeometry}}}, unit, 0)
	require.NotEmpty(t, classed)
	for _, e := range classed {
		env, err := envelope.Decode(e.Record.Message.Body)
		require.NoError(t, err)
		require.Equal(t, classify.ClassInvalidGeometry, env.FailureClass, "the filter applies too")
	}

	_, err = postgis.ListIntersecting(ctx, s, broker.ListOptions{}, orb.Bound{Min: orb.Point{1, 1}}, 0)
	require.ErrorIs(t, err, broker.ErrInvalidArgument, "min beyond max")
	_, err = postgis.ListIntersecting(ctx, s, broker.ListOptions{}, orb.Bound{Max: orb.Point{math.Inf(1), 1}}, 0)
	require.ErrorIs(t, err, broker.ErrInvalidArgument)
	_, err = postgis.ListIntersecting(ctx, s, broker.ListOptions{}, unit, 999999)
	require.ErrorIs(t, err, broker.ErrInvalidArgument)
	_, err = postgis.ListIntersecting(ctx, memory.New(nil), broker.ListOptions{}, unit, 0)
	require.ErrorIs(t, err, errors.ErrUnsupported)
	closed := newStore(t, nil)
	require.NoError(t, closed.Close())
	_, err = postgis.ListIntersecting(ctx, closed, broker.ListOptions{}, unit, 0)
	require.ErrorIs(t, err, broker.ErrClosed, "through the portable store's List")
}

// TestLogger: duplicates and geometries PostGIS refuses are logged at
// debug level.
func TestLogger(t *testing.T) {
	ctx := context.Background()
	var buf bytes.Buffer
	var mu sync.Mutex
	h := slog.NewTextHandler(&lockedWriter{w: &buf, mu: &mu}, &slog.HandlerOptions{Level: slog.LevelDebug})
	s := newStore(t, &postgis.Options{StoreOptions: broker.StoreOptions{Logger: slog.New(h)}})
	m := bowtie(t, "idem:log:1")
	require.NoError(t, s.Publish(ctx, "log", m))
	require.NoError(t, s.Publish(ctx, "log", m))
	require.NoError(t, s.Publish(ctx, "log", message(t, `{"event_id":"evt-bad","geometry":{"type":"Circle","coordinates":[1,2]}}`, "idem:log:2", invalid(nil), time.Time{})))
	mu.Lock()
	defer mu.Unlock()
	out := buf.String()
	require.Contains(t, out, "duplicate dead-letter write absorbed")
	require.Contains(t, out, "idempotency_key=idem:log:1")
	require.Contains(t, out, "PostGIS cannot parse the geometry")
	require.Contains(t, out, "event_id=evt-bad")
	require.Equal(t, 2, strings.Count(out, "\n"), out)
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func kindOf(e *envelope.Envelope) string {
	if e.GeometryError == nil {
		return ""
	}
	return e.GeometryError.Kind
}

// TestConflictsAreRetried: a Publish, Ack, Release and Purge that wait on
// a row another transaction holds past lock_timeout (SQLSTATE 55P03) are
// run again until the row is free, instead of failing.
func TestConflictsAreRetried(t *testing.T) {
	ctx := context.Background()
	schema := pgtest.Schema(t)
	plain := newStore(t, &postgis.Options{Schema: schema})
	cfg, err := pgxpool.ParseConfig(testenv.Postgres(t))
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["lock_timeout"] = "100ms"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	defer pool.Close()
	s, err := postgis.New(ctx, pool, &postgis.Options{Schema: schema})
	require.NoError(t, err)
	defer s.Close()
	msgs := brokertest.Messages(t, brokertest.FilterInputs()[:3])
	publishAll(t, s, "locked", msgs)
	recs, err := s.Fetch(ctx, "locked", broker.Filter{}, 3)
	require.NoError(t, err)
	require.Len(t, recs, 3)

	// Each operation waits on a row lock held for 600ms: several lock
	// timeouts, then success.
	held := func(id string, op func() error) {
		t.Helper()
		tx, err := poolOf(t, plain).Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		var one int
		require.NoError(t, tx.QueryRow(ctx, `SELECT 1 FROM `+postgis.Table(s)+` WHERE id = $1::bigint FOR UPDATE`, id).Scan(&one))
		done := make(chan error, 1)
		go func() { done <- op() }()
		time.Sleep(600 * time.Millisecond)
		select {
		case err := <-done:
			t.Fatalf("returned while the row was locked: %v", err)
		default:
		}
		require.NoError(t, tx.Commit(ctx))
		require.NoError(t, <-done, "retried its lock timeouts until the row was free")
	}
	held(recs[0].ID, func() error { return s.Ack(ctx, recs[0]) })
	held(recs[1].ID, func() error { return s.Release(ctx, recs[1]) })
	// A duplicate of a leased record updates its row.
	held(recs[2].ID, func() error { return s.Publish(ctx, "locked", msgs[2]) })
	held(recs[0].ID, func() error {
		res, err := s.Purge(ctx, broker.PurgeRequest{Destination: "locked", Filter: broker.Filter{Until: time.Now().Add(time.Hour)}})
		if err == nil && len(res.IDs) != 1 {
			err = fmt.Errorf("purged %v, want the acknowledged record", res.IDs)
		}
		return err
	})
}
