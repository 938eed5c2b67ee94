package envelope_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
)

func TestCloudEventRoundTrip(t *testing.T) {
	ctx := context.Background()
	for _, m := range modes {
		for _, tc := range payloadCases {
			t.Run(m.name+"/"+tc.name, func(t *testing.T) {
				var b *envelope.Builder
				if m.threshold > 0 {
					off, _ := newOffloader(t, m.threshold)
					b = newBuilder(t, off)
				} else {
					b = newBuilder(t, nil)
				}
				env, data, err := b.Build(ctx, envelope.Input{Payload: []byte(tc.body), IdempotencyKey: "idem:v1:" + tc.name,
					Err: classify.CRSMismatch(errors.New("payload CRS is EPSG:3857"), 3857), MaxBytes: m.maxBytes,
					Source: &envelope.Source{System: "kafka", Topic: "spatial events/eu"}})
				require.NoError(t, err)
				ce, err := envelope.ToCloudEvent(env, nil)
				require.NoError(t, err)

				var attrs map[string]json.RawMessage
				require.NoError(t, json.Unmarshal(ce, &attrs))
				name := regexp.MustCompile(`^[a-z0-9]{1,20}$`)
				for k := range attrs {
					if k != "data_base64" {
						require.Regexp(t, name, k, "CloudEvents attribute names")
					}
				}
				require.NotContains(t, attrs, "data")
				require.JSONEq(t, `"`+base64.StdEncoding.EncodeToString(data)+`"`, string(attrs["data_base64"]),
					"the envelope is the data, byte for byte, in base64 by default")
				require.JSONEq(t, `"`+envelope.CloudEventDataContentType+`"`, string(attrs["datacontenttype"]))
				require.JSONEq(t, `"/geodlq/kafka/spatial%20events%2Feu"`, string(attrs["source"]))
				require.JSONEq(t, `"`+envelope.CloudEventType+`"`, string(attrs["type"]))
				require.JSONEq(t, `"crs_mismatch"`, string(attrs[envelope.ExtClass]))
				require.JSONEq(t, `"poison"`, string(attrs[envelope.ExtDestination]))
				require.JSONEq(t, `"`+env.EventID+`"`, string(attrs["subject"]))
				same := func(back *envelope.Envelope, err error) {
					t.Helper()
					require.NoError(t, err)
					again, err := back.Encode()
					require.NoError(t, err)
					require.Equal(t, string(data), string(again))
				}
				same(envelope.FromCloudEvent(ce))

				// JSONData: the envelope embedded as JSON.
				js, err := envelope.ToCloudEvent(env, &envelope.CloudEventOptions{JSONData: true})
				require.NoError(t, err)
				attrs = nil
				require.NoError(t, json.Unmarshal(js, &attrs))
				require.Equal(t, string(data), string(attrs["data"]), "JSONData embeds the envelope byte for byte")
				require.JSONEq(t, `"application/json"`, string(attrs["datacontenttype"]))
				require.NotContains(t, attrs, "data_base64")
				same(envelope.FromCloudEvent(js))

				// The envelope as a JSON string, as the SDKs write data of a
				// type other than application/json.
				i := strings.Index(string(js), `,"data":`)
				require.Positive(t, i)
				quoted, err := json.Marshal(string(data))
				require.NoError(t, err)
				same(envelope.FromCloudEvent([]byte(string(js[:i]) + `,"data":` + string(quoted) + `}`)))

				// Binary mode over HTTP and Kafka: the same attributes as
				// headers, the envelope as the body.
				h := map[string][]string{"Ce-Stale": {"x"}, "content-type": {"text/plain"}, "X-Other": {"kept"}}
				body, err := envelope.ToCloudEventHTTP(env, h, nil)
				require.NoError(t, err)
				require.Equal(t, string(data), string(body))
				require.Equal(t, []string{envelope.CloudEventDataContentType}, h["Content-Type"])
				require.Equal(t, []string{"kept"}, h["X-Other"])
				require.NotContains(t, h, "Ce-Stale")
				require.NotContains(t, h, "content-type")
				require.Equal(t, []string{"/geodlq/kafka/spatial%2520events%252Feu"}, h["Ce-Source"], "percent-encoded once more")
				require.Equal(t, []string{"crs_mismatch"}, h["Ce-Dlqclass"])
				same(envelope.FromCloudEventHTTP(h, body))

				kh, value, err := envelope.ToCloudEventKafka(env, nil)
				require.NoError(t, err)
				require.Equal(t, string(data), string(value))
				got := map[string]string{}
				for _, hh := range kh {
					got[hh.Key] = string(hh.Value)
				}
				require.Equal(t, envelope.CloudEventDataContentType, got["content-type"])
				require.Equal(t, "/geodlq/kafka/spatial%20events%2Feu", got["ce_source"])
				require.Equal(t, "idem:v1:"+tc.name, got["ce_dlqidempotencykey"])
				same(envelope.FromCloudEventKafka(kh, value))
			})
		}
	}
}

