package contracttest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/internal/corpus"
	"github.com/geodlq/geodlq/offload"
)

// A document is an envelope (or a would-be envelope) and what is known
// about it.
type document struct {
	name string
	data []byte
	// built is true for the Builder's output: it must be valid, and its
	// payload restore to payload.
	built   bool
	payload []byte
	// invalid, for a forged document, says which enforcers must reject it:
	// "schema" (the schema itself), "beyond" (Decode and the Python
	// reader, by a rule of BeyondSchema: the schema accepts it); "" for a
	// forged document with no expectation of its own (the hostile corpus,
	// whose expectations are checked against Decode).
	invalid string
	// hostile, for a forged document of the hostile corpus, checks what
	// Decode made of it against the corpus's expectation.
	hostile func(t testing.TB, dv verdict, vs []envelope.Violation)
	// store holds the blobs the document's offload URIs point at.
	store *blobStore
}

// blobStore is an offload.DirStore and the Offloader over it: Go builds
// and restores with the Offloader, the Python reader reads the directory.
type blobStore struct {
	dir, baseURI, prefix string
	off                  *offload.Offloader
}

func newBlobStore(t testing.TB, baseURI string, threshold int) *blobStore {
	t.Helper()
	dir := t.TempDir()
	ds, err := offload.NewDirStore(dir)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ds.Close() })
	if baseURI == "" {
		baseURI = ds.URI()
	}
	off, err := offload.New(ds, &offload.Options{BaseURI: baseURI, Threshold: threshold})
	require.NoError(t, err)
	return &blobStore{dir: dir, baseURI: baseURI, prefix: off.Prefix(), off: off}
}

var fixedNow = time.Date(2026, 3, 14, 15, 9, 26, 535897000, time.UTC)

func newBuilder(t testing.TB, bs *blobStore) *envelope.Builder {
	t.Helper()
	opts := &envelope.BuilderOptions{Now: func() time.Time { return fixedNow }}
	if bs != nil {
		opts.Offloader = bs.off
	}
	b, err := envelope.NewBuilder(opts)
	require.NoError(t, err)
	return b
}

// edgeBodies are the envelope package's fuzz seeds (envelope/
// roundtrip_test.go, payloadCases): bodies whose bytes must survive the
// dead-letter path exactly.
var edgeBodies = []string{
	`{"event_id":"e1","geometry":{"type":"Point","coordinates":[1,2]}}`,
	"{\n\t\"geometry\" : {\"type\": \"Point\",\r\n \"coordinates\": [ 1 , 2 ]},\n\"id\": 7 }",
	`{"z":1,"geometry":{"coordinates":[1,2],"type":"Point"},"a":2}`,
	`{"geometry":{"type":"Point","coordinates":[0,0]},"geometry":{"type":"Point","coordinates":[1,1]},"id":"a","id":"b"}`,
	`{"name":"caf\u00e9 \ud83d\ude00 \ud800","geometry":{"type":"Point","coordinates":[1,2]}}`,
	`{"name":"café 😀","geometry":null}`,
	`{"html":"<b>&amp;</b>","geometry":{"type":"Point","coordinates":[1,2]}}`,
	`{"a":1.0,"b":1e400,"c":-0,"d":1E+2,"geometry":{"type":"Point","coordinates":[1.0,-0.0]}}`,
	`{"s":"a\/b\n\u0000","geometry":{"type":"Point","coordinates":[1,2]}}`,
	"{\"name\":\"\xff\xfe\",\"geometry\":{\"type\":\"Point\",\"coordinates\":[1,2]}}",
	`{"geometry":{"type":"Point","coordinates":[NaN,-Infinity]},"v":Infinity}`,
	"POINT (30 10) -- WKT, not JSON \"quoted\" \\ back",
	"",
	"\ufeff{\"geometry\":{\"type\":\"Point\",\"coordinates\":[1,2]}}",
	"{\"geometry\":{\"type\":\"Point\",\"coordinates\":[1,2]}}\n",
	"  {\"geometry\":{\"type\":\"Point\",\"coordinates\":[1,2]}}",
	`"just a string"`,
	`null`,
	`[{"geometry":1}]`,
	`{"geometry":{"type":"Point","coordinates":[1,`,
	"\x00\x01\x02\x80\xff",
	`{"event_id":"evt-7","crs":null,"geometry":{"type":"Point","coordinates":[1,2]}}`,
	"{\"s\":\"a\u2028b\",\"geometry\":{\"type\":\"Point\",\"coordinates\":[1,2]}}",
	"a\x7fb\tc",
	"{\"geometry\":\"\xff\"}",
	`{"geometry":"a string geometry \ud83d"}`,
	`{"event_id":"` + strings.Repeat("x", 2000) + `","geometry":{"type":"Point","coordinates":[1,2]}}`,
	`{"crs":{"type":"name","properties":{"name":"urn:ogc:def:crs:EPSG::3857"}},"geometry":{"type":"Point","coordinates":[1,2]}}`,
}

