package envelope

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sync"
	"unicode/utf8"

	"github.com/geodlq/geodlq/internal/jsonscan"
)

// checkWire enforces, on the bytes of a document, the rules of dlq.v1 that
// encoding/json does not see once it has decoded them into a struct, so
// that Decode accepts exactly what the JSON Schema (and the readers in
// other languages) accept:
//
//   - the document is UTF-8 (encoding/json would replace invalid bytes);
//   - the envelope's own objects (the envelope, geometry, geometry_error,
//     its fault, source) have no duplicate member names (encoding/json
//     would merge them) and only lower-case snake_case names
//     (encoding/json matches names case-insensitively, so "Event_ID" or
//     "\u017fource_crs" would land in a known field);
//   - no defined member is null (encoding/json ignores null), every
//     required member is present (encoding/json would leave a zero value
//     that may well be valid), and optional strings are not empty;
//   - integers are written as integers, times match the schema's
//     RFC 3339 pattern (time.Time also accepts "," for ".", and offsets
//     such as +24:00), and base64 values have no line breaks (which
//     encoding/base64 skips).
//
// It reports ok == false, and no violations, when the document is not
// well-formed enough to walk; json.Unmarshal then reports the syntax error.
// It walks only the envelope's own objects (three levels at most) and
// skips every other value with jsonscan, so its depth is bounded.
func checkWire(data []byte) (vs []Violation, ok bool) {
	if !utf8.Valid(data) {
		return []Violation{violation("", "utf8", "the envelope is not UTF-8 JSON text")}, true
	}
	w := wireWalker{data: data}
	i := firstNonSpace(data)
	if i >= len(data) || data[i] != '{' {
		return nil, false
	}
	if _, err := w.object(i, &topLevel, ""); err != nil {
		return nil, false
	}
	return w.vs, true
}

// Member kinds, for checkWire.
const (
	mString     = iota // a string that may be empty
	mOptString         // a string, absent rather than empty
	mInt               // an integer
	mBool              // a boolean
	mRecordTime        // first_seen_at, dead_lettered_at
	mTime              // source.timestamp
	mBase64            // source.key
	mObject            // one of the envelope's objects: walked
	mLocation          // geometry_error.location
	mVerbatim          // raw_payload, geometry.inline: any JSON value, null included
	mEncoding          // raw_payload_encoding, inline_encoding (an optional string)
)

type wireMember struct {
	name     string
	kind     uint8
	required bool
	sub      *wireLevel
}

type wireLevel struct {
	members []wireMember
}

var (
	faultLevel = wireLevel{members: []wireMember{
		{name: "part", kind: mInt, required: true},
		{name: "ring", kind: mInt, required: true},
		{name: "vertex", kind: mInt, required: true},
		{name: "on_segment", kind: mBool},
	}}
	geometryErrorLevel = wireLevel{members: []wireMember{
		{name: "reason", kind: mString, required: true},
		{name: "kind", kind: mOptString},
		{name: "location", kind: mLocation},
		{name: "epsg", kind: mInt},
		{name: "fault", kind: mObject, sub: &faultLevel},
	}}
	geometryLevel = wireLevel{members: []wireMember{
		{name: "inline", kind: mVerbatim},
		{name: "inline_encoding", kind: mEncoding},
		{name: "offload_uri", kind: mOptString},
		{name: "byte_size", kind: mInt, required: true},
		{name: "content_sha256", kind: mString, required: true},
		{name: "payload_offset", kind: mInt, required: true},
		{name: "missing", kind: mBool},
	}}
	sourceLevel = wireLevel{members: []wireMember{
		{name: "system", kind: mString, required: true},
		{name: "topic", kind: mOptString},
		{name: "partition", kind: mInt},
		{name: "offset", kind: mInt},
		{name: "message_id", kind: mOptString},
		{name: "key", kind: mBase64},
		{name: "group_id", kind: mOptString},
		{name: "dedup_id", kind: mOptString},
		{name: "delivery_count", kind: mInt},
		{name: "timestamp", kind: mTime},
	}}
	topLevel = wireLevel{members: []wireMember{
		{name: "schema_version", kind: mString, required: true},
		{name: "event_id", kind: mString, required: true},
		{name: "idempotency_key", kind: mString, required: true},
		{name: "idempotency_key_derived", kind: mBool},
		{name: "failure_class", kind: mString, required: true},
		{name: "failed_stage", kind: mString, required: true},
		{name: "destination", kind: mString, required: true},
		{name: "error_message", kind: mString, required: true},
		{name: "geometry_error", kind: mObject, sub: &geometryErrorLevel},
		{name: "source_crs", kind: mString, required: true},
		{name: "source_epsg", kind: mInt},
		{name: "geometry", kind: mObject, required: true, sub: &geometryLevel},
		{name: "geometry_type", kind: mOptString},
		{name: "vertex_count", kind: mInt},
		{name: "payload_sha256", kind: mString, required: true},
		{name: "payload_size", kind: mInt, required: true},
		{name: "attempts", kind: mInt, required: true},
		{name: "first_seen_at", kind: mRecordTime, required: true},
		{name: "dead_lettered_at", kind: mRecordTime, required: true},
		{name: "trace_id", kind: mOptString},
		{name: "source", kind: mObject, sub: &sourceLevel},
		{name: "raw_payload_offload_uri", kind: mOptString},
		{name: "raw_payload_encoding", kind: mEncoding},
		{name: "raw_payload", kind: mVerbatim},
	}}
)