func TestCloudEventIDAndSource(t *testing.T) {
	env, data, err := newBuilder(t, nil).Build(context.Background(), envelope.Input{Payload: []byte(bowtie), IdempotencyKey: "k"})
	require.NoError(t, err)
	ce, err := envelope.ToCloudEvent(env, nil)
	require.NoError(t, err)
	var attrs map[string]any
	require.NoError(t, json.Unmarshal(ce, &attrs))
	require.Equal(t, sha(data), attrs["id"], "the default id is the envelope's hash")
	require.Equal(t, "/geodlq", attrs["source"])
	require.Equal(t, "2026-03-14T15:09:26.535897Z", attrs["time"])
	ce, err = envelope.ToCloudEvent(env, &envelope.CloudEventOptions{ID: "x-1", Source: "urn:example:pipeline"})
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(ce, &attrs))
	require.Equal(t, "x-1", attrs["id"])
	require.Equal(t, "urn:example:pipeline", attrs["source"])
	ce, err = envelope.ToCloudEvent(env, &envelope.CloudEventOptions{JSONData: true})
	require.NoError(t, err)
	attrs = nil
	require.NoError(t, json.Unmarshal(ce, &attrs))
	require.NotContains(t, attrs, "data_base64")
	require.Contains(t, string(ce), `,"data":`+string(data)+`}`)
	back, err := envelope.FromCloudEvent(ce)
	require.NoError(t, err)
	require.Equal(t, env.EventID, back.EventID)

	bad := *env
	bad.Attempts = 0
	_, err = envelope.ToCloudEvent(&bad, nil)
	require.ErrorIs(t, err, envelope.ErrInvalid)
}

