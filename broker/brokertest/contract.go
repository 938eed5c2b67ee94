package brokertest

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/offload"
)

// testLeaseTakeover: a holder whose lease expired and was taken over by
// another consumer can neither acknowledge nor release the record; the new
// holder can.
func testLeaseTakeover(t *testing.T, h Harness) {
	unsupported(t, h, CapLeaseLost)
	caps := h.Capabilities()
	require.Positive(t, caps.LeaseExpiry, "harness must declare LeaseExpiry")
	old, nw := makeStore(t, h), reopen(t, h)
	d := dest(t, "takeover")
	publish(t, old, d, Messages(t, SampleInputs()[:2])...)
	stale := drain(t, old, d, broker.Filter{})
	require.Len(t, stale, 2)
	var taken []*broker.Record
	deadline := time.Now().Add(caps.LeaseExpiry*3 + 10*time.Second)
	for time.Now().Before(deadline) && len(taken) < 2 {
		time.Sleep(caps.LeaseExpiry / 4)
		taken = append(taken, drain(t, nw, d, broker.Filter{})...)
	}
	require.Len(t, taken, 2, "the expired leases are taken over")
	ctx := context.Background()
	require.ErrorIs(t, old.Ack(ctx, stale[0]), broker.ErrLeaseLost, "an Ack from the holder whose lease was taken over fails")
	require.ErrorIs(t, old.Release(ctx, stale[1]), broker.ErrLeaseLost, "so does a Release")
	require.Empty(t, drain(t, nw, d, broker.Filter{}), "the stale Release gave nothing back: the new holder still holds the records")
	ackAll(t, nw, taken)
	require.Empty(t, drain(t, reopen(t, h), d, broker.Filter{}), "the new holder's acks are final")
}

// testSizeLimitReported: a declared size limit is the store's
// MaxMessageBytes, so that a Processor shrinks envelopes under it (by
// offloading) and an oversized event is dead-lettered instead of being
// redelivered forever.
func testSizeLimitReported(t *testing.T, h Harness) {
	unsupported(t, h, CapSizeLimit)
	limit := h.Capabilities().MaxMessageBytes
	require.Positive(t, limit, "harness must declare MaxMessageBytes or CapSizeLimit unsupported")
	s := makeStore(t, h)
	d := dest(t, "limit")
	require.Equal(t, limit, s.MaxMessageBytes(d), "the store reports the limit it enforces")

	off, err := offload.New(offload.NewMemStore(), nil)
	require.NoError(t, err)
	b, err := envelope.NewBuilder(&envelope.BuilderOptions{Offloader: off})
	require.NoError(t, err)
	proc, err := broker.NewProcessor(&broker.ProcessorOptions{Publisher: s, Builder: b,
		Destination: func(*broker.Message, classify.Route) string { return d }})
	require.NoError(t, err)
	// A polygon ring well over the limit.
	var ring strings.Builder
	for i := 0; ring.Len() < 2*limit; i++ {
		fmt.Fprintf(&ring, "[%d.5,%d.25],", i, i%90)
	}
	payload := []byte(`{"event_id":"evt-huge","geometry":{"type":"LineString","coordinates":[` + strings.TrimSuffix(ring.String(), ",") + `]}}`)
	res, err := proc.Process(context.Background(), &broker.Message{Body: payload}, func(context.Context, *broker.Message) error {
		return classify.InvalidGeometry(errors.New("too big to be valid"))
	})
	require.NoError(t, err, "an event larger than the store's limit is dead-lettered, not refused forever")
	require.True(t, res.DeadLettered)
	got := drain(t, s, d, broker.Filter{})
	require.Len(t, got, 1)
	require.LessOrEqual(t, len(got[0].Message.Body), limit)
	env, err := envelope.Decode(got[0].Message.Body)
	require.NoError(t, err)
	restored, err := env.Restore(context.Background(), off)
	require.NoError(t, err)
	require.Equal(t, payload, restored, "the offloaded event restores byte for byte")
	ackAll(t, s, got)
}

