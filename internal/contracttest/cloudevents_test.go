package contracttest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/cloudevents/sdk-go/protocol/kafka_sarama/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/internal/testenv"
)

// sameEnvelope checks that a dead letter read back is the envelope data,
// byte for byte.
func sameEnvelope(t *testing.T, name string, data []byte, env *envelope.Envelope, err error) {
	t.Helper()
	require.NoError(t, err, name)
	again, err := env.Encode()
	require.NoError(t, err)
	require.Equal(t, string(data), string(again), "%s: the envelope changed on the way", name)
}

// checkSDKEvent checks what the Go SDK read of a dead-letter event: valid,
// its data the envelope byte for byte, the dead-letter fields as
// extensions. text turns the SDK's string back into the attribute's value
// (the SDK keeps HTTP headers percent-encoded, as the binding before 1.0.2
// did not encode them).
func checkSDKEvent(t *testing.T, name string, data []byte, env *envelope.Envelope, ev event.Event, contentType string, text func(any) string) {
	t.Helper()
	require.NoError(t, ev.Validate(), name)
	require.Equal(t, "1.0", ev.SpecVersion())
	require.Equal(t, envelope.CloudEventType, ev.Type())
	require.Equal(t, env.EventID, text(ev.Subject()))
	require.True(t, env.DeadLetteredAt.Equal(ev.Time()))
	require.Equal(t, envelope.SchemaID, ev.DataSchema())
	require.Equal(t, contentType, ev.DataContentType())
	require.Equal(t, string(data), string(ev.Data()), "%s: the SDK holds the envelope verbatim", name)
	ext := ev.Extensions()
	require.Equal(t, env.FailureClass.String(), text(ext[envelope.ExtClass]))
	require.Equal(t, env.FailedStage.String(), text(ext[envelope.ExtStage]))
	require.Equal(t, env.Route.String(), text(ext[envelope.ExtDestination]))
	require.Equal(t, env.IdempotencyKey, text(ext[envelope.ExtIdempotencyKey]), name)
	require.Equal(t, env.PayloadSHA256, text(ext[envelope.ExtPayloadSHA256]))
	require.Equal(t, strconv.Itoa(env.Attempts), text(ext[envelope.ExtAttempts]))
}

// asIs is the text of a value the SDK read from JSON or a Kafka header.
func asIs(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// percentDecoded is the text of an HTTP header the SDK read.
func percentDecoded(v any) string {
	s, err := url.PathUnescape(asIs(v))
	if err != nil {
		return "undecodable " + asIs(v)
	}
	return s
}

// TestCloudEventsGoSDKStructured: the Go SDK reads every corpus dead
// letter in structured mode (data_base64), validates it, holds the
// envelope byte for byte, and what it writes back reads back unchanged;
// also through its HTTP binding. The JSONData form is counted: the SDK
// cannot parse some valid JSON numbers in data (1E+2), and compacts JSON
// data it writes.
func TestCloudEventsGoSDKStructured(t *testing.T) {
	built := builtCorpus(t, false)
	compacted, unreadable := 0, 0
	for _, d := range built {
		env, err := envelope.Decode(d.data)
		require.NoError(t, err, d.name)
		ce, err := envelope.ToCloudEvent(env, nil)
		require.NoError(t, err, d.name)
		var ev event.Event
		require.NoError(t, json.Unmarshal(ce, &ev), d.name)
		checkSDKEvent(t, d.name, d.data, env, ev, envelope.CloudEventDataContentType, asIs)
		out, err := json.Marshal(ev)
		require.NoError(t, err)
		back, err := envelope.FromCloudEvent(out)
		sameEnvelope(t, d.name, d.data, back, err)

		req := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(ce))
		req.Header.Set("Content-Type", envelope.CloudEventsMediaType)
		got, err := cehttp.NewEventFromHTTPRequest(req)
		require.NoError(t, err, d.name)
		checkSDKEvent(t, d.name, d.data, env, *got, envelope.CloudEventDataContentType, asIs)

		js, err := envelope.ToCloudEvent(env, &envelope.CloudEventOptions{JSONData: true})
		require.NoError(t, err)
		var evj event.Event
		if err := json.Unmarshal(js, &evj); err != nil {
			unreadable++
			continue
		}
		out, err = json.Marshal(evj)
		require.NoError(t, err)
		if back, err := envelope.FromCloudEvent(out); err != nil {
			require.ErrorIs(t, err, envelope.ErrInvalid, d.name)
			compacted++
		} else {
			sameEnvelope(t, d.name, d.data, back, nil)
		}
	}
	t.Logf("%d dead letters through the Go SDK as data_base64, intact; as JSON data, %d it could not parse, %d refused after it compacted them",
		len(built), unreadable, compacted)
}