// TestFromCloudEventRules holds FromCloudEvent to the CloudEvents 1.0
// JSON format and to the envelope it carries.
func TestFromCloudEventRules(t *testing.T) {
	env, _, err := newBuilder(t, nil).Build(context.Background(), envelope.Input{Payload: []byte(bowtie), IdempotencyKey: "k",
		Err: classify.InvalidGeometry(errors.New("Self-intersection[0.5 0.5]"))})
	require.NoError(t, err)
	ce, err := envelope.ToCloudEvent(env, &envelope.CloudEventOptions{JSONData: true})
	require.NoError(t, err)
	// mutate changes the attributes, keeping the data verbatim.
	mutate := func(f func(m map[string]any)) []byte {
		i := strings.Index(string(ce), `,"data":`)
		require.Positive(t, i)
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(string(ce[:i])+"}"), &m))
		f(m)
		data, hasData := m["data"]
		delete(m, "data")
		b, err := json.Marshal(m)
		require.NoError(t, err)
		if hasData && data == nil {
			return b
		}
		return []byte(string(b[:len(b)-1]) + string(ce[i:]))
	}
	dataEdit := func(old, new string) []byte {
		require.Contains(t, string(ce), old)
		return []byte(strings.Replace(string(ce), old, new, 1))
	}
	cases := []struct {
		name   string
		doc    []byte
		attr   string // "": a Decode error
		target error
	}{
		{"not JSON", []byte(`{"specversion":`), "", envelope.ErrCloudEvent},
		{"an array", []byte(`[]`), "", envelope.ErrCloudEvent},
		{"invalid UTF-8", []byte("{\"specversion\":\"1.0\xff\"}"), "", envelope.ErrCloudEvent},
		{"no specversion", mutate(func(m map[string]any) { delete(m, "specversion") }), "specversion", envelope.ErrCloudEvent},
		{"specversion 0.3", mutate(func(m map[string]any) { m["specversion"] = "0.3" }), "specversion", envelope.ErrCloudEvent},
		{"no id", mutate(func(m map[string]any) { delete(m, "id") }), "id", envelope.ErrCloudEvent},
		{"empty id", mutate(func(m map[string]any) { m["id"] = "" }), "id", envelope.ErrCloudEvent},
		{"null id", mutate(func(m map[string]any) { m["id"] = nil }), "id", envelope.ErrCloudEvent},
		{"no source", mutate(func(m map[string]any) { delete(m, "source") }), "source", envelope.ErrCloudEvent},
		{"source not a URI-reference", mutate(func(m map[string]any) { m["source"] = "%zz" }), "source", envelope.ErrCloudEvent},
		{"no type", mutate(func(m map[string]any) { delete(m, "type") }), "type", envelope.ErrCloudEvent},
		{"another type", mutate(func(m map[string]any) { m["type"] = "com.example.order.created" }), "type", envelope.ErrCloudEvent},
		{"upper-case attribute", mutate(func(m map[string]any) { m["dlqClass"] = "x" }), "dlqClass", envelope.ErrCloudEvent},
		{"attribute with an underscore", mutate(func(m map[string]any) { m["dlq_class"] = "x" }), "dlq_class", envelope.ErrCloudEvent},
		{"object attribute", mutate(func(m map[string]any) { m["comexample"] = map[string]any{"a": 1} }), "comexample", envelope.ErrCloudEvent},
		{"fractional integer", mutate(func(m map[string]any) { m["comexample"] = 1.5 }), "comexample", envelope.ErrCloudEvent},
		{"integer beyond 32 bits", []byte(strings.Replace(string(ce), `"specversion"`, `"comexample":2147483648,"specversion"`, 1)), "comexample", envelope.ErrCloudEvent},
		{"time not RFC 3339", mutate(func(m map[string]any) { m["time"] = "yesterday" }), "time", envelope.ErrCloudEvent},
		{"text data", mutate(func(m map[string]any) { m["datacontenttype"] = "text/plain" }), "datacontenttype", envelope.ErrCloudEvent},
		{"relative dataschema", mutate(func(m map[string]any) { m["dataschema"] = "dlq.v1.schema.json" }), "dataschema", envelope.ErrCloudEvent},
		{"no data", mutate(func(m map[string]any) { m["data"] = nil }), "data", envelope.ErrCloudEvent},
		{"data and data_base64", mutate(func(m map[string]any) { m["data_base64"] = "e30=" }), "data", envelope.ErrCloudEvent},
		{"bad data_base64", mutate(func(m map[string]any) { m["data"] = nil; m["data_base64"] = "!!" }), "data_base64", envelope.ErrCloudEvent},
		{"class contradicts", mutate(func(m map[string]any) { m[envelope.ExtClass] = "transient" }), envelope.ExtClass, envelope.ErrCloudEvent},
		{"attempts contradict", mutate(func(m map[string]any) { m[envelope.ExtAttempts] = 2 }), envelope.ExtAttempts, envelope.ErrCloudEvent},
		{"first seen contradicts", mutate(func(m map[string]any) { m[envelope.ExtFirstSeenAt] = "2020-01-01T00:00:00Z" }), envelope.ExtFirstSeenAt, envelope.ErrCloudEvent},
		{"invalid envelope", dataEdit(`"attempts":1,`, `"attempts":0,`), "", envelope.ErrInvalid},
		{"envelope v2", dataEdit(`"schema_version":"dlq.v1"`, `"schema_version":"dlq.v2"`), "", envelope.ErrUnsupportedVersion},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := envelope.FromCloudEvent(tc.doc)
			require.ErrorIs(t, err, tc.target)
			if tc.attr != "" {
				var ce *envelope.CloudEventError
				require.ErrorAs(t, err, &ce)
				require.Equal(t, tc.attr, ce.Attribute, "%v", err)
			}
		})
	}

	// Null attributes are unset, unknown extensions are ignored, and
	// other producers' whitespace and member order are fine, as long as
	// the data is the envelope verbatim (as CloudEvents SDKs keep JSON
	// data they hold as bytes).
	doc := string(ce)
	for _, cut := range []string{`"subject":"evt-9",`, `"time":"2026-03-14T15:09:26.535897Z",`, `"dlqclass":"invalid_geometry",`} {
		require.Contains(t, doc, cut)
		doc = strings.Replace(doc, cut, "", 1)
	}
	doc = strings.Replace(doc, `"datacontenttype":"application/json"`, `"datacontenttype" : "application/json; charset=utf-8"`, 1)
	doc = "{\n  \"subject\": null, \"time\": null, \"comexampleflag\": true,\n  \"traceparent\": \"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\",\n  " + doc[1:] + "\n"
	got, err := envelope.FromCloudEvent([]byte(doc))
	require.NoError(t, err, doc)
	require.Equal(t, env.EventID, got.EventID)

	// Data re-serialised on the way (here: through a map) no longer
	// matches its recorded sizes: the envelope is refused, not misread.
	var whole map[string]any
	require.NoError(t, json.Unmarshal(ce, &whole))
	reserialised, err := json.Marshal(whole)
	require.NoError(t, err)
	_, err = envelope.FromCloudEvent(reserialised)
	require.ErrorIs(t, err, envelope.ErrInvalid)
}