// errorFor returns the failure a corpus item is expected to get, with its
// geometry detail; valid items fail transiently (a downstream outage).
func errorFor(it corpus.Item) error {
	if it.Valid() {
		return classify.Transient(errors.New("tile server: 503 Service Unavailable"))
	}
	reason := it.Reason
	if reason == "" {
		reason = string(it.Kind) + ": " + it.Description
	}
	return &classify.Error{Class: it.Class, Stage: it.Stage, Err: errors.New(reason), Geometry: &classify.GeometryDetail{
		Reason: reason, Kind: it.Kind, Location: it.Location, Fault: it.Fault, EPSG: it.EPSG}}
}

// rotatingErrors give the edge bodies every class, with and without
// detail.
var rotatingErrors = []error{
	classify.InvalidGeometry(errors.New("Self-intersection[0.5 0.5]")),
	classify.CRSMismatch(errors.New("payload CRS is EPSG:3857"), 3857),
	classify.CRSMismatch(errors.New(`unparseable CRS "EPSG:43x6"`), 0),
	classify.SchemaViolation(errors.New("json: cannot unmarshal string into Go value of type float64")),
	classify.Transient(errors.New("context deadline exceeded")),
	classify.ResourceExhausted(errors.New("vertex budget of 1000000 exceeded: 1500000")),
	nil,
	errors.New("an error nothing recognises: \xff\x00 <html> \u2028"),
}

func sources() []*envelope.Source {
	part, off := int32(7), int64(1<<40)
	at := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.FixedZone("CET", 3600))
	return []*envelope.Source{
		nil,
		{System: "kafka", Topic: "spatial.events", Partition: &part, Offset: &off, Key: []byte("parcel-7\x00\xff"), Timestamp: &at, DeliveryCount: 2},
		{System: "sqs", Topic: "vector-jobs.fifo", MessageID: "m-1", GroupID: "g-1", DedupID: "d-1", DeliveryCount: 4},
	}
}

// modes are the ways an envelope carries its payload.
var modes = []struct {
	name      string
	threshold int // 0: no offloader
	maxBytes  int
}{
	{"inline", 0, 0},
	{"geometry-offloaded", 1, 0},
	{"payload-offloaded", 1, 1400},
}

