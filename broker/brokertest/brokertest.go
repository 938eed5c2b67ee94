// Package brokertest is the conformance suite every geodlq dead-letter store
// adapter passes, in the style of gocloud.dev's drivertest: an adapter
// provides a [Harness] and calls [RunConformanceTests] from a ~40-line
// conformance_test.go. An adapter someone else writes proves itself the
// same way (docs/writing-a-store.md walks through one).
//
// The suite runs against the portable [*broker.Store] the adapter's
// constructor returns, so it checks the driver and the shared behaviour
// together. Every requirement it holds an adapter to:
//
//   - Round trip: an envelope written and read back is identical byte for
//     byte, with its ordering key, headers and provenance; Fetch sets each
//     record's ID, Destination and Lease.
//   - Publish accepts any body bytes (not JSON, not UTF-8, NUL bytes).
//   - Durable on return: once Publish returns nil another handle (another
//     process) sees the write.
//   - Ack is final: an acknowledged record never comes back, on any handle.
//   - Redelivery: an unacknowledged record is redelivered after its
//     consumer crashes, once its lease expires, with the same id and bytes.
//   - Release returns a record at once.
//   - Leases are exclusive: two consumers never hold a record under live
//     leases.
//   - Lease takeover: once another consumer took over a record whose lease
//     expired, the old holder's Ack and Release fail with an error wrapping
//     [broker.ErrLeaseLost] and change nothing.
//   - Lease renewal: Fetch sets each record's LeaseExpires, never later
//     than the configured lease allows; a record renewed every quarter
//     lease stays with its holder for three leases while another consumer
//     keeps fetching — checked against every lease the holder proved: the
//     other is never given the record inside one, and the holder never
//     proves one after the other was given it; Renew of a released,
//     acknowledged or taken-over record fails with ErrLeaseLost.
//   - Concurrent replayers: two [replay.Replayer]s, each with its own
//     handle, replay one destination at once with a lease shorter than a
//     batch takes: every record is re-injected exactly once between them.
//   - Key order: records with the same key come back in publish order.
//   - Destinations are isolated.
//   - Size limit: a body one byte over the declared limit is refused with
//     a [*classify.TooLargeError] and nothing is stored; a body of exactly
//     the limit is stored whole. The store reports the limit it enforces
//     through MaxMessageBytes (the [broker.Limiter] a Processor asks), so
//     an event larger than the limit is dead-lettered with its geometry
//     offloaded instead of being refused on every redelivery.
//   - Filters return exactly the matching records (the portable store
//     guarantees it even for a driver that filters less).
//   - Concurrency: writers and readers over at least 10,000 envelopes lose
//     and duplicate nothing, every record counted and hashed.
//   - A cancelled context: Publish and Fetch with a context already done
//     report an error.
//   - Interrupted publish: a Publish whose context is cancelled at a random
//     point mid-write reports the write's true outcome — an error only when
//     nothing was stored — so a redelivery's retry stores each message
//     exactly once.
//   - Closed: after Close every method fails with an error wrapping
//     [broker.ErrClosed], Close is idempotent, and closing a handle loses
//     no record.
//   - Listing (adapters with a [broker.Lister]): pages cover every record
//     once in both orders, with any page size; List filters, by record id
//     too, leases nothing, and still shows leased records; Stats counts
//     every record. Every sort orders every record across pages of any
//     size, in both directions, ties in the written order where the
//     adapter sorts natively; Total counts the matching records whatever
//     the page; summaries carry no message and say what the body says;
//     the text search finds properties, event ids, reasons and messages,
//     the source filters and Stats' source grouping follow the source
//     pointer; pages end at MaxBytes.
//   - PublishBatch: every message of a batch is stored whole, once, as
//     Publish would store it, whether the adapter batches ([broker.Batcher])
//     or not; a batch holding a message over the limit stores nothing.
//   - Purge (adapters with a [broker.Purger]): a purge without a bound is
//     refused; a dry run deletes nothing; a leased record is never deleted;
//     one record can be discarded by id; the blobs the deleted envelopes
//     referenced are reported, and those no remaining record references
//     are reported orphaned.
//   - Crash safety, with faults injected over at least 1,000 events: the
//     dead-letter write failing before or after the store took it, the
//     consumer shut down or killed between the write and the source ack,
//     the replayer killed between the re-inject and the dead-letter ack,
//     lost responses, the consumer of re-injected events dying inside its
//     idempotency claim. Every event is at every moment either
//     unacknowledged at its source or in the store (or, once replayed,
//     re-injected), never neither, and every replayed event's side effect
//     runs exactly once, as the claims store shows.
//
// Capabilities an adapter lacks are declared by its harness in
// [Capabilities.Unsupported] with the reason, and the suite reports them
// with t.Skip and that reason; the listing and purge checks are skipped,
// with the reason, for adapters whose driver has no Lister or Purger —
// nothing is skipped silently.
package brokertest

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/paulmach/orb"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
)

