package corpus

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/paulmach/orb"

	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/internal/geojson"
	"github.com/geodlq/geodlq/offload"
)

// HostileBaseURI is the offload base URI the forged envelopes of [Hostile]
// point into. A test that restores them serves [Sample.Blobs] from an
// offload.Offloader with this BaseURI and the default prefix.
const HostileBaseURI = "mem://hostile"

// DefaultHostileSize is the size the families that scale are generated at
// when a test has no byte limit of its own to fill: 32 MiB, half of
// spatial's default byte budget and well beyond the ~30 MB of nested
// collections that used to overflow the stack.
const DefaultHostileSize = 32 << 20

// MinHostileSize is the smallest size a scaling family is meaningful at:
// below it Generate still returns the family's smallest instance.
const MinHostileSize = 4 << 10

// Input says what a hostile family's bytes are.
type Input uint8

// The inputs.
const (
	// InputEvent is an event payload as a producer sent it: what
	// spatial.Checker.CheckEvent, the ingress gate and envelope.Builder
	// are given.
	InputEvent Input = iota + 1
	// InputEnvelope is a dlq.v1 envelope as a store hands it back: what
	// envelope.Decode, Restore, the replayer and triage are given. The
	// families of this input are forged.
	InputEnvelope
)

// Family is one kind of hostile input, with the verdict it must get.
//
// For an [InputEvent] family, Class and Kind are the verdict of
// spatial.Checker.CheckEvent with default Options (and so, with the same
// limits, of the ingress gate given the same checkers): Class is zero for
// an event that must pass, Kind is "" when only the class is pinned. The
// verdict holds for every size from [MinHostileSize] to 64 MiB.
//
// For an [InputEnvelope] family, DecodeErr is the sentinel the error of
// envelope.Decode must wrap (nil: it decodes), and RestoreErr the one
// Envelope.Restore's must wrap, given a Fetcher over [Sample.Blobs] (nil:
// it restores the payload whose size and hash the envelope records).
type Family struct {
	// Name identifies the family; it is stable, lower case, with
	// underscores.
	Name string
	// Group gathers related families: "depth", "number", "nan", "utf8",
	// "duplicate", "trailing", "size", "structure", "crs", "envelope".
	Group string
	// Description says what the input is and why it is hostile.
	Description string
	// Input says whether the bytes are an event or an envelope.
	Input Input
	// Scales is true when Generate fills the size it is given (nesting or
	// repetition up to a byte limit); other families ignore the size.
	Scales bool
	// Large is true for a family that does not scale and whose instance
	// is larger than MaxSeedSize (up to 30 MB: a million-position ring,
	// five million positions).
	Large bool
	// Class is the expected failure class of an event; zero: valid.
	Class classify.Class
	// Kind is the expected reason kind of an event, or "".
	Kind classify.ReasonKind
	// DecodeErr is what envelope.Decode's error must wrap; nil: decodes.
	DecodeErr error
	// RestoreErr is what Restore's error must wrap; nil: restores.
	RestoreErr error

	gen func(size int) Sample
}

// Sample is a generated instance of a family.
type Sample struct {
	// Data is the event or envelope.
	Data []byte
	// Blobs are the objects an envelope's offload URIs point at, by key
	// relative to [HostileBaseURI]; nil for events.
	Blobs map[string][]byte
}

// Valid reports whether an event family must pass.
func (f Family) Valid() bool {
	var valid classify.Class
	return f.Input == InputEvent && f.Class == valid
}

// Generate returns an instance of the family. A family that scales
// returns at most size bytes (and at least its smallest instance, when
// size is below [MinHostileSize]); the others return the same bytes
// whatever the size. Generation is deterministic and allocates the output
// once, so a test measuring memory counts the input and little else.
func (f Family) Generate(size int) Sample { return f.gen(max(size, MinHostileSize)) }

// Hostile returns every hostile family, grouped. The slice is fresh;
// callers may modify it.
func Hostile() []Family {
	out := make([]Family, 0, len(hostileEvents)+len(hostileEnvelopes))
	for _, f := range hostileEvents {
		f.Input = InputEvent
		out = append(out, f)
	}
	for _, f := range hostileEnvelopes {
		f.Input = InputEnvelope
		f.Group = "envelope"
		out = append(out, f)
	}
	return out
}

// MaxSeedSize is the largest instance [HostileSeeds] returns.
const MaxSeedSize = 64 << 10

// HostileSeeds returns an instance of every family of the given input
// small enough to seed a fuzz target: the scaling families at
// [MinHostileSize], the others when they are at most [MaxSeedSize] bytes.
// (The large fixed families — a million-position ring, five million
// positions — would slow a fuzzer to a crawl; the fuzz targets reach size
// and depth with structured generators instead, see package nesting.)
func HostileSeeds(in Input) [][]byte {
	var out [][]byte
	for _, f := range Hostile() {
		if f.Input != in {
			continue
		}
		if !f.Large {
			out = append(out, f.Generate(MinHostileSize).Data)
		}
	}
	return out
}

// HostileFamily returns the family with the given name.
func HostileFamily(name string) (Family, bool) {
	for _, f := range Hostile() {
		if f.Name == name {
			return f, true
		}
	}
	return Family{}, false
}

// Building blocks.
const (
	hPoint   = `{"type":"Point","coordinates":[1,2]}`
	hPolygon = `{"type":"Polygon","coordinates":[[[0,0],[1,0],[1,1],[0,1],[0,0]]]}`
	hHead    = `{"event_id":"evt-hostile","crs":"EPSG:4326","geometry":`
	hTail    = `,"properties":{"name":"hostile"}}`
	hValid   = hHead + hPolygon + hTail
)

var (
	invalid  = classify.ClassInvalidGeometry
	tooLarge = classify.ClassResourceExhausted
	valid    classify.Class
)

func fixed(s string) func(int) Sample {
	return func(int) Sample { return Sample{Data: []byte(s)} }
}

// nest returns head, open n times, inner, close n times, tail: n as large
// as fits in size (at least 1).
func nest(head, open, inner, close, tail string) func(int) Sample {
	return func(size int) Sample {
		fixedLen := len(head) + len(inner) + len(tail)
		n := max((size-fixedLen)/(len(open)+len(close)), 1)
		b := make([]byte, 0, fixedLen+n*(len(open)+len(close)))
		b = append(b, head...)
		b = appendRepeat(b, open, n)
		b = append(b, inner...)
		b = appendRepeat(b, close, n)
		return Sample{Data: append(b, tail...)}
	}
}

// repeat returns head, unit n times separated by sep, tail: n as large as
// fits in size (at least 1).
func repeat(head, unit, sep, tail string) func(int) Sample {
	return func(size int) Sample {
		n := max((size-len(head)-len(tail)+len(sep))/(len(unit)+len(sep)), 1)
		return Sample{Data: repeatN(head, unit, sep, tail, n)}
	}
}

func repeatN(head, unit, sep, tail string, n int) []byte {
	b := make([]byte, 0, len(head)+len(tail)+n*(len(unit)+len(sep)))
	b = append(b, head...)
	for i := range n {
		if i > 0 {
			b = append(b, sep...)
		}
		b = append(b, unit...)
	}
	return append(b, tail...)
}

func appendRepeat(b []byte, s string, n int) []byte {
	for range n {
		b = append(b, s...)
	}
	return b
}