// testClosed: after Close every operation fails with an error wrapping
// broker.ErrClosed, and Close is idempotent.
func testClosed(t *testing.T, h Harness) {
	s := reopen(t, h)
	d := dest(t, "closed")
	publish(t, s, d, Messages(t, SampleInputs()[:1])...)
	recs := drain(t, s, d, broker.Filter{})
	require.Len(t, recs, 1)
	first := s.Close()
	require.Equal(t, first, s.Close(), "a second Close returns what the first did")
	ctx := context.Background()
	checks := map[string]error{
		"Publish": s.Publish(ctx, d, Message(t, SampleInputs()[0])),
		"Ack":     s.Ack(ctx, recs[0]),
		"Release": s.Release(ctx, recs[0]),
	}
	_, checks["Fetch"] = s.Fetch(ctx, d, broker.Filter{}, 1)
	_, checks["List"] = s.List(ctx, broker.ListOptions{})
	_, checks["Stats"] = s.Stats(ctx, broker.StatsOptions{})
	_, checks["Purge"] = s.Purge(ctx, broker.PurgeRequest{Filter: broker.Filter{Until: time.Now()}})
	_, checks["Destinations"] = s.Destinations(ctx)
	for op, err := range checks {
		require.ErrorIs(t, err, broker.ErrClosed, "%s after Close", op)
	}
	other := reopen(t, h)
	again := drain(t, other, d, broker.Filter{})
	if len(again) == 0 {
		// The closed handle's lease is still live: wait for it.
		if exp := h.Capabilities().LeaseExpiry; exp > 0 {
			deadline := time.Now().Add(exp*3 + 10*time.Second)
			for time.Now().Before(deadline) && len(again) == 0 {
				time.Sleep(exp / 4)
				again = drain(t, other, d, broker.Filter{})
			}
		}
	}
	require.Len(t, again, 1, "closing a handle loses nothing")
	ackAll(t, other, again)
}

