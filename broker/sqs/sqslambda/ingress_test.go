package sqslambda_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/memory"
	"github.com/geodlq/geodlq/broker/sqs/sqslambda"
	"github.com/geodlq/geodlq/ingress"
	"github.com/geodlq/geodlq/internal/corpus"
)

// hostileSize is the size the scaling hostile families are generated at:
// past the gate's 1 MiB budget set below, so the budget families are
// refused for size and the others are judged whole.
const hostileSize = 2 << 20

// TestIngressHostileCorpus runs every hostile event family through both
// API Gateway payload formats, raw and base64-encoded: each answer is the
// verdict ingress.Validate gives the same bytes — 202 and the exact bytes
// enqueued when it finds nothing, else its status and its violations in
// an RFC 9457 body — with no panic, within a deadline.
func TestIngressHostileCorpus(t *testing.T) {
	opts := ingress.Options{MaxBytes: 1 << 20}
	q := memory.New(nil)
	g, err := sqslambda.NewIngress(q, "events", &sqslambda.IngressOptions{Options: opts})
	require.NoError(t, err)
	n := 0
	for _, f := range corpus.Hostile() {
		if f.Input != corpus.InputEvent {
			continue
		}
		n++
		t.Run(f.Name, func(t *testing.T) {
			payload := f.Generate(hostileSize).Data
			want := ingress.Validate(payload, &opts)
			for _, form := range []string{"v1", "v1-base64", "v2", "v2-base64"} {
				body, b64 := string(payload), false
				if form == "v1-base64" || form == "v2-base64" {
					body, b64 = base64.StdEncoding.EncodeToString(payload), true
				}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				var status int
				var respBody string
				var headers map[string]string
				done := make(chan struct{})
				go func() {
					defer close(done)
					if form[:2] == "v1" {
						r, err := g.HandleV1(ctx, events.APIGatewayProxyRequest{HTTPMethod: "POST", Path: "/events", Body: body, IsBase64Encoded: b64})
						require.NoError(t, err)
						status, respBody, headers = r.StatusCode, r.Body, r.Headers
						return
					}
					var req events.APIGatewayV2HTTPRequest
					req.RequestContext.HTTP.Method = "POST"
					req.RawPath, req.Body, req.IsBase64Encoded = "/events", body, b64
					r, err := g.HandleV2(ctx, req)
					require.NoError(t, err)
					status, respBody, headers = r.StatusCode, r.Body, r.Headers
				}()
				select {
				case <-done:
				case <-ctx.Done():
					t.Fatalf("%s: no answer within 30s", form)
				}
				cancel()
				if len(want) == 0 {
					require.Equal(t, http.StatusAccepted, status, "%s: %s", form, respBody)
					msgs := memory.Messages(q, "events")
					require.NotEmpty(t, msgs)
					require.Equal(t, payload, msgs[len(msgs)-1].Body, "%s: enqueued byte for byte", form)
					continue
				}
				p := ingress.NewProblem(want, "/events", &opts)
				require.Equal(t, p.Status, status, "%s: %s", form, respBody)
				require.Equal(t, ingress.ContentTypeProblem, headers["Content-Type"])
				var got ingress.Problem
				require.NoError(t, json.Unmarshal([]byte(respBody), &got), form)
				wantJSON, err := ingress.MarshalProblem(p)
				require.NoError(t, err)
				require.JSONEq(t, string(wantJSON), respBody, "%s: the same violations as ingress.Validate", form)
			}
		})
	}
	require.GreaterOrEqual(t, n, 60, "the hostile corpus has at least 60 event families")
}

// failing refuses every write.
type failing struct{}

func (failing) Publish(context.Context, string, *broker.Message) error {
	return errors.New("sqs: send: AWS.SimpleQueueService.NonExistentQueue")
}

func TestIngressAnswers(t *testing.T) {
	valid := `{"source_uri":"s3://b/k.geojson","processing_mode":"vector","geometry":{"type":"Point","coordinates":[1,2]}}`
	q := memory.New(&memory.Options{StoreOptions: broker.StoreOptions{MaxMessageBytes: 200}})
	g, err := sqslambda.NewIngress(q, "events", nil)
	require.NoError(t, err)
	down, err := sqslambda.NewIngress(failing{}, "events", nil)
	require.NoError(t, err)
	for _, tc := range []struct {
		name   string
		g      *sqslambda.Ingress
		method string
		body   string
		b64    bool
		status int
	}{
		{"valid", g, "POST", valid, false, http.StatusAccepted},
		{"valid base64", g, "POST", base64.StdEncoding.EncodeToString([]byte(valid)), true, http.StatusAccepted},
		{"not base64", g, "POST", "%%%", true, http.StatusBadRequest},
		{"over the queue's limit, which is the gate's default budget", g, "POST", valid[:len(valid)-1] + `,"pad":"` + string(make([]byte, 200)) + `"}`, false, http.StatusRequestEntityTooLarge},
		{"base64 over the budget is refused before decoding", g, "POST", base64.StdEncoding.EncodeToString(make([]byte, 1000)), true, http.StatusRequestEntityTooLarge},
		{"GET", g, "GET", "", false, http.StatusMethodNotAllowed},
		{"queue down", down, "POST", valid, false, http.StatusServiceUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := tc.g.HandleV1(context.Background(), events.APIGatewayProxyRequest{HTTPMethod: tc.method, Path: "/events", Body: tc.body,
				IsBase64Encoded: tc.b64, Headers: map[string]string{"idempotency-key": "idem:client:1"}})
			require.NoError(t, err)
			require.Equal(t, tc.status, r.StatusCode, r.Body)
			if tc.status != http.StatusAccepted {
				require.Equal(t, ingress.ContentTypeProblem, r.Headers["Content-Type"])
				var p ingress.Problem
				require.NoError(t, json.Unmarshal([]byte(r.Body), &p))
				require.Equal(t, tc.status, p.Status)
			}
			if tc.status == http.StatusServiceUnavailable {
				require.Equal(t, "1", r.Headers["Retry-After"])
			}
		})
	}
	msgs := memory.Messages(q, "events")
	require.Len(t, msgs, 2)
	require.Equal(t, "idem:client:1", msgs[0].Header(broker.HeaderIdempotencyKey), "the client's Idempotency-Key travels")
}
