package ingress

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/geodlq/geodlq/classify"
)

// Problem types of the middleware's answers (RFC 9457 "type" members).
// They are URNs: stable identifiers, not documents to fetch. Replace them
// with your own documentation URLs through Options.
const (
	// ProblemTypeInvalid: the event breaks the schema or geometry rules.
	ProblemTypeInvalid = "urn:geodlq:problem:invalid-event"
	// ProblemTypeTooLarge: the event is over the byte or vertex budget.
	ProblemTypeTooLarge = "urn:geodlq:problem:event-too-large"
)

// maxPreallocate bounds the buffer allocated for a request body on the
// strength of its Content-Length before any of it is read (see readAll).
const maxPreallocate = 1 << 20

// ContentTypeProblem is the media type of the middleware's error answers.
const ContentTypeProblem = "application/problem+json"

// Problem is the body of the middleware's error answers: an RFC 9457
// problem details object with an "errors" extension member listing every
// violation.
type Problem struct {
	// Type identifies the problem type: Options.ProblemTypeInvalid or
	// Options.ProblemTypeTooLarge.
	Type string `json:"type"`
	// Title is a short summary of the problem type.
	Title string `json:"title"`
	// Status is the HTTP status code: 400 or 413.
	Status int `json:"status"`
	// Detail explains this occurrence.
	Detail string `json:"detail"`
	// Instance identifies this occurrence (Options.Instance; by default
	// the request path).
	Instance string `json:"instance,omitempty"`
	// Errors lists each violation with its JSON pointer.
	Errors []Violation `json:"errors"`
}

// Middleware returns a handler that validates the body of each request
// whose method is in Options.Methods (POST, PUT, PATCH by default) before
// next sees it, so that malformed events never reach the queue behind
// next. Other requests pass through untouched.
//
// The body is read up to Options.MaxBytes: a request declaring a larger
// Content-Length, or whose body runs past it, is answered 413 at once
// without reading further. The body is then checked with the rules of
// [Validate]. An event with violations is answered 400 (413 when one of
// them is a byte or vertex budget) with a [Problem] body of type
// application/problem+json, and next is not called. A valid event is
// passed to next with r.Body replaced by a reader over exactly the bytes
// received (and r.ContentLength and r.GetBody set to match), so next can
// enqueue them byte for byte. A body that cannot be read (the client went
// away) is answered 400 without a violation list entry beyond the read
// error.
func Middleware(next http.Handler, opts *Options) http.Handler {
	c := newConfig(opts)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !c.methods[r.Method] {
			next.ServeHTTP(w, r)
			return
		}
		if c.MaxBytes >= 0 && r.ContentLength > c.MaxBytes {
			c.reject(w, r, []Violation{tooLarge(r.ContentLength, c.MaxBytes)})
			return
		}
		body, err := c.readBody(w, r)
		if err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				v := tooLarge(mbe.Limit+1, c.MaxBytes)
				v.Message = fmt.Sprintf("the event is more than %d bytes, over the budget", mbe.Limit)
				c.reject(w, r, []Violation{v})
				return
			}
			c.reject(w, r, []Violation{{Class: classify.ClassSchemaViolation, Kind: classify.KindMalformed,
				Message: "the request body could not be read: " + err.Error()}})
			return
		}
		if vs := c.validate(body); len(vs) > 0 {
			c.reject(w, r, vs)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
		next.ServeHTTP(w, r)
	})
}

func (c *config) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	body := r.Body
	if c.MaxBytes >= 0 {
		body = http.MaxBytesReader(w, r.Body, c.MaxBytes)
	}
	return readAll(body, r.ContentLength)
}

// readAll reads r to the end into a buffer that grows with what arrives:
// it starts at min(claimed, maxPreallocate) and doubles, but never past
// the claimed length (Content-Length) while the body keeps to it, so that
// an honest body ends in a buffer of exactly its size (the peak is one and
// a half times the body, not the three of doubling past it) and a false
// claim costs nothing beyond the bytes actually sent.
func readAll(r io.Reader, claimed int64) ([]byte, error) {
	size := 512
	if claimed > 0 {
		size = int(min(claimed, maxPreallocate))
	}
	buf := make([]byte, 0, size)
	for {
		if len(buf) == cap(buf) {
			if int64(len(buf)) == claimed {
				// The claim is met: the body should end here.
				var probe [1]byte
				n, err := io.ReadFull(r, probe[:])
				if n == 0 {
					if err == io.EOF || err == io.ErrUnexpectedEOF {
						err = nil
					}
					return buf, err
				}
				buf = append(buf, probe[0]) // more than claimed: grow as usual
				continue
			}
			next := 2 * cap(buf)
			if claimed > int64(len(buf)) && claimed < int64(next) {
				next = int(claimed)
			}
			grown := make([]byte, len(buf), next)
			copy(grown, buf)
			buf = grown
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

// NewProblem returns the problem details the middleware answers for
// violations vs of a request for instance: status 413 when one of them is
// resource_exhausted, else 400.
func NewProblem(vs []Violation, instance string, opts *Options) *Problem {
	return newConfig(opts).problem(vs, instance)
}

func (c *config) problem(vs []Violation, instance string) *Problem {
	p := &Problem{Type: c.ProblemTypeInvalid, Title: "Invalid event", Status: http.StatusBadRequest, Instance: instance, Errors: vs}
	for _, v := range vs {
		if v.Class == classify.ClassResourceExhausted {
			p.Type, p.Title, p.Status = c.ProblemTypeTooLarge, "Event too large", http.StatusRequestEntityTooLarge
			break
		}
	}
	if p.Errors == nil {
		p.Errors = []Violation{}
	}
	switch len(vs) {
	case 0:
		p.Detail = "The event was not enqueued."
	case 1:
		p.Detail = "The event was not enqueued: " + vs[0].Message + "."
	default:
		p.Detail = fmt.Sprintf("The event was not enqueued: %s, and %d more violation%s.", vs[0].Message, len(vs)-1, plural(len(vs)-1))
	}
	return p
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// MarshalProblem encodes p as the middleware writes it: compact JSON
// without HTML escaping, ending in a newline.
func MarshalProblem(p *Problem) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(p); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func (c *config) reject(w http.ResponseWriter, r *http.Request, vs []Violation) {
	p := c.problem(vs, c.Instance(r))
	body, err := MarshalProblem(p)
	if err != nil {
		// A Violation always encodes; this is a bug, not bad input.
		http.Error(w, "ingress: encoding problem details: "+err.Error(), http.StatusInternalServerError)
		return
	}
	c.Logger.DebugContext(r.Context(), "ingress: event rejected", "path", r.URL.Path, "status", p.Status,
		"violations", len(vs), "first_kind", string(vs[0].Kind), "first_pointer", vs[0].Pointer)
	h := w.Header()
	h.Set("Content-Type", ContentTypeProblem)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(p.Status)
	_, _ = w.Write(body)
}
