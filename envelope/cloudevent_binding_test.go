package envelope_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
)

// bindingEnvelope is a dead letter whose idempotency key needs percent-
// encoding in an HTTP header (space, '%', '"', non-ASCII, U+2028).
func bindingEnvelope(t testing.TB) (*envelope.Envelope, []byte) {
	t.Helper()
	env, data, err := newBuilder(t, nil).Build(context.Background(), envelope.Input{Payload: []byte(bowtie),
		IdempotencyKey: "idem:v1:50% \"off\" é 😀\u2028", Attempts: 3,
		Err: classify.CRSMismatch(errors.New("payload CRS is EPSG:3857"), 3857)})
	require.NoError(t, err)
	return env, data
}

func TestCloudEventHTTPHeaders(t *testing.T) {
	env, data := bindingEnvelope(t)
	h := map[string][]string{}
	body, err := envelope.ToCloudEventHTTP(env, h, &envelope.CloudEventOptions{ID: "a b", Source: "urn:x"})
	require.NoError(t, err)
	require.Equal(t, data, body)
	require.Equal(t, map[string][]string{
		"Content-Type":         {envelope.CloudEventDataContentType},
		"Ce-Specversion":       {"1.0"},
		"Ce-Id":                {"a%20b"},
		"Ce-Source":            {"urn:x"},
		"Ce-Type":              {envelope.CloudEventType},
		"Ce-Subject":           {env.EventID},
		"Ce-Time":              {"2026-03-14T15:09:26.535897Z"},
		"Ce-Dataschema":        {envelope.SchemaID},
		"Ce-Dlqclass":          {"crs_mismatch"},
		"Ce-Dlqstage":          {"spatial_join"},
		"Ce-Dlqdestination":    {"poison"},
		"Ce-Dlqidempotencykey": {"idem:v1:50%25%20%22off%22%20%C3%A9%20%F0%9F%98%80%E2%80%A8"},
		"Ce-Dlqattempts":       {"3"},
		"Ce-Dlqfirstseenat":    {"2026-03-14T15:09:26.535897Z"},
		"Ce-Dlqpayloadsha256":  {env.PayloadSHA256},
		"Ce-Dlqepsg":           {"4326"},
	}, h)
	back, err := envelope.FromCloudEventHTTP(h, body)
	require.NoError(t, err)
	require.Equal(t, env.IdempotencyKey, back.IdempotencyKey)

	kh, value, err := envelope.ToCloudEventKafka(env, nil)
	require.NoError(t, err)
	require.Equal(t, data, value)
	require.Equal(t, envelope.KafkaHeader{Key: "content-type", Value: []byte(envelope.CloudEventDataContentType)}, kh[6])
	require.Contains(t, kh, envelope.KafkaHeader{Key: "ce_dlqidempotencykey", Value: []byte(env.IdempotencyKey)}, "Kafka headers are UTF-8, not encoded")
	require.Contains(t, kh, envelope.KafkaHeader{Key: "ce_dlqattempts", Value: []byte("3")})
}