// Harness gives the suite access to one adapter's store. A harness is made
// for a single test, so the data it exposes starts empty.
type Harness interface {
	// MakeStore returns a handle on the harness's store.
	MakeStore(ctx context.Context) (*broker.Store, error)
	// Reopen returns a second, independent handle on the same data, as
	// another process would open it (a new connection, client or consumer
	// group member). Data published through any handle is visible to it.
	Reopen(ctx context.Context) (*broker.Store, error)
	// Capabilities declares the adapter's settings and limits.
	Capabilities() Capabilities
	// Close releases everything the harness made.
	Close()
}

// HarnessMaker makes a fresh harness for one test.
type HarnessMaker func(ctx context.Context, t *testing.T) (Harness, error)

// Capability names, for [Capabilities.Unsupported].
const (
	// CapRedelivery: an unacknowledged record is redelivered after its
	// consumer crashes.
	CapRedelivery = "redelivery"
	// CapSizeLimit: messages over a limit are refused.
	CapSizeLimit = "size-limit"
	// CapLeaseLost: Ack after a lost lease fails with broker.ErrLeaseLost.
	CapLeaseLost = "lease-lost"
	// CapBBoxFilter: filtering by bounding box.
	CapBBoxFilter = "bbox-filter"
	// CapRenewHeld: the renewal of a live lease succeeds. An adapter whose
	// broker may take a record from a holder that renews it (a Kafka
	// rebalance hands partitions over) declares it unsupported; its
	// renewals may then be refused, but exclusivity is checked all the
	// same.
	CapRenewHeld = "renew-held"
)

// Capabilities declares what the harness configured and what the adapter
// cannot do.
type Capabilities struct {
	// LeaseExpiry is the lease (or visibility timeout, or session timeout)
	// the harness configured: after it, a record fetched but not
	// acknowledged is redelivered. Keep it short (about a second).
	LeaseExpiry time.Duration
	// MaxMessageBytes is the size limit the harness configured; the suite
	// publishes bodies of exactly this size and one byte more.
	MaxMessageBytes int
	// ConcurrentRecords is the number of envelopes in the concurrency test.
	// Default and minimum 10,000.
	ConcurrentRecords int
	// CrashEvents is the number of events in the crash-safety test.
	// Default and minimum 1,000.
	CrashEvents int
	// InterruptedPublishes is the number of publishes the
	// interrupted-publish test cancels at random points. Default 200.
	InterruptedPublishes int
	// Unsupported maps a capability name (Cap…) to the reason the adapter
	// lacks it. The matching tests are skipped with that reason.
	Unsupported map[string]string
}

