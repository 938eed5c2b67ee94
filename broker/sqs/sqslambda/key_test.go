package sqslambda_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/memory"
	"github.com/geodlq/geodlq/broker/sqs/sqslambda"
	"github.com/geodlq/geodlq/classify"
)

// TestEventKeyIngressToEnvelope assigns keys at the gate — the client's
// Idempotency-Key, else the event's own idempotency_key, else derived and
// marked — and follows the enqueued messages through HandleSQS into their
// envelopes; a record a producer sent straight to the queue with its own
// key member keeps it too.
func TestEventKeyIngressToEnvelope(t *testing.T) {
	ctx := context.Background()
	q := memory.New(nil)
	g, err := sqslambda.NewIngress(q, "vector-jobs", nil)
	require.NoError(t, err)
	event := func(key string) string {
		k := ""
		if key != "" {
			k = `"idempotency_key":"` + key + `",`
		}
		return `{` + k + `"source_uri":"s3://b/` + key + `.geojson","processing_mode":"vector","geometry":{"type":"Point","coordinates":[1,2]}}`
	}
	type want struct {
		key     string
		derived bool
	}
	wants := map[string]want{} // by body
	for _, tc := range []struct {
		body, header string
		key          string
		derived      bool
	}{
		{body: event("own-1"), key: "own-1"},
		{body: event("own-2"), header: "client-2", key: "client-2"},
		{body: event(""), derived: true},
	} {
		var req events.APIGatewayV2HTTPRequest
		req.RequestContext.HTTP.Method, req.RawPath, req.Body = "POST", "/events", tc.body
		if tc.header != "" {
			req.Headers = map[string]string{"idempotency-key": tc.header}
		}
		resp, err := g.HandleV2(ctx, req)
		require.NoError(t, err)
		require.Equal(t, 202, resp.StatusCode, resp.Body)
		var ans struct {
			Key     string `json:"idempotency_key"`
			Derived bool   `json:"idempotency_key_derived"`
		}
		require.NoError(t, json.Unmarshal([]byte(resp.Body), &ans))
		if tc.key != "" {
			require.Equal(t, tc.key, ans.Key)
		}
		require.NotEmpty(t, ans.Key)
		require.Equal(t, tc.derived, ans.Derived)
		wants[tc.body] = want{ans.Key, tc.derived}
	}
	recs, err := q.Fetch(ctx, "vector-jobs", broker.Filter{}, 10)
	require.NoError(t, err)
	require.Len(t, recs, 3)
	var batch []events.SQSMessage
	for i, r := range recs {
		attrs := map[string]events.SQSMessageAttribute{}
		for k, v := range r.Message.Headers {
			attrs[k] = events.SQSMessageAttribute{DataType: "String", StringValue: &v}
		}
		w := wants[string(r.Message.Body)]
		require.Equal(t, w.key, r.Message.Header(broker.HeaderIdempotencyKey), "the gate assigned the key")
		batch = append(batch, events.SQSMessage{MessageId: "m-" + string(rune('a'+i)), Body: string(r.Message.Body), MessageAttributes: attrs,
			EventSourceARN: "arn:aws:sqs:us-east-1:123456789012:vector-jobs", Attributes: map[string]string{"ApproximateReceiveCount": "1"}})
	}
	direct := event("producer-4")
	wants[direct] = want{key: "producer-4"}
	batch = append(batch, events.SQSMessage{MessageId: "m-direct", Body: direct,
		EventSourceARN: "arn:aws:sqs:us-east-1:123456789012:vector-jobs", Attributes: map[string]string{"ApproximateReceiveCount": "1"}})

	dlq := memory.New(nil)
	h, err := sqslambda.New(func(context.Context, *broker.Message) error {
		return classify.InvalidGeometry(errors.New("Self-intersection[0.5 0.5]"))
	}, &sqslambda.Options{Processor: broker.ProcessorOptions{Publisher: dlq}})
	require.NoError(t, err)
	resp, err := h.HandleSQS(ctx, events.SQSEvent{Records: batch})
	require.NoError(t, err)
	require.Empty(t, resp.BatchItemFailures)
	dead, err := dlq.Fetch(ctx, "vector-jobs.poison.dlt", broker.Filter{}, 10)
	require.NoError(t, err)
	require.Len(t, dead, 4)
	for _, r := range dead {
		env, err := broker.EnvelopeOf(r.Message)
		require.NoError(t, err)
		w := wants[string(env.RawPayload)]
		require.Equal(t, w.key, env.IdempotencyKey)
		require.Equal(t, w.derived, env.IdempotencyKeyDerived, env.IdempotencyKey)
	}
}