// wirePatterns are the schema's own patterns, compiled once: the schema
// file is the single source of these rules.
type wirePatterns struct {
	name, recordTime, time, uri *regexp.Regexp
}

var schemaPatterns = sync.OnceValue(func() wirePatterns {
	var s struct {
		Defs map[string]struct {
			Pattern string `json:"pattern"`
		} `json:"$defs"`
	}
	if err := json.Unmarshal(schemaJSON, &s); err != nil {
		panic("envelope: embedded schema: " + err.Error()) // a build defect
	}
	re := func(name string) *regexp.Regexp { return regexp.MustCompile(s.Defs[name].Pattern) }
	return wirePatterns{name: re("member_name"), recordTime: re("record_time"), time: re("time"), uri: re("uri")}
})

type wireWalker struct {
	data []byte
	vs   []Violation
}

func (w *wireWalker) add(field, rule, msg string) { w.vs = append(w.vs, violation(field, rule, msg)) }

// object walks the object starting at data[i] (a '{') with the members of
// lvl; prefix is its wire path plus "." ("" for the envelope).
func (w *wireWalker) object(i int, lvl *wireLevel, prefix string) (int, error) {
	data := w.data
	var seen [32]bool // by index into lvl.members
	var names nameSet
	var encSpan, verbSpan [2]int // the encoding's and the verbatim value's spans
	encSpan[0], verbSpan[0] = -1, -1
	i++
	i = skipSpace(data, i)
	if i < len(data) && data[i] == '}' {
		i++
	} else {
		for {
			ks, ke, err := jsonscan.Skip(data, i)
			if err != nil || data[ks] != '"' {
				return i, errNotWalkable
			}
			name := data[ks+1 : ke-1]
			if bytes.IndexByte(name, '\\') >= 0 {
				u, err := jsonscan.Unquote(data[ks:ke])
				if err != nil {
					return i, errNotWalkable
				}
				name = []byte(u)
			}
			i = skipSpace(data, ke)
			if i >= len(data) || data[i] != ':' {
				return i, errNotWalkable
			}
			vs, ve, err := jsonscan.Skip(data, i+1)
			if err != nil {
				return i, errNotWalkable
			}
			if !isMemberName(name) {
				w.add(prefix+string(name), "name", fmt.Sprintf("member name %q is not lower-case snake_case", name))
			}
			if names.seen(name) {
				w.add(prefix+string(name), "duplicate", fmt.Sprintf("member %q appears more than once", prefix+string(name)))
			}
			if k := lvl.index(name); k >= 0 {
				seen[k] = true
				m := &lvl.members[k]
				if err := w.member(m, prefix, vs, ve); err != nil {
					return i, err
				}
				switch m.kind {
				case mEncoding:
					encSpan = [2]int{vs, ve}
				case mVerbatim:
					verbSpan = [2]int{vs, ve}
				}
			}
			i = skipSpace(data, ve)
			if i >= len(data) {
				return i, errNotWalkable
			}
			if data[i] == '}' {
				i++
				break
			}
			if data[i] != ',' {
				return i, errNotWalkable
			}
			i = skipSpace(data, i+1)
		}
	}
	for k, m := range lvl.members {
		if m.required && !seen[k] {
			w.add(prefix+m.name, "required", prefix+m.name+" is required")
		}
	}
	// A base64 verbatim value has the schema's alphabet: no line breaks.
	if encSpan[0] >= 0 && verbSpan[0] >= 0 && bytes.Equal(data[encSpan[0]:encSpan[1]], []byte(`"base64"`)) {
		for _, m := range lvl.members {
			if m.kind == mVerbatim {
				w.base64(prefix+m.name, verbSpan[0], verbSpan[1])
			}
		}
	}
	return i, nil
}

