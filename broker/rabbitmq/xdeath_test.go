package rabbitmq_test

import (
	"context"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker/rabbitmq"
	"github.com/geodlq/geodlq/internal/testenv"
)

// Header values as RabbitMQ 3.10 delivered them (recorded with amqp091-go).
var (
	t0 = time.Date(2026, 12, 2, 18, 39, 3, 0, time.UTC)

	recordedRejected = amqp.Table{
		"x-death": []any{amqp.Table{
			"count": int64(1), "exchange": "", "queue": "q.src", "reason": "rejected",
			"routing-keys": []any{"q.src"}, "time": t0.Local(),
		}},
		"x-first-death-exchange": "", "x-first-death-queue": "q.src", "x-first-death-reason": "rejected",
	}
	recordedDeliveryLimit = amqp.Table{
		"x-death": []any{amqp.Table{
			"count": int64(1), "exchange": "", "queue": "q.qsrc", "reason": "delivery_limit",
			"routing-keys": []any{"q.qsrc"}, "time": t0.Add(time.Second),
		}},
		"x-first-death-exchange": "", "x-first-death-queue": "q.qsrc", "x-first-death-reason": "delivery_limit",
	}
	// A retry loop: rejected from the work queue to a wait queue whose TTL
	// dead-letters back; the most recent death comes first.
	retryLoop = amqp.Table{
		"x-death": []any{
			amqp.Table{"count": int64(3), "exchange": "retry", "queue": "q.wait", "reason": "expired",
				"routing-keys": []any{"parcels"}, "time": t0.Add(time.Minute), "original-expiration": "5000"},
			amqp.Table{"count": int64(3), "exchange": "ingest", "queue": "q.work", "reason": "rejected",
				"routing-keys": []any{"parcels", "cc-key"}, "time": t0},
		},
	}
)

func TestParseXDeath(t *testing.T) {
	tests := []struct {
		name    string
		headers amqp.Table
		want    []rabbitmq.Death
		wantErr string
	}{
		{name: "none", headers: amqp.Table{"other": "x"}},
		{name: "nil headers"},
		{name: "rejected", headers: recordedRejected, want: []rabbitmq.Death{
			{Queue: "q.src", Exchange: "", RoutingKeys: []string{"q.src"}, Count: 1, Reason: "rejected", Time: t0},
		}},
		{name: "delivery limit", headers: recordedDeliveryLimit, want: []rabbitmq.Death{
			{Queue: "q.qsrc", RoutingKeys: []string{"q.qsrc"}, Count: 1, Reason: "delivery_limit", Time: t0.Add(time.Second)},
		}},
		{name: "retry loop", headers: retryLoop, want: []rabbitmq.Death{
			{Queue: "q.wait", Exchange: "retry", RoutingKeys: []string{"parcels"}, Count: 3, Reason: "expired", Time: t0.Add(time.Minute), OriginalExpiration: "5000"},
			{Queue: "q.work", Exchange: "ingest", RoutingKeys: []string{"parcels", "cc-key"}, Count: 3, Reason: "rejected", Time: t0},
		}},
		{name: "narrow count, plain map, no time", headers: amqp.Table{"x-death": []any{map[string]any{"count": int32(2), "queue": "q", "reason": "maxlen"}}},
			want: []rabbitmq.Death{{Queue: "q", Count: 2, Reason: "maxlen"}}},
		{name: "not an array", headers: amqp.Table{"x-death": "oops"}, wantErr: "not an array"},
		{name: "entry not a table", headers: amqp.Table{"x-death": []any{"oops"}}, wantErr: "not a table"},
		{name: "count is a string", headers: amqp.Table{"x-death": []any{amqp.Table{"count": "1", "queue": "q", "reason": "rejected"}}}, wantErr: "count"},
		{name: "negative count", headers: amqp.Table{"x-death": []any{amqp.Table{"count": int64(-1), "queue": "q", "reason": "rejected"}}}, wantErr: "count"},
		{name: "no queue", headers: amqp.Table{"x-death": []any{amqp.Table{"count": int64(1), "reason": "rejected"}}}, wantErr: "queue missing"},
		{name: "bad time", headers: amqp.Table{"x-death": []any{amqp.Table{"count": int64(1), "queue": "q", "reason": "rejected", "time": "yesterday"}}}, wantErr: "time"},
		{name: "too many entries", headers: amqp.Table{"x-death": make([]any, 1001)}, wantErr: "1001 entries"},
		{name: "bad routing key", headers: amqp.Table{"x-death": []any{amqp.Table{"count": int64(1), "queue": "q", "reason": "rejected", "routing-keys": []any{7}}}}, wantErr: "routing key"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := rabbitmq.ParseXDeath(tc.headers)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestDeliveryAttempt(t *testing.T) {
	tests := []struct {
		name string
		d    amqp.Delivery
		want int
	}{
		{"first delivery", amqp.Delivery{}, 1},
		{"classic redelivery (lower bound)", amqp.Delivery{Redelivered: true}, 2},
		{"quorum first delivery", amqp.Delivery{Headers: amqp.Table{"x-delivery-count": int64(0)}}, 1},
		{"quorum third delivery", amqp.Delivery{Redelivered: true, Headers: amqp.Table{"x-delivery-count": int64(2)}}, 3},
		{"rejected once, read from the parking queue", amqp.Delivery{Headers: recordedRejected}, 2},
		{"over the delivery limit", amqp.Delivery{Headers: recordedDeliveryLimit}, 2},
		{"retry loop: three rejections, expiries are not attempts", amqp.Delivery{Headers: retryLoop}, 4},
		{"malformed x-death is ignored", amqp.Delivery{Headers: amqp.Table{"x-death": "oops"}}, 1},
		{"huge counts saturate", amqp.Delivery{Headers: amqp.Table{"x-delivery-count": int64(1) << 62, "x-death": []any{
			amqp.Table{"count": int64(1) << 62, "queue": "a", "reason": "rejected"},
			amqp.Table{"count": int64(1) << 62, "queue": "b", "reason": "delivery_limit"}}}}, 1 << 30},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, rabbitmq.DeliveryAttempt(tc.d))
		})
	}
}