var hostileEvents = []Family{
	// Nesting, up to the byte limit, in every position the readers meet.
	{Name: "depth_collections", Group: "depth", Scales: true, Class: schema, Kind: classify.KindMalformed,
		Description: "GeometryCollections nested inside each other up to the byte limit, \"type\" first (the ~30 MB event that overflowed the stack)",
		gen:         nest(hHead, `{"type":"GeometryCollection","geometries":[`, hPoint, `]}`, hTail)},
	{Name: "depth_collections_geometries_first", Group: "depth", Scales: true, Class: schema, Kind: classify.KindMalformed,
		Description: "nested GeometryCollections with \"geometries\" before \"type\", so the parser must skip them first",
		gen:         nest(hHead, `{"geometries":[`, hPoint, `],"type":"GeometryCollection"}`, hTail)},
	{Name: "depth_coordinates", Group: "depth", Scales: true, Class: schema, Kind: classify.KindMalformed,
		Description: "Polygon coordinates of arrays of arrays up to the byte limit, \"type\" first",
		gen:         nest(hHead+`{"type":"Polygon","coordinates":`, "[", "0", "]", "}"+hTail)},
	{Name: "depth_coordinates_before_type", Group: "depth", Scales: true, Class: schema, Kind: classify.KindMalformed,
		Description: "deeply nested coordinates before \"type\", so the parser must skip them first",
		gen:         nest(hHead+`{"coordinates":`, "[", "0", "]", `,"type":"Polygon"}`+hTail)},
	{Name: "depth_position", Group: "depth", Scales: true, Class: schema, Kind: classify.KindMalformed,
		Description: "a Point whose second ordinate is deeply nested arrays",
		gen:         nest(hHead+`{"type":"Point","coordinates":[1,`, "[", "2", "]", "]}"+hTail)},
	{Name: "depth_geometries_arrays", Group: "depth", Scales: true, Class: schema, Kind: classify.KindMalformed,
		Description: "a GeometryCollection whose \"geometries\" are nested arrays, not geometry objects",
		gen:         nest(hHead+`{"type":"GeometryCollection","geometries":`, "[", "", "]", "}"+hTail)},
	{Name: "depth_properties_arrays", Group: "depth", Scales: true, Class: schema, Kind: classify.KindMalformed,
		Description: "a valid geometry and properties of arrays nested up to the byte limit",
		gen:         nest(hHead+hPolygon+`,"properties":`, "[", "", "]", "}")},
	{Name: "depth_properties_objects", Group: "depth", Scales: true, Class: schema, Kind: classify.KindMalformed,
		Description: "properties of objects nested up to the byte limit, before the geometry",
		gen:         nest(`{"event_id":"evt-hostile","properties":`, `{"a":`, "1", "}", `,"geometry":`+hPolygon+"}")},
	{Name: "depth_properties_mixed", Group: "depth", Scales: true, Class: schema, Kind: classify.KindMalformed,
		Description: "properties alternating arrays and objects up to the byte limit",
		gen:         nest(hHead+hPolygon+`,"properties":`, `[{"a":`, "null", "}]", "}")},
	{Name: "depth_escaped_keys", Group: "depth", Scales: true, Class: schema, Kind: classify.KindMalformed,
		Description: "nested objects whose keys are all escapes, so skipping must not decode them",
		gen:         nest(hHead+hPolygon+`,"properties":`, `{"\u0061\u0062":`, `"\ud83d\ude00"`, "}", "}")},
	{Name: "depth_bbox", Group: "depth", Scales: true, Class: schema, Kind: classify.KindMalformed,
		Description: "a geometry whose \"bbox\" is deeply nested arrays",
		gen:         nest(hHead+`{"type":"Point","coordinates":[1,2],"bbox":`, "[", "1", "]", "}"+hTail)},
	{Name: "depth_crs_object", Group: "depth", Scales: true, Class: schema, Kind: classify.KindMalformed,
		Description: "a named CRS object with a deeply nested extra property",
		gen:         nest(`{"crs":{"type":"name","properties":{"name":"EPSG:4326","x":`, `{"x":`, "1", "}", `}},"geometry":`+hPolygon+"}")},
	{Name: "depth_crs_type", Group: "depth", Scales: true, Class: schema, Kind: classify.KindMalformed,
		Description: "a CRS object whose \"type\" is deeply nested arrays",
		gen:         nest(`{"crs":{"type":`, "[", "", "]", `},"geometry":`+hPolygon+"}")},
	{Name: "depth_geometry_crs", Group: "depth", Scales: true, Class: schema, Kind: classify.KindMalformed,
		Description: "a geometry's own (GeoJSON 2008) crs with deeply nested properties",
		gen:         nest(`{"geometry":{"type":"Point","coordinates":[1,2],"crs":{"type":"name","properties":`, `{"a":`, "1", "}", "}}}")},
	{Name: "depth_collection_member", Group: "depth", Scales: true, Class: schema, Kind: classify.KindMalformed,
		Description: "a collection member with a deeply nested unknown member",
		gen:         nest(hHead+`{"type":"GeometryCollection","geometries":[{"type":"Point","coordinates":[1,2],"p":`, "[", "", "]", "}]}"+hTail)},
	{Name: "depth_geometry_value", Group: "depth", Scales: true, Class: schema, Kind: classify.KindMalformed,
		Description: "a \"geometry\" that is deeply nested arrays",
		gen:         nest(hHead, "[", "", "]", hTail)},
	{Name: "depth_top_level", Group: "depth", Scales: true, Class: schema, Kind: classify.KindMalformed,
		Description: "a payload that is nothing but nested arrays",
		gen:         nest("", "[", "", "]", "")},
	{Name: "depth_unclosed", Group: "depth", Scales: true, Class: schema, Kind: classify.KindMalformed,
		Description: "a valid geometry, then properties that open arrays up to the byte limit and never close them",
		gen:         nest(hHead+hPolygon+`,"properties":`, "[", "", "", "")},
	{Name: "depth_at_limit", Group: "depth", Class: valid,
		Description: "properties nested exactly as deep as the parser allows (512): a valid event",
		gen: fixed(hHead + hPolygon + `,"properties":` + strings.Repeat("[", geojson.DefaultMaxDepth) +
			strings.Repeat("]", geojson.DefaultMaxDepth) + "}")},
	{Name: "depth_collections_at_limit", Group: "depth", Class: valid,
		Description: "GeometryCollections nested exactly as deep as allowed (8): a valid event",
		gen: fixed(hHead + strings.Repeat(`{"type":"GeometryCollection","geometries":[`, geojson.DefaultMaxNesting) + hPoint +
			strings.Repeat(`]}`, geojson.DefaultMaxNesting) + hTail)},

	// Numbers.
	{Name: "number_huge", Group: "number", Class: invalid, Kind: classify.KindInvalidCoordinate,
		Description: "a coordinate too large for a float64 (1e999999): it reads as +Inf",
		gen:         fixed(hHead + `{"type":"Polygon","coordinates":[[[0,0],[1e999999,0],[1,1],[0,1],[0,0]]]}` + hTail)},
	{Name: "number_tiny", Group: "number", Class: valid,
		Description: "a coordinate that underflows to zero (1e-999999) in an otherwise valid polygon",
		gen:         fixed(hHead + `{"type":"Polygon","coordinates":[[[0,0],[1,0],[1,1],[1e-999999,1],[0,0]]]}` + hTail)},
	{Name: "number_negative_zero", Group: "number", Class: valid,
		Description: "-0 and -0.0e-0 as coordinates",
		gen:         fixed(hHead + `{"type":"Polygon","coordinates":[[[-0,-0.0e-0],[1,0],[1,1],[0,1],[0,0]]]}` + hTail)},
	{Name: "number_long_coordinate", Group: "number", Scales: true, Class: schema, Kind: classify.KindMalformed,
		Description: "a coordinate with digits up to the byte limit",
		gen:         nest(hHead+`{"type":"Point","coordinates":[1.`, "5", "", "", `,2]}`+hTail)},
	{Name: "number_long_exponent", Group: "number", Class: schema, Kind: classify.KindMalformed,
		Description: "a coordinate whose exponent has a thousand leading zeros",
		gen:         fixed(hHead + `{"type":"Point","coordinates":[1e` + strings.Repeat("0", 1000) + `1,2]}` + hTail)},
	{Name: "number_long_in_properties", Group: "number", Scales: true, Class: valid,
		Description: "a number with digits up to the byte limit in the properties, which are skipped, never converted",
		gen:         nest(hHead+hPolygon+`,"properties":{"n":-1.`, "0", "", "", "1e-5}}")},
	{Name: "number_leading_zero", Group: "number", Class: schema, Kind: classify.KindMalformed,
		Description: "a coordinate with a leading zero (01), not JSON",
		gen:         fixed(hHead + `{"type":"Point","coordinates":[01,2]}` + hTail)},
	{Name: "number_plus_sign", Group: "number", Class: schema, Kind: classify.KindMalformed,
		Description: "a coordinate with a plus sign (+1), not JSON",
		gen:         fixed(hHead + `{"type":"Point","coordinates":[+1,2]}` + hTail)},
	{Name: "number_hex", Group: "number", Class: schema, Kind: classify.KindMalformed,
		Description: "a hexadecimal coordinate (0x10), not JSON",
		gen:         fixed(hHead + `{"type":"Point","coordinates":[0x10,2]}` + hTail)},
	{Name: "number_bare_dot", Group: "number", Class: schema, Kind: classify.KindMalformed,
		Description: "coordinates .5 and 1., not JSON",
		gen:         fixed(hHead + `{"type":"Point","coordinates":[.5,1.]}` + hTail)},
	{Name: "number_many_ordinates", Group: "number", Scales: true, Class: valid,
		Description: "a Point with ordinates up to the byte limit: the fourth and later are read and dropped",
		gen:         repeat(hHead+`{"type":"Point","coordinates":[1,2,`, "0", ",", "]}"+hTail)},

	// NaN and Infinity.
	{Name: "nan_coordinate", Group: "nan", Class: invalid, Kind: classify.KindInvalidCoordinate,
		Description: "a bare NaN coordinate, as Python's json.dumps writes it",
		gen:         fixed(hHead + `{"type":"Polygon","coordinates":[[[0,0],[1,0],[NaN,1],[0,1],[0,0]]]}` + hTail)},
	{Name: "infinity_coordinate", Group: "nan", Class: invalid, Kind: classify.KindInvalidCoordinate,
		Description: "bare Infinity and -Infinity coordinates",
		gen:         fixed(hHead + `{"type":"LineString","coordinates":[[0,0],[Infinity,-Infinity]]}` + hTail)},
	{Name: "nan_many", Large: true, Group: "nan", Class: invalid, Kind: classify.KindInvalidCoordinate,
		Description: "a MultiPoint of a million NaN positions",
		gen: func(int) Sample {
			return Sample{Data: repeatN(hHead+`{"type":"MultiPoint","coordinates":[`, "[NaN,NaN]", ",", "]}"+hTail, 1_000_000)}
		}},
	{Name: "nan_in_properties", Group: "nan", Class: schema, Kind: classify.KindMalformed,
		Description: "NaN outside coordinates, where it is not accepted",
		gen:         fixed(hHead + hPolygon + `,"properties":{"score":NaN}}`)},
	{Name: "nan_crs", Group: "nan", Class: schema, Kind: classify.KindMalformed,
		Description: "\"crs\": NaN",
		gen:         fixed(`{"crs":NaN,"geometry":` + hPolygon + `}`)},
	{Name: "nan_lower_case", Group: "nan", Class: schema, Kind: classify.KindMalformed,
		Description: "nan, a spelling no JSON dialect accepts",
		gen:         fixed(hHead + `{"type":"Point","coordinates":[nan,1]}` + hTail)},
	{Name: "nan_negative", Group: "nan", Class: schema, Kind: classify.KindMalformed,
		Description: "-NaN, which Python does not write",
		gen:         fixed(hHead + `{"type":"Point","coordinates":[-NaN,1]}` + hTail)},
	{Name: "infinity_plus", Group: "nan", Class: schema, Kind: classify.KindMalformed,
		Description: "+Infinity",
		gen:         fixed(hHead + `{"type":"Point","coordinates":[+Infinity,1]}` + hTail)},
	{Name: "infinity_truncated", Group: "nan", Class: schema, Kind: classify.KindMalformed,
		Description: "Inf and Infinityx, near misses of the token",
		gen:         fixed(hHead + `{"type":"MultiPoint","coordinates":[[Inf,1],[Infinityx,1]]}` + hTail)},
	{Name: "nan_quoted", Group: "nan", Class: schema, Kind: classify.KindMalformed,
		Description: "\"NaN\" as a string coordinate",
		gen:         fixed(hHead + `{"type":"Point","coordinates":["NaN",1]}` + hTail)},

	// UTF-8 and strings.
	{Name: "utf8_invalid_key", Group: "utf8", Class: valid,
		Description: "a member name of invalid UTF-8 (read as U+FFFD, as encoding/json does)",
		gen:         fixed(`{"` + "\xff\xfe" + `":1,"geometry":` + hPolygon + `}`)},
	{Name: "utf8_invalid_value", Group: "utf8", Class: valid,
		Description: "invalid UTF-8, an overlong encoding and a lone surrogate in property strings",
		gen:         fixed(hHead + hPolygon + `,"properties":{"a":"` + "\xff\xc0\xaf\xed\xa0\x80" + `","b":"\ud800"}}`)},
	{Name: "utf8_invalid_type", Group: "utf8", Class: schema, Kind: classify.KindMalformed,
		Description: "a geometry type with an invalid UTF-8 byte",
		gen:         fixed(hHead + `{"type":"Point` + "\xff" + `","coordinates":[1,2]}` + hTail)},
	{Name: "utf8_escaped_type", Group: "utf8", Class: valid,
		Description: "\"type\" and its value spelled with escapes; they decode to Polygon",
		gen:         fixed(hHead + `{"\u0074ype":"\u0050olygon","coordinates":[[[0,0],[1,0],[1,1],[0,1],[0,0]]]}` + hTail)},
	{Name: "utf8_bom", Group: "utf8", Class: schema, Kind: classify.KindMalformed,
		Description: "a UTF-8 byte order mark before the event, which JSON does not allow",
		gen:         fixed("\ufeff" + hValid)},
	{Name: "utf8_raw_nul_in_string", Group: "utf8", Class: schema, Kind: classify.KindMalformed,
		Description: "a raw NUL inside a string",
		gen:         fixed(hHead + hPolygon + `,"properties":{"a":"x` + "\x00" + `y"}}`)},
	{Name: "utf8_escaped_nul_key", Group: "utf8", Class: schema, Kind: classify.KindMissingGeometry,
		Description: "the geometry under a key with an escaped NUL, \"geo\\u0000metry\": there is no geometry",
		gen:         fixed(`{"geo\u0000metry":` + hPolygon + `}`)},
	{Name: "utf8_nul_in_crs", Group: "utf8", Class: crsMis, Kind: classify.KindCRSUnparseable,
		Description: "a CRS with an escaped NUL, which must not reach PROJ as a C string",
		gen:         fixed(`{"crs":"EPSG:4326\u0000junk","geometry":` + hPolygon + `}`)},
	{Name: "utf8_huge_string", Group: "utf8", Scales: true, Class: valid,
		Description: "a property string up to the byte limit",
		gen:         nest(hHead+hPolygon+`,"properties":{"s":"`, "a", "", "", `"}}`)},
	{Name: "utf8_huge_escaped_string", Group: "utf8", Scales: true, Class: valid,
		Description: "a property string of \\u escapes up to the byte limit, which skipping must not decode",
		gen:         nest(hHead+hPolygon+`,"properties":{"s":"`, `\u00e9`, "", "", `"}}`)},
	{Name: "utf8_unterminated_string", Group: "utf8", Scales: true, Class: schema, Kind: classify.KindMalformed,
		Description: "a property string that runs to the end of the input",
		gen:         nest(hHead+hPolygon+`,"properties":{"s":"`, "a", "", "", "")},

	// Duplicate members.
	{Name: "duplicate_geometry", Group: "duplicate", Class: schema, Kind: classify.KindMalformed,
		Description: "two \"geometry\" members: which one a reader takes is ambiguous",
		gen:         fixed(`{"geometry":` + hPoint + `,"geometry":` + hPolygon + `}`)},
	{Name: "duplicate_geometry_escaped", Group: "duplicate", Class: schema, Kind: classify.KindMalformed,
		Description: "\"geometry\" and \"\\u0067eometry\", the same name once decoded",
		gen:         fixed(`{"geometry":` + hPoint + `,"\u0067eometry":` + hPolygon + `}`)},
	{Name: "duplicate_type", Group: "duplicate", Class: schema, Kind: classify.KindMalformed,
		Description: "a geometry with two \"type\" members",
		gen:         fixed(hHead + `{"type":"Point","type":"Polygon","coordinates":[1,2]}` + hTail)},
	{Name: "duplicate_coordinates", Group: "duplicate", Class: schema, Kind: classify.KindMalformed,
		Description: "a geometry with two \"coordinates\" members",
		gen:         fixed(hHead + `{"type":"Point","coordinates":[1,2],"coordinates":[3,4]}` + hTail)},
	{Name: "duplicate_geometries", Group: "duplicate", Class: schema, Kind: classify.KindMalformed,
		Description: "a GeometryCollection with two \"geometries\" members",
		gen:         fixed(hHead + `{"type":"GeometryCollection","geometries":[],"geometries":[` + hPoint + `]}` + hTail)},
	{Name: "duplicate_crs", Group: "duplicate", Class: schema, Kind: classify.KindMalformed,
		Description: "two \"crs\" members, one of them Web Mercator",
		gen:         fixed(`{"crs":"EPSG:4326","geometry":` + hPolygon + `,"crs":"EPSG:3857"}`)},
	{Name: "duplicate_properties_many", Group: "duplicate", Scales: true, Class: valid,
		Description: "properties repeating one key up to the byte limit",
		gen:         repeat(hHead+hPolygon+`,"properties":{`, `"a":1`, ",", "}}")},

	// Bytes after (and before) the document.
	{Name: "trailing_nul_garbage", Group: "trailing", Class: schema, Kind: classify.KindMalformed,
		Description: "a valid event followed by a NUL byte and garbage (judged valid when the scanner took NUL for the end)",
		gen:         fixed(hValid + "\x00garbage")},
	{Name: "trailing_nul_padding", Group: "trailing", Scales: true, Class: schema, Kind: classify.KindMalformed,
		Description: "a valid event followed by NUL bytes up to the byte limit",
		gen:         nest(hValid, "\x00", "", "", "")},
	{Name: "trailing_garbage", Group: "trailing", Class: schema, Kind: classify.KindMalformed,
		Description: "a valid event followed by text",
		gen:         fixed(hValid + "garbage")},
	{Name: "trailing_second_document", Group: "trailing", Class: schema, Kind: classify.KindMalformed,
		Description: "two valid events back to back",
		gen:         fixed(hValid + hValid)},
	{Name: "trailing_comma", Group: "trailing", Class: schema, Kind: classify.KindMalformed,
		Description: "a valid event and a comma",
		gen:         fixed(hValid + ",")},
	{Name: "trailing_closing_brace", Group: "trailing", Class: schema, Kind: classify.KindMalformed,
		Description: "a valid event and an extra }",
		gen:         fixed(hValid + "}")},
	{Name: "trailing_unicode_space", Group: "trailing", Class: schema, Kind: classify.KindMalformed,
		Description: "a valid event and U+00A0, U+2028: white space to Unicode, not to JSON",
		gen:         fixed(hValid + "\u00a0\u2028")},
	{Name: "trailing_control_space", Group: "trailing", Class: schema, Kind: classify.KindMalformed,
		Description: "a valid event and a vertical tab and form feed, not JSON white space",
		gen:         fixed(hValid + "\v\f")},
	{Name: "trailing_bom", Group: "trailing", Class: schema, Kind: classify.KindMalformed,
		Description: "a valid event and a byte order mark",
		gen:         fixed(hValid + "\ufeff")},
	{Name: "trailing_comment", Group: "trailing", Class: schema, Kind: classify.KindMalformed,
		Description: "a valid event and a // comment",
		gen:         fixed(hValid + "// ok")},
	{Name: "trailing_invalid_utf8", Group: "trailing", Class: schema, Kind: classify.KindMalformed,
		Description: "a valid event and bytes that are not UTF-8",
		gen:         fixed(hValid + "\xff\xfe\x80")},
	{Name: "trailing_white_space", Group: "trailing", Scales: true, Class: valid,
		Description: "a valid event followed by JSON white space up to the byte limit: valid",
		gen:         nest(hValid, " \t\r\n", "", "", "")},
	{Name: "leading_nul", Group: "trailing", Class: schema, Kind: classify.KindMalformed,
		Description: "a NUL byte before a valid event",
		gen:         fixed("\x00" + hValid)},

	// Sizes.
	{Name: "ring_1e6", Large: true, Group: "size", Class: valid,
		Description: "a valid polygon whose ring has a million positions",
		gen:         func(int) Sample { return Sample{Data: ringEvent(1_000_000, false)} }},
	{Name: "ring_1e6_self_intersecting", Large: true, Group: "size", Class: invalid,
		Description: "a million-position ring with two adjacent positions swapped: one self-intersection",
		gen:         func(int) Sample { return Sample{Data: ringEvent(1_000_000, true)} }},
	{Name: "ring_star_crossings", Group: "size", Class: invalid, Kind: classify.KindSelfIntersection,
		Description: "a 42 KB star polygon, each of 2001 positions joined to the one almost opposite: two million crossings for a repair to node",
		gen:         func(int) Sample { return Sample{Data: starEvent(2001)} }},
	{Name: "holes_1e5", Large: true, Group: "size", Class: tooLarge, Kind: classify.KindVertexBudget,
		Description: "a valid polygon with a hundred thousand holes: over the default holes budget (10,000), which bounds GEOS's memory",
		gen:         func(int) Sample { return Sample{Data: holesEvent(100_000, false)} }},
	{Name: "holes_1e5_one_outside", Large: true, Group: "size", Class: tooLarge, Kind: classify.KindVertexBudget,
		Description: "a hundred thousand holes, the last outside the shell",
		gen:         func(int) Sample { return Sample{Data: holesEvent(100_000, true)} }},
	{Name: "holes_1e4", Large: true, Group: "size", Class: valid,
		Description: "a valid polygon with ten thousand holes, as many as the holes budget allows",
		gen:         func(int) Sample { return Sample{Data: holesEvent(10_000, false)} }},
	{Name: "holes_1e4_one_outside", Large: true, Group: "size", Class: invalid, Kind: classify.KindHoleOutsideShell,
		Description: "ten thousand holes, the last outside the shell: invalid, and over the repair budget (GEOS would take seconds)",
		gen:         func(int) Sample { return Sample{Data: holesEvent(10_000, true)} }},
	{Name: "vertex_budget", Large: true, Group: "size", Class: tooLarge, Kind: classify.KindVertexBudget,
		Description: "a MultiPoint of one position more than the default vertex budget",
		gen: func(int) Sample {
			return Sample{Data: repeatN(hHead+`{"type":"MultiPoint","coordinates":[`, "[0,0]", ",", "]}"+hTail, geojson.DefaultMaxVertices+1)}
		}},
	{Name: "parts_budget", Large: true, Group: "size", Class: tooLarge, Kind: classify.KindVertexBudget,
		Description: "a Polygon of a million empty rings: parts, not positions, exhaust memory",
		gen: func(int) Sample {
			return Sample{Data: repeatN(hHead+`{"type":"Polygon","coordinates":[`, "[]", ",", "]}"+hTail, geojson.DefaultMaxParts)}
		}},
	{Name: "empty_rings", Group: "size", Class: invalid, Kind: classify.KindTooFewPoints,
		Description: "a Polygon of a valid shell and five thousand empty holes",
		gen: func(int) Sample {
			return Sample{Data: repeatN(hHead+`{"type":"Polygon","coordinates":[[[0,0],[1,0],[1,1],[0,1],[0,0]],`, "[]", ",", "]}"+hTail, 5_000)}
		}},
	{Name: "collection_members_many", Large: true, Group: "size", Class: tooLarge, Kind: classify.KindVertexBudget,
		Description: "a GeometryCollection of three hundred thousand Points: over the parts budget",
		gen: func(int) Sample {
			return Sample{Data: repeatN(hHead+`{"type":"GeometryCollection","geometries":[`, hPoint, ",", "]}"+hTail, 300_000)}
		}},
	{Name: "multipolygon_parts_many", Large: true, Group: "size", Class: tooLarge, Kind: classify.KindVertexBudget,
		Description: "a valid MultiPolygon of a hundred and fifty thousand small squares: over the parts budget",
		gen:         func(int) Sample { return Sample{Data: squaresEvent(150_000)} }},
	{Name: "multipolygon_parts_under_budget", Large: true, Group: "size", Class: valid,
		Description: "a valid MultiPolygon of forty-five thousand small squares (ninety thousand parts, under the budget)",
		gen:         func(int) Sample { return Sample{Data: squaresEvent(45_000)} }},
	{Name: "lines_of_one_position", Large: true, Group: "size", Class: invalid, Kind: classify.KindTooFewPoints,
		Description: "a MultiLineString of twenty thousand one-position lines",
		gen: func(int) Sample {
			return Sample{Data: repeatN(hHead+`{"type":"MultiLineString","coordinates":[`, "[[0,0]]", ",", "]}"+hTail, 20_000)}
		}},
	{Name: "large_valid", Group: "size", Scales: true, Class: valid,
		Description: "a valid MultiPolygon event up to the byte limit",
		gen: func(size int) Sample {
			// LargeEvent may overshoot by one polygon and its tail.
			return Sample{Data: LargeEvent(max(size-2048, 1024))}
		}},

	// Structure.
	{Name: "empty", Group: "structure", Class: schema, Kind: classify.KindMalformed,
		Description: "an empty payload", gen: fixed("")},
	{Name: "white_space_only", Group: "structure", Class: schema, Kind: classify.KindMalformed,
		Description: "a payload of white space", gen: fixed(" \t\r\n")},
	{Name: "top_level_array", Group: "structure", Class: schema, Kind: classify.KindMalformed,
		Description: "a payload that is an array of events", gen: fixed("[" + hValid + "]")},
	{Name: "top_level_string", Group: "structure", Class: schema, Kind: classify.KindMalformed,
		Description: "a payload that is the event as a JSON string", gen: fixed(strconv.Quote(hValid))},
	{Name: "top_level_null", Group: "structure", Class: schema, Kind: classify.KindMalformed,
		Description: "a payload that is null", gen: fixed("null")},
	{Name: "truncated", Group: "structure", Class: schema, Kind: classify.KindMalformed,
		Description: "a valid event cut in the middle of a coordinate",
		gen:         fixed(hValid[:len(hHead)+40])},
	{Name: "type_not_string", Group: "structure", Class: schema, Kind: classify.KindMalformed,
		Description: "\"type\": 7", gen: fixed(hHead + `{"type":7,"coordinates":[1,2]}` + hTail)},
	{Name: "type_lower_case", Group: "structure", Class: schema, Kind: classify.KindMalformed,
		Description: "\"type\": \"polygon\"", gen: fixed(hHead + `{"type":"polygon","coordinates":[[[0,0],[1,0],[1,1],[0,0]]]}` + hTail)},
	{Name: "coordinates_string", Group: "structure", Class: schema, Kind: classify.KindMalformed,
		Description: "coordinates as a string", gen: fixed(hHead + `{"type":"Point","coordinates":"1,2"}` + hTail)},
	{Name: "missing_geometry", Group: "structure", Class: schema, Kind: classify.KindMissingGeometry,
		Description: "no geometry at all", gen: fixed(`{"event_id":"evt-hostile","crs":"EPSG:4326"}`)},

	// CRS.
	{Name: "crs_linked", Group: "crs", Class: crsMis, Kind: classify.KindCRSUnparseable,
		Description: "a linked CRS object (GeoJSON 2008) pointing elsewhere, which is never fetched",
		gen:         fixed(`{"crs":{"type":"link","properties":{"href":"http://169.254.169.254/latest/meta-data/","type":"proj4"}},"geometry":` + hPolygon + `}`)},
	{Name: "crs_huge_string", Group: "crs", Scales: true, Class: crsMis, Kind: classify.KindCRSUnparseable,
		Description: "a CRS string up to the byte limit, which must not reach PROJ",
		gen:         nest(`{"geometry":`+hPolygon+`,"crs":"EPSG:`, "9", "", "", `"}`)},
	{Name: "crs_deep_projjson", Group: "crs", Class: crsMis, Kind: classify.KindCRSUnparseable,
		Description: "a PROJJSON CRS of 4000 nested arrays, under the 8 KiB definition limit, for PROJ's JSON parser",
		gen:         fixed(`{"crs":"{\"type\":` + strings.Repeat("[", 4000) + strings.Repeat("]", 4000) + `}","geometry":` + hPolygon + `}`)},
	{Name: "crs_deep_wkt", Group: "crs", Class: crsMis, Kind: classify.KindCRSUnparseable,
		Description: "a WKT CRS of 4000 nested brackets, for PROJ's WKT parser",
		gen:         fixed(`{"crs":"GEOGCS[` + strings.Repeat("A[", 4000) + strings.Repeat("]", 4001) + `","geometry":` + hPolygon + `}`)},
	{Name: "crs_integer_huge", Group: "crs", Class: schema, Kind: classify.KindMalformed,
		Description: "an integer CRS too large for any EPSG code",
		gen:         fixed(`{"crs":99999999999999999999999,"geometry":` + hPolygon + `}`)},
	{Name: "crs_integer_negative", Group: "crs", Class: schema, Kind: classify.KindMalformed,
		Description: "\"crs\": -4326", gen: fixed(`{"crs":-4326,"geometry":` + hPolygon + `}`)},
	{Name: "crs_float", Group: "crs", Class: schema, Kind: classify.KindMalformed,
		Description: "\"crs\": 4326.0", gen: fixed(`{"crs":4326.0,"geometry":` + hPolygon + `}`)},
}