// TestPercentEncoding checks the HTTP binding's example and its decoding
// rules.
func TestPercentEncoding(t *testing.T) {
	env, _ := bindingEnvelope(t)
	h := map[string][]string{}
	body, err := envelope.ToCloudEventHTTP(env, h, &envelope.CloudEventOptions{ID: "Euro € 😀"})
	require.NoError(t, err)
	require.Equal(t, []string{"Euro%20%E2%82%AC%20%F0%9F%98%80"}, h["Ce-Id"], "the binding's own example")
	for _, tc := range []struct {
		name, id string
		ok       bool
	}{
		{"lower-case hex", "Euro%20%e2%82%ac", true},
		{"unnecessarily encoded", "%45uro", true},
		{"double-quoted", `"Euro \"x\" %E2%82%AC"`, true},
		{"partly double-quoted", `Eu"ro \"x"`, true},
		{"raw UTF-8 from an older producer", "Euro €", true},
		{"overlong encoding", "%C0%A0", false},
		{"a lone continuation byte", "%80", false},
		{"a truncated escape", "Euro%2", false},
		{"not hex", "Euro%zz", false},
		{"unterminated quote", `"Euro`, false},
		{"a backslash ending a quote", `"Euro\`, false},
		{"raw invalid UTF-8", "Euro\xff", false},
		{"empty", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h2 := cloneHeader(h)
			h2["Ce-Id"] = []string{tc.id}
			_, err := envelope.FromCloudEventHTTP(h2, body)
			if tc.ok {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, envelope.ErrCloudEvent)
			var ce *envelope.CloudEventError
			require.ErrorAs(t, err, &ce)
			require.Equal(t, "id", ce.Attribute, "%v", err)
		})
	}
}

func cloneHeader(h map[string][]string) map[string][]string {
	c := make(map[string][]string, len(h))
	for k, v := range h {
		c[k] = append([]string(nil), v...)
	}
	return c
}

// TestFromCloudEventHTTPRules holds FromCloudEventHTTP to the HTTP binding
// and to the rules FromCloudEvent enforces.
func TestFromCloudEventHTTPRules(t *testing.T) {
	env, data := bindingEnvelope(t)
	h := map[string][]string{}
	body, err := envelope.ToCloudEventHTTP(env, h, nil)
	require.NoError(t, err)
	structured, err := envelope.ToCloudEvent(env, nil)
	require.NoError(t, err)
	edit := func(f func(h map[string][]string)) map[string][]string {
		c := cloneHeader(h)
		f(c)
		return c
	}
	ok := []struct {
		name   string
		header map[string][]string
		body   []byte
	}{
		{"as written", h, body},
		{"lower-case names", edit(func(c map[string][]string) {
			for k, v := range c {
				delete(c, k)
				c[strings.ToLower(k)] = v
			}
		}), body},
		{"upper-case names", edit(func(c map[string][]string) { c["CE-ID"] = c["Ce-Id"]; delete(c, "Ce-Id") }), body},
		{"no Content-Type", edit(func(c map[string][]string) { delete(c, "Content-Type") }), body},
		{"application/json", edit(func(c map[string][]string) { c["Content-Type"] = []string{"application/json; charset=utf-8"} }), body},
		{"only the required attributes", map[string][]string{"Ce-Specversion": {"1.0"}, "Ce-Id": {"1"}, "Ce-Source": {"/"},
			"Ce-Type": {envelope.CloudEventType}}, body},
		{"unknown extensions and other headers", edit(func(c map[string][]string) {
			c["Ce-Comexampletenant"] = []string{"eu%201"}
			c["Ce-Traceparent"] = []string{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
			c["Authorization"] = []string{"Bearer x", "twice"}
		}), body},
		{"the key left percent-encoded by an SDK", edit(func(c map[string][]string) {
			c["Ce-Dlqidempotencykey"] = []string{"idem:v1:50%2525%2520%2522off%2522%2520%25C3%25A9%2520%25F0%259F%2598%2580%25E2%2580%25A8"}
		}), body},
		{"structured", map[string][]string{"Content-Type": {"application/cloudevents+json; charset=UTF-8"}}, structured},
		{"structured, with binary headers too", edit(func(c map[string][]string) {
			c["Content-Type"] = []string{envelope.CloudEventsMediaType}
			c["Ce-Id"] = []string{"ignored"}
		}), structured},
	}
	for _, tc := range ok {
		t.Run(tc.name, func(t *testing.T) {
			got, err := envelope.FromCloudEventHTTP(tc.header, tc.body)
			require.NoError(t, err)
			again, err := got.Encode()
			require.NoError(t, err)
			require.Equal(t, data, again)
		})
	}
	bad := []struct {
		name   string
		header map[string][]string
		body   []byte
		attr   string // "": a Decode error, or the message as a whole
		target error
	}{
		{"no id", edit(func(c map[string][]string) { delete(c, "Ce-Id") }), body, "id", envelope.ErrCloudEvent},
		{"no specversion", edit(func(c map[string][]string) { delete(c, "Ce-Specversion") }), body, "specversion", envelope.ErrCloudEvent},
		{"specversion 0.3", edit(func(c map[string][]string) { c["Ce-Specversion"] = []string{"0.3"} }), body, "specversion", envelope.ErrCloudEvent},
		{"another type", edit(func(c map[string][]string) { c["Ce-Type"] = []string{"com.example.x"} }), body, "type", envelope.ErrCloudEvent},
		{"source not a URI-reference", edit(func(c map[string][]string) { c["Ce-Source"] = []string{"%25zz"} }), body, "source", envelope.ErrCloudEvent},
		{"time not RFC 3339", edit(func(c map[string][]string) { c["Ce-Time"] = []string{"yesterday"} }), body, "time", envelope.ErrCloudEvent},
		{"relative dataschema", edit(func(c map[string][]string) { c["Ce-Dataschema"] = []string{"dlq.json"} }), body, "dataschema", envelope.ErrCloudEvent},
		{"text data", edit(func(c map[string][]string) { c["Content-Type"] = []string{"text/plain"} }), body, "datacontenttype", envelope.ErrCloudEvent},
		{"ce-datacontenttype", edit(func(c map[string][]string) { c["Ce-Datacontenttype"] = []string{"application/json"} }), body, "datacontenttype", envelope.ErrCloudEvent},
		{"an attribute twice", edit(func(c map[string][]string) { c["ce-id"] = []string{"2"} }), body, "id", envelope.ErrCloudEvent},
		{"an attribute with two values", edit(func(c map[string][]string) { c["Ce-Id"] = []string{"1", "2"} }), body, "Ce-Id", envelope.ErrCloudEvent},
		{"Content-Type twice", edit(func(c map[string][]string) { c["content-type"] = []string{"application/json"} }), body, "", envelope.ErrCloudEvent},
		{"an attribute named with an underscore", edit(func(c map[string][]string) { c["Ce-Dlq_class"] = []string{"x"} }), body, "dlq_class", envelope.ErrCloudEvent},
		{"a ce-data header", edit(func(c map[string][]string) { c["Ce-Data"] = []string{"{}"} }), body, "data", envelope.ErrCloudEvent},
		{"class contradicts", edit(func(c map[string][]string) { c["Ce-Dlqclass"] = []string{"transient"} }), body, envelope.ExtClass, envelope.ErrCloudEvent},
		{"attempts contradict", edit(func(c map[string][]string) { c["Ce-Dlqattempts"] = []string{"2"} }), body, envelope.ExtAttempts, envelope.ErrCloudEvent},
		{"attempts with a leading zero", edit(func(c map[string][]string) { c["Ce-Dlqattempts"] = []string{"03"} }), body, envelope.ExtAttempts, envelope.ErrCloudEvent},
		{"attempts with a plus sign", edit(func(c map[string][]string) { c["Ce-Dlqattempts"] = []string{"+3"} }), body, envelope.ExtAttempts, envelope.ErrCloudEvent},
		{"attempts beyond 32 bits", edit(func(c map[string][]string) { c["Ce-Dlqattempts"] = []string{"2147483648"} }), body, envelope.ExtAttempts, envelope.ErrCloudEvent},
		{"epsg not an integer", edit(func(c map[string][]string) { c["Ce-Dlqepsg"] = []string{"3857.0"} }), body, envelope.ExtEPSG, envelope.ErrCloudEvent},
		{"first seen contradicts", edit(func(c map[string][]string) { c["Ce-Dlqfirstseenat"] = []string{"2020-01-01T00:00:00Z"} }), body, envelope.ExtFirstSeenAt, envelope.ErrCloudEvent},
		{"key contradicts", edit(func(c map[string][]string) { c["Ce-Dlqidempotencykey"] = []string{"idem:v1:other"} }), body, envelope.ExtIdempotencyKey, envelope.ErrCloudEvent},
		{"no body", h, nil, "data", envelope.ErrCloudEvent},
		{"a body that is not an envelope", h, []byte(`{"a":1}`), "", envelope.ErrUnsupportedVersion},
		{"an envelope edited", h, bytes.Replace(body, []byte(`"attempts":3`), []byte(`"attempts":0`), 1), "", envelope.ErrInvalid},
		{"a batch", map[string][]string{"Content-Type": {"application/cloudevents-batch+json"}}, []byte("[" + string(structured) + "]"), "", envelope.ErrCloudEvent},
		{"another structured format", map[string][]string{"Content-Type": {"application/cloudevents+avro"}}, structured, "", envelope.ErrCloudEvent},
		{"structured, not JSON", map[string][]string{"Content-Type": {envelope.CloudEventsMediaType}}, body[:10], "", envelope.ErrCloudEvent},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			_, err := envelope.FromCloudEventHTTP(tc.header, tc.body)
			require.ErrorIs(t, err, tc.target)
			if tc.attr != "" {
				var ce *envelope.CloudEventError
				require.ErrorAs(t, err, &ce)
				require.Equal(t, tc.attr, ce.Attribute, "%v", err)
			}
		})
	}
}

// TestFromCloudEventKafkaRules holds FromCloudEventKafka to the Kafka
// binding and to the rules FromCloudEvent enforces.
func TestFromCloudEventKafkaRules(t *testing.T) {
	env, data := bindingEnvelope(t)
	kh, value, err := envelope.ToCloudEventKafka(env, nil)
	require.NoError(t, err)
	structured, err := envelope.ToCloudEvent(env, nil)
	require.NoError(t, err)
	set := func(key, v string) []envelope.KafkaHeader {
		var out []envelope.KafkaHeader
		done := false
		for _, h := range kh {
			if h.Key == key {
				done = true
				if v == "\x00delete" {
					continue
				}
				h.Value = []byte(v)
			}
			out = append(out, h)
		}
		if !done {
			out = append(out, envelope.KafkaHeader{Key: key, Value: []byte(v)})
		}
		return out
	}
	add := func(key, v string) []envelope.KafkaHeader {
		return append(append([]envelope.KafkaHeader(nil), kh...), envelope.KafkaHeader{Key: key, Value: []byte(v)})
	}
	for _, tc := range []struct {
		name    string
		headers []envelope.KafkaHeader
		value   []byte
	}{
		{"as written", kh, value},
		{"ce_datacontenttype agreeing, as the JS SDK adds it", add("ce_datacontenttype", envelope.CloudEventDataContentType), value},
		{"ce_datacontenttype without content-type", set("content-type", "\x00delete"), value},
		{"Content-Type in another case", set("content-type", "\x00delete"), value},
		{"the Go SDK's own extensions", add("ce_kafkatopic", "spatial.events"), value},
		{"structured", []envelope.KafkaHeader{{Key: "content-type", Value: []byte("application/cloudevents+json; charset=UTF-8")}}, structured},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := envelope.FromCloudEventKafka(tc.headers, tc.value)
			require.NoError(t, err)
			again, err := got.Encode()
			require.NoError(t, err)
			require.Equal(t, data, again)
		})
	}
	for _, tc := range []struct {
		name    string
		headers []envelope.KafkaHeader
		value   []byte
		attr    string
		target  error
	}{
		{"no id", set("ce_id", "\x00delete"), value, "id", envelope.ErrCloudEvent},
		{"an id twice", add("ce_id", "2"), value, "id", envelope.ErrCloudEvent},
		{"content-type twice", add("Content-Type", "application/json"), value, "Content-Type", envelope.ErrCloudEvent},
		{"ce_datacontenttype contradicting", add("ce_datacontenttype", "application/json"), value, "datacontenttype", envelope.ErrCloudEvent},
		{"text data", set("content-type", "text/plain"), value, "datacontenttype", envelope.ErrCloudEvent},
		{"a value not UTF-8", set("ce_subject", "\xff"), value, "subject", envelope.ErrCloudEvent},
		{"content-type not UTF-8", set("content-type", "\xff"), value, "content-type", envelope.ErrCloudEvent},
		{"an upper-case attribute", add("ce_ID", "1"), value, "ID", envelope.ErrCloudEvent},
		{"attempts contradict", set("ce_dlqattempts", "4"), value, envelope.ExtAttempts, envelope.ErrCloudEvent},
		{"attempts not an integer", set("ce_dlqattempts", "three"), value, envelope.ExtAttempts, envelope.ErrCloudEvent},
		{"key percent-encoded", set("ce_dlqidempotencykey", "idem:v1:other%20"), value, envelope.ExtIdempotencyKey, envelope.ErrCloudEvent},
		{"a tombstone", kh, nil, "data", envelope.ErrCloudEvent},
		{"an envelope edited", kh, bytes.Replace(value, []byte(`"attempts":3`), []byte(`"attempts":0`), 1), "", envelope.ErrInvalid},
		{"a batch", []envelope.KafkaHeader{{Key: "content-type", Value: []byte("application/cloudevents-batch+json")}}, structured, "", envelope.ErrCloudEvent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := envelope.FromCloudEventKafka(tc.headers, tc.value)
			require.ErrorIs(t, err, tc.target)
			if tc.attr != "" {
				var ce *envelope.CloudEventError
				require.ErrorAs(t, err, &ce)
				require.Equal(t, tc.attr, ce.Attribute, "%v", err)
			}
		})
	}
}

// TestStructuredFromBinaryText reads structured events as an SDK writes
// them after reading a binary-mode message: every extension a string, the
// HTTP header's percent-encoding left in place.
func TestStructuredFromBinaryText(t *testing.T) {
	env, _ := bindingEnvelope(t)
	ce, err := envelope.ToCloudEvent(env, nil)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(ce, &m))
	m[envelope.ExtAttempts] = "3"
	m[envelope.ExtEPSG] = "4326"
	m[envelope.ExtIdempotencyKey] = "idem:v1:50%25%20%22off%22%20%C3%A9%20%F0%9F%98%80%E2%80%A8"
	doc, err := json.Marshal(m)
	require.NoError(t, err)
	_, err = envelope.FromCloudEvent(doc)
	require.NoError(t, err)
	m[envelope.ExtAttempts] = "03"
	doc, err = json.Marshal(m)
	require.NoError(t, err)
	_, err = envelope.FromCloudEvent(doc)
	require.ErrorIs(t, err, envelope.ErrCloudEvent)
}

func ExampleToCloudEventHTTP() {
	b, _ := envelope.NewBuilder(nil)
	env, _, _ := b.Build(context.Background(), envelope.Input{
		Payload: []byte(`{"event_id":"evt-9","geometry":{"type":"Point","coordinates":[1,2]}}`),
		Err:     classify.InvalidGeometry(errors.New("Invalid Coordinate[NaN 1]")),
		Source:  &envelope.Source{System: "kafka", Topic: "parcels"},
	})
	header := map[string][]string{} // an http.Header
	body, err := envelope.ToCloudEventHTTP(env, header, nil)
	if err != nil {
		panic(err)
	}
	fmt.Println(header["Content-Type"], header["Ce-Type"], header["Ce-Source"], header["Ce-Dlqclass"])

	back, err := envelope.FromCloudEventHTTP(header, body)
	fmt.Println(back.EventID, err)
	// Output:
	// [application/vnd.geodlq.dlq.v1+json] [io.github.geodlq.dlq.v1] [/geodlq/kafka/parcels] [invalid_geometry]
	// evt-9 <nil>
}

func ExampleToCloudEventKafka() {
	b, _ := envelope.NewBuilder(nil)
	env, _, _ := b.Build(context.Background(), envelope.Input{
		Payload: []byte(`{"event_id":"evt-9","geometry":{"type":"Point","coordinates":[1,2]}}`),
		Err:     classify.InvalidGeometry(errors.New("Invalid Coordinate[NaN 1]")),
	})
	headers, value, err := envelope.ToCloudEventKafka(env, nil)
	if err != nil {
		panic(err)
	}
	for _, h := range headers[:8] {
		if h.Key != "ce_id" && h.Key != "ce_time" { // the envelope's hash, the time it was built
			fmt.Printf("%s: %s\n", h.Key, h.Value)
		}
	}
	back, err := envelope.FromCloudEventKafka(headers, value)
	fmt.Println(back.EventID, err)
	// Output:
	// ce_specversion: 1.0
	// ce_source: /geodlq
	// ce_type: io.github.geodlq.dlq.v1
	// ce_subject: evt-9
	// content-type: application/vnd.geodlq.dlq.v1+json
	// ce_dataschema: https://github.com/geodlq/geodlq/raw/main/envelope/dlq.v1.schema.json
	// evt-9 <nil>
}

// parseHeaderLines reads "Name: value" lines (a fuzz input's headers).
func parseHeaderLines(b []byte) (map[string][]string, []envelope.KafkaHeader) {
	h := map[string][]string{}
	var kh []envelope.KafkaHeader
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		v = strings.TrimPrefix(v, " ")
		h[k] = append(h[k], v)
		kh = append(kh, envelope.KafkaHeader{Key: k, Value: []byte(v)})
	}
	return h, kh
}

// bindingSeeds are HTTP and Kafka messages of every payload case, and
// structured ones, as header lines and a body.
func bindingSeeds(f *testing.F) {
	ctx := context.Background()
	b := newBuilder(f, nil)
	for i, tc := range payloadCases {
		env, _, err := b.Build(ctx, envelope.Input{Payload: []byte(tc.body), IdempotencyKey: "k é%" + tc.name,
			Err: classify.CRSMismatch(errors.New("x"), 3857), Source: &envelope.Source{System: "kafka", Topic: "t"}})
		if err != nil {
			f.Fatal(err)
		}
		h := map[string][]string{}
		body, err := envelope.ToCloudEventHTTP(env, h, nil)
		if err != nil {
			f.Fatal(err)
		}
		var lines bytes.Buffer
		for k, vs := range h {
			fmt.Fprintf(&lines, "%s: %s\n", k, vs[0])
		}
		f.Add(lines.Bytes(), body)
		kh, value, err := envelope.ToCloudEventKafka(env, nil)
		if err != nil {
			f.Fatal(err)
		}
		lines.Reset()
		for _, h := range kh {
			fmt.Fprintf(&lines, "%s: %s\n", h.Key, h.Value)
		}
		f.Add(lines.Bytes(), value)
		if i%4 == 0 {
			ce, err := envelope.ToCloudEvent(env, &envelope.CloudEventOptions{JSONData: i%8 == 0})
			if err != nil {
				f.Fatal(err)
			}
			f.Add([]byte("Content-Type: application/cloudevents+json\n"), ce)
		}
	}
}

// checkBindingResult: any message gets a typed answer, never a panic; an
// event that reads carries a valid envelope, which binds again.
func checkBindingResult(t *testing.T, env *envelope.Envelope, err error) {
	if err != nil {
		if !errors.Is(err, envelope.ErrCloudEvent) && !errors.Is(err, envelope.ErrInvalid) && !errors.Is(err, envelope.ErrUnsupportedVersion) {
			t.Fatalf("untyped error: %v", err)
		}
		return
	}
	if err := env.Validate(); err != nil {
		t.Fatalf("read an invalid envelope: %v", err)
	}
	h := map[string][]string{}
	body, err := envelope.ToCloudEventHTTP(env, h, nil)
	if err != nil {
		t.Fatalf("ToCloudEventHTTP of a read envelope: %v", err)
	}
	if _, err := envelope.FromCloudEventHTTP(h, body); err != nil {
		t.Fatalf("FromCloudEventHTTP(ToCloudEventHTTP(x)): %v", err)
	}
	kh, value, err := envelope.ToCloudEventKafka(env, nil)
	if err != nil {
		t.Fatalf("ToCloudEventKafka of a read envelope: %v", err)
	}
	if _, err := envelope.FromCloudEventKafka(kh, value); err != nil {
		t.Fatalf("FromCloudEventKafka(ToCloudEventKafka(x)): %v", err)
	}
}

// FuzzFromCloudEventHTTP reads HTTP messages: header lines and a body.
func FuzzFromCloudEventHTTP(f *testing.F) {
	bindingSeeds(f)
	f.Fuzz(func(t *testing.T, headerLines, body []byte) {
		h, _ := parseHeaderLines(headerLines)
		env, err := envelope.FromCloudEventHTTP(h, body)
		checkBindingResult(t, env, err)
	})
}

// FuzzFromCloudEventKafka reads Kafka records: header lines and a value.
func FuzzFromCloudEventKafka(f *testing.F) {
	bindingSeeds(f)
	f.Fuzz(func(t *testing.T, headerLines, value []byte) {
		_, kh := parseHeaderLines(headerLines)
		env, err := envelope.FromCloudEventKafka(kh, value)
		checkBindingResult(t, env, err)
	})
}