func TestMessageOf(t *testing.T) {
	d := amqp.Delivery{
		Body:      []byte(`{"geometry":null}`),
		MessageId: "m-1",
		Headers: func() amqp.Table {
			h := amqp.Table{rabbitmq.HeaderKey: []byte{0, 1, 0xff}, "idempotency-key": "idem:1", "n": int32(3)}
			for k, v := range retryLoop {
				h[k] = v
			}
			return h
		}(),
	}
	m := rabbitmq.MessageOf(d, "q.parking")
	require.Equal(t, d.Body, m.Body)
	require.Equal(t, []byte{0, 1, 0xff}, m.Key)
	require.Equal(t, map[string]string{"idempotency-key": "idem:1"}, m.Headers, "string headers only; the key is not a header")
	require.Equal(t, 4, m.DeliveryAttempt)
	require.Equal(t, "rabbitmq", m.Source.System)
	require.Equal(t, "q.work", m.Source.Topic, "the original queue: the oldest death")
	require.Equal(t, "m-1", m.Source.MessageID)
	require.Equal(t, 4, m.Source.DeliveryCount)
	require.Equal(t, t0, *m.Source.Timestamp, "no message timestamp: the first death")

	d.Headers = nil
	d.Timestamp = t0.Add(time.Hour)
	m = rabbitmq.MessageOf(d, "q.src")
	require.Equal(t, "q.src", m.Source.Topic)
	require.Equal(t, t0.Add(time.Hour), *m.Source.Timestamp)
	require.Equal(t, 1, m.DeliveryAttempt)
}