// nameSet is the set of an object's member names: in an array while
// there are few (an envelope's objects have at most 24), in a map beyond.
type nameSet struct {
	few  [32][]byte
	n    int
	many map[string]struct{}
}

// seen reports whether name was seen before, and records it.
func (s *nameSet) seen(name []byte) bool {
	if s.many == nil {
		for _, n := range s.few[:s.n] {
			if bytes.Equal(n, name) {
				return true
			}
		}
		if s.n < len(s.few) {
			s.few[s.n] = name
			s.n++
			return false
		}
		s.many = make(map[string]struct{}, 2*len(s.few))
		for _, n := range s.few {
			s.many[string(n)] = struct{}{}
		}
	}
	if _, ok := s.many[string(name)]; ok {
		return true
	}
	s.many[string(name)] = struct{}{}
	return false
}

// isMemberName reports whether b matches the schema's member_name
// pattern, ^[a-z][a-z0-9_]*$.
func isMemberName(b []byte) bool {
	if len(b) == 0 || b[0] < 'a' || b[0] > 'z' {
		return false
	}
	for _, c := range b[1:] {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// isTime reports whether s matches the schema's time pattern (minYear 0)
// or record_time pattern (minYear 2): an RFC 3339 date-time with
// upper-case T and Z, a real calendar date, no leap second, and a four
// digit year of at least minYear.
func isTime[T string | []byte](s T, minYear int) bool {
	// 2006-01-02T15:04:05[.frac](Z|±hh:mm)
	if len(s) < 20 || s[4] != '-' || s[7] != '-' || s[10] != 'T' || s[13] != ':' || s[16] != ':' {
		return false
	}
	num := func(i, n int) int {
		v := 0
		for k := i; k < i+n; k++ {
			c := s[k]
			if c < '0' || c > '9' {
				return -1
			}
			v = v*10 + int(c-'0')
		}
		return v
	}
	year, month, day := num(0, 4), num(5, 2), num(8, 2)
	hour, minute, sec := num(11, 2), num(14, 2), num(17, 2)
	if year < minYear || month < 1 || month > 12 || day < 1 || hour < 0 || hour > 23 || minute < 0 || minute > 59 || sec < 0 || sec > 59 {
		return false
	}
	days := [...]int{31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31}[month-1]
	if month == 2 && year%4 == 0 && (year%100 != 0 || year%400 == 0) {
		days = 29
	}
	if day > days {
		return false
	}
	rest := s[19:]
	if rest[0] == '.' {
		n := 1
		for n < len(rest) && rest[n] >= '0' && rest[n] <= '9' {
			n++
		}
		if n == 1 {
			return false
		}
		rest = rest[n:]
	}
	if len(rest) == 1 && rest[0] == 'Z' {
		return true
	}
	if len(rest) != 6 || rest[0] != '+' && rest[0] != '-' || rest[3] != ':' {
		return false
	}
	oh, om := -1, -1
	if c := rest[1:3]; c[0] >= '0' && c[0] <= '9' && c[1] >= '0' && c[1] <= '9' {
		oh = int(c[0]-'0')*10 + int(c[1]-'0')
	}
	if c := rest[4:6]; c[0] >= '0' && c[0] <= '9' && c[1] >= '0' && c[1] <= '9' {
		om = int(c[0]-'0')*10 + int(c[1]-'0')
	}
	return oh >= 0 && oh <= 23 && om >= 0 && om <= 59
}

func (lvl *wireLevel) index(name []byte) int {
	for k := range lvl.members {
		if lvl.members[k].name == string(name) {
			return k
		}
	}
	return -1
}

// member checks the value data[s:e] of a defined member; prefix is the
// wire path of its object plus ".".
func (w *wireWalker) member(m *wireMember, prefix string, s, e int) error {
	data := w.data
	v := data[s:e]
	field := func() string { return prefix + m.name } // built only for a violation
	if v[0] == 'n' && m.kind != mVerbatim {
		w.add(field(), "null", field()+" must not be null")
		return nil
	}
	switch m.kind {
	case mOptString, mEncoding, mBase64:
		if len(v) == 2 && v[0] == '"' {
			w.add(field(), "empty", field()+" must be omitted rather than empty")
			return nil
		}
		if m.kind == mBase64 {
			w.base64(field(), s, e)
		}
	case mInt:
		if v[0] == '-' || v[0] >= '0' && v[0] <= '9' {
			if bytes.ContainsAny(v, ".eE") {
				w.add(field(), "integer", fmt.Sprintf("%s must be written as an integer, not %s", field(), clip(v)))
			}
		}
	case mRecordTime, mTime:
		if v[0] != '"' {
			return nil // a type error, reported by json.Unmarshal
		}
		t := v[1 : len(v)-1]
		if bytes.IndexByte(t, '\\') >= 0 {
			u, err := jsonscan.Unquote(v)
			if err != nil {
				return errNotWalkable
			}
			t = []byte(u)
		}
		minYear := 0
		if m.kind == mRecordTime {
			minYear = 2
		}
		if !isTime(t, minYear) {
			msg := "an RFC 3339 date-time (upper-case T and Z, no leap second) in years 0000–9999"
			if m.kind == mRecordTime {
				msg = "an RFC 3339 date-time (upper-case T and Z, no leap second) in years 0002–9999"
			}
			w.add(field(), "time", fmt.Sprintf("%s %s is not %s", field(), clip(v), msg))
		}
	case mObject:
		if v[0] == '{' {
			if _, err := w.object(s, m.sub, field()+"."); err != nil {
				return err
			}
		}
	case mLocation:
		if v[0] != '[' {
			return nil
		}
		for i := skipSpace(data, s+1); i < e && data[i] != ']'; {
			es, ee, err := jsonscan.Skip(data, i)
			if err != nil {
				return errNotWalkable
			}
			if data[es] == 'n' {
				w.add(field(), "null", field()+" must not hold null")
			}
			i = skipSpace(data, ee)
			if i < e && data[i] == ',' {
				i = skipSpace(data, i+1)
			}
		}
	}
	return nil
}

// base64 checks that the string data[s:e], if it is one, uses only the
// base64 alphabet.
func (w *wireWalker) base64(field string, s, e int) {
	if w.data[s] != '"' {
		return // a type error, reported elsewhere
	}
	str, err := jsonscan.Unquote(w.data[s:e])
	if err != nil {
		return
	}
	for i := 0; i < len(str); i++ {
		c := str[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '+' || c == '/' || c == '=') {
			w.add(field, "base64", fmt.Sprintf("%s holds %q, which is not in the base64 alphabet", field, c))
			return
		}
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && isWS(b[i]) {
		i++
	}
	return i
}

func clip(v []byte) string {
	if len(v) > 40 {
		return string(v[:40]) + "…"
	}
	return string(v)
}

// errNotWalkable stops checkWire on a document json.Unmarshal will reject.
var errNotWalkable = errors.New("envelope: malformed document")