func ExampleToCloudEvent() {
	b, _ := envelope.NewBuilder(nil)
	env, _, _ := b.Build(context.Background(), envelope.Input{
		Payload: []byte(`{"event_id":"evt-9","geometry":{"type":"Point","coordinates":[1,2]}}`),
		Err:     classify.InvalidGeometry(errors.New("Invalid Coordinate[NaN 1]")),
		Source:  &envelope.Source{System: "kafka", Topic: "parcels"},
	})
	ce, err := envelope.ToCloudEvent(env, nil)
	if err != nil {
		panic(err)
	}
	var attrs map[string]any
	_ = json.Unmarshal(ce, &attrs)
	fmt.Println(attrs["type"], attrs["source"], attrs["subject"], attrs["dlqclass"], attrs["dlqdestination"])

	back, err := envelope.FromCloudEvent(ce)
	fmt.Println(back.EventID, err)
	// Output:
	// io.github.geodlq.dlq.v1 /geodlq/kafka/parcels evt-9 invalid_geometry poison
	// evt-9 <nil>
}

// FuzzFromCloudEvent: any bytes get a typed answer, never a panic; an
// event that reads carries a valid envelope, which binds again.
func FuzzFromCloudEvent(f *testing.F) {
	ctx := context.Background()
	b, err := envelope.NewBuilder(nil)
	if err != nil {
		f.Fatal(err)
	}
	for i, tc := range payloadCases {
		env, _, err := b.Build(ctx, envelope.Input{Payload: []byte(tc.body), IdempotencyKey: "k",
			Err: classify.CRSMismatch(errors.New("x"), 3857), Source: &envelope.Source{System: "kafka", Topic: "t"}})
		if err != nil {
			f.Fatal(err)
		}
		ce, err := envelope.ToCloudEvent(env, &envelope.CloudEventOptions{JSONData: i%2 == 1})
		if err != nil {
			f.Fatal(err)
		}
		f.Add(ce)
	}
	f.Add([]byte(`{"specversion":"1.0","id":"1","source":"/","type":"io.github.geodlq.dlq.v1","data":null}`))
	f.Add([]byte(`{"specversion":"1.0","id":"1","source":"/","type":"io.github.geodlq.dlq.v1","data_base64":"e30="}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		env, err := envelope.FromCloudEvent(data)
		if err != nil {
			if !errors.Is(err, envelope.ErrCloudEvent) && !errors.Is(err, envelope.ErrInvalid) && !errors.Is(err, envelope.ErrUnsupportedVersion) {
				t.Fatalf("untyped error: %v", err)
			}
			return
		}
		if err := env.Validate(); err != nil {
			t.Fatalf("read an invalid envelope: %v", err)
		}
		ce, err := envelope.ToCloudEvent(env, nil)
		if err != nil {
			t.Fatalf("ToCloudEvent of a read envelope: %v", err)
		}
		if _, err := envelope.FromCloudEvent(ce); err != nil {
			t.Fatalf("FromCloudEvent(ToCloudEvent(x)): %v", err)
		}
	})
}