// TestDeadLetterExchangeWiring proves with the real broker that a message
// rejected without requeue (classic queue), or redelivered past a quorum
// queue's x-delivery-limit, lands in the parking queue behind the
// dead-letter exchange with an x-death the parser reads.
func TestDeadLetterExchangeWiring(t *testing.T) {
	url := testenv.AMQP(t)
	ctx := context.Background()
	ch, err := dial(t, url).Channel()
	require.NoError(t, err)
	name := uniqueName("geodlqtest")
	dlx, park, src, qsrc := name+".dlx", name+".parking", name+".src", name+".qsrc"
	t.Cleanup(func() { cleanup(t, url, dlx, park, src, qsrc) })

	_, err = rabbitmq.DeclareSourceQueue(ctx, ch, src, &rabbitmq.SourceQueueOptions{
		DeadLetterExchange: dlx, DeadLetterRoutingKey: "parked", ParkingQueue: park,
	})
	require.NoError(t, err)
	_, err = rabbitmq.DeclareSourceQueue(ctx, ch, src, &rabbitmq.SourceQueueOptions{
		DeadLetterExchange: dlx, DeadLetterRoutingKey: "parked", ParkingQueue: park,
	})
	require.NoError(t, err, "declaring again is a no-op")
	_, err = rabbitmq.DeclareSourceQueue(ctx, ch, qsrc, &rabbitmq.SourceQueueOptions{
		DeadLetterExchange: dlx, DeadLetterRoutingKey: "parked", Quorum: true, DeliveryLimit: 1,
	})
	require.NoError(t, err)
	_, err = rabbitmq.DeclareSourceQueue(ctx, ch, "never", &rabbitmq.SourceQueueOptions{DeadLetterExchange: dlx, DeliveryLimit: 1})
	require.ErrorContains(t, err, "quorum")

	before := time.Now().Add(-2 * time.Second)
	require.NoError(t, ch.PublishWithContext(ctx, "", src, false, false, amqp.Publishing{Body: []byte("rejected"), MessageId: "m-rej", DeliveryMode: amqp.Persistent}))
	require.NoError(t, ch.PublishWithContext(ctx, "", qsrc, false, false, amqp.Publishing{Body: []byte("limited"), MessageId: "m-lim", DeliveryMode: amqp.Persistent}))

	get := func(q string) amqp.Delivery {
		var d amqp.Delivery
		require.Eventually(t, func() bool {
			var ok bool
			d, ok, err = ch.Get(q, false)
			require.NoError(t, err)
			return ok
		}, 10*time.Second, 20*time.Millisecond, "a message in %s", q)
		return d
	}
	d := get(src)
	require.Equal(t, 1, rabbitmq.DeliveryAttempt(d))
	require.NoError(t, d.Reject(false))
	for i := range 2 {
		d := get(qsrc)
		require.Equal(t, i+1, rabbitmq.DeliveryAttempt(d), "x-delivery-count read into the attempt")
		require.NoError(t, d.Nack(false, true))
	}

	byID := map[string]amqp.Delivery{}
	for range 2 {
		d := get(park)
		byID[d.MessageId] = d
		require.NoError(t, d.Ack(false))
	}
	for id, want := range map[string]struct{ queue, reason string }{"m-rej": {src, rabbitmq.ReasonRejected}, "m-lim": {qsrc, rabbitmq.ReasonDeliveryLimit}} {
		d, ok := byID[id]
		require.True(t, ok, "%s reached the parking queue", id)
		deaths, err := rabbitmq.ParseXDeath(d.Headers)
		require.NoError(t, err)
		require.Len(t, deaths, 1)
		require.Equal(t, want.queue, deaths[0].Queue)
		require.Equal(t, want.reason, deaths[0].Reason)
		require.EqualValues(t, 1, deaths[0].Count)
		require.Equal(t, "", deaths[0].Exchange, "published through the default exchange")
		require.Equal(t, []string{want.queue}, deaths[0].RoutingKeys)
		require.WithinRange(t, deaths[0].Time, before, time.Now().Add(2*time.Second))
		m := rabbitmq.MessageOf(d, park)
		require.Equal(t, want.queue, m.Source.Topic, "provenance: the original queue")
		require.Equal(t, 2, m.DeliveryAttempt)
		require.Equal(t, want.queue, m.Headers["x-first-death-queue"])
	}
}
