package sqs

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/geodlq/geodlq/broker"
)

// HeaderKey is the message attribute that carries a message's ordering
// key, base64 (standard encoding), when it has one.
const HeaderKey = "geodlq-key"

// Message attributes the adapter sets besides the message's own headers
// and HeaderKey (named in the package doc).
const (
	// attrBodyEncoding is "base64" when the body holds characters SQS
	// refuses (invalid UTF-8, most control characters, U+FFFE/U+FFFF) and
	// was sent base64-encoded. Absent otherwise: the body is sent as is.
	attrBodyEncoding = "geodlq-body-encoding"
	// attrHeaders carries all the headers as one JSON object of strings
	// when they cannot travel as individual attributes: more than SQS's
	// 10 attributes would be needed, or a name or value SQS refuses.
	attrHeaders = "geodlq-headers"
)

// maxMessageAttributes is SQS's limit on message attributes per message.
const maxMessageAttributes = 10

const dataTypeString = "String"

// validBody reports whether s holds only characters SQS accepts in a
// message body or string attribute: #x9 | #xA | #xD | #x20–#xD7FF |
// #xE000–#xFFFD | #x10000–#x10FFFF, in valid UTF-8.
func validBody(s []byte) bool {
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c < 0x20 && c != '\t' && c != '\n' && c != '\r' {
				return false
			}
			i++
			continue
		}
		r, n := utf8.DecodeRune(s[i:])
		if r == utf8.RuneError && n == 1 {
			return false
		}
		if (r >= 0xD800 && r <= 0xDFFF) || r == 0xFFFE || r == 0xFFFF {
			return false
		}
		i += n
	}
	return true
}

// validAttrName reports whether name is a message attribute name SQS
// accepts for an application attribute.
func validAttrName(name string) bool {
	if name == "" || len(name) > 256 || name[0] == '.' || name[len(name)-1] == '.' || strings.Contains(name, "..") {
		return false
	}
	l := strings.ToLower(name)
	if strings.HasPrefix(l, "aws.") || strings.HasPrefix(l, "amazon.") {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

func reservedAttr(name string) bool {
	return name == HeaderKey || name == attrBodyEncoding || name == attrHeaders
}

func strAttr(v string) types.MessageAttributeValue {
	return types.MessageAttributeValue{DataType: aws.String(dataTypeString), StringValue: aws.String(v)}
}

// encoded is a message as SQS will carry it.
type encoded struct {
	body  string
	attrs map[string]types.MessageAttributeValue
	// bodyLen is len(body); size is body plus attributes, counted as SQS
	// counts them.
	bodyLen, size int
}

// encodeMessage maps m onto an SQS body and message attributes.
func encodeMessage(m *broker.Message) (encoded, error) {
	var e encoded
	attrs := map[string]types.MessageAttributeValue{}
	if validBody(m.Body) {
		e.body = string(m.Body)
	} else {
		e.body = base64.StdEncoding.EncodeToString(m.Body)
		attrs[attrBodyEncoding] = strAttr("base64")
	}
	if len(m.Key) > 0 {
		attrs[HeaderKey] = strAttr(base64.StdEncoding.EncodeToString(m.Key))
	}
	individual := len(attrs)+len(m.Headers) <= maxMessageAttributes
	for k, v := range m.Headers {
		if reservedAttr(k) {
			return encoded{}, fmt.Errorf("sqs: header %q uses a name the adapter reserves", k)
		}
		if !validAttrName(k) || v == "" || !validBody([]byte(v)) {
			individual = false
		}
	}
	if len(m.Headers) > 0 {
		if individual {
			for k, v := range m.Headers {
				attrs[k] = strAttr(v)
			}
		} else {
			b, err := json.Marshal(m.Headers)
			if err != nil {
				return encoded{}, fmt.Errorf("sqs: packing headers: %w", err)
			}
			attrs[attrHeaders] = strAttr(string(b))
		}
	}
	if len(attrs) > 0 {
		e.attrs = attrs
	}
	e.bodyLen = len(e.body)
	e.size = e.bodyLen + attrSize(attrs)
	return e, nil
}

// attrSize counts message attributes as SQS does against the message size
// limit: each attribute's name, data type and value.
func attrSize(attrs map[string]types.MessageAttributeValue) int {
	n := 0
	for k, a := range attrs {
		n += len(k) + len(aws.ToString(a.DataType)) + len(aws.ToString(a.StringValue)) + len(a.BinaryValue)
	}
	return n
}

// decodeMessage maps an SQS message back onto body, key and headers. It
// reverses encodeMessage; attributes another producer set become headers
// too (String and Number by value, Binary base64-encoded).
func decodeMessage(msg types.Message) (body, key []byte, headers map[string]string, err error) {
	body = []byte(aws.ToString(msg.Body))
	names := slices.Sorted(maps.Keys(msg.MessageAttributes))
	for _, k := range names {
		a := msg.MessageAttributes[k]
		v := aws.ToString(a.StringValue)
		switch k {
		case attrBodyEncoding:
			if v != "base64" {
				return nil, nil, nil, fmt.Errorf("sqs: message %s: unknown %s %q", aws.ToString(msg.MessageId), attrBodyEncoding, v)
			}
			if body, err = base64.StdEncoding.DecodeString(aws.ToString(msg.Body)); err != nil {
				return nil, nil, nil, fmt.Errorf("sqs: message %s: base64 body: %w", aws.ToString(msg.MessageId), err)
			}
		case HeaderKey:
			if key, err = base64.StdEncoding.DecodeString(v); err != nil {
				return nil, nil, nil, fmt.Errorf("sqs: message %s: %s: %w", aws.ToString(msg.MessageId), HeaderKey, err)
			}
		case attrHeaders:
			var h map[string]string
			if err := json.Unmarshal([]byte(v), &h); err != nil {
				return nil, nil, nil, fmt.Errorf("sqs: message %s: %s: %w", aws.ToString(msg.MessageId), attrHeaders, err)
			}
			if headers == nil {
				headers = make(map[string]string, len(h))
			}
			maps.Copy(headers, h)
		default:
			if headers == nil {
				headers = map[string]string{}
			}
			if a.StringValue != nil {
				headers[k] = v
			} else if a.BinaryValue != nil {
				headers[k] = base64.StdEncoding.EncodeToString(a.BinaryValue)
			}
		}
	}
	return body, key, headers, nil
}
