package jetstream_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/jetstream"
	"github.com/geodlq/geodlq/broker/memory"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/internal/testenv"
)

// TestSourcePublisherRoundTrip publishes to a source stream's subject and
// reads the messages back through NewConsumer: body, headers and key
// whole, in order, each acknowledged by the stream before Publish
// returned.
func TestSourcePublisherRoundTrip(t *testing.T) {
	url := testenv.NATS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	store, js := newStore(t, nil)
	subject, cons := source(t, js, url, natsjs.ConsumerConfig{})
	pub := jetstream.SourcePublisher(store)

	sent := []*broker.Message{
		{Body: []byte(`{"event_id":"evt-1"}`), Key: []byte{0xff, 0, 'k'},
			Headers: map[string]string{broker.HeaderIdempotencyKey: "idem:v1:abc", broker.HeaderReplayOf: "x.poison.dlt/7"}},
		{Body: []byte("not json\x00\xfe")},
		{Body: []byte{}, Headers: map[string]string{jetstream.HeaderKey: "not base64, and replaced by the key"}, Key: []byte("k2")},
	}
	for _, m := range sent {
		require.NoError(t, pub.Publish(ctx, subject, m))
	}
	info, err := cons.Info(ctx)
	require.NoError(t, err)
	require.EqualValues(t, len(sent), info.NumPending, "acknowledged by the stream, so already there")

	var mu sync.Mutex
	var got []*broker.Message
	c, err := jetstream.NewConsumer(ctx, js, cons, processor(t, store), nil)
	require.NoError(t, err)
	run(t, c, func(_ context.Context, m *broker.Message) error {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, m.Clone())
		return nil
	})
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(got) == len(sent) }, 30*time.Second, 10*time.Millisecond)
	for i, m := range sent {
		require.Equal(t, string(m.Body), string(got[i].Body), "message %d", i)
		require.Equal(t, m.Key, got[i].Key, "message %d", i)
		for k, v := range m.Headers {
			if k != jetstream.HeaderKey {
				require.Equal(t, v, got[i].Header(k), "message %d header %s", i, k)
			}
		}
		require.Equal(t, subject, got[i].Source.Topic)
		require.EqualValues(t, i+1, *got[i].Source.Offset)
	}
}

// TestSourcePublisherRefuses checks every refusal and the error it
// wraps; nothing refused reaches the stream.
func TestSourcePublisherRefuses(t *testing.T) {
	url := testenv.NATS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dlq := uniqueName("TEST")
	prefix := "geodlqtest." + dlq
	store, js := newStore(t, &jetstream.Options{Stream: dlq, SubjectPrefix: prefix})
	subject, cons := source(t, js, url, natsjs.ConsumerConfig{})
	name := uniqueName("SMALL")
	small := "geodlqtest." + name + ".parcels"
	_, err := js.CreateStream(ctx, natsjs.StreamConfig{Name: name, Subjects: []string{small}, MaxMsgSize: 1024})
	require.NoError(t, err)
	t.Cleanup(func() { deleteStream(t, url, name) })
	readOnly, err := jetstream.New(ctx, js, &jetstream.Options{Stream: dlq, SubjectPrefix: prefix, StoreOptions: broker.StoreOptions{ReadOnly: true}})
	require.NoError(t, err)
	cancelled, cancelNow := context.WithCancel(ctx)
	cancelNow()
	msg := &broker.Message{Body: []byte("x")}

	cases := []struct {
		name    string
		s       *broker.Store
		ctx     context.Context
		subject string
		m       *broker.Message
		want    error
	}{
		{"an empty subject", store, ctx, "", msg, broker.ErrInvalidArgument},
		{"a wildcard", store, ctx, "geodlqtest.*", msg, broker.ErrInvalidArgument},
		{"a full wildcard", store, ctx, "geodlqtest.>", msg, broker.ErrInvalidArgument},
		{"an empty token", store, ctx, "geodlqtest..parcels", msg, broker.ErrInvalidArgument},
		{"whitespace", store, ctx, "geodlqtest. parcels", msg, broker.ErrInvalidArgument},
		{"a nil message", store, ctx, subject, nil, broker.ErrInvalidArgument},
		{"a header name with a colon", store, ctx, subject, &broker.Message{Headers: map[string]string{"a:b": "v"}}, broker.ErrInvalidArgument},
		{"a header value with a line break", store, ctx, subject, &broker.Message{Headers: map[string]string{"a": "v\r\nInjected: 1"}}, broker.ErrInvalidArgument},
		{"over max_payload", store, ctx, subject, &broker.Message{Body: make([]byte, 2<<20)}, classify.ErrTooLarge},
		{"over the stream's max_msg_size", store, ctx, small, &broker.Message{Body: make([]byte, 2048)}, classify.ErrTooLarge},
		{"a read-only store", readOnly, ctx, subject, msg, broker.ErrReadOnly},
		{"a store of another adapter", memory.New(nil), ctx, subject, msg, errors.ErrUnsupported},
		{"a nil store", nil, ctx, subject, msg, errors.ErrUnsupported},
		{"a cancelled context", store, cancelled, subject, msg, context.Canceled},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			require.ErrorIs(t, jetstream.SourcePublisher(tc.s).Publish(tc.ctx, tc.subject, tc.m), tc.want)
		})
	}
	var tooLarge *classify.TooLargeError
	require.ErrorAs(t, jetstream.SourcePublisher(store).Publish(ctx, small, &broker.Message{Body: make([]byte, 2048)}), &tooLarge)
	require.Positive(t, tooLarge.Limit)
	require.Less(t, tooLarge.Limit, 1024, "the stream's limit less the headers")
	info, err := cons.Info(ctx)
	require.NoError(t, err)
	require.Zero(t, info.NumPending, "nothing refused was published")

	// A store whose opener made the connection closes it: publishing
	// through it afterwards is ErrClosed.
	owned, err := broker.OpenStore(ctx, url+"?geodlq_stream="+dlq+"&geodlq_prefix="+prefix, nil)
	require.NoError(t, err)
	require.NoError(t, owned.Close())
	require.ErrorIs(t, jetstream.SourcePublisher(owned).Publish(ctx, subject, msg), broker.ErrClosed)
}