// ringEvent is a polygon of one ring of n positions on a circle (closing
// position included), optionally with two adjacent positions swapped.
func ringEvent(n int, twist bool) []byte {
	b := make([]byte, 0, 32*n+256)
	b = append(b, hHead...)
	b = append(b, `{"type":"Polygon","coordinates":[[`...)
	pos := func(k int) (float64, float64) {
		a := 2 * math.Pi * float64(k%(n-1)) / float64(n-1)
		return math.Round(10*math.Cos(a)*1e7) / 1e7, math.Round(10*math.Sin(a)*1e7) / 1e7
	}
	for k := range n {
		j := k
		if twist && (k == n/2 || k == n/2+1) {
			j = n + 1 - k // n/2 and n/2+1 swap
			if n%2 == 1 {
				j--
			}
		}
		x, y := pos(j)
		if k > 0 {
			b = append(b, ',')
		}
		b = append(b, '[')
		b = strconv.AppendFloat(b, x, 'f', -1, 64)
		b = append(b, ',')
		b = strconv.AppendFloat(b, y, 'f', -1, 64)
		b = append(b, ']')
	}
	b = append(b, "]]}"...)
	return append(b, hTail...)
}

// starEvent is a polygon of one ring of n positions on a circle, each
// joined to the one almost opposite.
func starEvent(n int) []byte {
	b := make([]byte, 0, 24*n+256)
	b = append(b, hHead...)
	b = append(b, `{"type":"Polygon","coordinates":[[`...)
	for i := 0; i <= n; i++ {
		k := i * ((n - 1) / 2) % n
		a := 2 * math.Pi * float64(k) / float64(n)
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '[')
		b = strconv.AppendFloat(b, math.Round(10*math.Cos(a)*1e6)/1e6, 'f', -1, 64)
		b = append(b, ',')
		b = strconv.AppendFloat(b, math.Round(10*math.Sin(a)*1e6)/1e6, 'f', -1, 64)
		b = append(b, ']')
	}
	b = append(b, "]]}"...)
	return append(b, hTail...)
}

