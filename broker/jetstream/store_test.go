package jetstream_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/brokertest"
	"github.com/geodlq/geodlq/broker/jetstream"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/internal/testenv"
)

func TestSubjectToken(t *testing.T) {
	tests := []struct{ dest, token string }{
		{"orders.poison.dlt", "orders_2Epoison_2Edlt"},
		{"plain-Name09", "plain-Name09"},
		{"a_b", "a_5Fb"},
		{"wild.*.>", "wild_2E_2A_2E_3E"},
		{"sp ace/slash", "sp_20ace_2Fslash"},
		{"café", "caf_C3_A9"},
		{"_2E", "_5F2E"},
	}
	for _, tc := range tests {
		t.Run(tc.dest, func(t *testing.T) {
			got := jetstream.SubjectToken(tc.dest)
			require.Equal(t, tc.token, got)
			require.NotContains(t, got, ".")
			back, err := jetstream.DestinationOfToken(got)
			require.NoError(t, err)
			require.Equal(t, tc.dest, back, "the mapping is reversible")
		})
	}
	for _, bad := range []string{"_", "_4", "_zz", "_2e", "x_G1", "_41", "a.b", "caf\xc3\xa9", "a b", "*"} {
		_, err := jetstream.DestinationOfToken(bad)
		require.Error(t, err, "%q is not a token SubjectToken makes", bad)
	}
}

// newStore returns a store on a fresh stream deleted when the test ends.
func newStore(t *testing.T, opts *jetstream.Options) (*broker.Store, natsjs.JetStream) {
	t.Helper()
	url := testenv.NATS(t)
	var o jetstream.Options
	if opts != nil {
		o = *opts
	}
	if o.Stream == "" {
		o.Stream = uniqueName("TEST")
		o.SubjectPrefix = "geodlqtest." + o.Stream
	}
	o.Create = true
	t.Cleanup(func() { deleteStream(t, url, o.Stream) })
	_, js := connect(t, url)
	s, err := jetstream.New(context.Background(), js, &o)
	require.NoError(t, err)
	return s, js
}

func fetchAll(t *testing.T, s *broker.Store, dest string) []*broker.Record {
	t.Helper()
	var all []*broker.Record
	for {
		recs, err := s.Fetch(context.Background(), dest, broker.Filter{}, 100)
		require.NoError(t, err)
		if len(recs) == 0 {
			return all
		}
		all = append(all, recs...)
	}
}

