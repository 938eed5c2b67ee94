package envelope

import (
	"bytes"
	"encoding/base64"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/internal/jsonscan"
)

// DecodeFast returns what [Decode] returns for data: the same envelope,
// or the same error. It reads an envelope as [Envelope.Encode] writes it
// (its members in any order, any white space) in one pass over the
// bytes, without reflection and without scanning raw_payload and
// geometry.inline more than once, and hands every document it is not
// sure of — anything Decode would reject, a member it does not know, an
// escaped member name, an embedded value nested more than 256 levels —
// to Decode. FuzzDecodeFast holds the two to the same result on
// arbitrary bytes.
//
// It is kept apart from Decode while it proves itself: geodlq's
// warehouse sync, which decodes every record of a store, reads with it.
func DecodeFast(data []byte) (*Envelope, error) {
	if e, ok := decodeFast(data); ok {
		return e, nil
	}
	return Decode(data)
}

// fastMaxDepth bounds the nesting of raw_payload and geometry.inline on
// the fast path: deeper values are left to Decode before they are
// descended into.
const fastMaxDepth = 256

// Bits of the members decodeFast has seen, per object.
const (
	tSchemaVersion = 1 << iota
	tEventID
	tIdemKey
	tIdemDerived
	tFailureClass
	tFailedStage
	tDestination
	tErrorMessage
	tGeometryError
	tSourceCRS
	tSourceEPSG
	tGeometry
	tGeometryType
	tVertexCount
	tPayloadSHA256
	tPayloadSize
	tAttempts
	tFirstSeenAt
	tDeadLetteredAt
	tTraceID
	tSource
	tRawPayloadOffloadURI
	tRawPayloadEncoding
	tRawPayload

	tRequired = tSchemaVersion | tEventID | tIdemKey | tFailureClass | tFailedStage | tDestination |
		tErrorMessage | tSourceCRS | tGeometry | tPayloadSHA256 | tPayloadSize | tAttempts | tFirstSeenAt | tDeadLetteredAt
)

// fastReader walks a document; every method reports false for what the
// fast path does not take, and the caller then gives up.
type fastReader struct {
	data []byte
	i    int
}

func (r *fastReader) ws() {
	for r.i < len(r.data) && isWS(r.data[r.i]) {
		r.i++
	}
}

// eat consumes c, after white space, if it is next.
func (r *fastReader) eat(c byte) bool {
	r.ws()
	if r.i < len(r.data) && r.data[r.i] == c {
		r.i++
		return true
	}
	return false
}

// stringToken returns the string token at r.i (quotes included) and
// whether it holds an escape. Raw control characters are refused.
func (r *fastReader) stringToken() (tok []byte, escaped, ok bool) {
	d := r.data
	if r.i >= len(d) || d[r.i] != '"' {
		return nil, false, false
	}
	for j := r.i + 1; j < len(d); j++ {
		switch c := d[j]; {
		case c == '"':
			tok = d[r.i : j+1]
			r.i = j + 1
			return tok, escaped, true
		case c == '\\':
			escaped = true
			j++
		case c < 0x20:
			return nil, false, false
		}
	}
	return nil, false, false
}

// name reads a member name without escapes and its colon.
func (r *fastReader) name() ([]byte, bool) {
	r.ws()
	tok, esc, ok := r.stringToken()
	if !ok || esc || !r.eat(':') {
		return nil, false
	}
	r.ws()
	return tok[1 : len(tok)-1], true
}

// str reads a string value; opt refuses "" (an optional member is
// omitted rather than empty).
func (r *fastReader) str(opt bool) (string, bool) {
	tok, esc, ok := r.stringToken()
	if !ok || opt && len(tok) == 2 {
		return "", false
	}
	if !esc {
		return string(tok[1 : len(tok)-1]), true
	}
	s, err := jsonscan.Unquote(tok)
	if err != nil || opt && s == "" {
		return "", false
	}
	return s, true
}

