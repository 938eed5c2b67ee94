package corpus

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"

	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/internal/jsonscan"
)

// KeyMember is the member a producer puts its idempotency key in, in the
// events of [Keyed]: envelope.Builder's default.
const KeyMember = "idempotency_key"

// KeyedEvent is an event of the [Keyed] stream, as a producer that assigns
// idempotency keys at ingestion sends it.
type KeyedEvent struct {
	// Name identifies the event: "<item>/<variant>".
	Name string
	// Item is the corpus item the event was made from, with its verdict;
	// its Payload is the event's. A truncated event has the verdict of a
	// body that is not JSON (schema_violation at parse, malformed).
	Item Item
	// Key is the event's own idempotency key as a JSON reader decodes the
	// top-level idempotency_key member (the last one, when there are
	// several): a non-empty string, or a number as written. "" when the
	// event has none a reader can use: no member, null, an empty string,
	// a key only in a nested object, or a body that is not a JSON
	// document.
	Key string
}

// keyVariant makes one event of an item: members are the item's top-level
// members without any idempotency_key; it returns the payload and the key
// a reader finds in it.
type keyVariant struct {
	name string
	make func(name string, members []member) (payload []byte, key string)
}

// member is one top-level member of an object: its exact bytes.
type member struct{ key, value []byte }

// fakeUUID returns a UUID-shaped key derived from s.
func fakeUUID(s string) string {
	h := sha256.Sum256([]byte(s))
	x := hex.EncodeToString(h[:16])
	return x[:8] + "-" + x[8:12] + "-4" + x[13:16] + "-a" + x[17:20] + "-" + x[20:32]
}

func idemKey(s string) string {
	h := sha256.Sum256([]byte("producer:" + s))
	return "idem:v1:" + hex.EncodeToString(h[:])
}

var keyVariants = []keyVariant{
	{"uuid-first", func(n string, ms []member) ([]byte, string) {
		k := fakeUUID(n)
		return object(append([]member{{[]byte(`"` + KeyMember + `"`), []byte(strconv.Quote(k))}}, ms...)), k
	}},
	{"idem-last", func(n string, ms []member) ([]byte, string) {
		// After the geometry: the scanner must go past it to find the key.
		k := idemKey(n)
		return object(append(ms, member{[]byte(`"` + KeyMember + `"`), []byte(`"` + k + `"`)})), k
	}},
	{"escaped", func(n string, ms []member) ([]byte, string) {
		// Escapes, non-ASCII and a line separator: the key is what a JSON
		// reader decodes, not the raw bytes.
		raw := `"order\/` + strconv.Itoa(len(n)) + ` caf\u00e9 \u2028 \"q\" ✓"`
		k := "order/" + strconv.Itoa(len(n)) + " café \u2028 \"q\" ✓"
		return object(insert(ms, 1, member{[]byte(`"` + KeyMember + `"`), []byte(raw)})), k
	}},
	{"numeric", func(n string, ms []member) ([]byte, string) {
		k := strconv.Itoa(1_000_000_007 + len(n)*7919)
		return object(insert(ms, 1, member{[]byte(`"` + KeyMember + `"`), []byte(k)})), k
	}},
	{"duplicate", func(n string, ms []member) ([]byte, string) {
		// The last member wins, as in encoding/json.
		k := idemKey(n + "#second")
		ms = insert(ms, 0, member{[]byte(`"` + KeyMember + `"`), []byte(`"` + idemKey(n+"#first") + `"`)})
		return object(append(ms, member{[]byte(`"` + KeyMember + `"`), []byte(`"` + k + `"`)})), k
	}},
	{"none", func(_ string, ms []member) ([]byte, string) { return object(ms), "" }},
	{"null", func(_ string, ms []member) ([]byte, string) {
		return object(insert(ms, 1, member{[]byte(`"` + KeyMember + `"`), []byte("null")})), ""
	}},
	{"empty", func(_ string, ms []member) ([]byte, string) {
		return object(insert(ms, 1, member{[]byte(`"` + KeyMember + `"`), []byte(`""`)})), ""
	}},
	{"nested-only", func(n string, ms []member) ([]byte, string) {
		// A key in properties is not the event's top-level key.
		return object(append(ms, member{[]byte(`"meta"`), []byte(`{"` + KeyMember + `":"` + idemKey(n) + `"}`)})), ""
	}},
	{"truncated", func(n string, ms []member) ([]byte, string) {
		// Cut inside the geometry: the key member before it is no key of
		// a JSON document.
		b := object(append([]member{{[]byte(`"` + KeyMember + `"`), []byte(`"` + idemKey(n) + `"`)}}, ms...))
		return b[:len(b)*2/3], ""
	}},
}