func TestStreamSetup(t *testing.T) {
	ctx := context.Background()
	s, js := newStore(t, nil)
	name := jetstream.StreamName(s)
	st, err := js.Stream(ctx, name)
	require.NoError(t, err)
	cfg := st.CachedInfo().Config
	require.Equal(t, natsjs.WorkQueuePolicy, cfg.Retention, "an acknowledged record is deleted")
	require.Equal(t, natsjs.FileStorage, cfg.Storage)
	require.Equal(t, natsjs.DiscardNew, cfg.Discard, "a full stream refuses writes rather than drop records")
	require.Equal(t, 2*time.Minute, cfg.Duplicates)
	require.Equal(t, []string{strings.TrimSuffix(jetstream.Subject(s, "x"), ".x") + ".>"}, cfg.Subjects)
	require.Equal(t, "geodlqtest."+name+".parcels_2Epoison_2Edlt", jetstream.Subject(s, "parcels.poison.dlt"))

	t.Run("idempotent", func(t *testing.T) {
		again, err := jetstream.New(ctx, js, &jetstream.Options{Stream: name, SubjectPrefix: "geodlqtest." + name, Create: true})
		require.NoError(t, err)
		require.Equal(t, jetstream.Subject(s, "a.b"), jetstream.Subject(again, "a.b"))
		st, err := js.Stream(ctx, name)
		require.NoError(t, err)
		require.Len(t, st.CachedInfo().Config.Subjects, 1, "no subject added twice")
	})
	t.Run("without Create a stream lacking the subjects is no store", func(t *testing.T) {
		for _, o := range []jetstream.Options{{}, {StoreOptions: broker.StoreOptions{ReadOnly: true}}, {StoreOptions: broker.StoreOptions{ReadOnly: true}, Create: true}} {
			o.Stream, o.SubjectPrefix = name, "geodlqtest3."+name
			_, err := jetstream.New(ctx, js, &o)
			require.ErrorIs(t, err, broker.ErrNoStore, "%+v", o)
		}
		st, err := js.Stream(ctx, name)
		require.NoError(t, err)
		require.Len(t, st.CachedInfo().Config.Subjects, 1, "unchanged")
	})
	t.Run("Create adds its subjects to an existing stream", func(t *testing.T) {
		other, err := jetstream.New(ctx, js, &jetstream.Options{Stream: name, SubjectPrefix: "geodlqtest2." + name, Create: true})
		require.NoError(t, err)
		st, err := js.Stream(ctx, name)
		require.NoError(t, err)
		require.Len(t, st.CachedInfo().Config.Subjects, 2)
		require.NoError(t, other.Publish(ctx, "d", &broker.Message{Body: []byte("x")}))
	})
	t.Run("a missing stream is no store without Create", func(t *testing.T) {
		missing := uniqueName("MISSING")
		for _, o := range []jetstream.Options{{Stream: missing}, {Stream: missing, StoreOptions: broker.StoreOptions{ReadOnly: true}, Create: true}} {
			_, err := jetstream.New(ctx, js, &o)
			require.ErrorIs(t, err, broker.ErrNoStore)
		}
		_, err := js.Stream(ctx, missing)
		require.ErrorIs(t, err, natsjs.ErrStreamNotFound, "nothing created")
	})
	t.Run("refuses limits retention", func(t *testing.T) {
		name := uniqueName("LIMITS")
		_, err := js.CreateStream(ctx, natsjs.StreamConfig{Name: name, Subjects: []string{"geodlqtest." + name + ".>"}})
		require.NoError(t, err)
		t.Cleanup(func() { _ = js.DeleteStream(context.Background(), name) })
		_, err = jetstream.New(ctx, js, &jetstream.Options{Stream: name, SubjectPrefix: "geodlqtest." + name, Create: true})
		require.ErrorContains(t, err, "limits retention")
		require.ErrorIs(t, err, broker.ErrNoStore)
	})
	t.Run("bad options", func(t *testing.T) {
		for _, o := range []jetstream.Options{{Stream: "a.b"}, {Replayer: "r*"}, {SubjectPrefix: "a..b"}, {SubjectPrefix: "a.>"},
			{StoreOptions: broker.StoreOptions{MaxMessageBytes: -1}}, {HeaderBudget: 2 << 20, Stream: name, SubjectPrefix: "geodlqtest." + name}} {
			_, err := jetstream.New(ctx, js, &o)
			require.ErrorIs(t, err, broker.ErrInvalidArgument, "%+v", o)
		}
		_, err := jetstream.New(ctx, nil, nil)
		require.ErrorIs(t, err, broker.ErrInvalidArgument)
	})
	t.Run("As", func(t *testing.T) {
		var nc *nats.Conn
		require.True(t, s.As(&nc))
		require.Same(t, js.Conn(), nc)
		var got natsjs.JetStream
		require.True(t, s.As(&got))
		var stream natsjs.Stream
		require.True(t, s.As(&stream))
		require.Equal(t, name, stream.CachedInfo().Config.Name)
		var wrong *int
		require.False(t, s.As(&wrong))
	})
}

func TestSizeLimit(t *testing.T) {
	ctx := context.Background()
	s, js := newStore(t, nil)
	require.Equal(t, int(js.Conn().MaxPayload())-jetstream.DefaultHeaderBudget, s.MaxMessageBytes("any"),
		"the limit is the server's max_payload less the header reserve")

	t.Run("headers count against max_payload", func(t *testing.T) {
		m := &broker.Message{Body: make([]byte, s.MaxMessageBytes("d")), Headers: map[string]string{"big": strings.Repeat("h", 2*jetstream.DefaultHeaderBudget)}}
		err := s.Publish(ctx, "d", m)
		require.ErrorIs(t, err, classify.ErrTooLarge)
		require.Empty(t, fetchAll(t, s, "d"))
	})
	t.Run("stream max_msg_size lowers the limit", func(t *testing.T) {
		name := uniqueName("SMALL")
		_, err := js.CreateStream(ctx, natsjs.StreamConfig{Name: name, Subjects: []string{"geodlqtest." + name + ".>"},
			Retention: natsjs.WorkQueuePolicy, MaxMsgSize: 64 << 10})
		require.NoError(t, err)
		t.Cleanup(func() { _ = js.DeleteStream(context.Background(), name) })
		small, err := jetstream.New(ctx, js, &jetstream.Options{Stream: name, SubjectPrefix: "geodlqtest." + name})
		require.NoError(t, err)
		require.Equal(t, 64<<10-jetstream.DefaultHeaderBudget, small.MaxMessageBytes("d"))
		err = small.Publish(ctx, "d", &broker.Message{Body: make([]byte, 64<<10-jetstream.DefaultHeaderBudget+1)})
		var tl *classify.TooLargeError
		require.ErrorAs(t, err, &tl)
		require.Equal(t, 64<<10-jetstream.DefaultHeaderBudget, tl.Limit)
	})
	t.Run("headers NATS cannot carry are refused", func(t *testing.T) {
		err := s.Publish(ctx, "h", &broker.Message{Body: []byte("x"), Headers: map[string]string{"k": "line\r\nbreak"}})
		require.ErrorContains(t, err, "cannot be carried")
		err = s.Publish(ctx, "h", &broker.Message{Body: []byte("x"), Headers: map[string]string{"a key": "v"}})
		require.Error(t, err)
		require.Empty(t, fetchAll(t, s, "h"))
	})
}