// integer reads an integer written as one (no fraction, no exponent)
// that fits in bits bits.
func (r *fastReader) integer(bits int) (int64, bool) {
	d := r.data
	s := r.i
	j := s
	if j < len(d) && d[j] == '-' {
		j++
	}
	digits := j
	for j < len(d) && d[j] >= '0' && d[j] <= '9' {
		j++
	}
	n := j - digits
	if n == 0 || n > 1 && d[digits] == '0' || j < len(d) && (d[j] == '.' || d[j] == 'e' || d[j] == 'E') {
		return 0, false
	}
	r.i = j
	var v int64
	if n <= 18 {
		for _, c := range d[digits:j] {
			v = v*10 + int64(c-'0')
		}
		if digits > s {
			v = -v
		}
	} else {
		var err error
		if v, err = strconv.ParseInt(string(d[s:j]), 10, 64); err != nil {
			return 0, false
		}
	}
	if bits < 64 && (v < -1<<(bits-1) || v > 1<<(bits-1)-1) {
		return 0, false
	}
	return v, true
}

// boolean reads true or false.
func (r *fastReader) boolean() (bool, bool) {
	d := r.data[r.i:]
	switch {
	case bytes.HasPrefix(d, []byte("true")):
		r.i += 4
		return true, true
	case bytes.HasPrefix(d, []byte("false")):
		r.i += 5
		return false, true
	}
	return false, false
}

// timestamp reads a time that matches the schema's pattern (record times
// from year 2) and that time.Time's own JSON decoding takes.
func (r *fastReader) timestamp(minYear int) (time.Time, bool) {
	var t time.Time
	tok, esc, ok := r.stringToken()
	if !ok || esc || !isTime(tok[1:len(tok)-1], minYear) || t.UnmarshalJSON(tok) != nil {
		return time.Time{}, false
	}
	return t, true
}

// number reads a JSON number as encoding/json decodes it into a float64.
func (r *fastReader) number() (float64, bool) {
	s := r.i
	e, ok := jsonscan.NumberEnd(r.data, s)
	if !ok {
		return 0, false
	}
	r.i = e
	f, err := strconv.ParseFloat(string(r.data[s:e]), 64)
	return f, err == nil
}

// skipString returns the end of the valid JSON string at data[i] (a '"'):
// no raw control character, only JSON's escapes.
func skipString(d []byte, i int) (int, bool) {
	for i++; i < len(d); i++ {
		switch c := d[i]; {
		case c == '"':
			return i + 1, true
		case c < 0x20:
			return i, false
		case c == '\\':
			i++
			if i >= len(d) {
				return i, false
			}
			switch d[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if i+4 >= len(d) {
					return i, false
				}
				for _, h := range d[i+1 : i+5] {
					if !(h >= '0' && h <= '9' || h >= 'a' && h <= 'f' || h >= 'A' && h <= 'F') {
						return i, false
					}
				}
				i += 4
			default:
				return i, false
			}
		}
	}
	return i, false
}

