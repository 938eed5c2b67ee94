package pubsubpush_test

import (
	"bytes"
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"github.com/stretchr/testify/require"
	"google.golang.org/api/idtoken"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/geodlq/geodlq/broker"
	geopubsub "github.com/geodlq/geodlq/broker/pubsub"
	"github.com/geodlq/geodlq/broker/pubsub/pubsubpush"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/spatial"
)

const project = "geo-push"

func newClient(t *testing.T) (*pubsub.Client, *pstest.Server) {
	t.Helper()
	srv := pstest.NewServer()
	conn, err := grpc.NewClient(srv.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	c, err := pubsub.NewClient(context.Background(), project, option.WithGRPCConn(conn))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(); _ = conn.Close(); _ = srv.Close() })
	return c, srv
}

const (
	bowtie = `{"event_id":"evt-bowtie","source_uri":"s3://b/k","processing_mode":"vector","crs":"EPSG:4326","geometry":{"type":"Polygon","coordinates":[[[0,0],[1,1],[0,1],[1,0],[0,0]]]}}`
	valid  = `{"event_id":"evt-ok","source_uri":"s3://b/k","processing_mode":"vector","crs":"EPSG:4326","geometry":{"type":"Point","coordinates":[1,2]}}`
	tile   = `{"event_id":"evt-tile","source_uri":"s3://b/k","processing_mode":"vector","crs":"EPSG:4326","geometry":{"type":"Point","coordinates":[1,2]}}`
	sub    = "projects/" + project + "/subscriptions/geo-vector-push"
)

// pushJSON is the body of a push subscription's request.
func pushJSON(id, data string, attempt int) []byte {
	b, _ := json.Marshal(map[string]any{
		"message": map[string]any{"data": base64.StdEncoding.EncodeToString([]byte(data)), "messageId": id, "message_id": id,
			"publishTime": "2026-12-03T10:00:00.123Z", "attributes": map[string]string{"idempotency-key": "idem:" + id}},
		"subscription": sub, "deliveryAttempt": attempt})
	return b
}

// messagePublished is Eventarc's MessagePublishedData.
func messagePublished(id, data string) []byte {
	b, _ := json.Marshal(map[string]any{
		"message":      map[string]any{"data": base64.StdEncoding.EncodeToString([]byte(data)), "messageId": id, "publishTime": "2026-12-03T10:00:00Z"},
		"subscription": "projects/" + project + "/subscriptions/eventarc-trigger-sub"})
	return b
}

type env struct {
	t      *testing.T
	srv    *httptest.Server
	store  *broker.Store
	client *pubsub.Client
}