// testInterruptedPublish: a Publish whose context is cancelled at a random
// point reports the write's true outcome: when it returns an error, the
// message is not in the store, so the retry a redelivery makes stores it
// exactly once; when it returns nil, the message is there once.
func testInterruptedPublish(t *testing.T, h Harness) {
	s := makeStore(t, h)
	d := dest(t, "interrupted")
	tmpl := Message(t, SampleInputs()[0])
	ctx := context.Background()
	// The typical write time, to cancel inside it.
	var lat []time.Duration
	for i := range 5 {
		m := &broker.Message{Body: VariantBody(t, tmpl.Body, 1_000_000+i)}
		start := time.Now()
		require.NoError(t, s.Publish(ctx, d, m))
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	typical := max(lat[len(lat)/2], 50*time.Microsecond)
	n := h.Capabilities().InterruptedPublishes
	if n == 0 {
		n = 200
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	want := map[[32]byte]int{}
	var failed, unknown int
	for i := range n {
		body := VariantBody(t, tmpl.Body, i)
		want[sha256.Sum256(body)] = 0
		cctx, cancel := context.WithCancel(ctx)
		delay := time.Duration(rng.Int64N(int64(2 * typical)))
		timer := time.AfterFunc(delay, cancel)
		err := s.Publish(cctx, d, &broker.Message{Body: body, Key: []byte("k")})
		timer.Stop()
		cancel()
		if err == nil {
			continue
		}
		failed++
		if errors.Is(err, broker.ErrOutcomeUnknown) {
			unknown++
		}
		// The source redelivers: the event is dead-lettered again.
		require.NoError(t, s.Publish(ctx, d, &broker.Message{Body: body, Key: []byte("k")}), "the retry of write %d", i)
	}
	require.Zero(t, unknown, "a cancelled write's outcome stays known while the store answers within the grace")
	recs := drain(t, reopen(t, h), d, broker.Filter{})
	for _, r := range recs {
		sum := sha256.Sum256(r.Message.Body)
		if c, ok := want[sum]; ok {
			want[sum] = c + 1
		}
	}
	for sum, c := range want {
		require.Equal(t, 1, c, "message %x is stored exactly once (%d of %d publishes were interrupted and retried)", sum[:6], failed, n)
	}
	t.Logf("%d of %d publishes cancelled before they started and retried; none stored twice", failed, n)
}

// testListing checks List, Destinations and Stats when the adapter lists:
// pages cover every record once, in order, in both directions; filters;
// statuses; counts.
func testListing(t *testing.T, h Harness) {
	s := makeStore(t, h)
	if _, ok := s.Driver().(broker.Lister); !ok {
		t.Skipf("adapter %s has no broker.Lister: List and Destinations answer errors.ErrUnsupported", s.Name())
	}
	ctx := context.Background()
	d := dest(t, "listing")
	msgs := Messages(t, FilterInputs())
	publish(t, s, d, msgs...)
	other := dest(t, "listing-other")
	publish(t, s, other, Messages(t, SampleInputs()[:1])...)

	ds, err := s.Destinations(ctx)
	require.NoError(t, err)
	require.Contains(t, ds, d)
	require.Contains(t, ds, other)

	page := func(newest bool, limit int) []string {
		var ids []string
		opts := broker.ListOptions{Destination: d, Descending: newest, Limit: limit}
		for range 1000 {
			p, err := s.List(ctx, opts)
			require.NoError(t, err)
			require.LessOrEqual(t, len(p.Entries), limit)
			for _, e := range p.Entries {
				require.Equal(t, d, e.Record.Destination)
				require.Empty(t, e.Record.Lease, "listing leases nothing")
				ids = append(ids, e.Record.ID)
			}
			if p.Next == "" {
				return ids
			}
			opts.After = p.Next
		}
		t.Fatal("List never returned a last page")
		return nil
	}
	all := page(false, 1000)
	require.Len(t, all, len(msgs), "one page holds every record")
	for _, limit := range []int{1, 2, 3, 7} {
		require.Equal(t, all, page(false, limit), "pages of %d cover every record once, oldest first", limit)
		rev := page(true, limit)
		slices.Reverse(rev)
		require.Equal(t, all, rev, "newest first is the reverse")
	}
	p, err := s.List(ctx, broker.ListOptions{Destination: d, Filter: broker.Filter{Classes: []classify.Class{classify.ClassInvalidGeometry}}, Limit: 1000})
	require.NoError(t, err)
	var want int
	for _, m := range msgs {
		if e, err := envelope.Decode(m.Body); err == nil && e.FailureClass == classify.ClassInvalidGeometry {
			want++
		}
	}
	require.Len(t, p.Entries, want, "List filters")
	first, err := s.List(ctx, broker.ListOptions{Destination: d, Filter: broker.Filter{IDs: []string{all[0]}}})
	require.NoError(t, err)
	require.Len(t, first.Entries, 1, "List by record id")
	require.Equal(t, all[0], first.Entries[0].Record.ID)

	leased := drain(t, s, d, broker.Filter{IDs: []string{all[0]}})
	require.Len(t, leased, 1, "Fetch by record id")
	p, err = s.List(ctx, broker.ListOptions{Destination: d, Limit: 1000})
	require.NoError(t, err)
	require.Len(t, p.Entries, len(msgs), "a leased record is still listed")
	require.Contains(t, []broker.Status{broker.StatusLeased, broker.StatusPending, ""}, p.Entries[0].Status)

	counts, err := s.Stats(ctx, broker.StatsOptions{Destination: d})
	require.NoError(t, err)
	total := 0
	for _, c := range counts {
		require.Equal(t, d, c.Destination)
		total += c.Pending + c.Leased
	}
	require.Equal(t, len(msgs), total, "Stats counts every record")

	ackAll(t, s, leased)
	p, err = s.List(ctx, broker.ListOptions{Destination: d, Limit: 1000})
	require.NoError(t, err)
	require.Len(t, p.Entries, len(msgs)-1, "an acknowledged record is not listed as pending")
	rest := drain(t, s, d, broker.Filter{})
	ackAll(t, s, rest)
	ackAll(t, s, drain(t, s, other, broker.Filter{}))
}

// testPurge checks Purge when the adapter purges: it refuses to delete
// everything by accident, deletes nothing in a dry run, never deletes a
// leased record, and reports the blobs the deleted envelopes referenced.
func testPurge(t *testing.T, h Harness) {
	s := makeStore(t, h)
	if _, ok := s.Driver().(broker.Purger); !ok {
		t.Skipf("adapter %s has no broker.Purger: Purge answers errors.ErrUnsupported", s.Name())
	}
	ctx := context.Background()
	_, err := s.Purge(ctx, broker.PurgeRequest{})
	require.ErrorIs(t, err, broker.ErrInvalidArgument, "a purge without a bound is refused")

	d := dest(t, "purge")
	off, err := offload.New(offload.NewMemStore(), &offload.Options{Threshold: 16})
	require.NoError(t, err)
	b, err := envelope.NewBuilder(&envelope.BuilderOptions{Offloader: off})
	require.NoError(t, err)
	var msgs []*broker.Message
	for i := range 6 {
		_, body, err := b.Build(ctx, envelope.Input{
			Payload:        []byte(fmt.Sprintf(`{"event_id":"evt-purge-%d","geometry":{"type":"LineString","coordinates":[[0,0],[%d,1],[2,2]]}}`, i, i%2)),
			IdempotencyKey: fmt.Sprintf("idem:test:purge:%d", i), Err: classify.InvalidGeometry(errors.New("x")),
		})
		require.NoError(t, err)
		msgs = append(msgs, &broker.Message{Body: body})
	}
	publish(t, s, d, msgs...)
	all := drain(t, s, d, broker.Filter{})
	require.Len(t, all, 6)
	releaseAll(t, s, all)
	held := drain(t, s, d, broker.Filter{IDs: []string{all[0].ID}})
	require.Len(t, held, 1)

	future := time.Now().Add(time.Hour)
	req := broker.PurgeRequest{Destination: d, Filter: broker.Filter{Until: future}, IncludePending: true, DryRun: true}
	dry, err := s.Purge(ctx, req)
	require.NoError(t, err)
	require.Len(t, dry.IDs, 5, "the leased record is never purged")
	require.NotContains(t, dry.IDs, all[0].ID)
	require.NotEmpty(t, dry.BlobURIs, "the deleted envelopes' offloaded geometries are reported")
	left := drain(t, s, d, broker.Filter{})
	require.Len(t, left, 5, "a dry run deletes nothing")
	releaseAll(t, s, left)

	byID, err := s.Purge(ctx, broker.PurgeRequest{Destination: d, Filter: broker.Filter{IDs: []string{all[1].ID}}, IncludePending: true})
	require.NoError(t, err)
	require.Equal(t, []string{all[1].ID}, byID.IDs, "discard one record by id")

	res, err := s.Purge(ctx, broker.PurgeRequest{Destination: d, Filter: broker.Filter{Until: future}, IncludePending: true})
	require.NoError(t, err)
	require.Len(t, res.IDs, 4)
	// Geometries 0, 2, 4 and 1, 3, 5 share a blob each; record 0 is
	// leased, so only the odd geometry's blob may be orphaned.
	require.Len(t, res.Orphaned, 1, "the blob record 0 still references is not orphaned; the other is")
	require.Contains(t, res.BlobURIs, res.Orphaned[0])
	require.Empty(t, drain(t, s, d, broker.Filter{}), "purged records are gone")
	ackAll(t, s, held)
}

// testPublishBatch checks Store.PublishBatch: every message stored whole,
// in order, whether the driver batches or not; a batch holding one
// message over the limit is refused before anything is stored.
func testPublishBatch(t *testing.T, h Harness) {
	s := makeStore(t, h)
	ctx := context.Background()
	d := dest(t, "batch")
	msgs := Messages(t, SampleInputs())
	msgs = append(msgs, &broker.Message{Body: []byte("not an envelope \x00\xff")})
	for i := range 3 {
		msgs = append(msgs, &broker.Message{Body: VariantBody(t, msgs[0].Body, i), Key: msgs[0].Key})
	}
	require.NoError(t, s.PublishBatch(ctx, d, nil), "an empty batch")
	require.NoError(t, s.PublishBatch(ctx, d, msgs))
	got := drain(t, s, d, broker.Filter{})
	require.Len(t, got, len(msgs), "every message of the batch is stored once")
	want := map[string]int{}
	for _, m := range msgs {
		want[string(m.Body)]++
	}
	for _, r := range got {
		want[string(r.Message.Body)]--
	}
	for body, n := range want {
		require.Zero(t, n, "body %q stored byte for byte", clipBody(body))
	}
	ackAll(t, s, got)

	if limit := h.Capabilities().MaxMessageBytes; limit > 0 {
		unsupported(t, h, CapSizeLimit)
		d2 := dest(t, "batch-large")
		err := s.PublishBatch(ctx, d2, []*broker.Message{msgs[0], {Body: make([]byte, limit+1)}})
		require.ErrorIs(t, err, classify.ErrTooLarge, "a batch with a message over the limit is refused")
		require.Empty(t, drain(t, s, d2, broker.Filter{}), "and nothing of it is stored")
	}
}

// testBatchSettle checks Store.RenewBatch and Store.AckBatch: each
// record fenced by its own lease (a stale lease in the batch is refused
// with ErrLeaseLost and changes nothing; the others are renewed or
// acknowledged), one error per record in order; a driver without
// broker.BatchSettler answers errors.ErrUnsupported for every record
// and changes nothing.
func testBatchSettle(t *testing.T, h Harness) {
	s := makeStore(t, h)
	ctx := context.Background()
	d := dest(t, "batchsettle")
	publish(t, s, d, Messages(t, SampleInputs()[:4])...)
	recs := drain(t, s, d, broker.Filter{})
	require.Len(t, recs, 4)
	stale := func(r *broker.Record) *broker.Record {
		c := *r
		c.Lease = "stale-" + r.Lease
		return &c
	}
	before := recs[1].LeaseExpires
	errs := s.RenewBatch(ctx, []*broker.Record{recs[0], stale(recs[1]), recs[1], recs[2]})
	require.Len(t, errs, 4)
	if errors.Is(errs[0], errors.ErrUnsupported) {
		for i, err := range errs {
			require.ErrorIs(t, err, errors.ErrUnsupported, "record %d", i)
		}
		require.ErrorIs(t, s.AckBatch(ctx, recs[:1])[0], errors.ErrUnsupported)
		require.Empty(t, drain(t, s, d, broker.Filter{}), "nothing was given back")
		ackAll(t, s, recs) // nothing was acknowledged: the leases are still held
		return
	}
	require.NoError(t, errs[0])
	require.ErrorIs(t, errs[1], broker.ErrLeaseLost, "a stale lease in the batch is refused")
	require.NoError(t, errs[2], "the record's own lease is renewed, the stale copy notwithstanding")
	require.NoError(t, errs[3])
	require.False(t, recs[1].LeaseExpires.Before(before), "a renewal moves LeaseExpires on")
	require.Empty(t, s.RenewBatch(ctx, nil), "an empty batch")

	errs = s.AckBatch(ctx, []*broker.Record{recs[0], stale(recs[2]), recs[1], nil})
	require.Len(t, errs, 4)
	require.NoError(t, errs[0])
	require.ErrorIs(t, errs[1], broker.ErrLeaseLost, "a stale lease in the batch acknowledges nothing")
	require.NoError(t, errs[2])
	require.ErrorIs(t, errs[3], broker.ErrInvalidArgument, "a nil record is refused, the others settled")
	again := s.AckBatch(ctx, []*broker.Record{recs[0]})
	require.ErrorIs(t, again[0], broker.ErrLeaseLost, "an acknowledged record cannot be acknowledged again")
	require.ErrorIs(t, s.RenewBatch(ctx, recs[:1])[0], broker.ErrLeaseLost, "nor renewed")

	// recs[2] and recs[3] are still held by their own leases.
	require.NoError(t, s.Release(ctx, recs[3]))
	back := drain(t, s, d, broker.Filter{})
	require.Len(t, back, 1, "only the released record comes back: the acknowledged ones are gone, recs[2] still held")
	require.Equal(t, recs[3].ID, back[0].ID)
	for i, err := range s.AckBatch(ctx, []*broker.Record{recs[2], back[0]}) {
		require.NoError(t, err, "record %d", i)
	}
	require.Empty(t, drain(t, reopen(t, h), d, broker.Filter{}), "the batch's acknowledgements are final")
}

func clipBody(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}
