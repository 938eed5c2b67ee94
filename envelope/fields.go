package envelope

import (
	"math"
	"strconv"
	"unicode/utf8"
)

// The field rules of dlq.v1 are the `validate` tags on [Envelope],
// [GeometryError], [GeometryRef] and [Source], in go-playground/validator's
// notation. They are checked here by hand, field by field in declaration
// order, with validator's names and messages ("event_id fails \"max\"=1024";
// a string's length counts code points, as JSON Schema's maxLength does):
// validator itself reaches reflect.Value.MethodByName, which turns off the
// linker's dead-method elimination in every program that links it. Its
// tests run validator over the same tags as an oracle (fields_test.go), so
// a tag and its check cannot drift apart.

// fieldCheck collects the violations of field rules under a wire-path
// prefix.
type fieldCheck struct {
	vs     []Violation
	prefix string
}

// fail records that field breaks rule tag (with its parameter, if any).
func (c *fieldCheck) fail(field, tag, param string) {
	f := c.prefix + field
	msg := f + " fails " + strconv.Quote(tag)
	if param != "" {
		msg += "=" + param
	}
	c.vs = append(c.vs, violation(f, tag, msg))
}

// str checks `required` (when required) and `max=max` (when max >= 0); as
// validator does, a field that fails required is not checked further.
func (c *fieldCheck) str(field, v string, required bool, max int) {
	if required && v == "" {
		c.fail(field, "required", "")
		return
	}
	if max >= 0 && len(v) > max && utf8.RuneCountInString(v) > max {
		c.fail(field, "max", strconv.Itoa(max))
	}
}

// oneOf checks `omitempty,oneof=…` (omit) or `required,oneof=…`.
func (c *fieldCheck) oneOf(field, v string, omit bool, param string, allowed ...string) {
	if v == "" {
		if !omit {
			c.fail(field, "required", "")
		}
		return
	}
	for _, a := range allowed {
		if v == a {
			return
		}
	}
	c.fail(field, "oneof", param)
}

// min checks `min=min` on an integer.
func (c *fieldCheck) min(field string, v, min int64) {
	if v < min {
		c.fail(field, "min", strconv.FormatInt(min, 10))
	}
}

// sha256hex checks our `sha256hex` rule: 64 lowercase hex digits.
func (c *fieldCheck) sha256hex(field, v string) {
	if !isHex64(v) {
		c.fail(field, "sha256hex", "")
	}
}

// fieldViolations appends the violations of e's field rules to vs.
func (e *Envelope) fieldViolations(vs []Violation) []Violation {
	c := fieldCheck{vs: vs}
	c.str("schema_version", e.SchemaVersion, true, -1)
	c.str("event_id", e.EventID, true, maxEventIDLen)
	c.str("idempotency_key", e.IdempotencyKey, true, maxKeyLen)
	c.str("failure_class", string(e.FailureClass), true, -1)
	c.str("failed_stage", string(e.FailedStage), true, -1)
	if g := e.GeometryError; g != nil {
		c.str("geometry_error.kind", g.Kind, false, 64)
		if g.Location != nil {
			if len(g.Location) != 2 {
				c.fail("geometry_error.location", "len", "2")
			} else {
				for i, f := range g.Location {
					if math.IsNaN(f) || math.IsInf(f, 0) {
						c.fail("geometry_error.location["+strconv.Itoa(i)+"]", "finite", "")
					}
				}
			}
		}
		if g.EPSG != nil {
			c.min("geometry_error.epsg", int64(*g.EPSG), 0)
		}
	}
	c.str("source_crs", e.SourceCRS, false, 4096)
	c.min("source_epsg", int64(e.SourceEPSG), 0)
	g := &e.Geometry
	c.oneOf("geometry.inline_encoding", g.InlineEncoding, true, "json string base64", "json", "string", "base64")
	c.str("geometry.offload_uri", g.OffloadURI, false, 2048)
	c.min("geometry.byte_size", g.ByteSize, 0)
	c.sha256hex("geometry.content_sha256", g.ContentSHA256)
	c.min("geometry.payload_offset", g.PayloadOffset, -1)
	c.str("geometry_type", e.GeometryType, false, 64)
	c.min("vertex_count", int64(e.VertexCount), 0)
	c.oneOf("raw_payload_encoding", e.RawPayloadEncoding, true, "json string base64", "json", "string", "base64")
	c.str("raw_payload_offload_uri", e.RawPayloadOffloadURI, false, 2048)
	c.sha256hex("payload_sha256", e.PayloadSHA256)
	c.min("payload_size", e.PayloadSize, 0)
	c.min("attempts", int64(e.Attempts), 1)
	c.oneOf("destination", string(e.Route), false, "retry poison", "retry", "poison")
	c.str("trace_id", e.TraceID, false, maxTraceIDLen)
	if e.Source != nil {
		c.prefix = "source."
		c.source(e.Source)
	}
	return c.vs
}

// source checks s's field rules.
func (c *fieldCheck) source(s *Source) {
	c.str("system", s.System, true, 64)
	c.str("topic", s.Topic, false, 1024)
	c.str("message_id", s.MessageID, false, 1024)
	c.str("group_id", s.GroupID, false, 1024)
	c.str("dedup_id", s.DedupID, false, 1024)
	c.min("delivery_count", int64(s.DeliveryCount), 0)
}