// RunConformanceTests runs the suite against the adapter newHarness makes.
func RunConformanceTests(t *testing.T, newHarness HarnessMaker) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, h Harness)
	}{
		{"RoundTripByteForByte", testRoundTrip},
		{"DurableOnReturn", testDurable},
		{"AckIsFinal", testAckIsFinal},
		{"RedeliveryAfterCrash", testRedelivery},
		{"Release", testRelease},
		{"LeasesAreExclusive", testExclusive},
		{"KeyOrder", testKeyOrder},
		{"DestinationsAreIsolated", testIsolation},
		{"TooLargeIsRefused", testTooLarge},
		{"Filters", testFilters},
		{"ConcurrentNoLossNoDuplicates", testConcurrent},
		{"CanceledContext", testCanceled},
		{"LeaseTakeover", testLeaseTakeover},
		{"LeaseRenewal", testLeaseRenewal},
		{"ConcurrentReplayersReinjectOnce", testConcurrentReplayers},
		{"SizeLimitReported", testSizeLimitReported},
		{"Closed", testClosed},
		{"InterruptedPublish", testInterruptedPublish},
		{"Listing", testListing},
		{"ListSorted", testListSorted},
		{"ListTotal", testListTotal},
		{"ListSummaries", testListSummaries},
		{"ListSearchAndSource", testListSearch},
		{"ListMaxBytes", testListMaxBytes},
		{"Purge", testPurge},
		{"PublishBatch", testPublishBatch},
		{"BatchSettle", testBatchSettle},
		{"CrashSafety", testCrashSafety},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			h, err := newHarness(ctx, t)
			require.NoError(t, err, "making harness")
			defer h.Close()
			tc.fn(t, h)
		})
	}
}

func unsupported(t *testing.T, h Harness, capability string) {
	t.Helper()
	if why, ok := h.Capabilities().Unsupported[capability]; ok {
		t.Skipf("adapter declares capability %q unsupported: %s", capability, why)
	}
}

func makeStore(t *testing.T, h Harness) *broker.Store {
	t.Helper()
	s, err := h.MakeStore(context.Background())
	require.NoError(t, err, "MakeStore")
	return s
}

func reopen(t *testing.T, h Harness) *broker.Store {
	t.Helper()
	s, err := h.Reopen(context.Background())
	require.NoError(t, err, "Reopen")
	return s
}

// dest returns a destination name unique to the test.
func dest(t *testing.T, suffix string) string {
	return fmt.Sprintf("brokertest.%d.%s", time.Now().UnixNano(), suffix)
}

// drain fetches until nothing more comes back, leasing everything.
func drain(t *testing.T, s *broker.Store, destination string, f broker.Filter) []*broker.Record {
	t.Helper()
	ctx := context.Background()
	var all []*broker.Record
	for range 10_000 {
		recs, err := s.Fetch(ctx, destination, f, 100)
		require.NoError(t, err, "Fetch")
		if len(recs) == 0 {
			return all
		}
		all = append(all, recs...)
	}
	t.Fatalf("Fetch never ran dry on %q", destination)
	return nil
}

func ackAll(t *testing.T, s *broker.Store, recs []*broker.Record) {
	t.Helper()
	for _, r := range recs {
		require.NoError(t, s.Ack(context.Background(), r), "Ack %s", r.ID)
	}
}

func releaseAll(t *testing.T, s *broker.Store, recs []*broker.Record) {
	t.Helper()
	for _, r := range recs {
		require.NoError(t, s.Release(context.Background(), r), "Release %s", r.ID)
	}
}

func publish(t *testing.T, s *broker.Store, destination string, msgs ...*broker.Message) {
	t.Helper()
	for i, m := range msgs {
		require.NoError(t, s.Publish(context.Background(), destination, m), "Publish #%d", i)
	}
}

func testRoundTrip(t *testing.T, h Harness) {
	s := makeStore(t, h)
	d := dest(t, "roundtrip")
	msgs := Messages(t, SampleInputs())
	publish(t, s, d, msgs...)
	got := drain(t, s, d, broker.Filter{})
	require.Len(t, got, len(msgs), "every published record comes back")
	for i, r := range got {
		want := msgs[i]
		require.Equal(t, d, r.Destination)
		require.NotEmpty(t, r.ID)
		require.NotEmpty(t, r.Lease, "a fetched record carries its lease")
		require.Equal(t, sha256.Sum256(want.Body), sha256.Sum256(r.Message.Body), "record %d body is byte-identical", i)
		require.Equal(t, want.Key, r.Message.Key, "record %d keeps its ordering key", i)
		for k, v := range want.Headers {
			require.Equal(t, v, r.Message.Headers[k], "record %d header %q", i, k)
		}
		env, err := envelope.Decode(r.Message.Body)
		require.NoError(t, err)
		wantEnv, err := envelope.Decode(want.Body)
		require.NoError(t, err)
		require.Equal(t, wantEnv.Source, env.Source, "record %d provenance survives", i)
		require.Equal(t, wantEnv.IdempotencyKey, env.IdempotencyKey)
		if r.Envelope != nil {
			require.Equal(t, wantEnv.EventID, r.Envelope.EventID)
		}
	}
	ackAll(t, s, got)
	require.Empty(t, drain(t, s, d, broker.Filter{}), "acknowledged records are gone")
}

