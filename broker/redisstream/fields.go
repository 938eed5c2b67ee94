package redisstream

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/geodlq/geodlq/broker"
)

// Stream entry field names; the package doc lists what each holds.
const (
	fieldVersion   = "v"
	fieldBody      = "body"
	fieldKey       = "key"
	fieldHeader    = "h:"
	fieldEnvelope  = "env"
	fieldClass     = "class"
	fieldStage     = "stage"
	fieldEPSG      = "epsg"
	fieldEventID   = "event_id"
	fieldAtSeconds = "dlq_at_s"
	fieldAtNanos   = "dlq_at_ns"
	fieldLocX      = "loc_x"
	fieldLocY      = "loc_y"
)

func formatFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// entryFields returns the field/value pairs Publish writes for m.
func entryFields(m *broker.Message) []any {
	a := make([]any, 0, 24+2*len(m.Headers))
	a = append(a, fieldVersion, "1")
	if env, err := broker.EnvelopeOf(m); err == nil {
		at := env.DeadLetteredAt
		a = append(a,
			fieldEnvelope, "1",
			fieldClass, env.FailureClass.String(),
			fieldStage, env.FailedStage.String(),
			fieldEPSG, strconv.Itoa(broker.EPSGOf(env)),
			fieldEventID, env.EventID,
			fieldAtSeconds, strconv.FormatInt(at.Unix(), 10),
			fieldAtNanos, strconv.Itoa(at.Nanosecond()),
		)
		if ge := env.GeometryError; ge != nil && len(ge.Location) == 2 {
			a = append(a, fieldLocX, formatFloat(ge.Location[0]), fieldLocY, formatFloat(ge.Location[1]))
		}
	}
	if m.Key != nil {
		a = append(a, fieldKey, m.Key)
	}
	names := make([]string, 0, len(m.Headers))
	for k := range m.Headers {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		a = append(a, fieldHeader+k, m.Headers[k])
	}
	return append(a, fieldBody, m.Body) // []byte: sent as is, not copied
}

// message rebuilds the message from an entry's field/value pairs. An
// entry without a body field (written by something other than Publish)
// becomes a message whose body is its fields in JSON (see fieldsJSON), so
// that nothing of it is lost when it is dead-lettered.
func message(fields []any, deliveries int) *broker.Message {
	m := &broker.Message{DeliveryAttempt: deliveries}
	hasBody := false
	for i := 0; i+1 < len(fields); i += 2 {
		name, _ := fields[i].(string)
		value, _ := fields[i+1].(string)
		switch {
		case name == fieldBody:
			m.Body, hasBody = []byte(value), true
		case name == fieldKey:
			m.Key = []byte(value)
		case strings.HasPrefix(name, fieldHeader):
			if m.Headers == nil {
				m.Headers = map[string]string{}
			}
			m.Headers[name[len(fieldHeader):]] = value
		}
	}
	if !hasBody {
		m.Body = fieldsJSON(fields)
	}
	return m
}

// fieldsJSON encodes an entry's fields without loss: a JSON object of
// name to value when the names are distinct and every name and value is
// UTF-8 (the usual entry), else a JSON array of [name, value] pairs in
// stored order, a string that is not UTF-8 given as {"base64": "…"}.
func fieldsJSON(fields []any) []byte {
	obj := make(map[string]string, len(fields)/2)
	plain := true
	for i := 0; i+1 < len(fields); i += 2 {
		name, _ := fields[i].(string)
		value, _ := fields[i+1].(string)
		if _, dup := obj[name]; dup || !utf8.ValidString(name) || !utf8.ValidString(value) {
			plain = false
			break
		}
		obj[name] = value
	}
	var b []byte
	if plain {
		b, _ = json.Marshal(obj) // a map of UTF-8 strings always marshals
		return b
	}
	str := func(s string) any {
		if utf8.ValidString(s) {
			return s
		}
		return map[string]string{"base64": base64.StdEncoding.EncodeToString([]byte(s))}
	}
	pairs := make([][2]any, 0, len(fields)/2)
	for i := 0; i+1 < len(fields); i += 2 {
		name, _ := fields[i].(string)
		value, _ := fields[i+1].(string)
		pairs = append(pairs, [2]any{str(name), str(value)})
	}
	b, _ = json.Marshal(pairs) // strings and maps of strings always marshal
	return b
}