// squaresEvent is a MultiPolygon of n disjoint small squares on a grid.
func squaresEvent(n int) []byte {
	cols := int(math.Ceil(math.Sqrt(float64(n))))
	b := make([]byte, 0, 80*n+256)
	b = append(b, hHead...)
	b = append(b, `{"type":"MultiPolygon","coordinates":[`...)
	for i := range n {
		x, y := 0.01*float64(i%cols), 0.01*float64(i/cols)
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, "[["...)
		for k, p := range [][2]float64{{x, y}, {x + 0.005, y}, {x + 0.005, y + 0.005}, {x, y + 0.005}, {x, y}} {
			if k > 0 {
				b = append(b, ',')
			}
			b = append(b, '[')
			b = strconv.AppendFloat(b, math.Round(p[0]*1e4)/1e4, 'f', -1, 64)
			b = append(b, ',')
			b = strconv.AppendFloat(b, math.Round(p[1]*1e4)/1e4, 'f', -1, 64)
			b = append(b, ']')
		}
		b = append(b, "]]"...)
	}
	b = append(b, "]}"...)
	return append(b, hTail...)
}

// holesEvent is a square shell with n small square holes on a grid;
// with outside set, the last hole lies outside the shell.
func holesEvent(n int, outside bool) []byte {
	cols := int(math.Ceil(math.Sqrt(float64(n))))
	const cell = 0.1
	size := cell * float64(cols)
	b := make([]byte, 0, 100*n+256)
	b = append(b, hHead...)
	b = append(b, `{"type":"Polygon","coordinates":[`...)
	corner := func(x0, y0, x1, y1 float64) {
		b = append(b, '[')
		for i, p := range [][2]float64{{x0, y0}, {x1, y0}, {x1, y1}, {x0, y1}, {x0, y0}} {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, '[')
			b = strconv.AppendFloat(b, math.Round(p[0]*1e4)/1e4, 'f', -1, 64)
			b = append(b, ',')
			b = strconv.AppendFloat(b, math.Round(p[1]*1e4)/1e4, 'f', -1, 64)
			b = append(b, ']')
		}
		b = append(b, ']')
	}
	corner(-1, -1, size+1, size+1)
	for i := range n {
		x, y := cell*float64(i%cols), cell*float64(i/cols)
		if outside && i == n-1 {
			x, y = size+5, size+5
		}
		b = append(b, ',')
		// Counter-clockwise or not, GEOS does not mind; the holes are
		// disjoint squares inside the shell.
		corner(x+0.02, y+0.02, x+0.08, y+0.08)
	}
	b = append(b, "]}"...)
	return append(b, hTail...)
}