func testDurable(t *testing.T, h Harness) {
	s := makeStore(t, h)
	d := dest(t, "durable")
	msgs := Messages(t, SampleInputs()[:3])
	publish(t, s, d, msgs...)
	other := reopen(t, h)
	got := drain(t, other, d, broker.Filter{})
	require.Len(t, got, len(msgs), "a second handle sees every write once Publish returned")
	for i, r := range got {
		require.Equal(t, msgs[i].Body, r.Message.Body)
	}
	ackAll(t, other, got)
}

func testAckIsFinal(t *testing.T, h Harness) {
	s := makeStore(t, h)
	d := dest(t, "ackfinal")
	publish(t, s, d, Messages(t, SampleInputs()[:2])...)
	got := drain(t, s, d, broker.Filter{})
	require.Len(t, got, 2)
	ackAll(t, s, got)
	if exp := h.Capabilities().LeaseExpiry; exp > 0 {
		time.Sleep(exp + exp/2)
	}
	require.Empty(t, drain(t, s, d, broker.Filter{}), "acked records do not come back after the lease time")
	require.Empty(t, drain(t, reopen(t, h), d, broker.Filter{}), "nor on another handle")
}

func testRedelivery(t *testing.T, h Harness) {
	unsupported(t, h, CapRedelivery)
	caps := h.Capabilities()
	require.Positive(t, caps.LeaseExpiry, "harness must declare LeaseExpiry")
	crashed := makeStore(t, h)
	d := dest(t, "redeliver")
	msgs := Messages(t, SampleInputs()[:2])
	publish(t, crashed, d, msgs...)
	first := drain(t, crashed, d, broker.Filter{})
	require.Len(t, first, 2)
	// The consumer holding the leases crashes: it never acks or releases.
	survivor := reopen(t, h)
	require.Empty(t, drain(t, survivor, d, broker.Filter{}), "leased records are invisible while the lease lives")
	var again []*broker.Record
	deadline := time.Now().Add(caps.LeaseExpiry*3 + 10*time.Second)
	for time.Now().Before(deadline) && len(again) < 2 {
		time.Sleep(caps.LeaseExpiry / 4)
		again = append(again, drain(t, survivor, d, broker.Filter{})...)
	}
	require.Len(t, again, 2, "unacknowledged records are redelivered after the crash")
	// Each lease lapses on its own, so the records may come back in
	// another order than they were first fetched (Kafka's partitions,
	// one poll each, did): match them by id.
	firstByID := map[string]int{}
	var published, fetched []string
	for i, r := range first {
		firstByID[r.ID] = i
		published, fetched = append(published, string(msgs[i].Body)), append(fetched, string(r.Message.Body))
	}
	require.ElementsMatch(t, published, fetched, "the records first fetched are the ones published")
	seen := map[string]bool{}
	for _, r := range again {
		i, ok := firstByID[r.ID]
		require.True(t, ok, "same record id on redelivery: %s is not one of the records first fetched", r.ID)
		require.False(t, seen[r.ID], "record %s redelivered twice in one lease", r.ID)
		seen[r.ID] = true
		require.Equal(t, first[i].Message.Body, r.Message.Body, "same bytes on redelivery")
		if r.Deliveries != 0 {
			require.GreaterOrEqual(t, r.Deliveries, 2, "delivery count grows")
		}
	}
	ackAll(t, survivor, again)
	if _, ok := caps.Unsupported[CapLeaseLost]; !ok {
		err := crashed.Ack(context.Background(), first[0])
		require.ErrorIs(t, err, broker.ErrLeaseLost, "acking with a lost lease fails")
	}
}