// TestCloudEventsGoSDKHTTPBinary sends every corpus dead letter in HTTP
// binary mode over a real connection both ways: envelope.ToCloudEventHTTP
// to a server that reads it with the Go SDK, and the SDK's own request
// for that event to a server that reads it with FromCloudEventHTTP. The
// event the SDK read, written in structured mode, reads back too.
func TestCloudEventsGoSDKHTTPBinary(t *testing.T) {
	type received struct {
		header http.Header
		body   []byte
		ev     *event.Event
		err    error
	}
	var mu sync.Mutex
	var last received
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		rec := received{header: r.Header.Clone(), body: body, err: err}
		if r.URL.Path == "/sdk" {
			rec.ev, rec.err = cehttp.NewEventFromHTTPRequest(&http.Request{Header: r.Header, Body: io.NopCloser(bytes.NewReader(body))})
		}
		mu.Lock()
		last = rec
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	client := &http.Client{Timeout: 10 * time.Second}
	post := func(req *http.Request) received {
		t.Helper()
		resp, err := client.Do(req)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		mu.Lock()
		defer mu.Unlock()
		require.NoError(t, last.err)
		return last
	}
	ctx := context.Background()
	built := builtCorpus(t, false)
	for _, d := range built {
		env, err := envelope.Decode(d.data)
		require.NoError(t, err, d.name)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/sdk", nil)
		require.NoError(t, err)
		body, err := envelope.ToCloudEventHTTP(env, req.Header, nil)
		require.NoError(t, err)
		req.Body, req.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		got := post(req)
		checkSDKEvent(t, d.name, d.data, env, *got.ev, envelope.CloudEventDataContentType, percentDecoded)

		sdkReq, err := cehttp.NewHTTPRequestFromEvent(ctx, srv.URL+"/ours", *got.ev)
		require.NoError(t, err)
		back := post(sdkReq)
		read, err := envelope.FromCloudEventHTTP(back.header, back.body)
		sameEnvelope(t, d.name+" (the SDK's binary request)", d.data, read, err)

		out, err := json.Marshal(got.ev)
		require.NoError(t, err)
		read, err = envelope.FromCloudEvent(out)
		sameEnvelope(t, d.name+" (the SDK's structured form of a binary message)", d.data, read, err)
	}
	t.Logf("%d dead letters over HTTP in binary mode, both ways, intact", len(built))
}

// TestCloudEventsGoSDKKafkaBinary reads every corpus dead letter in Kafka
// binary mode with the Go SDK's Kafka binding (kafka_sarama, from a
// consumed record), and reads back with FromCloudEventKafka the records
// the binding writes for that event, in binary and structured mode.
func TestCloudEventsGoSDKKafkaBinary(t *testing.T) {
	ctx := context.Background()
	built := builtCorpus(t, false)
	for _, d := range built {
		env, err := envelope.Decode(d.data)
		require.NoError(t, err, d.name)
		headers, value, err := envelope.ToCloudEventKafka(env, nil)
		require.NoError(t, err)
		cm := &sarama.ConsumerMessage{Topic: "spatial.events.poison.dlt", Partition: 3, Offset: 77, Key: []byte("k"), Value: value}
		for _, h := range headers {
			cm.Headers = append(cm.Headers, &sarama.RecordHeader{Key: []byte(h.Key), Value: h.Value})
		}
		ev, err := binding.ToEvent(ctx, kafka_sarama.NewMessageFromConsumerMessage(cm))
		require.NoError(t, err, d.name)
		checkSDKEvent(t, d.name, d.data, env, *ev, envelope.CloudEventDataContentType, asIs)

		for _, mode := range []struct {
			name string
			ctx  context.Context
		}{{"binary", binding.WithForceBinary(ctx)}, {"structured", binding.WithForceStructured(ctx)}} {
			var pm sarama.ProducerMessage
			require.NoError(t, kafka_sarama.WriteProducerMessage(mode.ctx, (*binding.EventMessage)(ev), &pm))
			var kh []envelope.KafkaHeader
			for _, h := range pm.Headers {
				kh = append(kh, envelope.KafkaHeader{Key: string(h.Key), Value: h.Value})
			}
			v, err := pm.Value.Encode()
			require.NoError(t, err)
			read, err := envelope.FromCloudEventKafka(kh, v)
			sameEnvelope(t, d.name+" (the SDK's "+mode.name+" record)", d.data, read, err)
		}
	}
	t.Logf("%d dead letters through the Go SDK's Kafka binding, intact", len(built))
}