// Forged envelopes.

var hostileEnvelopes = []Family{
	{Name: "envelope_valid", Class: valid,
		Description: "an honest envelope of a bowtie: decodes and restores (the control)",
		gen:         forge(func(f *forger) { f.inline(bowtieEvent) })},
	{Name: "envelope_payload_size_1gib_offloaded", RestoreErr: offload.ErrIntegrity,
		Description: "the whole payload offloaded, its blob present, but payload_size claiming 1 GiB: nothing may be sized by the claim",
		gen: forge(func(f *forger) {
			f.offloadPayload(bowtieEvent)
			f.env.PayloadSize = 1 << 30
		})},
	{Name: "envelope_byte_size_1gib_offloaded", RestoreErr: offload.ErrIntegrity,
		Description: "the geometry offloaded, its blob present, byte_size and payload_size claiming 1 GiB more, consistently",
		gen: forge(func(f *forger) {
			f.offloadGeometry(bowtieEvent)
			f.env.Geometry.ByteSize += 1 << 30
			f.env.PayloadSize += 1 << 30
		})},
	{Name: "envelope_payload_size_mismatch", DecodeErr: envelope.ErrInvalid,
		Description: "inline raw_payload with payload_size claiming 1 GiB",
		gen: forge(func(f *forger) {
			f.inline(bowtieEvent)
			f.env.PayloadSize = 1 << 30
		})},
	{Name: "envelope_negative_size", DecodeErr: envelope.ErrInvalid,
		Description: "payload_size -1",
		gen:         forge(func(f *forger) { f.inline(bowtieEvent); f.env.PayloadSize = -1 })},
	{Name: "envelope_hash_mismatch", RestoreErr: offload.ErrIntegrity,
		Description: "raw_payload altered after the hash was taken",
		gen: forge(func(f *forger) {
			f.inline(bowtieEvent)
			f.env.RawPayload = bytes.Replace(f.env.RawPayload, []byte("[1,1]"), []byte("[1,2]"), 1)
		})},
	{Name: "envelope_geometry_hash_mismatch", RestoreErr: offload.ErrIntegrity,
		Description: "an offloaded geometry blob whose bytes differ from its recorded hash",
		gen: forge(func(f *forger) {
			f.offloadGeometry(bowtieEvent)
			for k, v := range f.blobs {
				f.blobs[k] = bytes.Replace(v, []byte("[1,1]"), []byte("[1,2]"), 1)
			}
		})},
	{Name: "envelope_missing_blob", RestoreErr: offload.ErrNotFound,
		Description: "an offloaded geometry whose blob is not in the store",
		gen: forge(func(f *forger) {
			f.offloadGeometry(bowtieEvent)
			f.blobs = nil
		})},
	{Name: "envelope_bad_ref", RestoreErr: offload.ErrIntegrity,
		Description: "an offloaded geometry whose raw_payload does not hold its $ref at payload_offset",
		gen: forge(func(f *forger) {
			f.offloadGeometry(bowtieEvent)
			f.env.Geometry.PayloadOffset = 1
		})},
	{Name: "envelope_uri_traversal", RestoreErr: offload.ErrForbiddenURI,
		Description: "raw_payload_offload_uri climbing out of the store with ..",
		gen: forge(func(f *forger) {
			f.offloadPayload(bowtieEvent)
			f.env.RawPayloadOffloadURI = HostileBaseURI + "/geodlq/../../etc/" + f.env.PayloadSHA256 + ".json"
		})},
	{Name: "envelope_uri_foreign", RestoreErr: offload.ErrForbiddenURI,
		Description: "a geometry offload_uri in another store (another scheme and bucket)",
		gen: forge(func(f *forger) {
			f.offloadGeometry(bowtieEvent)
			uri := "s3://attacker-bucket/geodlq/" + f.env.Geometry.ContentSHA256 + ".geojson"
			ref := `{"$ref":"` + f.env.Geometry.OffloadURI + `"}`
			f.env.RawPayload = bytes.Replace(f.env.RawPayload, []byte(ref), []byte(`{"$ref":"`+uri+`"}`), 1)
			f.env.Geometry.OffloadURI = uri
		})},
	{Name: "envelope_version_unknown", DecodeErr: envelope.ErrUnsupportedVersion,
		Description: "schema_version dlq.v2",
		gen: forge(func(f *forger) {
			f.inline(bowtieEvent)
			f.edit = func(b []byte) []byte { return bytes.Replace(b, []byte(`"dlq.v1"`), []byte(`"dlq.v2"`), 1) }
		})},
	{Name: "envelope_version_missing", DecodeErr: envelope.ErrUnsupportedVersion,
		Description: "no schema_version member",
		gen: forge(func(f *forger) {
			f.inline(bowtieEvent)
			f.edit = func(b []byte) []byte { return bytes.Replace(b, []byte(`"schema_version":"dlq.v1",`), nil, 1) }
		})},
	{Name: "envelope_trailing_nul", DecodeErr: envelope.ErrInvalid,
		Description: "a valid envelope followed by a NUL byte and garbage",
		gen: forge(func(f *forger) {
			f.inline(bowtieEvent)
			f.edit = func(b []byte) []byte { return append(b, "\x00garbage"...) }
		})},
	{Name: "envelope_trailing_document", DecodeErr: envelope.ErrInvalid,
		Description: "a valid envelope followed by another",
		gen: forge(func(f *forger) {
			f.inline(bowtieEvent)
			f.edit = func(b []byte) []byte { return append(b, b...) }
		})},
	{Name: "envelope_not_json", DecodeErr: envelope.ErrInvalid,
		Description: "bytes that are not JSON", gen: fixed("\x00\x01dlq.v1\xff")},
	{Name: "envelope_duplicate_raw_payload", DecodeErr: envelope.ErrInvalid,
		Description: "raw_payload twice, the second of the same length but different: which one a reader takes is ambiguous",
		gen: forge(func(f *forger) {
			f.inline(bowtieEvent)
			f.edit = func(b []byte) []byte {
				i := bytes.LastIndex(b, []byte(`,"raw_payload":`))
				other := bytes.Replace(b[i:len(b)-1], []byte("[1,1]"), []byte("[1,2]"), 1)
				return append(append(b[:len(b)-1:len(b)-1], other...), '}')
			}
		})},
	{Name: "envelope_nan_location", DecodeErr: envelope.ErrInvalid,
		Description: "geometry_error.location [NaN, 0]: not JSON",
		gen: forge(func(f *forger) {
			f.inline(bowtieEvent)
			f.edit = func(b []byte) []byte {
				return bytes.Replace(b, []byte(`"location":[0.5,0.5]`), []byte(`"location":[NaN,0]`), 1)
			}
		})},
	{Name: "envelope_huge_number", DecodeErr: envelope.ErrInvalid,
		Description: "attempts 1e400",
		gen: forge(func(f *forger) {
			f.inline(bowtieEvent)
			f.edit = func(b []byte) []byte { return bytes.Replace(b, []byte(`"attempts":1`), []byte(`"attempts":1e400`), 1) }
		})},
	{Name: "envelope_payload_offset_out_of_range", DecodeErr: envelope.ErrInvalid,
		Description: "geometry.payload_offset past the payload",
		gen:         forge(func(f *forger) { f.inline(bowtieEvent); f.env.Geometry.PayloadOffset = 1 << 40 })},
	{Name: "envelope_fault_huge", Class: valid,
		Description: "a fault whose part, ring and vertex are near the int range's ends: decodes and restores; whoever draws it must cope",
		gen: forge(func(f *forger) {
			f.inline(bowtieEvent)
			f.env.GeometryError.Fault = &classify.Fault{Part: math.MaxInt32, Ring: math.MinInt32, Vertex: 1 << 62}
		})},
	{Name: "envelope_deep_raw_payload", Class: valid,
		Description: "raw_payload embedded as JSON, arrays nested as deep as encoding/json reads (9990): decodes, restores, and is then a payload to refuse",
		gen:         forge(func(f *forger) { f.inline(strings.Repeat("[", 9990) + strings.Repeat("]", 9990)) })},
	{Name: "envelope_too_deep_raw_payload", Scales: true, DecodeErr: envelope.ErrInvalid,
		Description: "raw_payload embedded as JSON, nested past encoding/json's limit, up to the byte limit",
		gen: func(size int) Sample {
			return forge(func(f *forger) {
				f.inline(hValid)
				f.edit = func(b []byte) []byte {
					n := max((size-len(b))/2, 10_001)
					i := bytes.LastIndex(b, []byte(`"raw_payload":`)) + len(`"raw_payload":`)
					out := make([]byte, 0, len(b)+2*n)
					out = append(out, b[:i]...)
					out = appendRepeat(out, "[", n)
					out = appendRepeat(out, "]", n)
					return append(out, '}')
				}
			})(size)
		}},
	{Name: "envelope_deep_payload_string", Scales: true, Class: valid,
		Description: "raw_payload string-encoded, holding nested GeometryCollections up to the byte limit: decodes and restores a payload every checker must refuse",
		gen: func(size int) Sample {
			// The string encoding escapes 6 quotes in every 43 bytes.
			payload := nest(hHead, `{"type":"GeometryCollection","geometries":[`, hPoint, `]}`, "}")(size*43/49 - 2048).Data
			return forge(func(f *forger) { f.inline(string(payload)) })(size)
		}},
	{Name: "envelope_deep_inline_string", Scales: true, Class: valid,
		Description: "geometry.inline string-encoded, holding nested GeometryCollections up to the byte limit (what geodlq render draws)",
		gen: func(size int) Sample {
			deep := nest("", `{"type":"GeometryCollection","geometries":[`, hPoint, `]}`, "")(size*43/49 - 2048).Data
			return forge(func(f *forger) {
				f.inline(bowtieEvent)
				f.env.Geometry.Inline = deep
				f.env.Geometry.InlineEncoding = envelope.EncodingString
				f.env.Geometry.ByteSize = int64(len(deep))
				sum := sha256.Sum256(deep)
				f.env.Geometry.ContentSHA256 = hex.EncodeToString(sum[:])
			})(size)
		}},
	{Name: "envelope_deep_inline_json", Large: true, Class: valid,
		Description: "geometry.inline embedded as JSON, 4990 nested GeometryCollections (as deep as encoding/json reads)",
		gen: forge(func(f *forger) {
			f.inline(bowtieEvent)
			deep := []byte(strings.Repeat(`{"type":"GeometryCollection","geometries":[`, 4990) + strings.Repeat(`]}`, 4990))
			f.env.Geometry.Inline = deep
			f.env.Geometry.InlineEncoding = envelope.EncodingJSON
			f.env.Geometry.ByteSize = int64(len(deep))
			sum := sha256.Sum256(deep)
			f.env.Geometry.ContentSHA256 = hex.EncodeToString(sum[:])
		})},
	{Name: "envelope_deep_envelope", Scales: true, DecodeErr: envelope.ErrInvalid,
		Description: "an envelope with an extra member of arrays nested up to the byte limit",
		gen: func(size int) Sample {
			return forge(func(f *forger) {
				f.inline(bowtieEvent)
				f.edit = func(b []byte) []byte {
					head := nest(`{"x":`, "[", "", "]", ",")(size - len(b)).Data
					return append(head[:len(head):len(head)], b[1:]...)
				}
			})(size)
		}},
	{Name: "envelope_base64_huge", Scales: true, Class: valid,
		Description: "a base64 raw_payload up to the byte limit, not UTF-8",
		gen: func(size int) Sample {
			p := make([]byte, max(size*3/4-1024, 16))
			for i := range p {
				p[i] = byte(i*7) | 0x80
			}
			return forge(func(f *forger) { f.inline(string(p)) })(size)
		}},
	{Name: "envelope_escaped_controls", Scales: true, Class: valid,
		Description: "a string raw_payload of control characters, each written as a six-byte escape (Build would choose base64), up to the byte limit",
		gen: func(size int) Sample {
			p := bytes.Repeat([]byte{0x01}, max(size/6-1024, 16))
			return forge(func(f *forger) {
				f.inline(string(p))
				f.env.RawPayloadEncoding = envelope.EncodingString // what Build would not choose
			})(size)
		}},
	{Name: "envelope_invalid_utf8_fields", DecodeErr: envelope.ErrInvalid,
		Description: "an error_message with bytes that are not UTF-8 (which encoding/json would quietly read as U+FFFD)",
		gen: forge(func(f *forger) {
			f.inline(bowtieEvent)
			f.edit = func(b []byte) []byte {
				return bytes.Replace(b, []byte(`"error_message":"`), []byte(`"error_message":"`+"\xff\xfe"), 1)
			}
		})},
}

