package mysql_test

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/paulmach/orb"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/brokertest"
	"github.com/geodlq/geodlq/broker/mysql"
	"github.com/geodlq/geodlq/broker/mysql/internal/mysqltest"
	"github.com/geodlq/geodlq/classify"
)

func maxAllowedPacket(t *testing.T, db *sql.DB) int {
	var p int
	require.NoError(t, db.QueryRow(`SELECT @@max_allowed_packet`).Scan(&p))
	return p
}

func tableCount(t *testing.T, db *sql.DB) int {
	var n int
	require.NoError(t, db.QueryRow(`SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE()`).Scan(&n))
	return n
}

func TestNewOptions(t *testing.T) {
	ctx := context.Background()
	db := mysqltest.NewDB(t)
	packet := maxAllowedPacket(t, db)
	tests := []struct {
		name string
		db   *sql.DB
		opts *mysql.Options
		want string
	}{
		{"nil db", nil, nil, "nil *sql.DB"},
		{"upper-case table", db, &mysql.Options{Table: "Dead"}, "must match"},
		{"table with a dash", db, &mysql.Options{Table: "dead-letters"}, "must match"},
		{"table too long", db, &mysql.Options{Table: strings.Repeat("t", 49)}, "at most 48"},
		{"lease under 1ms", db, &mysql.Options{StoreOptions: broker.StoreOptions{LeaseTTL: time.Microsecond}}, "under 1ms"},
		{"negative limit", db, &mysql.Options{StoreOptions: broker.StoreOptions{MaxMessageBytes: -1}}, "negative"},
		{"limit the packet cannot carry", db, &mysql.Options{Create: true, StoreOptions: broker.StoreOptions{MaxMessageBytes: packet}}, "max_allowed_packet"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := mysql.New(ctx, tc.db, tc.opts)
			require.ErrorIs(t, err, broker.ErrInvalidArgument)
			require.ErrorContains(t, err, tc.want)
		})
	}
	require.Zero(t, tableCount(t, db), "refused options create nothing")
}

// TestDefaultLimitFitsThePacket: the default body limit is read from the
// server (max_allowed_packet less 1 MiB), a body of exactly that size is
// stored and read back byte for byte, and a row the packet cannot carry
// (the body with huge headers) is refused whole.
func TestDefaultLimitFitsThePacket(t *testing.T) {
	ctx := context.Background()
	db := mysqltest.NewDB(t)
	s, err := mysql.New(ctx, db, &mysql.Options{Create: true})
	require.NoError(t, err)
	defer s.Close()
	packet := maxAllowedPacket(t, db)
	limit := s.MaxMessageBytes("any")
	require.Equal(t, min(packet-1<<20, mysql.DefaultMaxMessageBytes), limit)

	body := make([]byte, limit)
	for i := range body {
		body[i] = byte(i * 7)
	}
	require.NoError(t, s.Publish(ctx, "big", &broker.Message{Body: body, Key: []byte("k")}))
	err = s.Publish(ctx, "big", &broker.Message{Body: append(body, 0)})
	require.ErrorIs(t, err, classify.ErrTooLarge, "one byte over the limit")
	err = s.Publish(ctx, "big", &broker.Message{Body: body, Headers: map[string]string{"x": strings.Repeat("h", 2<<20)}})
	require.ErrorIs(t, err, classify.ErrTooLarge, "a row over max_allowed_packet is refused before it is sent")
	recs, err := s.Fetch(ctx, "big", broker.Filter{}, 10)
	require.NoError(t, err)
	require.Len(t, recs, 1, "only the body within the limit was stored")
	require.True(t, bytes.Equal(body, recs[0].Message.Body), "byte for byte")
	require.NoError(t, s.Ack(ctx, recs[0]))
}