// TestDuplicateWindow proves Nats-Msg-Id: a retried write of the same
// dead-letter message is absorbed; the same event failing again after its
// record was replayed (acknowledged, hence deleted) is stored again.
func TestDuplicateWindow(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t, nil)
	in := brokertest.SampleInputs()[0]
	m := brokertest.Message(t, in)
	id := jetstream.MsgID("orders.poison.dlt", m)
	require.NotEmpty(t, id)
	require.Equal(t, id, jetstream.MsgID("orders.poison.dlt", m), "the id is deterministic")
	require.NotEqual(t, id, jetstream.MsgID("orders.retry.dlt", m), "the destination is part of the id")

	// The Processor rebuilds the envelope when the source redelivers a
	// message whose dead-letter write timed out: a new dead_lettered_at,
	// the same key and source position.
	in2 := in
	in2.At = in.At.Add(time.Minute)
	rebuilt := brokertest.Message(t, in2)
	require.NotEqual(t, m.Body, rebuilt.Body)
	require.Equal(t, id, jetstream.MsgID("orders.poison.dlt", rebuilt))

	const d = "orders.poison.dlt"
	require.NoError(t, s.Publish(ctx, d, m))
	require.NoError(t, s.Publish(ctx, d, m), "a retried write succeeds")
	require.NoError(t, s.Publish(ctx, d, rebuilt), "so does a rebuilt one")
	got := fetchAll(t, s, d)
	require.Len(t, got, 1, "the duplicate window absorbed both retries")
	require.Equal(t, m.Body, got[0].Message.Body)
	require.NotContains(t, got[0].Message.Headers, jetstream.HeaderMsgID, "adapter headers are not returned")

	// Same event, new source position: it failed again after a replay.
	in3 := in
	off := *in.Source.Offset + 100
	src := *in.Source
	src.Offset = &off
	in3.Source = &src
	again := brokertest.Message(t, in3)
	require.NoError(t, s.Publish(ctx, d, again))
	got2 := fetchAll(t, s, d)
	require.Len(t, got2, 1, "a failure from a new source position is a new record")
	require.Equal(t, again.Body, got2[0].Message.Body)
	require.NoError(t, s.Ack(ctx, got[0]))
	require.NoError(t, s.Ack(ctx, got2[0]))

	// The first record was replayed and acknowledged (deleted). A write
	// with its id inside the window is then a new failure, not a retry:
	// it must be stored, not dropped.
	require.NoError(t, s.Publish(ctx, d, m))
	got3 := fetchAll(t, s, d)
	require.Len(t, got3, 1, "a write whose duplicate was already acknowledged is stored")
	require.NotEqual(t, got[0].ID, got3[0].ID)
	require.NoError(t, s.Publish(ctx, d, m), "and its own retry is absorbed")
	require.NoError(t, s.Release(ctx, got3[0]))
	require.Len(t, fetchAll(t, s, d), 1)

	// Without an idempotency key there is no id and no de-duplication.
	raw := &broker.Message{Body: []byte("not an envelope")}
	require.Empty(t, jetstream.MsgID(d, raw))
	require.NoError(t, s.Publish(ctx, "raw", raw))
	require.NoError(t, s.Publish(ctx, "raw", raw))
	require.Len(t, fetchAll(t, s, "raw"), 2)

	// A re-injected message carries dlq-replay-of: each replay of a record
	// is one write; another record of the same event is another.
	r1 := &broker.Message{Body: []byte("{}"), Headers: map[string]string{broker.HeaderIdempotencyKey: "k", broker.HeaderReplayOf: "d/1"}}
	r2 := &broker.Message{Body: []byte("{}"), Headers: map[string]string{broker.HeaderIdempotencyKey: "k", broker.HeaderReplayOf: "d/2"}}
	require.NotEqual(t, jetstream.MsgID("src", r1), jetstream.MsgID("src", r2))
}