func insert(ms []member, at int, m member) []member {
	at = min(at, len(ms))
	out := make([]member, 0, len(ms)+1)
	out = append(out, ms[:at]...)
	out = append(out, m)
	return append(out, ms[at:]...)
}

func object(ms []member) []byte {
	b := []byte{'{'}
	for i, m := range ms {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, m.key...)
		b = append(b, ':')
		b = append(b, m.value...)
	}
	return append(b, '}')
}

// members splits a JSON object into its top-level members, exactly as
// written; ok is false when data is not one.
func members(data []byte) (ms []member, ok bool) {
	i, err := skipTo(data, 0, '{')
	if err != nil {
		return nil, false
	}
	for {
		ks, ke, err := jsonscan.Skip(data, i)
		if err != nil {
			if i, err = skipTo(data, i, '}'); err == nil && len(ms) == 0 && onlySpace(data[i:]) {
				return ms, true
			}
			return nil, false
		}
		if data[ks] != '"' {
			return nil, false
		}
		if i, err = skipTo(data, ke, ':'); err != nil {
			return nil, false
		}
		vs, ve, err := jsonscan.Skip(data, i)
		if err != nil {
			return nil, false
		}
		ms = append(ms, member{data[ks:ke], data[vs:ve]})
		if i, err = skipTo(data, ve, ','); err == nil {
			continue
		}
		if i, err = skipTo(data, ve, '}'); err != nil || !onlySpace(data[i:]) {
			return nil, false
		}
		return ms, true
	}
}

// skipTo skips white space from i and then the byte c; it returns the
// offset after c.
func skipTo(data []byte, i int, c byte) (int, error) {
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r') {
		i++
	}
	if i >= len(data) || data[i] != c {
		return i, fmt.Errorf("corpus: want %q at %d", c, i)
	}
	return i + 1, nil
}

func onlySpace(b []byte) bool {
	for _, c := range b {
		if c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			return false
		}
	}
	return true
}

// Keyed returns the keyed event stream: every item of the corpus — the
// valid ones and one for each way an event can fail — as a producer that
// assigns idempotency keys at ingestion would send it, in every variant of
// carrying a key (first or last member, with escapes, a number, twice),
// of not carrying one (none, null, empty, only nested), and cut short (a
// key before the cut, in a body that is no longer JSON); the items whose
// file already has a key also come as they are. A body that is not a JSON
// object comes as it is, with a key-like text that no reader takes for a
// key. Last come a few large events (a geometry of about 1.5 MB, the key
// after it). The output is deterministic; callers may modify it.
func Keyed() []KeyedEvent {
	var out []KeyedEvent
	for _, it := range All() {
		ms, ok := members(it.Payload)
		if !ok {
			it.Payload = append([]byte(`"`+KeyMember+`":"`+idemKey(it.Name)+`" `), it.Payload...)
			out = append(out, KeyedEvent{Name: it.Name + "/not-an-object", Item: it})
			continue
		}
		var base []member
		own := ""
		for _, m := range ms {
			if string(m.key) == `"`+KeyMember+`"` {
				own, _ = jsonscan.Unquote(m.value)
				continue
			}
			base = append(base, m)
		}
		if own != "" {
			out = append(out, KeyedEvent{Name: it.Name + "/as-is", Item: it.clone(), Key: own})
		}
		for _, v := range keyVariants {
			name := it.Name + "/" + v.name
			payload, key := v.make(name, base)
			ev := it.clone()
			ev.Payload = payload
			if v.name == "truncated" {
				ev.Class, ev.Stage, ev.Kind, ev.Reason = classify.ClassSchemaViolation, classify.StageParse, classify.KindMalformed, ""
				ev.Location, ev.Fault, ev.EPSG = nil, nil, 0
			}
			out = append(out, KeyedEvent{Name: name, Item: ev, Key: key})
		}
	}
	for i, size := range []int{1_500_000, 1_600_000} {
		name := "large/" + strconv.Itoa(i)
		ev := LargeEvent(size)
		key := idemKey(name)
		if i == 1 {
			key = ""
		} else {
			ev = append(ev[:len(ev)-1], `,"`+KeyMember+`":"`+key+`"}`...)
		}
		out = append(out, KeyedEvent{Name: name, Key: key, Item: Item{Name: name, Description: "a large valid event",
			Payload: ev, EPSG: 4326}})
	}
	return out
}