// TestBytesRoundTrip: keys, headers and bodies that are not text come
// back exactly; a nil key stays nil.
func TestBytesRoundTrip(t *testing.T) {
	ctx := context.Background()
	s, err := mysql.New(ctx, mysqltest.NewDB(t), &mysql.Options{Create: true})
	require.NoError(t, err)
	defer s.Close()
	msgs := []*broker.Message{
		{Body: nil},
		{Body: []byte{}, Key: []byte{}},
		{Body: []byte("\x00\xff\xfe"), Key: []byte{0, 0xff}, Headers: map[string]string{
			"caf\xe9": "v\x00\xff", "plain": "ünï 🗺", "": "", "nul": "\x00",
		}},
	}
	for _, m := range msgs {
		require.NoError(t, s.Publish(ctx, "bytes", m))
	}
	recs, err := s.Fetch(ctx, "bytes", broker.Filter{}, 10)
	require.NoError(t, err)
	require.Len(t, recs, len(msgs))
	require.Nil(t, recs[0].Message.Key)
	require.NotNil(t, recs[0].Message.Body)
	require.Empty(t, recs[0].Message.Body)
	require.NotNil(t, recs[1].Message.Key)
	require.Empty(t, recs[1].Message.Key)
	require.Equal(t, msgs[2].Key, recs[2].Message.Key)
	require.Equal(t, msgs[2].Body, recs[2].Message.Body)
	require.Equal(t, msgs[2].Headers, recs[2].Message.Headers)
	for _, r := range recs {
		require.Equal(t, 1, r.Deliveries)
		require.Equal(t, 1, r.Message.DeliveryAttempt)
	}
}

// TestDestinationsAreBytes: destinations differing in case or trailing
// space are distinct (the columns are binary, not a case-insensitive
// collation).
func TestDestinationsAreBytes(t *testing.T) {
	ctx := context.Background()
	s, err := mysql.New(ctx, mysqltest.NewDB(t), &mysql.Options{Create: true})
	require.NoError(t, err)
	defer s.Close()
	names := []string{"dlq", "DLQ", "dlq ", "dlq.ü"}
	for _, n := range names {
		require.NoError(t, s.Publish(ctx, n, brokertest.Message(t, brokertest.SampleInputs()[0])))
	}
	for _, n := range names {
		recs, err := s.Fetch(ctx, n, broker.Filter{}, 10)
		require.NoError(t, err)
		require.Len(t, recs, 1, n)
	}
	ds, err := s.Destinations(ctx)
	require.NoError(t, err)
	require.ElementsMatch(t, names, ds)
}

// TestReadOnly: a read-only store runs no migration, refuses every write
// with ErrReadOnly, and reads.
func TestReadOnly(t *testing.T) {
	ctx := context.Background()
	db := mysqltest.NewDB(t)
	_, err := mysql.New(ctx, db, &mysql.Options{StoreOptions: broker.StoreOptions{ReadOnly: true}, Create: true})
	require.ErrorIs(t, err, broker.ErrNoStore, "read-only never creates")
	require.Zero(t, tableCount(t, db), "and writes nothing")

	_, err = db.Exec("CREATE TABLE `" + mysql.DefaultTable + "` (id INT PRIMARY KEY)")
	require.NoError(t, err)
	_, err = mysql.New(ctx, db, &mysql.Options{StoreOptions: broker.StoreOptions{ReadOnly: true}})
	require.ErrorIs(t, err, broker.ErrNoStore, "a table of the same name that is not geodlq's")
	_, err = mysql.New(ctx, db, &mysql.Options{Create: true})
	require.ErrorIs(t, err, broker.ErrNoStore, "is never migrated or written, not even with Create")
	_, err = db.Exec("DROP TABLE `" + mysql.DefaultTable + "`")
	require.NoError(t, err)

	rw, err := mysql.New(ctx, db, &mysql.Options{Create: true})
	require.NoError(t, err)
	require.NoError(t, rw.Publish(ctx, "d", brokertest.Message(t, brokertest.SampleInputs()[0])))
	ro, err := mysql.New(ctx, db, &mysql.Options{StoreOptions: broker.StoreOptions{ReadOnly: true}})
	require.NoError(t, err)
	p, err := ro.List(ctx, broker.ListOptions{})
	require.NoError(t, err)
	require.Len(t, p.Entries, 1)
	counts, err := ro.Stats(ctx, broker.StatsOptions{})
	require.NoError(t, err)
	require.Len(t, counts, 1)
	_, err = ro.Purge(ctx, broker.PurgeRequest{Filter: broker.Filter{Until: time.Now()}, IncludePending: true, DryRun: true})
	require.NoError(t, err, "a dry run purge reads only")

	require.ErrorIs(t, ro.Publish(ctx, "d", &broker.Message{Body: []byte("x")}), broker.ErrReadOnly)
	_, err = ro.Fetch(ctx, "d", broker.Filter{}, 1)
	require.ErrorIs(t, err, broker.ErrReadOnly, "a fetch leases: it writes")
	recs, err := rw.Fetch(ctx, "d", broker.Filter{}, 1)
	require.NoError(t, err)
	require.ErrorIs(t, ro.Ack(ctx, recs[0]), broker.ErrReadOnly)
	require.ErrorIs(t, ro.Release(ctx, recs[0]), broker.ErrReadOnly)
	_, err = ro.Purge(ctx, broker.PurgeRequest{Filter: broker.Filter{Until: time.Now()}, IncludePending: true})
	require.ErrorIs(t, err, broker.ErrReadOnly)
	require.NoError(t, rw.Ack(ctx, recs[0]))
}