const bowtieEvent = `{"event_id":"evt-bowtie","crs":"EPSG:4326","geometry":{"type":"Polygon","coordinates":[[[0,0],[1,1],[1,0],[0,1],[0,0]]]}}`

// forger builds an honest envelope, lets a family tamper with it, and
// encodes the result.
type forger struct {
	env   *envelope.Envelope
	blobs map[string][]byte
	edit  func([]byte) []byte
}

var forgeTime = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func (f *forger) build(payload string, threshold int, maxBytes int) {
	must := func(err error) {
		if err != nil {
			panic(fmt.Sprintf("corpus: forging an envelope: %v", err)) // a bug in this file
		}
	}
	store := offload.NewMemStore()
	off, err := offload.New(store, &offload.Options{BaseURI: HostileBaseURI, Threshold: threshold})
	must(err)
	b, err := envelope.NewBuilder(&envelope.BuilderOptions{Offloader: off, Now: func() time.Time { return forgeTime }})
	must(err)
	reason := "Self-intersection[0.5 0.5]"
	cause := &classify.Error{Class: classify.ClassInvalidGeometry, Stage: classify.StageTopologyValidation, Err: errors.New(reason),
		Geometry: &classify.GeometryDetail{Reason: reason, Kind: classify.KindSelfIntersection, Location: &orb.Point{0.5, 0.5},
			Fault: &classify.Fault{Part: -1, Ring: 0, Vertex: 0, OnSegment: true}}}
	env, _, err := b.Build(context.Background(), envelope.Input{Payload: []byte(payload), Err: cause, IdempotencyKey: "hostile",
		Source: &envelope.Source{System: "memory", Topic: "hostile"}, MaxBytes: maxBytes})
	must(err)
	f.env = env
	f.blobs = map[string][]byte{}
	for _, k := range store.Keys() {
		rc, err := store.Get(context.Background(), k)
		must(err)
		f.blobs[k], err = io.ReadAll(rc)
		must(err)
		must(rc.Close())
	}
}

// inline builds the envelope of payload with nothing offloaded.
func (f *forger) inline(payload string) { f.build(payload, 1<<62, 0) }

// offloadGeometry builds it with the geometry offloaded.
func (f *forger) offloadGeometry(payload string) { f.build(payload, 1, 0) }

// offloadPayload builds it with the whole payload offloaded: the payload
// gets 4 KiB of properties, and the envelope a 2000-byte limit.
func (f *forger) offloadPayload(payload string) {
	f.build(strings.TrimSuffix(payload, "}")+`,"properties":{"pad":"`+strings.Repeat("x", 4096)+`"}}`, 1, 2000)
}

func forge(tamper func(*forger)) func(int) Sample {
	return func(int) Sample {
		f := &forger{}
		tamper(f)
		b, err := f.env.Encode()
		if err != nil {
			panic(fmt.Sprintf("corpus: encoding a forged envelope: %v", err))
		}
		if f.edit != nil {
			b = f.edit(b)
		}
		if len(f.blobs) == 0 {
			f.blobs = nil
		}
		return Sample{Data: b, Blobs: f.blobs}
	}
}