func TestLeases(t *testing.T) {
	ctx := context.Background()
	s, js := newStore(t, &jetstream.Options{StoreOptions: broker.StoreOptions{LeaseTTL: time.Second}})
	require.Equal(t, 900*time.Millisecond, jetstream.Lease(s))
	name := jetstream.StreamName(s)
	other, err := jetstream.New(ctx, js, &jetstream.Options{Stream: name, SubjectPrefix: "geodlqtest." + name, StoreOptions: broker.StoreOptions{LeaseTTL: time.Second}})
	require.NoError(t, err)
	const d = "lease.test"
	for _, m := range brokertest.Messages(t, brokertest.SampleInputs()[:3]) {
		require.NoError(t, s.Publish(ctx, d, m))
	}

	recs := fetchAll(t, s, d)
	require.Len(t, recs, 3)
	for _, r := range recs {
		require.Equal(t, 1, r.Deliveries)
		require.Equal(t, 1, r.Message.DeliveryAttempt)
	}

	t.Run("another handle of the same replayer may settle", func(t *testing.T) {
		require.NoError(t, other.Ack(ctx, recs[0]), "JetStream acks are not bound to a connection")
	})
	t.Run("settling twice", func(t *testing.T) {
		require.NoError(t, s.Release(ctx, recs[1]))
		require.ErrorIs(t, s.Ack(ctx, recs[1]), broker.ErrLeaseLost)
	})
	t.Run("a forged lease", func(t *testing.T) {
		f := *recs[2]
		f.ID = recs[0].ID
		require.ErrorIs(t, s.Ack(ctx, &f), broker.ErrLeaseLost)
		f = *recs[2]
		f.Lease = "garbage"
		require.ErrorIs(t, s.Ack(ctx, &f), broker.ErrLeaseLost)
	})
	t.Run("a lapsed lease", func(t *testing.T) {
		time.Sleep(jetstream.Lease(s) + 10*time.Millisecond)
		require.ErrorIs(t, s.Ack(ctx, recs[2]), broker.ErrLeaseLost, "too late to ack: the server may redeliver")
		require.ErrorIs(t, s.Release(ctx, recs[2]), broker.ErrLeaseLost)
	})

	var again []*broker.Record
	require.Eventually(t, func() bool {
		again = append(again, fetchAll(t, s, d)...)
		return len(again) == 2
	}, 60*time.Second, 50*time.Millisecond)
	byID := map[string]*broker.Record{}
	for _, r := range again {
		byID[r.ID] = r
	}
	require.Equal(t, 2, byID[recs[1].ID].Deliveries, "released once: second delivery")
	require.Equal(t, 2, byID[recs[2].ID].Message.DeliveryAttempt, "redelivered after the ack wait: second delivery")
	for _, r := range again {
		require.NoError(t, s.Ack(ctx, r))
	}
	require.Empty(t, fetchAll(t, other, d))
	require.NoError(t, s.Close())
	require.ErrorIs(t, s.Publish(ctx, d, &broker.Message{Body: []byte("x")}), broker.ErrClosed)
}

// TestFilteredFetchReleasesSurplus: a filtered fetch leases only what it
// returns; the records it passed over, matching or not, are available to
// the next fetch at once.
func TestFilteredFetchReleasesSurplus(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t, nil)
	const d = "filter.surplus"
	msgs := brokertest.Messages(t, brokertest.FilterInputs())
	for _, m := range msgs {
		require.NoError(t, s.Publish(ctx, d, m))
	}
	env0, err := envelope.Decode(msgs[0].Body)
	require.NoError(t, err)
	f := broker.Filter{Classes: []classify.Class{env0.FailureClass}}
	one, err := s.Fetch(ctx, d, f, 1)
	require.NoError(t, err)
	require.Len(t, one, 1)
	require.NotNil(t, one[0].Envelope, "a filtered fetch returns the decoded envelope")
	require.True(t, f.Match(one[0].Envelope))
	rest := fetchAll(t, s, d)
	require.Len(t, rest, len(msgs)-1, "everything but the leased record is available")
	for _, r := range append(one, rest...) {
		require.NoError(t, s.Ack(ctx, r))
	}
}

// TestConsumerRecreated: a consumer deleted on the server (by an operator,
// or an inactivity threshold) is created again, and nothing is lost.
func TestConsumerRecreated(t *testing.T) {
	ctx := context.Background()
	s, js := newStore(t, nil)
	require.NoError(t, s.Publish(ctx, "d", &broker.Message{Body: []byte("one")}))
	require.Len(t, fetchAll(t, s, "d"), 1)
	require.NoError(t, js.DeleteConsumer(ctx, jetstream.StreamName(s), jetstream.ConsumerName(s, "d")))
	var recs []*broker.Record
	for range 3 {
		got, err := s.Fetch(ctx, "d", broker.Filter{}, 10)
		if err == nil {
			recs = append(recs, got...)
		}
	}
	require.Len(t, recs, 1, "the new consumer delivers the un-acked record")
	require.NoError(t, s.Ack(ctx, recs[0]))
}