// TestMigrate: New creates the table once however many processes race,
// records the version, and refuses a table newer than the package.
func TestMigrate(t *testing.T) {
	ctx := context.Background()
	db := mysqltest.NewDB(t)
	_, err := mysql.New(ctx, db, nil)
	require.ErrorIs(t, err, broker.ErrNoStore, "without Create a missing table is no store")
	require.Zero(t, tableCount(t, db))

	var wg sync.WaitGroup
	errs := make([]error, 6)
	for i := range errs {
		wg.Go(func() {
			s, err := mysql.New(ctx, db, &mysql.Options{Create: true, Table: "dl"})
			if err == nil {
				err = s.Close()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	var v, n int
	require.NoError(t, db.QueryRow("SELECT MAX(version), COUNT(*) FROM `dl_migrations`").Scan(&v, &n))
	require.Equal(t, mysql.SchemaVersion, v)
	require.Equal(t, mysql.SchemaVersion, n, "each step recorded once")
	_, err = mysql.New(ctx, db, &mysql.Options{Table: "dl"})
	require.NoError(t, err, "an existing store opens without Create")

	_, err = db.Exec("INSERT INTO `dl_migrations` (version, name, applied_at) VALUES (?, 'from the future', UTC_TIMESTAMP(6))", mysql.SchemaVersion+1)
	require.NoError(t, err)
	_, err = mysql.New(ctx, db, &mysql.Options{Table: "dl"})
	require.ErrorContains(t, err, "newer than this package")
	_, err = mysql.New(ctx, db, &mysql.Options{Table: "dl", StoreOptions: broker.StoreOptions{ReadOnly: true}})
	require.ErrorContains(t, err, "schema version")
}

// TestLeaseOnTheDatabaseClock: a lease lasts LeaseTTL by the server's
// clock; deliveries count every lease; Ack after expiry works until
// another fetch takes the record.
func TestLeaseOnTheDatabaseClock(t *testing.T) {
	ctx := context.Background()
	db := mysqltest.NewDB(t)
	s, err := mysql.New(ctx, db, &mysql.Options{Create: true, StoreOptions: broker.StoreOptions{LeaseTTL: 300 * time.Millisecond}})
	require.NoError(t, err)
	defer s.Close()
	require.NoError(t, s.Publish(ctx, "d", brokertest.Message(t, brokertest.SampleInputs()[0])))
	first, err := s.Fetch(ctx, "d", broker.Filter{}, 1)
	require.NoError(t, err)
	require.Len(t, first, 1)
	var left float64
	require.NoError(t, db.QueryRow("SELECT TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), lease_until) / 1e6 FROM `"+mysql.DefaultTable+"`").Scan(&left))
	require.InDelta(t, 0.3, left, 0.2, "lease_until = UTC_TIMESTAMP(6) + LeaseTTL")
	none, err := s.Fetch(ctx, "d", broker.Filter{}, 1)
	require.NoError(t, err)
	require.Empty(t, none, "leased")
	time.Sleep(400 * time.Millisecond)
	require.NoError(t, s.Release(ctx, first[0]), "after expiry, before a takeover, the holder still settles")
	again, err := s.Fetch(ctx, "d", broker.Filter{}, 1)
	require.NoError(t, err)
	require.Len(t, again, 1)
	require.Equal(t, 2, again[0].Deliveries)
	require.NotEqual(t, first[0].Lease, again[0].Lease)
	require.ErrorIs(t, s.Ack(ctx, first[0]), broker.ErrLeaseLost)
	forged := *again[0]
	forged.Lease = "zz"
	require.ErrorIs(t, s.Ack(ctx, &forged), broker.ErrLeaseLost, "a lease this store did not hand out")
	require.NoError(t, s.Ack(ctx, again[0]))
}

// TestFiltersInSQL: record ids, reason kinds and bounding boxes select in
// SQL (the portable store would mask a driver that filters less, so the
// driver is asked directly).
func TestFiltersInSQL(t *testing.T) {
	ctx := context.Background()
	s, err := mysql.New(ctx, mysqltest.NewDB(t), &mysql.Options{Create: true})
	require.NoError(t, err)
	defer s.Close()
	in := brokertest.FilterInputs()
	for _, m := range brokertest.Messages(t, in) {
		require.NoError(t, s.Publish(ctx, "f", m))
	}
	require.NoError(t, s.Publish(ctx, "f", &broker.Message{Body: []byte("not an envelope")}))
	lister := s.Driver().(broker.Lister)
	all, err := lister.List(ctx, broker.ListOptions{Destination: "f", Limit: 100})
	require.NoError(t, err)
	require.Len(t, all.Entries, len(in)+1)
	for name, f := range map[string]broker.Filter{
		"ids":          {IDs: []string{all.Entries[1].Record.ID, all.Entries[3].Record.ID, "nope", "007"}},
		"reason kinds": {ReasonKinds: []classify.ReasonKind{classify.KindOfReason("Self-intersection[x y]")}},
		"bbox":         {BBox: &orb.Bound{Min: orb.Point{0, 0}, Max: orb.Point{1, 1}}},
		"since":        {Since: brokertest.FilterBaseTime.Add(2*time.Hour + 1)},
	} {
		t.Run(name, func(t *testing.T) {
			var want []string
			for _, e := range all.Entries {
				if f.MatchRecord(e.Record) {
					want = append(want, e.Record.ID)
				}
			}
			require.NotEmpty(t, want)
			p, err := lister.List(ctx, broker.ListOptions{Destination: "f", Filter: f, Limit: 100})
			require.NoError(t, err)
			var got []string
			for _, e := range p.Entries {
				got = append(got, e.Record.ID)
			}
			require.Equal(t, want, got)
			recs, err := s.Driver().Fetch(ctx, "f", f, 100)
			require.NoError(t, err)
			got = got[:0]
			for _, r := range recs {
				got = append(got, r.ID)
				require.NoError(t, s.Release(ctx, r))
			}
			require.Equal(t, want, got)
		})
	}
}

// TestStatsBuckets: counts per triage columns and time bucket, statuses
// included.
func TestStatsBuckets(t *testing.T) {
	ctx := context.Background()
	s, err := mysql.New(ctx, mysqltest.NewDB(t), &mysql.Options{Create: true})
	require.NoError(t, err)
	defer s.Close()
	in := brokertest.FilterInputs()
	for _, m := range brokertest.Messages(t, in) {
		require.NoError(t, s.Publish(ctx, "st", m))
	}
	recs, err := s.Fetch(ctx, "st", broker.Filter{}, 2)
	require.NoError(t, err)
	require.NoError(t, s.Ack(ctx, recs[0]))
	counts, err := s.Stats(ctx, broker.StatsOptions{Destination: "st", Bucket: 3 * time.Hour})
	require.NoError(t, err)
	var pending, leased, replayed int
	buckets := map[time.Time]int{}
	for _, c := range counts {
		pending, leased, replayed = pending+c.Pending, leased+c.Leased, replayed+c.Replayed
		buckets[c.Bucket] += c.Total()
		require.Zero(t, c.Bucket.UnixNano()%int64(3*time.Hour), "buckets start at multiples of the bucket since the epoch")
	}
	require.Equal(t, []int{len(in) - 2, 1, 1}, []int{pending, leased, replayed})
	// Hours 0..8 after 12:00 in 3-hour buckets from 12:00: 3, 3, 3.
	require.Len(t, buckets, 3)
	for b, n := range buckets {
		require.Equal(t, 3, n, "bucket %v", b)
	}
}

// TestPurgeReplayedOnly: without IncludePending only acknowledged rows
// go; a purge across destinations names records "destination/id"; a
// purge by event id takes exactly those events.
func TestPurgeReplayedOnly(t *testing.T) {
	ctx := context.Background()
	s, err := mysql.New(ctx, mysqltest.NewDB(t), &mysql.Options{Create: true})
	require.NoError(t, err)
	defer s.Close()
	in := brokertest.FilterInputs()
	for _, d := range []string{"p1", "p2"} {
		for _, m := range brokertest.Messages(t, in[:3]) {
			require.NoError(t, s.Publish(ctx, d, m))
		}
	}
	recs, err := s.Fetch(ctx, "p1", broker.Filter{}, 1)
	require.NoError(t, err)
	require.NoError(t, s.Ack(ctx, recs[0]))
	future := time.Now().Add(time.Hour)

	res, err := s.Purge(ctx, broker.PurgeRequest{Filter: broker.Filter{Until: future}})
	require.NoError(t, err)
	require.Equal(t, []string{"p1/" + recs[0].ID}, res.IDs, "only the replayed record, named with its destination")

	res, err = s.Purge(ctx, broker.PurgeRequest{Destination: "p2", IncludePending: true,
		Filter: broker.Filter{EventIDs: []string{"evt-filter-1", "evt-filter-9"}}})
	require.NoError(t, err)
	require.Len(t, res.IDs, 1, "one event of p2")
	p, err := s.List(ctx, broker.ListOptions{IncludeReplayed: true, Limit: 100})
	require.NoError(t, err)
	require.Len(t, p.Entries, 4, "2 left in p1, 2 in p2")
}

func TestNewConsumerArguments(t *testing.T) {
	ctx := context.Background()
	db := mysqltest.NewDB(t)
	s, err := mysql.New(ctx, db, &mysql.Options{Create: true})
	require.NoError(t, err)
	defer s.Close()
	proc, err := broker.NewProcessor(&broker.ProcessorOptions{Publisher: s,
		Destination: func(*broker.Message, classify.Route) string { return "dlq" }})
	require.NoError(t, err)
	for name, call := range map[string]func() error{
		"nil store":       func() error { _, err := mysql.NewConsumer(nil, "src", proc, nil); return err },
		"bad destination": func() error { _, err := mysql.NewConsumer(s, "", proc, nil); return err },
		"bad filter": func() error {
			_, err := mysql.NewConsumer(s, "src", proc, &mysql.ConsumerOptions{Filter: broker.Filter{Classes: []classify.Class{"nope"}}})
			return err
		},
	} {
		require.ErrorIs(t, call(), broker.ErrInvalidArgument, name)
	}
	ro, err := mysql.New(ctx, db, &mysql.Options{StoreOptions: broker.StoreOptions{ReadOnly: true}})
	require.NoError(t, err)
	_, err = mysql.NewConsumer(ro, "src", proc, nil)
	require.ErrorIs(t, err, broker.ErrReadOnly, "a read-only store is not consumed")
	c, err := mysql.NewConsumer(s, "src", proc, nil)
	require.NoError(t, err)
	require.NoError(t, c.Close())
}

// TestConflictsAreRetried: Ack, Release and Purge that wait on a row
// another transaction holds past innodb_lock_wait_timeout (error 1205)
// are run again until the row is free, instead of failing.
func TestConflictsAreRetried(t *testing.T) {
	ctx := context.Background()
	cfg := mysqltest.Database(t)
	plain := mysqltest.Open(t, cfg)
	sc := cfg.Clone()
	if sc.Params == nil {
		sc.Params = map[string]string{}
	}
	sc.Params["innodb_lock_wait_timeout"] = "1"
	s, err := mysql.New(ctx, mysqltest.Open(t, sc), &mysql.Options{Create: true, Table: "dl"})
	require.NoError(t, err)
	defer s.Close()
	for _, m := range brokertest.Messages(t, brokertest.FilterInputs()[:3]) {
		require.NoError(t, s.Publish(ctx, "locked", m))
	}
	recs, err := s.Fetch(ctx, "locked", broker.Filter{}, 3)
	require.NoError(t, err)
	require.Len(t, recs, 3)

	// Each operation waits on a row lock held for 2.5s: two lock-wait
	// timeouts, then success.
	held := func(id string, op func() error) {
		t.Helper()
		tx, err := plain.BeginTx(ctx, nil)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback() }()
		var one int
		require.NoError(t, tx.QueryRowContext(ctx, "SELECT 1 FROM `dl` WHERE id = ? FOR UPDATE", id).Scan(&one))
		done := make(chan error, 1)
		go func() { done <- op() }()
		time.Sleep(2500 * time.Millisecond)
		select {
		case err := <-done:
			t.Fatalf("returned while the row was locked: %v", err)
		default:
		}
		require.NoError(t, tx.Commit())
		require.NoError(t, <-done, "retried its lock-wait timeouts until the row was free")
	}
	held(recs[0].ID, func() error { return s.Ack(ctx, recs[0]) })
	held(recs[1].ID, func() error { return s.Release(ctx, recs[1]) })
	held(recs[0].ID, func() error {
		res, err := s.Purge(ctx, broker.PurgeRequest{Destination: "locked", Filter: broker.Filter{Until: time.Now().Add(time.Hour)}})
		if err == nil && len(res.IDs) != 1 {
			err = fmt.Errorf("purged %v, want the acknowledged record", res.IDs)
		}
		return err
	})
}

// TestStatsAgreeWithListing: Stats groups by the raw columns in the stats
// index's order and merges NULL with empty fields and envelopes with the
// rest afterwards; its counts by source, with and without a destination,
// must equal those computed from every record's summary, opaque messages
// (no class, no source) included.
func TestStatsAgreeWithListing(t *testing.T) {
	ctx := context.Background()
	s, err := mysql.New(ctx, mysqltest.NewDB(t), &mysql.Options{Create: true})
	require.NoError(t, err)
	defer s.Close()
	for i, m := range brokertest.Messages(t, brokertest.FilterInputs()) {
		require.NoError(t, s.Publish(ctx, []string{"sa", "sb"}[i%2], m))
	}
	for i := range 3 {
		require.NoError(t, s.Publish(ctx, "sa", &broker.Message{Body: []byte(fmt.Sprintf("not an envelope %d", i))}))
	}
	recs, err := s.Fetch(ctx, "sa", broker.Filter{}, 1)
	require.NoError(t, err)
	require.NoError(t, s.Ack(ctx, recs[0]))

	type key struct {
		dest, class, stage, kind, source string
		epsg                             int
	}
	want := map[key]int{}
	all := 0
	err = s.ScanAll(ctx, broker.ListOptions{IncludeReplayed: true, Summaries: true}, func(e broker.Entry) error {
		sum := e.Summary
		want[key{e.Record.Destination, string(sum.Class), string(sum.Stage), string(sum.ReasonKind), sum.Source, sum.EPSG}]++
		all++
		return nil
	})
	require.NoError(t, err)
	require.Greater(t, all, 10)
	for _, tc := range []struct {
		name string
		dest string
	}{{"every destination", ""}, {"one destination", "sa"}} {
		t.Run(tc.name, func(t *testing.T) {
			counts, err := s.Stats(ctx, broker.StatsOptions{Destination: tc.dest, BySource: true})
			require.NoError(t, err)
			got := map[key]int{}
			for _, c := range counts {
				k := key{c.Destination, string(c.Class), string(c.Stage), string(c.ReasonKind), c.Source, c.EPSG}
				_, dup := got[k]
				require.False(t, dup, "one count per key: %+v", k)
				got[k] = c.Total()
			}
			exp := map[key]int{}
			for k, n := range want {
				if tc.dest == "" || k.dest == tc.dest {
					exp[k] = n
				}
			}
			require.Equal(t, exp, got)
			require.True(t, slices.IsSortedFunc(counts, broker.CompareCounts), "in CompareCounts order")
		})
	}
}
