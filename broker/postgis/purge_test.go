package postgis_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/postgis"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/offload"
)

// offloaded builds the dead-letter message of an event whose geometry —
// a line through (n, n) — is offloaded; extra is spliced into the payload.
func offloaded(t *testing.T, b *envelope.Builder, key string, n int, extra string) (*broker.Message, string) {
	t.Helper()
	env, body, err := b.Build(context.Background(), envelope.Input{
		Payload:        fmt.Appendf(nil, `{"event_id":"evt-%s",%s"geometry":{"type":"LineString","coordinates":[[0,0],[%d,%d],[2,2]]}}`, key, extra, n, n),
		IdempotencyKey: "idem:purge:" + key, Err: invalid(nil), Source: src,
	})
	require.NoError(t, err)
	require.NotEmpty(t, env.Geometry.OffloadURI)
	return &broker.Message{Body: body, Headers: broker.Headers(env)}, env.Geometry.OffloadURI
}

// withRawPayloadURI returns m's envelope with its raw payload offloaded to
// uri.
func withRawPayloadURI(t *testing.T, m *broker.Message, uri string) *broker.Message {
	t.Helper()
	env, err := envelope.Decode(m.Body)
	require.NoError(t, err)
	env.RawPayload, env.RawPayloadEncoding, env.RawPayloadOffloadURI = nil, "", uri
	body, err := env.Encode()
	require.NoError(t, err)
	back, err := envelope.Decode(body)
	require.NoError(t, err)
	require.Equal(t, uri, back.RawPayloadOffloadURI)
	return &broker.Message{Body: body, Headers: m.Headers}
}

// TestPurge: Purge deletes what the request selects and nothing under a
// live lease; a dry run reports exactly what the purge then does; the
// blobs of deleted envelopes — offloaded geometries and payloads, from the
// jsonb envelope or, where jsonb could not hold it, from the body — are
// reported, and orphaned only when no remaining record, replayed or not,
// of any destination references them.
func TestPurge(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, &postgis.Options{StoreOptions: broker.StoreOptions{LeaseTTL: time.Minute}})
	off, err := offload.New(offload.NewMemStore(), &offload.Options{Threshold: 16})
	require.NoError(t, err)
	b, err := envelope.NewBuilder(&envelope.BuilderOptions{Offloader: off})
	require.NoError(t, err)
	const d, d2 = "purge", "purge.other"

	id := func(m *broker.Message, dest string) string {
		return strconv.FormatInt(write(t, s, dest, m).ID, 10)
	}
	mA, g1 := offloaded(t, b, "a", 1, "")
	a := id(mA, d) // replayed below
	mB, _ := offloaded(t, b, "b", 1, "")
	bID := id(mB, d) // G1 too, pending
	mC, gC := offloaded(t, b, "c", 3, "")
	const r1 = "mem://raw/c.json"
	c := id(withRawPayloadURI(t, mC, r1), d)
	mD, g2 := offloaded(t, b, "d", 2, `"note":"a\u0000b",`)
	dd := id(mD, d)
	require.Equal(t, 1, count(t, s, "id = $1 AND is_envelope AND envelope IS NULL", dd), "jsonb cannot hold D's envelope")
	mE, g3 := offloaded(t, b, "e", 4, "")
	e := id(mE, d) // leased below
	mF, _ := offloaded(t, b, "f", 2, "")
	f := id(mF, d2) // G2, another destination
	g := id(&broker.Message{Body: []byte("not an envelope")}, d)

	recs, err := s.Fetch(ctx, d, broker.Filter{IDs: []string{a}}, 1)
	require.NoError(t, err)
	require.NoError(t, s.Ack(ctx, recs[0]))
	held, err := s.Fetch(ctx, d, broker.Filter{IDs: []string{e}}, 1)
	require.NoError(t, err)
	require.Len(t, held, 1)

	// purge runs req as a dry run, then for real, and checks they agree.
	purge := func(req broker.PurgeRequest) broker.PurgeResult {
		t.Helper()
		before := count(t, s, "true")
		req.DryRun = true
		dry, err := s.Purge(ctx, req)
		require.NoError(t, err)
		require.Equal(t, before, count(t, s, "true"), "a dry run deletes nothing")
		req.DryRun = false
		res, err := s.Purge(ctx, req)
		require.NoError(t, err)
		require.Equal(t, dry, res, "the dry run reported what the purge did")
		require.Equal(t, before-len(res.IDs), count(t, s, "true"))
		return res
	}
	future := time.Now().Add(time.Hour)

	res := purge(broker.PurgeRequest{Destination: d, Filter: broker.Filter{Until: future}})
	require.Equal(t, []string{a}, res.IDs, "without IncludePending only replayed records go")
	require.Equal(t, []string{g1}, res.BlobURIs)
	require.Empty(t, res.Orphaned, "B still references G1")

	res = purge(broker.PurgeRequest{Destination: d, Filter: broker.Filter{Until: future}, IncludePending: true})
	require.Equal(t, []string{bID, c, dd}, res.IDs, "never the leased E; never G, which is not an envelope")
	require.Equal(t, sorted([]string{g1, gC, g2, r1}), res.BlobURIs, "D's from its body, C's raw payload from the jsonb envelope")
	require.Equal(t, sorted([]string{g1, gC, r1}), res.Orphaned, "F, in another destination, still references G2")

	res = purge(broker.PurgeRequest{Destination: d, Filter: broker.Filter{IDs: []string{g, e}}, IncludePending: true})
	require.Equal(t, []string{g}, res.IDs, "discarded by id; the leased one stays")
	require.Empty(t, res.BlobURIs)

	res = purge(broker.PurgeRequest{Filter: broker.Filter{EventIDs: []string{"evt-f"}}, IncludePending: true})
	require.Equal(t, []string{d2 + "/" + f}, res.IDs, "destination/id when the request names none")
	require.Equal(t, []string{g2}, res.Orphaned)

	// An envelope jsonb cannot hold keeps its blobs referenced.
	mH, g4 := offloaded(t, b, "h", 5, `"note":"\u0000",`)
	id(mH, "purge.h")
	mI, _ := offloaded(t, b, "i", 5, "")
	i := id(mI, "purge.i")
	res = purge(broker.PurgeRequest{Destination: "purge.i", Filter: broker.Filter{IDs: []string{i}}, IncludePending: true})
	require.Equal(t, []string{i}, res.IDs)
	require.Equal(t, []string{g4}, res.BlobURIs)
	require.Empty(t, res.Orphaned, "H's body references G4")

	require.NoError(t, s.Ack(ctx, held[0]))
	res = purge(broker.PurgeRequest{Destination: d, Filter: broker.Filter{IDs: []string{e}}})
	require.Equal(t, []string{e}, res.IDs, "once replayed it goes")
	require.Equal(t, []string{g3}, res.Orphaned)
	require.Zero(t, count(t, s, "destination = $1", d))
}

func sorted(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}