// builtCorpus returns the Builder's envelopes over every event corpus in
// the repository, in every mode; the hostile families only when hostile.
func builtCorpus(t testing.TB, hostile bool) []document {
	t.Helper()
	ctx := context.Background()
	var docs []document
	stores := map[string]*blobStore{}
	build := func(mode string, name string, in envelope.Input) {
		m := modes[0]
		for _, mm := range modes {
			if mm.name == mode {
				m = mm
			}
		}
		var bs *blobStore
		if m.threshold > 0 {
			if stores[mode] == nil {
				stores[mode] = newBlobStore(t, "", m.threshold)
			}
			bs = stores[mode]
		}
		in.MaxBytes = m.maxBytes
		_, data, err := newBuilder(t, bs).Build(ctx, in)
		require.NoError(t, err, name)
		docs = append(docs, document{name: mode + "/" + name, data: data, built: true, payload: in.Payload, store: bs})
	}
	srcs := sources()
	for _, m := range modes {
		for i, it := range corpus.All() {
			build(m.name, "corpus/"+it.Name, envelope.Input{Payload: it.Payload, IdempotencyKey: "idem:v1:" + it.Name,
				Err: errorFor(it), Source: srcs[i%len(srcs)], TraceID: "trace-" + it.Name, Attempts: i % 4})
		}
		for i, body := range edgeBodies {
			in := envelope.Input{Payload: []byte(body), Err: rotatingErrors[i%len(rotatingErrors)], Source: srcs[i%len(srcs)]}
			if i%2 == 0 {
				in.IdempotencyKey = fmt.Sprintf("idem:v1:edge-%d \u00e9\u2028", i)
			}
			build(m.name, fmt.Sprintf("seed/%02d", i), in)
		}
	}
	// A geometry over the default threshold, offloaded for its size.
	bs := newBlobStore(t, "", 0)
	large := corpus.LargeEvent(300 << 10)
	_, data, err := newBuilder(t, bs).Build(ctx, envelope.Input{Payload: large, IdempotencyKey: "idem:v1:large",
		Err: classify.ResourceExhausted(errors.New("vertex budget exceeded"))})
	require.NoError(t, err)
	require.Contains(t, string(data), `"offload_uri"`)
	docs = append(docs, document{name: "large/300KiB", data: data, built: true, payload: large, store: bs})
	if hostile {
		hostileBuilt(t, build)
	}
	return docs
}

// mutation forges an invalid document from a built one.
type mutation struct {
	name, base string // base: the name of the built document (its suffix)
	old, new   string // replace the first old by new (every one when all)
	all        bool
	invalid    string // "schema" or "beyond"
}