// verbatim reads any JSON value, fully checked (json.Valid's grammar) and
// nested at most fastMaxDepth levels, and returns its bytes. The depth is
// checked before each container is entered, in a fixed array: no input
// makes it allocate or recurse.
func (r *fastReader) verbatim() ([]byte, bool) {
	d := r.data
	s := r.i
	i := s
	var stack [fastMaxDepth / 64]uint64 // bit set: the container at that depth is an object
	depth := 0
	inObject := func() bool { return stack[(depth-1)/64]&(1<<((depth-1)%64)) != 0 }
value:
	for i < len(d) && isWS(d[i]) {
		i++
	}
	if i >= len(d) {
		return nil, false
	}
	switch c := d[i]; c {
	case '{', '[':
		if depth == fastMaxDepth {
			return nil, false
		}
		w, bit := depth/64, uint64(1)<<(depth%64)
		if c == '{' {
			stack[w] |= bit
		} else {
			stack[w] &^= bit
		}
		depth++
		for i++; i < len(d) && isWS(d[i]); i++ {
		}
		if i < len(d) && (d[i] == '}' && c == '{' || d[i] == ']' && c == '[') {
			depth--
			i++
			goto next
		}
		if c == '{' {
			goto key
		}
		goto value
	case '"':
		var ok bool
		if i, ok = skipString(d, i); !ok {
			return nil, false
		}
	case 't', 'f', 'n':
		lit := "null"
		if c == 't' {
			lit = "true"
		} else if c == 'f' {
			lit = "false"
		}
		if !bytes.HasPrefix(d[i:], []byte(lit)) {
			return nil, false
		}
		i += len(lit)
	default:
		var ok bool
		if i, ok = jsonscan.NumberEnd(d, i); !ok {
			return nil, false
		}
	}
next:
	if depth == 0 {
		r.i = i
		return d[s:i], true
	}
	for i < len(d) && isWS(d[i]) {
		i++
	}
	if i >= len(d) {
		return nil, false
	}
	switch d[i] {
	case ',':
		i++
		if inObject() {
			goto key
		}
		goto value
	case '}', ']':
		if (d[i] == '}') != inObject() {
			return nil, false
		}
		depth--
		i++
		goto next
	}
	return nil, false
key:
	for i < len(d) && isWS(d[i]) {
		i++
	}
	if i >= len(d) || d[i] != '"' {
		return nil, false
	}
	{
		var ok bool
		if i, ok = skipString(d, i); !ok {
			return nil, false
		}
	}
	for i < len(d) && isWS(d[i]) {
		i++
	}
	if i >= len(d) || d[i] != ':' {
		return nil, false
	}
	i++
	goto value
}

// object reads the members of an object, calling member for each name
// (the reader at its value); member reports the name's bit, or 0 to give
// up. It refuses duplicates and an empty object.
func (r *fastReader) object(member func(name []byte) uint32) (uint32, bool) {
	if !r.eat('{') {
		return 0, false
	}
	var seen uint32
	for {
		name, ok := r.name()
		if !ok {
			return 0, false
		}
		bit := member(name)
		if bit == 0 || seen&bit != 0 {
			return 0, false
		}
		seen |= bit
		if r.eat(',') {
			continue
		}
		if r.eat('}') {
			return seen, true
		}
		return 0, false
	}
}

