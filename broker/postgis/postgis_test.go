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
	"github.com/geodlq/geodlq/broker/postgis"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/internal/pgtest"
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

func count(t *testing.T, s *postgis.Store, where string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, s.Pool().QueryRow(context.Background(), `SELECT count(*) FROM `+s.Table()+` WHERE `+where, args...).Scan(&n))
	return n
}

func TestNewValidatesArguments(t *testing.T) {
	ctx := context.Background()
	_, err := postgis.New(ctx, nil, nil)
	require.Error(t, err, "a pool is required")
	pool := &pgxpool.Pool{} // never used: New does no I/O without Migrate
	for _, o := range []postgis.Options{
		{Schema: "Geodlq"}, {Schema: "1abc"}, {Schema: `a"b`}, {Table: "dead-letters"},
		{Table: "t_" + string(bytes.Repeat([]byte("x"), 40))},
	} {
		_, err := postgis.New(ctx, pool, &o)
		require.Error(t, err, "%+v", o)
	}
	s, err := postgis.New(ctx, pool, nil)
	require.NoError(t, err)
	require.Equal(t, `"geodlq"."dead_letters"`, s.Table(), "defaults")
	require.Equal(t, postgis.DefaultMaxMessageBytes, s.MaxMessageBytes("any"))
	var p *pgxpool.Pool
	require.True(t, s.As(&p))
	require.Same(t, pool, p)
	require.Same(t, pool, s.Pool())
	var other *int
	require.False(t, s.As(&other))
}