func testRelease(t *testing.T, h Harness) {
	s := makeStore(t, h)
	d := dest(t, "release")
	msgs := Messages(t, SampleInputs()[:3])
	publish(t, s, d, msgs...)
	got := drain(t, s, d, broker.Filter{})
	require.Len(t, got, 3)
	releaseAll(t, s, got)
	again := drain(t, s, d, broker.Filter{})
	require.Len(t, again, 3, "released records are available at once")
	for i := range again {
		require.Equal(t, got[i].ID, again[i].ID)
	}
	ackAll(t, s, again)
}

func testExclusive(t *testing.T, h Harness) {
	a, b := makeStore(t, h), reopen(t, h)
	d := dest(t, "exclusive")
	lease := h.Capabilities().LeaseExpiry
	const n = 200
	in := make([]Input, n)
	for i := range in {
		in[i] = SampleInputs()[i%len(SampleInputs())]
		in[i].IdempotencyKey = fmt.Sprintf("idem:test:exclusive:%d", i)
	}
	publish(t, a, d, Messages(t, in)...)
	var mu sync.Mutex
	acked := map[string]int{}
	all := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(acked) >= n
	}
	// An empty Fetch says only that nothing is available to this
	// consumer now: a group-based store (Kafka) may hand a partition
	// from one consumer to the other in between. Both keep fetching
	// until every record is acknowledged, or a minute has passed.
	deadline := time.Now().Add(time.Minute)
	var wg sync.WaitGroup
	for _, s := range []*broker.Store{a, b} {
		wg.Go(func() {
			for {
				fetched := time.Now()
				recs, err := s.Fetch(context.Background(), d, broker.Filter{}, 7)
				if err != nil {
					t.Errorf("Fetch: %v", err)
					return
				}
				if len(recs) == 0 {
					if all() || time.Now().After(deadline) {
						return
					}
					time.Sleep(20 * time.Millisecond)
					continue
				}
				for _, r := range recs {
					err := s.Ack(context.Background(), r)
					switch {
					case err == nil:
						mu.Lock()
						acked[r.ID]++
						mu.Unlock()
					case errors.Is(err, broker.ErrLeaseLost) && lease > 0 && time.Since(fetched) > lease:
						// Our lease lapsed (a slow machine) and the other
						// consumer took the record over: allowed.
					default:
						t.Errorf("Ack %s %v after fetch: %v (a live lease must not be lost: two consumers held the record)", r.ID, time.Since(fetched), err)
					}
				}
			}
		})
	}
	wg.Wait()
	require.Len(t, acked, n, "every record delivered and acknowledged")
	for id, c := range acked {
		require.Equal(t, 1, c, "record %s acknowledged by exactly one consumer", id)
	}
}

func testKeyOrder(t *testing.T, h Harness) {
	s := makeStore(t, h)
	d := dest(t, "keyorder")
	var msgs []*broker.Message
	for i := range 30 {
		in := SampleInputs()[0]
		in.IdempotencyKey = "idem:test:order:" + strconv.Itoa(i)
		in.Key = []byte("entity-" + strconv.Itoa(i%3))
		msgs = append(msgs, Message(t, in))
	}
	publish(t, s, d, msgs...)
	got := drain(t, s, d, broker.Filter{})
	require.Len(t, got, len(msgs))
	perKey := map[string][]string{}
	for _, r := range got {
		env, err := envelope.Decode(r.Message.Body)
		require.NoError(t, err)
		perKey[string(r.Message.Key)] = append(perKey[string(r.Message.Key)], env.IdempotencyKey)
	}
	for k, keys := range perKey {
		var want []string
		for i := range 30 {
			if "entity-"+strconv.Itoa(i%3) == k {
				want = append(want, "idem:test:order:"+strconv.Itoa(i))
			}
		}
		require.Equal(t, want, keys, "records of key %q come back in publish order", k)
	}
	ackAll(t, s, got)
}