// digest identifies a message for deduplication: the SHA-256 of its key
// (nil and empty differ), its headers in name order and its body, each
// length-prefixed; 32 hex digits.
func digest(m *broker.Message) string {
	h := sha256.New()
	var n [9]byte
	put := func(tag byte, b []byte) {
		n[0] = tag
		binary.BigEndian.PutUint64(n[1:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	if m.Key != nil {
		put('k', m.Key)
	}
	names := make([]string, 0, len(m.Headers))
	for k := range m.Headers {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		put('h', []byte(k))
		put('v', []byte(m.Headers[k]))
	}
	put('b', m.Body)
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// sameSlotKey returns a key for the store's bookkeeping of stream key
// (digests, settle marks) that Redis Cluster places in the stream's hash
// slot, so that one script may touch both. A key's slot is the hash of its
// hash tag — the text between its first "{" and the next "}", when not
// empty — or of the whole key. When the stream key has a tag, appending
// keeps it; otherwise the stream key becomes the tag of "{key}suffix",
// which works unless the key contains a "}" (then no other key shares its
// slot, and on Cluster the script fails with CROSSSLOT: the package doc
// asks for destination names without braces there).
func sameSlotKey(key, suffix string) string {
	if start := strings.IndexByte(key, '{'); start >= 0 {
		if end := strings.IndexByte(key[start+1:], '}'); end > 0 {
			return key + suffix
		}
	}
	return "{" + key + "}" + suffix
}

// validID reports whether id has the form of a stream entry id, "ms-seq".
func validID(id string) bool {
	ms, seq, ok := strings.Cut(id, "-")
	if !ok {
		return false
	}
	_, err1 := strconv.ParseUint(ms, 10, 64)
	_, err2 := strconv.ParseUint(seq, 10, 64)
	return err1 == nil && err2 == nil
}

// The catalog is a hash at the key "<Prefix>": the field "layout" holds
// the layout version of the store, and one field "d:<destination>" per
// destination ever published to.
const (
	catalogLayout = "layout"
	catalogDest   = "d:"
	layoutVersion = "1"
)

// maxExact bounds the Unix seconds passed to Lua, whose numbers are
// doubles: clamping keeps every comparison with a stored time (years 0
// to 9999) exact.
const maxExact = 1<<53 - 1

func timeArgs(t time.Time) (sec int64, nsec int) {
	sec, nsec = t.Unix(), t.Nanosecond()
	switch {
	case sec > maxExact:
		return maxExact, 0
	case sec < -maxExact:
		return -maxExact, 0
	}
	return sec, nsec
}

// filterArgs encodes f for fetchScript: nil for the zero filter (or one of
// reason kinds only, which the script cannot read), else tagged groups
// ("c", n, names…; "s", …; "e", …; "i", …; "r", n, record ids…; "ge", s,
// ns; "lt", s, ns; "bb", minX, minY, maxX, maxY). Values are passed as
// strings, byte for byte.
func filterArgs(f broker.Filter) []any {
	if f.IsZero() {
		return nil
	}
	var a []any
	set := func(tag string, vals []string) {
		if len(vals) == 0 {
			return
		}
		a = append(a, tag, strconv.Itoa(len(vals)))
		for _, v := range vals {
			a = append(a, v)
		}
	}
	strs := func(n int, at func(int) string) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = at(i)
		}
		return out
	}
	set("c", strs(len(f.Classes), func(i int) string { return f.Classes[i].String() }))
	set("s", strs(len(f.Stages), func(i int) string { return f.Stages[i].String() }))
	set("e", strs(len(f.EPSG), func(i int) string { return strconv.Itoa(f.EPSG[i]) }))
	set("i", f.EventIDs)
	set("r", f.IDs)
	if !f.Since.IsZero() {
		s, ns := timeArgs(f.Since)
		a = append(a, "ge", strconv.FormatInt(s, 10), strconv.Itoa(ns))
	}
	if !f.Until.IsZero() {
		s, ns := timeArgs(f.Until)
		a = append(a, "lt", strconv.FormatInt(s, 10), strconv.Itoa(ns))
	}
	if b := f.BBox; b != nil {
		a = append(a, "bb", formatFloat(b.Min[0]), formatFloat(b.Min[1]), formatFloat(b.Max[0]), formatFloat(b.Max[1]))
	}
	return a
}
