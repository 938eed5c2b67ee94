package classify

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"syscall"
)

// Rule classifies an error it recognises. It returns ok=false for errors it
// does not know, so the next rule is tried. Rules must be safe for
// concurrent use and must not retain err.
type Rule func(err error) (class Class, ok bool)

// StatusCoder is implemented by errors that carry an HTTP status code, such
// as a downstream tile server's or geocoder's response error. Status 408,
// 429, 502, 503 and 504 are classified transient by the default rules.
type StatusCoder interface {
	StatusCode() int
}

// Classifier maps errors to classes: a marked [*Error] in the chain first,
// then the user's rules in order, then the default rules, and finally
// [ClassUnknown]. A Classifier is immutable and safe for concurrent use; the
// zero value and nil use the default rules only.
type Classifier struct {
	rules []Rule
}

// NewClassifier returns a classifier that consults rules (in order) after
// an error's own mark and before the default rules.
func NewClassifier(rules ...Rule) *Classifier {
	return &Classifier{rules: append([]Rule(nil), rules...)}
}

// Classify returns the class of err using the default rules only. A nil
// error has no class and yields "".
func Classify(err error) Class {
	return (*Classifier)(nil).Classify(err)
}

// Classify returns the class of err. A nil error has no class and yields "".
func (c *Classifier) Classify(err error) Class {
	if err == nil {
		return ""
	}
	if cl, ok := markedClass(err); ok {
		return cl
	}
	if c != nil {
		for _, r := range c.rules {
			if cl, ok := r(err); ok && cl.Valid() {
				return cl
			}
		}
	}
	for _, r := range defaultRules {
		if cl, ok := r(err); ok {
			return cl
		}
	}
	return ClassUnknown
}

var defaultRules = [...]Rule{
	transientContext,
	transientNet,
	transientStatus,
	schemaJSON,
	tooLarge,
}

func tooLarge(err error) (Class, bool) {
	if errors.Is(err, ErrTooLarge) {
		return ClassResourceExhausted, true
	}
	return "", false
}

func transientContext(err error) (Class, bool) {
	if errors.Is(err, context.DeadlineExceeded) {
		return ClassTransient, true
	}
	return "", false
}

func transientNet(err error) (Class, bool) {
	if errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, syscall.ETIMEDOUT) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, net.ErrClosed) {
		return ClassTransient, true
	}
	if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
		return ClassTransient, true
	}
	return "", false
}

type statusError interface {
	error
	StatusCoder
}

func transientStatus(err error) (Class, bool) {
	var sc statusError
	if !errors.As(err, &sc) {
		return "", false
	}
	switch sc.StatusCode() {
	case 408, 429, 502, 503, 504:
		return ClassTransient, true
	}
	return "", false
}

func schemaJSON(err error) (Class, bool) {
	if se := (*json.SyntaxError)(nil); errors.As(err, &se) {
		return ClassSchemaViolation, true
	}
	if te := (*json.UnmarshalTypeError)(nil); errors.As(err, &te) {
		return ClassSchemaViolation, true
	}
	return "", false
}