func testIsolation(t *testing.T, h Harness) {
	s := makeStore(t, h)
	d1, d2 := dest(t, "iso1"), dest(t, "iso2")
	publish(t, s, d1, Messages(t, SampleInputs()[:2])...)
	publish(t, s, d2, Messages(t, SampleInputs()[2:3])...)
	g1, g2 := drain(t, s, d1, broker.Filter{}), drain(t, s, d2, broker.Filter{})
	require.Len(t, g1, 2)
	require.Len(t, g2, 1)
	ackAll(t, s, g1)
	ackAll(t, s, g2)
}

func testTooLarge(t *testing.T, h Harness) {
	unsupported(t, h, CapSizeLimit)
	limit := h.Capabilities().MaxMessageBytes
	require.Positive(t, limit, "harness must declare MaxMessageBytes or CapSizeLimit unsupported")
	s := makeStore(t, h)
	d := dest(t, "toolarge")
	base := Message(t, SampleInputs()[0])
	pad := func(n int) *broker.Message {
		m := base.Clone()
		m.Body = make([]byte, n)
		for i := range m.Body {
			m.Body[i] = 'x'
		}
		return m
	}
	err := s.Publish(context.Background(), d, pad(limit+1))
	require.ErrorIs(t, err, classify.ErrTooLarge, "a body one byte over the limit is refused")
	var tl *classify.TooLargeError
	if errors.As(err, &tl) {
		require.Equal(t, limit+1, tl.Size)
	}
	require.Empty(t, drain(t, s, d, broker.Filter{}), "nothing is stored, not even truncated")
	require.NoError(t, s.Publish(context.Background(), d, pad(limit)), "a body of exactly the limit is accepted")
	got := drain(t, s, d, broker.Filter{})
	require.Len(t, got, 1)
	require.Len(t, got[0].Message.Body, limit)
	ackAll(t, s, got)
}