// TestCloudEventFromSDK builds a dead-letter event with the SDK's own API,
// as a producer in another service would, and reads it.
func TestCloudEventFromSDK(t *testing.T) {
	built := builtCorpus(t, false)
	env, err := envelope.Decode(built[0].data)
	require.NoError(t, err)
	ev := event.New()
	ev.SetID("a-1")
	ev.SetSource("//pipeline.example/parcels")
	ev.SetType(envelope.CloudEventType)
	ev.SetTime(time.Now())
	ev.SetExtension(envelope.ExtClass, env.FailureClass.String())
	ev.SetExtension(envelope.ExtAttempts, env.Attempts)
	ev.SetExtension("comexampletenant", "eu-1")
	require.NoError(t, ev.SetData(event.ApplicationJSON, json.RawMessage(built[0].data)))
	require.NoError(t, ev.Validate())
	out, err := json.Marshal(ev)
	require.NoError(t, err)
	back, err := envelope.FromCloudEvent(out)
	require.NoError(t, err, string(out))
	require.Equal(t, env.IdempotencyKey, back.IdempotencyKey)

	// As data_base64 of the dead-letter media type.
	ev.SetDataContentType(envelope.CloudEventDataContentType)
	ev.DataBase64 = true
	ev.DataEncoded = built[0].data
	out, err = json.Marshal(ev)
	require.NoError(t, err)
	require.Contains(t, string(out), `"data_base64"`)
	back, err = envelope.FromCloudEvent(out)
	require.NoError(t, err, string(out))
	require.Equal(t, env.EventID, back.EventID)

	// In HTTP binary mode, from the SDK's request.
	req, err := cehttp.NewHTTPRequestFromEvent(context.Background(), "http://dlq.example/", ev)
	require.NoError(t, err)
	body, err := io.ReadAll(req.Body)
	require.NoError(t, err)
	back, err = envelope.FromCloudEventHTTP(req.Header, body)
	require.NoError(t, err)
	require.Equal(t, env.EventID, back.EventID)

	ev.SetExtension(envelope.ExtClass, "resource_exhausted")
	require.NotEqual(t, "resource_exhausted", env.FailureClass.String())
	out, err = json.Marshal(ev)
	require.NoError(t, err)
	_, err = envelope.FromCloudEvent(out)
	require.ErrorIs(t, err, envelope.ErrCloudEvent)
}

// node returns the node binary and the directory of the JS SDK installed
// by scripts/services.sh (npm ci in js/). Without them the test fails
// under GEODLQ_REQUIRE_SERVICES and is skipped loudly otherwise.
func node(t *testing.T) (string, string) {
	t.Helper()
	dir, err := filepath.Abs("js")
	require.NoError(t, err)
	bin, err := exec.LookPath("node")
	_, serr := os.Stat(filepath.Join(dir, "node_modules", "cloudevents", "package.json"))
	if err == nil && serr == nil {
		return bin, dir
	}
	msg := "node and the CloudEvents JS SDK are needed (scripts/services.sh runs npm ci in internal/contracttest/js): %v %v"
	if testenv.Required() {
		t.Fatalf(msg, err, serr)
	}
	t.Skipf("SKIPPING: "+msg+"; set GEODLQ_REQUIRE_SERVICES=1 to fail instead", err, serr)
	return "", ""
}

// jsResult is a line of js/roundtrip.js.
type jsResult struct {
	Name    string            `json:"name"`
	Via     string            `json:"via"`
	Headers map[string]string `json:"headers"`
	Body    []byte            `json:"body"`
	Error   string            `json:"error"`
}