// decodeFast decodes data as Decode does when it is sure Decode accepts
// it; ok is false otherwise (and for anything it does not take).
func decodeFast(data []byte) (*Envelope, bool) {
	if !utf8.Valid(data) {
		return nil, false
	}
	r := &fastReader{data: data}
	e := &Envelope{}
	var (
		raw, inline        []byte
		rawEnc, inlineEnc  string
		payloadOffset      int64
		class, stage, dest string
	)
	ok := true
	// Each member reads its value; a value it does not take clears ok.
	top := func(name []byte) uint32 {
		var v int64
		switch string(name) {
		case "schema_version":
			e.SchemaVersion, ok = r.str(false)
			ok = ok && e.SchemaVersion == SchemaVersion
			return tSchemaVersion
		case "event_id":
			e.EventID, ok = r.str(false)
			return tEventID
		case "idempotency_key":
			e.IdempotencyKey, ok = r.str(false)
			return tIdemKey
		case "idempotency_key_derived":
			e.IdempotencyKeyDerived, ok = r.boolean()
			return tIdemDerived
		case "failure_class":
			class, ok = r.str(false)
			return tFailureClass
		case "failed_stage":
			stage, ok = r.str(false)
			return tFailedStage
		case "destination":
			dest, ok = r.str(false)
			return tDestination
		case "error_message":
			e.ErrorMessage, ok = r.str(false)
			return tErrorMessage
		case "geometry_error":
			e.GeometryError, ok = r.geometryError()
			return tGeometryError
		case "source_crs":
			e.SourceCRS, ok = r.str(false)
			return tSourceCRS
		case "source_epsg":
			v, ok = r.integer(strconv.IntSize)
			e.SourceEPSG = int(v)
			return tSourceEPSG
		case "geometry":
			inline, inlineEnc, payloadOffset, ok = r.geometry(&e.Geometry)
			return tGeometry
		case "geometry_type":
			e.GeometryType, ok = r.str(true)
			return tGeometryType
		case "vertex_count":
			v, ok = r.integer(strconv.IntSize)
			e.VertexCount = int(v)
			return tVertexCount
		case "payload_sha256":
			e.PayloadSHA256, ok = r.str(false)
			return tPayloadSHA256
		case "payload_size":
			e.PayloadSize, ok = r.integer(64)
			return tPayloadSize
		case "attempts":
			v, ok = r.integer(strconv.IntSize)
			e.Attempts = int(v)
			return tAttempts
		case "first_seen_at":
			e.FirstSeenAt, ok = r.timestamp(2)
			return tFirstSeenAt
		case "dead_lettered_at":
			e.DeadLetteredAt, ok = r.timestamp(2)
			return tDeadLetteredAt
		case "trace_id":
			e.TraceID, ok = r.str(true)
			return tTraceID
		case "source":
			e.Source, ok = r.source()
			return tSource
		case "raw_payload_offload_uri":
			e.RawPayloadOffloadURI, ok = r.str(true)
			return tRawPayloadOffloadURI
		case "raw_payload_encoding":
			rawEnc, ok = r.str(true)
			return tRawPayloadEncoding
		case "raw_payload":
			raw, ok = r.verbatim()
			return tRawPayload
		}
		return 0
	}
	seen, objOK := r.object(func(name []byte) uint32 {
		if !ok {
			return 0
		}
		return top(name)
	})
	if !objOK || !ok || seen&tRequired != tRequired {
		return nil, false
	}
	if r.ws(); r.i != len(data) {
		return nil, false
	}
	var err error
	if e.FailureClass, err = classify.ParseClass(class); err != nil {
		return nil, false
	}
	if e.FailedStage, err = classify.ParseStage(stage); err != nil {
		return nil, false
	}
	e.Route = classify.Route(dest)
	e.RawPayloadEncoding = rawEnc
	e.Geometry.PayloadOffset = payloadOffset
	if raw != nil {
		if e.RawPayload, ok = verbatimBytes(raw, rawEnc); !ok {
			return nil, false
		}
		if e.RawPayloadEncoding == "" {
			e.RawPayloadEncoding = EncodingJSON
		}
	} else if e.RawPayloadOffloadURI == "" {
		return nil, false
	}
	if inline != nil {
		if e.Geometry.Inline, ok = verbatimBytes(inline, inlineEnc); !ok {
			return nil, false
		}
		if e.Geometry.InlineEncoding == "" {
			e.Geometry.InlineEncoding = EncodingJSON
		}
	}
	// verbatimBytes checked that each encoding carries its bytes.
	if e.check(nil, false) != nil {
		return nil, false
	}
	return e, true
}

// verbatimBytes recovers the bytes of a verbatim value in encoding enc as
// decodeBytes does, when they are certainly what Decode recovers and the
// encoding can carry them ("applicable").
func verbatimBytes(v []byte, enc string) ([]byte, bool) {
	switch enc {
	case "", EncodingJSON:
		// verbatim checked the grammar; the document is UTF-8.
		return bytes.Clone(v), true
	case EncodingString:
		if v[0] != '"' {
			return nil, false
		}
		b, err := jsonscan.AppendUnquote(make([]byte, 0, len(v)), v)
		return b, err == nil && utf8.Valid(b)
	case EncodingBase64:
		return base64Value(v)
	}
	return nil, false
}

// base64Value decodes a base64 string token as encoding/json decodes it
// into a []byte, when it has no escape and only the base64 alphabet (the
// schema's rule).
func base64Value(tok []byte) ([]byte, bool) {
	if len(tok) < 2 || tok[0] != '"' {
		return nil, false
	}
	s := tok[1 : len(tok)-1]
	for _, c := range s {
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '+' || c == '/' || c == '=') {
			return nil, false
		}
	}
	b := make([]byte, base64.StdEncoding.DecodedLen(len(s)))
	n, err := base64.StdEncoding.Decode(b, s)
	if err != nil {
		return nil, false
	}
	return b[:n], true
}