func testFilters(t *testing.T, h Harness) {
	s := makeStore(t, h)
	d := dest(t, "filters")
	inputs := FilterInputs()
	msgs := Messages(t, inputs)
	publish(t, s, d, msgs...)
	envs := make([]*envelope.Envelope, len(msgs))
	for i, m := range msgs {
		e, err := envelope.Decode(m.Body)
		require.NoError(t, err)
		envs[i] = e
	}
	t0 := FilterBaseTime
	filters := map[string]broker.Filter{
		"class":         {Classes: []classify.Class{classify.ClassInvalidGeometry}},
		"classes":       {Classes: []classify.Class{classify.ClassTransient, classify.ClassCRSMismatch}},
		"stage":         {Stages: []classify.Stage{classify.StageCRSTransform}},
		"epsg":          {EPSG: []int{3857}},
		"since":         {Since: t0.Add(3 * time.Hour)},
		"until":         {Until: t0.Add(3 * time.Hour)},
		"window":        {Since: t0.Add(2 * time.Hour), Until: t0.Add(5 * time.Hour)},
		"event-ids":     {EventIDs: []string{"evt-filter-1", "evt-filter-4"}},
		"class+stage":   {Classes: []classify.Class{classify.ClassInvalidGeometry}, Stages: []classify.Stage{classify.StageTopologyValidation}},
		"no-match":      {Classes: []classify.Class{classify.ClassResourceExhausted}},
		"bbox":          {BBox: &orb.Bound{Min: orb.Point{0, 0}, Max: orb.Point{1, 1}}},
		"class+window":  {Classes: []classify.Class{classify.ClassInvalidGeometry}, Since: t0.Add(1 * time.Hour)},
		"text-property": {Text: "SUDAN"},
		"text-event-id": {Text: "filter-7"},
		"text-reason":   {Text: "self-intersection"},
		"text-none":     {Text: "atlantis"},
		"source":        {SourcePointer: "/properties/provider", Sources: []string{"ign"}},
		"source-prefix": {SourcePrefix: "s3://provider-b/"},
		"source+text":   {SourcePointer: "/properties/provider", Sources: []string{"osm"}, Text: "chad"},
	}
	names := make([]string, 0, len(filters))
	for n := range filters {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, name := range names {
		f := filters[name]
		t.Run(name, func(t *testing.T) {
			if f.BBox != nil {
				unsupported(t, h, CapBBoxFilter)
			}
			var want []string
			for _, e := range envs {
				if f.Match(e) {
					want = append(want, e.EventID)
				}
			}
			got := drain(t, s, d, f)
			var gotIDs []string
			for _, r := range got {
				e, err := envelope.Decode(r.Message.Body)
				require.NoError(t, err)
				gotIDs = append(gotIDs, e.EventID)
			}
			releaseAll(t, s, got)
			slices.Sort(want)
			slices.Sort(gotIDs)
			require.Equal(t, want, gotIDs, "filter %q returns exactly the matching records", name)
		})
	}
	all := drain(t, s, d, broker.Filter{})
	require.Len(t, all, len(msgs), "filtered fetches released everything they leased")
	ackAll(t, s, all)
}

func testConcurrent(t *testing.T, h Harness) {
	caps := h.Capabilities()
	n := max(caps.ConcurrentRecords, 10_000)
	const writers, readers = 4, 4
	d := dest(t, "concurrent")
	// One template envelope per writer; each record varies by key and id.
	tmpl := Message(t, SampleInputs()[0])
	bodies := make([][]byte, n)
	want := make(map[[32]byte]int, n)
	for i := range n {
		bodies[i] = VariantBody(t, tmpl.Body, i)
		want[sha256.Sum256(bodies[i])]++
	}
	require.Len(t, want, n, "bodies are distinct")
	ws := make([]*broker.Store, writers)
	rs := make([]*broker.Store, readers)
	for i := range ws {
		ws[i] = reopen(t, h)
	}
	for i := range rs {
		rs[i] = reopen(t, h)
	}
	ctx := context.Background()
	var written atomic.Int64
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := w; i < n; i += writers {
				m := &broker.Message{Key: []byte("k" + strconv.Itoa(i%17)), Body: bodies[i]}
				if err := ws[w].Publish(ctx, d, m); err != nil {
					t.Errorf("Publish %d: %v", i, err)
					return
				}
				written.Add(1)
			}
		})
	}
	var mu sync.Mutex
	got := make(map[[32]byte]int, n)
	var acked, lost atomic.Int64
	done := make(chan struct{})
	var rg sync.WaitGroup
	for r := range readers {
		rg.Go(func() {
			idle := 0
			for {
				recs, err := rs[r].Fetch(ctx, d, broker.Filter{}, 50)
				if err != nil {
					t.Errorf("Fetch: %v", err)
					return
				}
				if len(recs) == 0 {
					select {
					case <-done:
						idle++
						if idle > 3 {
							return
						}
					default:
					}
					time.Sleep(5 * time.Millisecond)
					continue
				}
				idle = 0
				for _, rec := range recs {
					sum := sha256.Sum256(rec.Message.Body)
					if err := rs[r].Ack(ctx, rec); err != nil {
						if errors.Is(err, broker.ErrLeaseLost) {
							// Our lease expired under load and another reader
							// holds the record now: it acknowledges it.
							lost.Add(1)
							continue
						}
						t.Errorf("Ack %s: %v", rec.ID, err)
						return
					}
					mu.Lock()
					got[sum]++
					mu.Unlock()
					acked.Add(1)
				}
			}
		})
	}
	wg.Wait()
	close(done)
	rg.Wait()
	require.Equal(t, int64(n), written.Load(), "every write succeeded")
	require.Equal(t, int64(n), acked.Load(), "every record was acknowledged exactly once (%d acks lost their lease and were redone by another reader)", lost.Load())
	require.Len(t, got, n, "no record lost")
	for sum, c := range got {
		require.Equal(t, 1, c, "record %x delivered once", sum[:6])
		require.Equal(t, 1, want[sum], "record %x was written", sum[:6])
	}
}

func testCanceled(t *testing.T, h Harness) {
	s := makeStore(t, h)
	d := dest(t, "canceled")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := s.Publish(ctx, d, Message(t, SampleInputs()[0]))
	require.Error(t, err, "Publish with a canceled context reports an error")
	_, err = s.Fetch(ctx, d, broker.Filter{}, 10)
	require.Error(t, err, "Fetch with a canceled context reports an error")
}