// TestReadOnly: a read-only store lists, but neither writes nor leases,
// and creates no consumer on the server.
func TestReadOnly(t *testing.T) {
	ctx := context.Background()
	s, js := newStore(t, nil)
	name := jetstream.StreamName(s)
	msgs := brokertest.Messages(t, brokertest.SampleInputs()[:2])
	for _, m := range msgs {
		require.NoError(t, s.Publish(ctx, "d", m))
	}
	ro, err := jetstream.New(ctx, js, &jetstream.Options{Stream: name, SubjectPrefix: "geodlqtest." + name, StoreOptions: broker.StoreOptions{ReadOnly: true}})
	require.NoError(t, err)
	require.ErrorIs(t, ro.Publish(ctx, "d", msgs[0]), broker.ErrReadOnly)
	_, err = ro.Fetch(ctx, "d", broker.Filter{}, 1)
	require.ErrorIs(t, err, broker.ErrReadOnly)
	recs := fetchAll(t, s, "d")
	require.Len(t, recs, 2)
	require.ErrorIs(t, ro.Ack(ctx, recs[0]), broker.ErrReadOnly)
	require.ErrorIs(t, ro.Release(ctx, recs[0]), broker.ErrReadOnly)
	p, err := ro.List(ctx, broker.ListOptions{Destination: "d"})
	require.NoError(t, err)
	require.Len(t, p.Entries, 2, "leased records are listed")
	for i, e := range p.Entries {
		require.Equal(t, msgs[i].Body, e.Record.Message.Body)
		require.Equal(t, msgs[i].Key, e.Record.Message.Key)
		require.Empty(t, e.Record.Lease)
		require.False(t, e.PublishedAt.IsZero())
	}
	st, err := js.Stream(ctx, name)
	require.NoError(t, err)
	info, err := st.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, info.State.Consumers, "only the writer's replay consumer: listing creates none")
	for _, r := range recs {
		require.NoError(t, s.Ack(ctx, r))
	}
}

// TestListAcrossDestinations: a listing of every destination pages
// through the stream in order, names each record's destination, and skips
// messages under the prefix that the store did not write; newest first
// finds a sparse destination's records far back in the stream.
func TestListAcrossDestinations(t *testing.T) {
	ctx := context.Background()
	s, js := newStore(t, nil)
	var want []string
	for i := range 7 {
		d := []string{"a.poison.dlt", "b.retry.dlt"}[i%2]
		require.NoError(t, s.Publish(ctx, d, &broker.Message{Body: []byte("body " + strconv.Itoa(i))}))
		want = append(want, d+"/body "+strconv.Itoa(i))
	}
	// A foreign message under the prefix, and a crowd of another
	// destination's records after the listed ones.
	_, err := js.Publish(ctx, strings.TrimSuffix(jetstream.Subject(s, "x"), "x")+"not.a.token", []byte("foreign"))
	require.NoError(t, err)
	for i := range 300 {
		require.NoError(t, s.Publish(ctx, "crowd", &broker.Message{Body: []byte("crowd " + strconv.Itoa(i))}))
	}
	ds, err := s.Destinations(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"a.poison.dlt", "b.retry.dlt", "crowd"}, ds)

	var got []string
	err = s.ScanAll(ctx, broker.ListOptions{Limit: 3}, func(e broker.Entry) error {
		if e.Record.Destination != "crowd" {
			got = append(got, e.Record.Destination+"/"+string(e.Record.Message.Body))
		}
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, want, got)

	var back []string
	err = s.ScanAll(ctx, broker.ListOptions{Destination: "a.poison.dlt", Descending: true, Limit: 2}, func(e broker.Entry) error {
		back = append(back, string(e.Record.Message.Body))
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, []string{"body 6", "body 4", "body 2", "body 0"}, back)

	_, err = s.List(ctx, broker.ListOptions{After: "not-a-sequence"})
	require.ErrorIs(t, err, broker.ErrInvalidArgument)
	counts, err := s.Stats(ctx, broker.StatsOptions{Destination: "b.retry.dlt"})
	require.NoError(t, err)
	require.Len(t, counts, 1)
	require.Equal(t, 3, counts[0].Total())
}