func (r *fastReader) geometryError() (*GeometryError, bool) {
	g := &GeometryError{}
	ok := true
	seen, objOK := r.object(func(name []byte) uint32 {
		if !ok {
			return 0
		}
		switch string(name) {
		case "reason":
			g.Reason, ok = r.str(false)
			return 1
		case "kind":
			g.Kind, ok = r.str(true)
			return 2
		case "location":
			g.Location, ok = r.location()
			return 4
		case "epsg":
			var v int64
			v, ok = r.integer(strconv.IntSize)
			n := int(v)
			g.EPSG = &n
			return 8
		case "fault":
			g.Fault, ok = r.fault()
			return 16
		}
		return 0
	})
	return g, objOK && ok && seen&1 != 0
}

// location reads [x, y]: two numbers, as the field rule wants.
func (r *fastReader) location() ([]float64, bool) {
	if !r.eat('[') {
		return nil, false
	}
	r.ws()
	x, ok := r.number()
	if !ok || !r.eat(',') {
		return nil, false
	}
	r.ws()
	y, ok := r.number()
	if !ok || !r.eat(']') {
		return nil, false
	}
	return []float64{x, y}, true
}

func (r *fastReader) fault() (*classify.Fault, bool) {
	f := &classify.Fault{}
	ok := true
	seen, objOK := r.object(func(name []byte) uint32 {
		if !ok {
			return 0
		}
		var v int64
		switch string(name) {
		case "part":
			v, ok = r.integer(strconv.IntSize)
			f.Part = int(v)
			return 1
		case "ring":
			v, ok = r.integer(strconv.IntSize)
			f.Ring = int(v)
			return 2
		case "vertex":
			v, ok = r.integer(strconv.IntSize)
			f.Vertex = int(v)
			return 4
		case "on_segment":
			f.OnSegment, ok = r.boolean()
			return 8
		}
		return 0
	})
	return f, objOK && ok && seen&7 == 7
}

// geometry reads the geometry object into g, but for its inline value,
// inline_encoding and payload_offset, which it returns.
func (r *fastReader) geometry(g *GeometryRef) (inline []byte, enc string, offset int64, _ bool) {
	ok := true
	seen, objOK := r.object(func(name []byte) uint32 {
		if !ok {
			return 0
		}
		switch string(name) {
		case "inline":
			inline, ok = r.verbatim()
			return 1
		case "inline_encoding":
			enc, ok = r.str(true)
			return 2
		case "offload_uri":
			g.OffloadURI, ok = r.str(true)
			return 4
		case "byte_size":
			g.ByteSize, ok = r.integer(64)
			return 8
		case "content_sha256":
			g.ContentSHA256, ok = r.str(false)
			return 16
		case "payload_offset":
			offset, ok = r.integer(64)
			return 32
		case "missing":
			g.Missing, ok = r.boolean()
			return 64
		}
		return 0
	})
	g.InlineEncoding = enc
	return inline, enc, offset, objOK && ok && seen&(8|16|32) == 8|16|32
}

func (r *fastReader) source() (*Source, bool) {
	s := &Source{}
	ok := true
	seen, objOK := r.object(func(name []byte) uint32 {
		if !ok {
			return 0
		}
		var v int64
		switch string(name) {
		case "system":
			s.System, ok = r.str(false)
			return 1
		case "topic":
			s.Topic, ok = r.str(true)
			return 2
		case "partition":
			v, ok = r.integer(32)
			p := int32(v)
			s.Partition = &p
			return 4
		case "offset":
			v, ok = r.integer(64)
			s.Offset = &v
			return 8
		case "message_id":
			s.MessageID, ok = r.str(true)
			return 16
		case "key":
			tok, esc, tokOK := r.stringToken()
			ok = tokOK && !esc && len(tok) > 2
			if ok {
				s.Key, ok = base64Value(tok)
			}
			return 32
		case "group_id":
			s.GroupID, ok = r.str(true)
			return 64
		case "dedup_id":
			s.DedupID, ok = r.str(true)
			return 128
		case "delivery_count":
			v, ok = r.integer(strconv.IntSize)
			s.DeliveryCount = int(v)
			return 256
		case "timestamp":
			var t time.Time
			t, ok = r.timestamp(0)
			s.Timestamp = &t
			return 512
		}
		return 0
	})
	return s, objOK && ok && seen&1 != 0
}