// newEnv serves a push handler that validates events with GEOS and
// dead-letters into the topic vector-dlq of pstest.
func newEnv(t *testing.T, dlqHasSubscription bool, opts pubsubpush.Options) *env {
	t.Helper()
	c, _ := newClient(t)
	_, err := c.TopicAdminClient.CreateTopic(context.Background(), &pubsubpb.Topic{Name: "projects/" + project + "/topics/vector-dlq"})
	require.NoError(t, err)
	if dlqHasSubscription {
		subscribe(t, c)
	}
	store, err := geopubsub.New(context.Background(), c, &geopubsub.Options{PublishSettings: &pubsub.PublishSettings{CountThreshold: 1, DelayThreshold: time.Millisecond, ByteThreshold: 1 << 20, Timeout: time.Minute}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	chk, err := spatial.NewChecker(nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = chk.Close() })
	opts.Processor.Publisher = store
	opts.Processor.Policy = classify.Policy{MaxAttempts: 3}
	opts.Processor.Destination = func(*broker.Message, classify.Route) string { return "vector-dlq" }
	h, err := pubsubpush.New(func(ctx context.Context, m *broker.Message) error {
		if _, err := chk.CheckEventContext(ctx, m.Body); err != nil {
			return err
		}
		if strings.Contains(string(m.Body), "evt-tile") {
			return classify.Transient(errors.New("tile server: HTTP 503"))
		}
		return nil
	}, &opts)
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &env{t: t, srv: srv, store: store, client: c}
}

func subscribe(t *testing.T, c *pubsub.Client) {
	t.Helper()
	_, err := c.SubscriptionAdminClient.CreateSubscription(context.Background(), &pubsubpb.Subscription{
		Name: "projects/" + project + "/subscriptions/vector-dlq-geodlq", Topic: "projects/" + project + "/topics/vector-dlq", AckDeadlineSeconds: 10})
	require.NoError(t, err)
}

func (e *env) post(body []byte, header http.Header) int {
	e.t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.srv.URL, bytes.NewReader(body))
	require.NoError(e.t, err)
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(e.t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
}

func (e *env) deadLetters() []*broker.Record {
	e.t.Helper()
	var all []*broker.Record
	for {
		recs, err := e.store.Fetch(context.Background(), "vector-dlq", broker.Filter{}, 100)
		require.NoError(e.t, err)
		if len(recs) == 0 {
			return all
		}
		for _, r := range recs {
			require.NoError(e.t, e.store.Ack(context.Background(), r))
		}
		all = append(all, recs...)
	}
}

func TestPushBodies(t *testing.T) {
	e := newEnv(t, true, pubsubpush.Options{})
	binary := http.Header{"Ce-Specversion": {"1.0"}, "Ce-Id": {"ce-7"}, "Ce-Type": {"google.cloud.pubsub.topic.v1.messagePublished"},
		"Ce-Source": {"//pubsub.googleapis.com/projects/" + project + "/topics/vector-jobs"}}
	structured, _ := json.Marshal(map[string]any{"specversion": "1.0", "id": "ce-8", "type": "google.cloud.pubsub.topic.v1.messagePublished",
		"source": "//pubsub.googleapis.com/projects/" + project + "/topics/vector-jobs", "data": json.RawMessage(messagePublished("m-8", bowtie))})
	for _, tc := range []struct {
		name   string
		body   []byte
		header http.Header
		status int
		id     string // the dead-lettered message id, or ""
		sub    string
	}{
		{"push JSON, valid event", pushJSON("m-1", valid, 1), nil, http.StatusNoContent, "", ""},
		{"push JSON, bowtie", pushJSON("m-2", bowtie, 1), nil, http.StatusNoContent, "m-2", sub},
		{"CloudEvent, binary mode", messagePublished("m-7", bowtie), binary, http.StatusNoContent, "m-7", "projects/" + project + "/subscriptions/eventarc-trigger-sub"},
		{"CloudEvent, structured mode", structured, http.Header{"Content-Type": {"application/cloudevents+json; charset=utf-8"}}, http.StatusNoContent, "m-8", "projects/" + project + "/subscriptions/eventarc-trigger-sub"},
		{"not a push body", []byte(`{"hello":1}`), nil, http.StatusBadRequest, "", ""},
		{"not JSON", []byte("\x00garbage"), nil, http.StatusBadRequest, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.status, e.post(tc.body, tc.header))
			dl := e.deadLetters()
			if tc.id == "" {
				require.Empty(t, dl)
				return
			}
			require.Len(t, dl, 1)
			env := dl[0].Envelope
			require.Equal(t, classify.ClassInvalidGeometry, env.FailureClass)
			require.Equal(t, tc.id, env.Source.MessageID)
			require.Equal(t, tc.sub, env.Source.Topic)
			restored, err := env.Restore(context.Background(), nil)
			require.NoError(t, err)
			require.Equal(t, bowtie, string(restored))
		})
	}
	require.Equal(t, http.StatusMethodNotAllowed, func() int {
		resp, err := http.Get(e.srv.URL)
		require.NoError(t, err)
		_ = resp.Body.Close()
		return resp.StatusCode
	}())
}

// TestRedeliveryWhenDeadLetterPublishFails: the dead-letter topic has no
// subscription (the store refuses to publish into the void), so the push
// is answered 503 and Pub/Sub delivers it again; once the topic has one,
// the next delivery is dead-lettered and answered 204. A transient
// failure is answered 503 until its attempts are spent.
func TestRedeliveryWhenDeadLetterPublishFails(t *testing.T) {
	e := newEnv(t, false, pubsubpush.Options{})
	require.Equal(t, http.StatusServiceUnavailable, e.post(pushJSON("m-1", bowtie, 1), nil), "the dead-letter publish failed: redeliver")
	subscribe(t, e.client)
	require.Equal(t, http.StatusNoContent, e.post(pushJSON("m-1", bowtie, 2), nil), "the redelivery is dead-lettered")
	dl := e.deadLetters()
	require.Len(t, dl, 1)
	require.Equal(t, 2, dl[0].Envelope.Source.DeliveryCount)

	require.Equal(t, http.StatusServiceUnavailable, e.post(pushJSON("m-2", tile, 1), nil), "a transient failure with attempts left: redeliver")
	require.Equal(t, http.StatusServiceUnavailable, e.post(pushJSON("m-2", tile, 2), nil))
	require.Equal(t, http.StatusNoContent, e.post(pushJSON("m-2", tile, 3), nil), "the attempt reaching MaxAttempts dead-letters")
	dl = e.deadLetters()
	require.Len(t, dl, 1)
	require.Equal(t, classify.ClassTransient, dl[0].Envelope.FailureClass)
	require.Equal(t, 3, dl[0].Envelope.Attempts)
}