// TestCloudEventsJSSDK reads every corpus dead letter with the CloudEvents
// JS SDK (npm cloudevents 10) in structured mode and in HTTP and Kafka
// binary mode, as frameworks hand messages over (HTTP bodies as text and
// as bytes, Kafka values as bytes), writes each event back in every way
// the SDK offers, and reads what it wrote with the From functions: the
// envelope must come back byte for byte. The one exception is the SDK's
// own: an event HTTP.toEvent read from data_base64 holds its data as a
// Uint32Array, which HTTP.binary and Kafka.binary then send as four bytes
// per byte (Kafka.toEvent makes a Uint8Array, which is fine); such a body
// is refused, never misread.
func TestCloudEventsJSSDK(t *testing.T) {
	bin, dir := node(t)
	built := builtCorpus(t, false)
	type input struct {
		Name    string            `json:"name"`
		Mode    string            `json:"mode"`
		Headers map[string]string `json:"headers"`
		Body    []byte            `json:"body"`
	}
	var in bytes.Buffer
	enc := json.NewEncoder(&in)
	byName := map[string]document{}
	for _, d := range built {
		byName[d.name] = d
		env, err := envelope.Decode(d.data)
		require.NoError(t, err, d.name)
		ce, err := envelope.ToCloudEvent(env, nil)
		require.NoError(t, err)
		require.NoError(t, enc.Encode(input{d.name, "structured", map[string]string{"content-type": envelope.CloudEventsMediaType}, ce}))
		h := http.Header{}
		body, err := envelope.ToCloudEventHTTP(env, h, nil)
		require.NoError(t, err)
		flat := map[string]string{}
		for k, v := range h {
			flat[k] = v[0]
		}
		require.NoError(t, enc.Encode(input{d.name, "http", flat, body}))
		kh, value, err := envelope.ToCloudEventKafka(env, nil)
		require.NoError(t, err)
		flat = map[string]string{}
		for _, h := range kh {
			flat[h.Key] = string(h.Value)
		}
		require.NoError(t, enc.Encode(input{d.name, "kafka", flat, value}))
	}

	cmd := exec.Command(bin, "roundtrip.js")
	cmd.Dir = dir
	cmd.Stdin = &in
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, stderr.String())

	counts := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 64<<20)
	n := 0
	for sc.Scan() {
		var r jsResult
		require.NoError(t, json.Unmarshal(sc.Bytes(), &r))
		n++
		require.Empty(t, r.Error, "%s via %s", r.Name, r.Via)
		d := byName[r.Name]
		var read *envelope.Envelope
		to := r.Via[strings.LastIndexByte(r.Via, '/')+1:]
		if strings.HasPrefix(to, "kafka") {
			var kh []envelope.KafkaHeader
			for k, v := range r.Headers {
				kh = append(kh, envelope.KafkaHeader{Key: k, Value: []byte(v)})
			}
			read, err = envelope.FromCloudEventKafka(kh, r.Body)
		} else {
			h := http.Header{}
			for k, v := range r.Headers {
				h.Set(k, v)
			}
			read, err = envelope.FromCloudEventHTTP(h, r.Body)
		}
		if r.Via == "http-structured-text/http-binary" || r.Via == "http-structured-text/kafka-binary" {
			// The SDK's Uint32Array: four bytes a byte.
			require.Len(t, r.Body, 4*len(d.data), "%s via %s", r.Name, r.Via)
			require.Error(t, err, "%s via %s: the SDK's Uint32Array body", r.Name, r.Via)
			require.True(t, errors.Is(err, envelope.ErrCloudEvent) || errors.Is(err, envelope.ErrInvalid) ||
				errors.Is(err, envelope.ErrUnsupportedVersion), "%s via %s: an untyped error: %v", r.Name, r.Via, err)
			counts["refused (the SDK's Uint32Array)"]++
			continue
		}
		sameEnvelope(t, r.Name+" via the JS SDK, "+r.Via, d.data, read, err)
		counts[r.Via]++
	}
	require.NoError(t, sc.Err())
	require.Equal(t, len(built)*4*5, n, "every message read and written back four ways")
	t.Logf("%d dead letters through the JS SDK: %v", len(built), counts)
}