// mutations are invalid envelopes: each breaks one rule. "schema" ones
// break a rule the JSON Schema states; "beyond" ones a rule of
// BeyondSchema (the schema accepts them).
var mutations = []mutation{
	{name: "version missing", base: "inline/corpus/bowtie", old: `"schema_version":"dlq.v1",`, new: ``, invalid: "schema"},
	{name: "version v2", base: "inline/corpus/bowtie", old: `"dlq.v1"`, new: `"dlq.v2"`, invalid: "schema"},
	{name: "version twice, the last v2", base: "inline/corpus/bowtie", old: `"schema_version":"dlq.v1",`, new: `"schema_version":"dlq.v1","schema_version":"dlq.v2",`, invalid: "schema"},
	{name: "version twice, the last v1", base: "inline/corpus/bowtie", old: `"schema_version":"dlq.v1",`, new: `"schema_version":"dlq.v2","schema_version":"dlq.v1",`, invalid: "beyond"},
	{name: "no version, a duplicate", base: "inline/corpus/bowtie", old: `"schema_version":"dlq.v1",`, new: `"x":1,"x":2,`, invalid: "schema"},
	{name: "version not a string", base: "inline/corpus/bowtie", old: `"dlq.v1"`, new: `1`, invalid: "schema"},
	{name: "not an object", base: "inline/corpus/bowtie", old: `{"schema_version"`, new: `[{"schema_version"`, invalid: "schema"},
	{name: "unknown class", base: "inline/corpus/bowtie", old: `"invalid_geometry"`, new: `"cosmic_ray"`, invalid: "schema"},
	{name: "unknown stage", base: "inline/corpus/bowtie", old: `"topology_validation"`, new: `"reticulate"`, invalid: "schema"},
	{name: "deterministic to retry", base: "inline/corpus/bowtie", old: `"destination":"poison"`, new: `"destination":"retry"`, invalid: "schema"},
	{name: "bad destination", base: "inline/corpus/valid_polygon", old: `"destination":"retry"`, new: `"destination":"nowhere"`, invalid: "schema"},
	{name: "empty event id", base: "inline/corpus/bowtie", old: `"event_id":"evt-9"`, new: `"event_id":""`, invalid: "schema"},
	{name: "event id too long", base: "inline/corpus/bowtie", old: `"event_id":"evt-9"`, new: `"event_id":"` + strings.Repeat("é", 1025) + `"`, invalid: "schema"},
	{name: "event id of 1024 runes", base: "inline/corpus/bowtie", old: `"event_id":"evt-9"`, new: `"event_id":"` + strings.Repeat("é", 1024) + `"`},
	{name: "zero attempts", base: "inline/corpus/bowtie", old: `"attempts":3`, new: `"attempts":0`, invalid: "schema"},
	{name: "attempts overflow", base: "inline/corpus/bowtie", old: `"attempts":3`, new: `"attempts":9223372036854775808`, invalid: "schema"},
	{name: "attempts at int64 max", base: "inline/corpus/bowtie", old: `"attempts":3`, new: `"attempts":9223372036854775807`},
	{name: "attempts a string", base: "inline/corpus/bowtie", old: `"attempts":3`, new: `"attempts":"1"`, invalid: "schema"},
	{name: "attempts 1.0", base: "inline/corpus/bowtie", old: `"attempts":3`, new: `"attempts":1.0`, invalid: "beyond"},
	{name: "attempts 1e0", base: "inline/corpus/bowtie", old: `"attempts":3`, new: `"attempts":1e0`, invalid: "beyond"},
	{name: "payload hash upper case", base: "inline/corpus/bowtie", old: `"payload_sha256":"`, new: `"payload_sha256":"A`, invalid: "schema"},
	{name: "payload hash with a newline", base: "inline/corpus/bowtie", old: `","payload_size"`, new: `\n","payload_size"`, invalid: "schema"},
	{name: "content hash short", base: "inline/corpus/bowtie", old: `"content_sha256":"`, new: `"content_sha256":"0`, invalid: "schema"},
	{name: "both inline and offload", base: "inline/corpus/bowtie", old: `"byte_size"`, new: `"offload_uri":"s3://b/geodlq/x.geojson","byte_size"`, invalid: "schema"},
	{name: "neither inline nor offload", base: "geometry-offloaded/corpus/bowtie", old: `"offload_uri":`, new: `"x_offload_uri":`, invalid: "schema"},
	{name: "offload URI not a URI", base: "geometry-offloaded/corpus/bowtie", old: `file://`, new: `file //`, all: true, invalid: "schema"},
	{name: "payload offset missing", base: "inline/corpus/bowtie", old: `,"payload_offset":`, new: `,"x_payload_offset":`, invalid: "schema"},
	{name: "payload offset -2", base: "inline/corpus/missing_geometry", old: `"payload_offset":-1`, new: `"payload_offset":-2`, invalid: "schema"},
	{name: "missing with an offset", base: "inline/corpus/missing_geometry", old: `"payload_offset":-1`, new: `"payload_offset":0`, invalid: "schema"},
	{name: "offset -1 without missing", base: "inline/corpus/missing_geometry", old: `,"missing":true`, new: ``, invalid: "schema"},
	{name: "crs mismatch without epsg", base: "inline/corpus/unparseable_crs", old: `,"epsg":0`, new: ``, invalid: "schema"},
	{name: "invalid geometry without detail", base: "inline/seed/00", old: `"geometry_error":{"reason":"Self-intersection[0.5 0.5]","kind":"self_intersection"},`, new: ``, invalid: "schema"},
	{name: "negative epsg", base: "inline/corpus/unparseable_crs", old: `"epsg":0`, new: `"epsg":-1`, invalid: "schema"},
	{name: "location of three", base: "inline/corpus/bowtie", old: `"location":[0.5,0.5]`, new: `"location":[0.5,0.5,1]`, invalid: "schema"},
	{name: "location empty", base: "inline/corpus/bowtie", old: `"location":[0.5,0.5]`, new: `"location":[]`, invalid: "schema"},
	{name: "location overflows a double", base: "inline/corpus/bowtie", old: `"location":[0.5,0.5]`, new: `"location":[1.7976931348623159e308,0.5]`, invalid: "schema"},
	{name: "location rounds to the largest double", base: "inline/corpus/bowtie", old: `"location":[0.5,0.5]`, new: `"location":[1.7976931348623158e308,0.5]`},
	{name: "location at the largest double", base: "inline/corpus/bowtie", old: `"location":[0.5,0.5]`, new: `"location":[1.7976931348623157e308,-1e-400]`},
	{name: "location null", base: "inline/corpus/bowtie", old: `"location":[0.5,0.5]`, new: `"location":[null,0.5]`, invalid: "schema"},
	{name: "no raw payload", base: "inline/corpus/bowtie", old: `,"raw_payload":`, new: `,"x_raw_payload":`, invalid: "schema"},
	{name: "raw payload and its offload", base: "inline/seed/12", old: `"raw_payload_encoding"`, new: `"raw_payload_offload_uri":"s3://b/geodlq/x.json","raw_payload_encoding"`, invalid: "schema"},
	{name: "bad raw encoding", base: "inline/seed/11", old: `"raw_payload_encoding":"string"`, new: `"raw_payload_encoding":"rot13"`, invalid: "schema"},
	{name: "string encoding of an object", base: "inline/seed/00", old: `,"raw_payload":{`, new: `,"raw_payload_encoding":"string","raw_payload":{`, invalid: "schema"},
	{name: "base64 encoding of an object", base: "inline/seed/00", old: `,"raw_payload":{`, new: `,"raw_payload_encoding":"base64","raw_payload":{`, invalid: "schema"},
	{name: "explicit json encoding", base: "inline/seed/00", old: `,"raw_payload":{`, new: `,"raw_payload_encoding":"json","raw_payload":{`},
	{name: "string inline geometry", base: "inline/seed/00", old: `"inline":{"type":"Point","coordinates":[1,2]}`, new: `"inline":"{\"type\":\"Point\",\"coordinates\":[1,2]}","inline_encoding":"string"`},
	{name: "base64 inline geometry", base: "inline/seed/00", old: `"inline":{"type":"Point","coordinates":[1,2]}`, new: `"inline":"eyJ0eXBlIjoiUG9pbnQiLCJjb29yZGluYXRlcyI6WzEsMl19","inline_encoding":"base64"`},
	{name: "base64 inline geometry of the wrong size", base: "inline/seed/00", old: `"inline":{"type":"Point","coordinates":[1,2]}`, new: `"inline":"eyJ0eXBlIjoiUG9pbnQiLCJjb29yZGluYXRlcyI6WzEsMl0=","inline_encoding":"base64"`, invalid: "beyond"},
	{name: "bad base64", base: "inline/seed/20", old: `"raw_payload":"AAECgP8="`, new: `"raw_payload":"AAECgP8"`, invalid: "schema"},
	{name: "base64 with a line break", base: "inline/seed/20", old: `"raw_payload":"AAECgP8="`, new: `"raw_payload":"AAEC\ngP8="`, invalid: "schema"},
	{name: "source without system", base: "inline/corpus/bowtie", old: `"source":{"system":"sqs",`, new: `"source":{`, invalid: "schema"},
	{name: "partition beyond int32", base: "inline/corpus/valid_multipolygon", old: `"partition":7`, new: `"partition":2147483648`, invalid: "schema"},
	{name: "null member", base: "inline/corpus/bowtie", old: `"source_crs":"EPSG:4326"`, new: `"source_crs":null`, invalid: "schema"},
	{name: "null after a value", base: "inline/corpus/bowtie", old: `"source_crs":"EPSG:4326"`, new: `"source_crs":"EPSG:4326","source_crs":null`, invalid: "schema"},
	{name: "empty optional string", base: "inline/corpus/bowtie", old: `"geometry_type":"Polygon"`, new: `"geometry_type":""`, invalid: "schema"},
	{name: "case-variant member", base: "inline/corpus/bowtie", old: `"event_id":"evt-9"`, new: `"event_id":"evt-9","Event_ID":"other"`, invalid: "schema"},
	{name: "case-folded member", base: "inline/corpus/bowtie", old: `"source_crs":"EPSG:4326"`, new: `"\u017fource_crs":"EPSG:3857","source_crs":"EPSG:4326"`, invalid: "schema"},
	{name: "time with a comma", base: "inline/corpus/bowtie", old: `"dead_lettered_at":"2026-03-14T15:09:26.535897Z"`, new: `"dead_lettered_at":"2026-03-14T15:09:26,535897Z"`, invalid: "schema"},
	{name: "time Feb 29 2026", base: "inline/corpus/bowtie", old: `"dead_lettered_at":"2026-03-14T`, new: `"dead_lettered_at":"2026-02-29T`, invalid: "schema"},
	{name: "time Feb 29 2024", base: "inline/corpus/bowtie", old: `"dead_lettered_at":"2026-03-14T`, new: `"dead_lettered_at":"2024-02-29T`},
	{name: "time with an offset", base: "inline/corpus/bowtie", old: `"dead_lettered_at":"2026-03-14T15:09:26.535897Z"`, new: `"dead_lettered_at":"2026-03-14T16:09:26.535897+01:00"`},
	{name: "time leap second", base: "inline/corpus/bowtie", old: `"dead_lettered_at":"2026-03-14T15:09:26`, new: `"dead_lettered_at":"2016-12-31T23:59:60`, invalid: "schema"},
	{name: "time in year 1", base: "inline/corpus/bowtie", old: `"first_seen_at":"2026-03-14T`, new: `"first_seen_at":"0001-03-14T`, invalid: "schema"},
	{name: "source time in year 0", base: "inline/corpus/valid_multipolygon", old: `"timestamp":"2026-`, new: `"timestamp":"0000-`},
	{name: "unknown members (v1.1)", base: "inline/corpus/bowtie", old: `"schema_version":"dlq.v1",`, new: `"schema_version":"dlq.v1","retry_after":"PT5M","x":{"A":null,"b":[1.5e3,"\ud800"]},`},
	{name: "unknown member in geometry", base: "geometry-offloaded/corpus/bowtie", old: `"byte_size"`, new: `"crs_wkt":null,"byte_size"`},
	{name: "invalid UTF-8", base: "inline/corpus/bowtie", old: `"error_message":"Self`, new: "\"error_message\":\"\xffSelf", invalid: "beyond"},
	{name: "invalid UTF-8 in an unknown member", base: "inline/corpus/bowtie", old: `"schema_version":"dlq.v1",`, new: "\"schema_version\":\"dlq.v1\",\"x\":\"\xed\xa0\x80\",", invalid: "beyond"},
	{name: "duplicate member", base: "inline/corpus/bowtie", old: `"trace_id":"trace-bowtie"`, new: `"trace_id":"trace-bowtie","trace_id":"trace-bowtie"`, invalid: "beyond"},
	{name: "duplicate unknown member", base: "inline/corpus/bowtie", old: `"schema_version":"dlq.v1",`, new: `"schema_version":"dlq.v1","x":1,"x":2,`, invalid: "beyond"},
	{name: "duplicate geometry", base: "inline/corpus/bowtie", old: `,"geometry":{`, new: `,"geometry":{"offload_uri":"s3://b/geodlq/x.geojson","byte_size":1,"content_sha256":"` + strings.Repeat("0", 64) + `","payload_offset":1},"geometry":{`, invalid: "beyond"},
	{name: "byte size lies", base: "inline/corpus/bowtie", old: `"byte_size":`, new: `"byte_size":1`, invalid: "beyond"},
	{name: "payload size lies", base: "inline/corpus/bowtie", old: `"payload_size":`, new: `"payload_size":1`, invalid: "beyond"},
	{name: "payload offset beyond the payload", base: "payload-offloaded/corpus/bowtie", old: `"payload_offset":`, new: `"payload_offset":9`, invalid: "beyond"},
	{name: "re-serialised payload", base: "inline/seed/01", old: `"geometry" : {`, new: `"geometry":{`, invalid: "beyond"},
	{name: "NaN in an unknown member", base: "inline/corpus/bowtie", old: `"schema_version":"dlq.v1",`, new: `"schema_version":"dlq.v1","x":NaN,`, invalid: "schema"},
	{name: "trailing garbage", base: "inline/corpus/bowtie", old: `"}`, new: `"}` + "\x00garbage", invalid: "schema"},
	{name: "nested too deep", base: "inline/corpus/bowtie", old: `"schema_version":"dlq.v1",`, new: `"schema_version":"dlq.v1","x":` + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + `,`, invalid: "schema"},
	{name: "nested to the limit", base: "inline/corpus/bowtie", old: `"schema_version":"dlq.v1",`, new: `"schema_version":"dlq.v1","x":` + strings.Repeat("[", 9999) + strings.Repeat("]", 9999) + `,`},
	// The Python reader skips what it does not keep, a run of values at a
	// time, and decodes a container of more than 64 KiB only in part.
	{name: "unknown member of 150 KiB", base: "inline/corpus/bowtie", old: `"schema_version":"dlq.v1",`, new: `"schema_version":"dlq.v1","x":[` + strings.Repeat(`{"a":[1,2.5,"s",true,null],"b":{}},`, 5000) + `0],`},
	{name: "long run of numbers", base: "inline/corpus/bowtie", old: `"schema_version":"dlq.v1",`, new: `"schema_version":"dlq.v1","x":[1` + strings.Repeat(", -2.5e3 ,0.0", 3000) + `],`},
	{name: "long run of numbers with a 5000-digit integer", base: "inline/corpus/bowtie", old: `"schema_version":"dlq.v1",`, new: `"schema_version":"dlq.v1","x":[1` + strings.Repeat(",2", 3000) + "," + strings.Repeat("9", 5000) + strings.Repeat(",2", 3000) + `],`},
	{name: "long run of numbers with a leading zero", base: "inline/corpus/bowtie", old: `"schema_version":"dlq.v1",`, new: `"schema_version":"dlq.v1","x":[1` + strings.Repeat(",2", 3000) + ",01" + strings.Repeat(",2", 3000) + `],`, invalid: "schema"},
	{name: "long run of numbers with two commas", base: "inline/corpus/bowtie", old: `"schema_version":"dlq.v1",`, new: `"schema_version":"dlq.v1","x":[1` + strings.Repeat(",2", 3000) + ",," + strings.Repeat(",2", 3000) + `],`, invalid: "schema"},
	{name: "long run of numbers ending in a comma", base: "inline/corpus/bowtie", old: `"schema_version":"dlq.v1",`, new: `"schema_version":"dlq.v1","x":[1` + strings.Repeat(",2", 3000) + `,],`, invalid: "schema"},
	{name: "long run of numbers without commas", base: "inline/corpus/bowtie", old: `"schema_version":"dlq.v1",`, new: `"schema_version":"dlq.v1","x":[1` + strings.Repeat(" 2", 3000) + `],`, invalid: "schema"},
	{name: "long run of small arrays", base: "inline/corpus/bowtie", old: `"schema_version":"dlq.v1",`, new: `"schema_version":"dlq.v1","x":[` + strings.Repeat(`[1,2] , ["a",null],`, 3000) + `[]],`},
	{name: "long run of small arrays, one element missing", base: "inline/corpus/bowtie", old: `"schema_version":"dlq.v1",`, new: `"schema_version":"dlq.v1","x":[` + strings.Repeat(`[1,2],`, 3000) + `,[1,2]],`, invalid: "schema"},
	{name: "long run of small arrays, one unclosed", base: "inline/corpus/bowtie", old: `"schema_version":"dlq.v1",`, new: `"schema_version":"dlq.v1","x":[` + strings.Repeat(`[1,2],`, 3000) + `[1,2,[1,2]],`, invalid: "schema"},
	{name: "string of 3000 escapes", base: "inline/corpus/bowtie", old: `"schema_version":"dlq.v1",`, new: `"schema_version":"dlq.v1","x":"` + strings.Repeat(`\n\u00e9`, 3000) + `",`},
	{name: "string of 3000 escapes, then a bad one", base: "inline/corpus/bowtie", old: `"schema_version":"dlq.v1",`, new: `"schema_version":"dlq.v1","x":"` + strings.Repeat(`\n`, 3000) + `\x",`, invalid: "schema"},
	{name: "string of 3000 escapes, unterminated", base: "inline/corpus/bowtie", old: `"schema_version":"dlq.v1",`, new: `"schema_version":"dlq.v1","x":["` + strings.Repeat(`\n`, 3000) + `],`, invalid: "schema"},
	{name: "long name in a deep unknown member", base: "inline/corpus/bowtie", old: `"schema_version":"dlq.v1",`, new: `"schema_version":"dlq.v1","x":` + strings.Repeat("[", 1500) + `{"` + strings.Repeat("k\u00e9", 30000) + `":1}` + strings.Repeat("]", 1500) + `,`},
	{name: "many unknown members", base: "inline/corpus/bowtie", old: `"schema_version":"dlq.v1",`, new: `"schema_version":"dlq.v1",` + members(`"m%d":[%d]`, 5000) + `,`},
	{name: "many unknown members, one twice", base: "inline/corpus/bowtie", old: `"schema_version":"dlq.v1",`, new: `"schema_version":"dlq.v1",` + members(`"m%d":[%d]`, 5000) + `,"m77":1,`, invalid: "beyond"},
	{name: "an unknown member twice, escaped", base: "inline/corpus/bowtie", old: `"schema_version":"dlq.v1",`, new: `"schema_version":"dlq.v1","x":1,"\u0078":2,`, invalid: "beyond"},
	{name: "an unknown member 30 times", base: "inline/corpus/bowtie", old: `"schema_version":"dlq.v1",`, new: `"schema_version":"dlq.v1",` + strings.Repeat(`"x":1,`, 30), invalid: "beyond"},
	{name: "many unknown members with bad names", base: "inline/corpus/bowtie", old: `"schema_version":"dlq.v1",`, new: `"schema_version":"dlq.v1",` + members(`"M%d":%d`, 200) + `,`, invalid: "schema"},
	{name: "location of 20,000 numbers", base: "inline/corpus/bowtie", old: `"location":[0.5,0.5]`, new: `"location":[0.5,0.5` + strings.Repeat(",0.5", 20000) + `]`, invalid: "schema"},
	{name: "location with a number of 70,000 digits", base: "inline/corpus/bowtie", old: `"location":[0.5,0.5]`, new: `"location":[0.5` + strings.Repeat("0", 70000) + `,0.5]`},
	{name: "location with a large first item", base: "inline/corpus/bowtie", old: `"location":[0.5,0.5]`, new: `"location":[[` + strings.Repeat("1,", 40000) + `1],0.5]`, invalid: "schema"},
	{name: "location of a large object", base: "inline/corpus/bowtie", old: `"location":[0.5,0.5]`, new: `"location":{"a":"` + strings.Repeat("1", 70000) + `"}`, invalid: "schema"},
	{name: "error message of 100,000 escapes", base: "inline/corpus/bowtie", old: `"error_message":"Self`, new: `"error_message":"` + strings.Repeat(`\u00e9`, 100000) + `Self`},
	{name: "long class", base: "inline/corpus/bowtie", old: `"invalid_geometry"`, new: `"` + strings.Repeat("invalid_geometry", 10000) + `"`, invalid: "schema"},
}

// members returns n comma-separated members from format, which takes the
// member's index twice.
func members(format string, n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, format, i, i)
	}
	return b.String()
}

// forged returns the mutations applied to the built documents.
func forged(t testing.TB, built []document) []document {
	t.Helper()
	byName := map[string]document{}
	for _, d := range built {
		byName[d.name] = d
	}
	var out []document
	for _, m := range mutations {
		base, ok := byName[m.base]
		require.True(t, ok, "mutation %q: no built document %q", m.name, m.base)
		require.Contains(t, string(base.data), m.old, "mutation %q: the base changed", m.name)
		n := 1
		if m.all {
			n = -1
		}
		data := bytes.Replace(base.data, []byte(m.old), []byte(m.new), n)
		if m.name == "trailing garbage" {
			data = append(bytes.TrimSuffix(base.data, []byte("}")), []byte("}\x00garbage")...)
		}
		out = append(out, document{name: "forged/" + m.name, data: data, invalid: m.invalid, store: base.store})
	}
	return out
}

func writeDoc(t testing.TB, dir string, i int, d document) string {
	t.Helper()
	p := filepath.Join(dir, fmt.Sprintf("%04d.json", i))
	require.NoError(t, os.WriteFile(p, d.data, 0o600))
	return p
}