// keys serves a JWKS of key as Google's certificate endpoint would.
type keys struct{ key *rsa.PrivateKey }

func (k keys) RoundTrip(*http.Request) (*http.Response, error) {
	b64 := base64.RawURLEncoding.EncodeToString
	body, _ := json.Marshal(map[string]any{"keys": []map[string]string{{"kid": "test-key", "kty": "RSA", "alg": "RS256", "use": "sig",
		"n": b64(k.key.N.Bytes()), "e": b64(big.NewInt(int64(k.key.E)).Bytes())}}})
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"application/json"}}, Body: io.NopCloser(bytes.NewReader(body))}, nil
}

func sign(t *testing.T, key *rsa.PrivateKey, claims map[string]any) string {
	t.Helper()
	enc := func(v any) string {
		b, err := json.Marshal(v)
		require.NoError(t, err)
		return base64.RawURLEncoding.EncodeToString(b)
	}
	unsigned := enc(map[string]string{"alg": "RS256", "kid": "test-key", "typ": "JWT"}) + "." + enc(claims)
	sum := sha256.Sum256([]byte(unsigned))
	sig, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, sum[:])
	require.NoError(t, err)
	return unsigned + "." + base64.RawURLEncoding.EncodeToString(sig)
}

func TestOIDCAudience(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	other, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	v, err := idtoken.NewValidator(context.Background(), option.WithHTTPClient(&http.Client{Transport: keys{key}}))
	require.NoError(t, err)
	const aud = "https://geo-consumer.example.run.app/push"
	const sa = "push@geo-push.iam.gserviceaccount.com"
	e := newEnv(t, true, pubsubpush.Options{Auth: &pubsubpush.Auth{Audience: aud, ServiceAccountEmail: sa, Validator: v}})
	now := time.Now()
	claims := func(mod func(map[string]any)) map[string]any {
		c := map[string]any{"iss": "https://accounts.google.com", "aud": aud, "exp": now.Add(time.Hour).Unix(), "iat": now.Unix(),
			"email": sa, "email_verified": true, "sub": "1234"}
		if mod != nil {
			mod(c)
		}
		return c
	}
	bearer := func(tok string) http.Header { return http.Header{"Authorization": {"Bearer " + tok}} }
	for _, tc := range []struct {
		name   string
		header http.Header
		status int
	}{
		{"no token", nil, http.StatusUnauthorized},
		{"valid token", bearer(sign(t, key, claims(nil))), http.StatusNoContent},
		{"another audience", bearer(sign(t, key, claims(func(c map[string]any) { c["aud"] = "https://elsewhere" }))), http.StatusUnauthorized},
		{"expired", bearer(sign(t, key, claims(func(c map[string]any) { c["exp"] = now.Add(-time.Minute).Unix() }))), http.StatusUnauthorized},
		{"not Google's issuer", bearer(sign(t, key, claims(func(c map[string]any) { c["iss"] = "https://evil.example" }))), http.StatusUnauthorized},
		{"signed by another key", bearer(sign(t, other, claims(nil))), http.StatusUnauthorized},
		{"another service account", bearer(sign(t, key, claims(func(c map[string]any) { c["email"] = "x@evil.example" }))), http.StatusForbidden},
		{"garbage", bearer("a.b.c"), http.StatusUnauthorized},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.status, e.post(pushJSON("m-auth", bowtie, 1), tc.header))
			dl := e.deadLetters()
			if tc.status == http.StatusNoContent {
				require.Len(t, dl, 1)
			} else {
				require.Empty(t, dl, "a refused push is not processed")
			}
		})
	}
}