// TestMigrate: migrations are versioned, idempotent and safe to run
// concurrently; the table has a real geometry column and GiST indexes.
func TestMigrate(t *testing.T) {
	ctx := context.Background()
	schema := pgtest.Schema(t)
	pool := pgtest.NewPool(t, 8)
	s, err := postgis.New(ctx, pool, &postgis.Options{Schema: schema})
	require.NoError(t, err)
	v, err := s.Version(ctx)
	require.NoError(t, err)
	require.Zero(t, v, "nothing applied yet")

	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() { errs[i] = s.Migrate(ctx) })
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err, "concurrent first migrations serialise")
	}
	require.NoError(t, s.Migrate(ctx), "migrating again is a no-op")
	v, err = s.Version(ctx)
	require.NoError(t, err)
	ms := postgis.Migrations()
	require.Equal(t, len(ms), v)
	for i, m := range ms {
		require.Equal(t, i+1, m.Version)
		require.NotEmpty(t, m.Name)
	}
	var applied int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM "`+schema+`".dead_letters_migrations`).Scan(&applied))
	require.Equal(t, len(ms), applied, "each step recorded once")

	types := map[string]string{}
	rows, err := pool.Query(ctx, `SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute
		WHERE attrelid = to_regclass($1) AND attname IN ('geom', 'location', 'body', 'envelope', 'headers')`, s.Table())
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

	// Another table in the same schema has its own version history.
	other, err := postgis.New(ctx, pool, &postgis.Options{Schema: schema, Table: "other_dlq", Migrate: true})
	require.NoError(t, err)
	v, err = other.Version(ctx)
	require.NoError(t, err)
	require.Equal(t, len(ms), v)
	require.NoError(t, other.Publish(ctx, "d", bowtie(t, "idem:migrate")))
	require.Zero(t, count(t, s, "true"), "tables are separate")
}

// TestSkipLocked: Fetch skips rows another transaction holds instead of
// waiting for them, and several workers fetching at once never hold the
// same record.
func TestSkipLocked(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, &postgis.Options{LeaseTTL: time.Minute})
	const d = "skiplocked"

	t.Run("rows locked elsewhere are skipped, not waited for", func(t *testing.T) {
		for i := range 10 {
			require.NoError(t, s.Publish(ctx, d, bowtie(t, "idem:lock:"+strconv.Itoa(i))))
		}
		tx, err := s.Pool().Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		rows, err := tx.Query(ctx, `SELECT id FROM `+s.Table()+` WHERE destination = $1 ORDER BY id LIMIT 3 FOR UPDATE`, d)
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
		_, err := s.PublishBatch(ctx, d, msgs)
		require.NoError(t, err)
		var (
			mu     sync.Mutex
			holder = map[string]int{}
			acked  = map[string]int{}
			per    = make([]int, workers)
			wg     sync.WaitGroup
		)
		for w := range workers {
			st, err := postgis.New(ctx, pgtest.NewPool(t, 2), &postgis.Options{Schema: schemaOf(s), LeaseTTL: time.Minute})
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

// schemaOf recovers the schema from the quoted table name.
func schemaOf(s *postgis.Store) string {
	name := s.Table()
	i := bytes.IndexByte([]byte(name), '.')
	return name[1 : i-1]
}

// TestLeases: leases are timestamps on the database clock; an expired
// lease makes the record fetchable again, and its old holder has lost it.
func TestLeases(t *testing.T) {
	ctx := context.Background()
	const ttl = 400 * time.Millisecond
	s := newStore(t, &postgis.Options{LeaseTTL: ttl})
	const d = "leases"
	require.NoError(t, s.Publish(ctx, d, bowtie(t, "idem:lease:1")))
	first, err := s.Fetch(ctx, d, broker.Filter{}, 10)
	require.NoError(t, err)
	require.Len(t, first, 1)
	require.Equal(t, 1, first[0].Deliveries)
	require.Equal(t, 1, first[0].Message.DeliveryAttempt)

	var left time.Duration
	require.NoError(t, s.Pool().QueryRow(ctx, `SELECT EXTRACT(EPOCH FROM lease_until - now()) * 1e9 FROM `+s.Table()+` WHERE id = $1`,
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
	s := newStore(t, &postgis.Options{LeaseTTL: time.Minute})
	const d = "dups"
	m := bowtie(t, "idem:dup:1")
	first, err := s.Write(ctx, d, m)
	require.NoError(t, err)
	require.False(t, first.Duplicate)
	again, err := s.Write(ctx, d, m)
	require.NoError(t, err)
	require.Equal(t, first.ID, again.ID)
	require.True(t, again.Duplicate, "the same write retried after a timeout")

	// The processor rebuilds the envelope when the source redelivers after
	// a failed write: later dead_lettered_at, same key. Still a duplicate.
	rebuilt := message(t, `{"event_id":"evt-x","geometry":{"type":"Point","coordinates":[1,2]}}`, "idem:dup:1",
		invalid(&orb.Point{1, 2}), time.Now())
	require.NotEqual(t, m.Body, rebuilt.Body)
	res, err := s.Write(ctx, d, rebuilt)
	require.NoError(t, err)
	require.True(t, res.Duplicate)
	require.Equal(t, 1, count(t, s, "destination = $1", d))
	list, err := s.List(ctx, d, broker.Filter{}, nil)
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, 2, list[0].Duplicates)
	require.Equal(t, m.Body, list[0].Record.Message.Body, "the first write is kept")

	// Another destination is another store.
	res, err = s.Write(ctx, d+".other", m)
	require.NoError(t, err)
	require.False(t, res.Duplicate)

	// Concurrent writers of one new key: one row.
	var wg sync.WaitGroup
	var mu sync.Mutex
	var inserted int
	for range 8 {
		wg.Go(func() {
			r, err := s.Write(ctx, d, bowtie(t, "idem:dup:race"))
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

	// Within one batch too.
	batch, err := s.PublishBatch(ctx, d, []*broker.Message{bowtie(t, "idem:dup:b1"), bowtie(t, "idem:dup:b2"), bowtie(t, "idem:dup:b1")})
	require.NoError(t, err)
	require.False(t, batch[0].Duplicate)
	require.False(t, batch[1].Duplicate)
	require.Equal(t, batch[0].ID, batch[2].ID)
	require.True(t, batch[2].Duplicate)

	// Bodies that are not envelopes are keyed by their header, if any.
	raw := &broker.Message{Body: []byte("not an envelope"), Headers: map[string]string{broker.HeaderIdempotencyKey: "idem:dup:raw"}}
	r1, err := s.Write(ctx, d, raw)
	require.NoError(t, err)
	r2, err := s.Write(ctx, d, raw)
	require.NoError(t, err)
	require.Equal(t, r1.ID, r2.ID)
	require.True(t, r2.Duplicate)
	bare := &broker.Message{Body: []byte("no key")}
	b1, err := s.Write(ctx, d, bare)
	require.NoError(t, err)
	b2, err := s.Write(ctx, d, bare)
	require.NoError(t, err)
	require.NotEqual(t, b1.ID, b2.ID, "without a key nothing is a duplicate")

	// Replayed: the key is free, a new failure is a new record.
	recs, err := s.Fetch(ctx, d, broker.Filter{EventIDs: []string{"evt-idem:dup:1"}}, 10)
	require.NoError(t, err)
	require.Len(t, recs, 1)
	require.NoError(t, s.Ack(ctx, recs[0]))
	after, err := s.Write(ctx, d, m)
	require.NoError(t, err)
	require.False(t, after.Duplicate, "a replayed record frees its key")
	require.NotEqual(t, first.ID, after.ID)

	// A duplicate during the lease: the event failed again (perhaps as the
	// replayed copy), so Ack must not mark the record replayed.
	recs, err = s.Fetch(ctx, d, broker.Filter{EventIDs: []string{"evt-idem:dup:1"}}, 10)
	require.NoError(t, err)
	require.Len(t, recs, 1)
	res, err = s.Write(ctx, d, m)
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
			res, err := s.Write(ctx, "geoms", m)
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
			require.NoError(t, s.Pool().QueryRow(ctx, `SELECT geom_status, COALESCE(geom_error, ''), COALESCE(offload_uri, ''),
				geom IS NOT NULL, COALESCE(ST_SRID(geom), 0), COALESCE(ST_NDims(geom), 0), ST_IsValid(geom),
				ST_X(location), ST_Y(location), ST_SRID(location)
				FROM `+s.Table()+` WHERE id = $1`, res.ID).Scan(&status, &geomErr, &uri, &hasGeom, &srid, &dims, &valid, &lx, &ly, &lsrid))
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
// inverted, infinite and NaN bounds included, whatever the SRID.
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
	_, err := s.PublishBatch(ctx, d, msgs)
	require.NoError(t, err)
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
		list, err := s.List(ctx, d, f, nil)
		require.NoError(t, err)
		var got []string
		for _, e := range list {
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
	require.NoError(t, s.Pool().QueryRow(ctx, `SELECT ST_Intersects('POINT(0 0)'::geometry, ST_MakeEnvelope(5e-324, 0, 1, 5e-324, 0))`).Scan(&stIntersects))
	require.True(t, stIntersects, "PostGIS's ST_Intersects misjudges this point")
	require.False(t, b(5e-324, 0, 1, 5e-324).Contains(orb.Point{0, 0}), "Filter.Match does not")

	// Fetch uses the same conditions.
	f := broker.Filter{BBox: &bounds[0]}
	recs, err := s.Fetch(ctx, d, f, 1000)
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
		list, err := s.List(ctx, d, f, nil)
		require.NoError(t, err)
		var got []string
		for _, e := range list {
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
	res, err := s.Write(ctx, d, withNUL)
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
	normal, err := s.Write(ctx, d, bowtie(t, "idem:verbatim:jsonb"))
	require.NoError(t, err)
	var eventID string
	require.NoError(t, s.Pool().QueryRow(ctx, `SELECT envelope->>'event_id' FROM `+s.Table()+` WHERE id = $1`, normal.ID).Scan(&eventID))
	require.Equal(t, "evt-idem:verbatim:jsonb", eventID)
	ackAll(t, s, got)
}

func ackAll(t *testing.T, s *postgis.Store, recs []*broker.Record) {
	t.Helper()
	for _, r := range recs {
		require.NoError(t, s.Ack(context.Background(), r))
	}
}

// TestTooLarge: a body over the limit is refused with the typed error,
// alone or in a batch, and nothing is stored.
func TestTooLarge(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, &postgis.Options{MaxMessageBytes: 1024})
	big := &broker.Message{Body: bytes.Repeat([]byte("x"), 1025)}
	err := s.Publish(ctx, "big", big)
	var tl *classify.TooLargeError
	require.ErrorAs(t, err, &tl)
	require.Equal(t, classify.TooLargeError{Destination: "big", Size: 1025, Limit: 1024}, *tl)
	_, err = s.PublishBatch(ctx, "big", []*broker.Message{{Body: []byte("ok")}, big})
	require.ErrorIs(t, err, classify.ErrTooLarge)
	require.Zero(t, count(t, s, "true"), "nothing stored, not even the batch's small message")
	require.NoError(t, s.Publish(ctx, "big", &broker.Message{Body: big.Body[:1024]}))
}

// TestListStatsPurge: triage queries by the same filters, counts by class,
// stage, EPSG, kind and time bucket, geometry queries with ST_Intersects,
// and purging replayed records.
func TestListStatsPurge(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, &postgis.Options{LeaseTTL: time.Minute})
	const d = "triage"
	msgs := brokertest.Messages(t, brokertest.FilterInputs())
	_, err := s.PublishBatch(ctx, d, msgs)
	require.NoError(t, err)
	require.NoError(t, s.Publish(ctx, d+".other", bowtie(t, "idem:triage:other")))

	all, err := s.List(ctx, d, broker.Filter{}, nil)
	require.NoError(t, err)
	require.Len(t, all, len(msgs))
	for i, e := range all {
		require.Equal(t, msgs[i].Body, e.Record.Message.Body)
		require.Equal(t, postgis.StatusPending, e.Status)
		require.False(t, e.PublishedAt.IsZero())
	}
	page, err := s.List(ctx, "", broker.Filter{}, &postgis.ListOptions{AfterID: mustID(t, all[2].Record), Limit: 3})
	require.NoError(t, err)
	require.Equal(t, []string{all[3].Record.ID, all[4].Record.ID, all[5].Record.ID}, []string{page[0].Record.ID, page[1].Record.ID, page[2].Record.ID})
	everywhere, err := s.List(ctx, "", broker.Filter{}, nil)
	require.NoError(t, err)
	require.Len(t, everywhere, len(msgs)+1)

	// Lease two records and replay one.
	recs, err := s.Fetch(ctx, d, broker.Filter{Classes: []classify.Class{classify.ClassInvalidGeometry}}, 2)
	require.NoError(t, err)
	require.Len(t, recs, 2)
	require.NoError(t, s.Ack(ctx, recs[0]))

	stats, err := s.Stats(ctx, d, broker.Filter{}, nil)
	require.NoError(t, err)
	want := map[string][3]int{}
	for i, m := range msgs {
		e, err := envelope.Decode(m.Body)
		require.NoError(t, err)
		k := fmt.Sprintf("%s/%s/%d/%s", e.FailureClass, e.FailedStage, broker.EPSGOf(e), kindOf(e))
		c := want[k]
		switch all[i].Record.ID {
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
		got[fmt.Sprintf("%s/%s/%d/%s", c.Class, c.Stage, c.EPSG, c.ReasonKind)] = [3]int{c.Pending, c.Leased, c.Replayed}
	}
	require.Equal(t, want, got)

	buckets, err := s.Stats(ctx, d, broker.Filter{Classes: []classify.Class{classify.ClassInvalidGeometry}}, &postgis.StatsOptions{Bucket: 2 * time.Hour})
	require.NoError(t, err)
	perBucket := map[time.Time]int{}
	for _, c := range buckets {
		require.Equal(t, "invalid_geometry", c.Class)
		perBucket[c.Bucket] += c.Pending + c.Leased + c.Replayed
	}
	t0 := brokertest.FilterBaseTime // 12:00, hours 0, 1, 2 and 8 are invalid_geometry
	require.Equal(t, map[time.Time]int{t0: 2, t0.Add(2 * time.Hour): 1, t0.Add(8 * time.Hour): 1}, perBucket)

	pending, err := s.List(ctx, d, broker.Filter{}, nil)
	require.NoError(t, err)
	require.Len(t, pending, len(msgs)-1, "replayed records are hidden by default")
	withReplayed, err := s.List(ctx, d, broker.Filter{}, &postgis.ListOptions{IncludeReplayed: true})
	require.NoError(t, err)
	require.Len(t, withReplayed, len(msgs))
	for _, e := range withReplayed {
		switch e.Record.ID {
		case recs[0].ID:
			require.Equal(t, postgis.StatusReplayed, e.Status)
			require.False(t, e.ReplayedAt.IsZero())
		case recs[1].ID:
			require.Equal(t, postgis.StatusLeased, e.Status)
			require.True(t, e.LeaseUntil.After(e.PublishedAt))
			require.Equal(t, 1, e.Deliveries)
		}
	}

	// Geometry queries: every FilterInputs geometry is POINT(0.5 0.5), in
	// SRID 4326 except the EPSG:3857 one. Mixed SRIDs do not break
	// ST_Intersects.
	in4326, err := s.List(ctx, d, broker.Filter{}, &postgis.ListOptions{IncludeReplayed: true, Intersects: &orb.Bound{Max: orb.Point{1, 1}}})
	require.NoError(t, err)
	require.Len(t, in4326, len(msgs)-1)
	in3857, err := s.List(ctx, d, broker.Filter{}, &postgis.ListOptions{Intersects: &orb.Bound{Max: orb.Point{1, 1}}, SRID: 3857})
	require.NoError(t, err)
	require.Len(t, in3857, 1)
	require.Equal(t, 3857, in3857[0].SRID)
	away, err := s.List(ctx, d, broker.Filter{}, &postgis.ListOptions{Intersects: &orb.Bound{Min: orb.Point{2, 2}, Max: orb.Point{3, 3}}})
	require.NoError(t, err)
	require.Empty(t, away)

	n, err := s.Purge(ctx, d, time.Now().Add(time.Hour))
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "only replayed records are purged")
	require.Equal(t, len(msgs)-1, count(t, s, "destination = $1", d))
}

// TestLogger: duplicates and geometries PostGIS refuses are logged at
// debug level.
func TestLogger(t *testing.T) {
	ctx := context.Background()
	var buf bytes.Buffer
	var mu sync.Mutex
	h := slog.NewTextHandler(&lockedWriter{w: &buf, mu: &mu}, &slog.HandlerOptions{Level: slog.LevelDebug})
	s := newStore(t, &postgis.Options{Logger: slog.New(h)})
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
