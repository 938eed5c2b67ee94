package sqslambda

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/aws/aws-lambda-go/events"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/ingress"
)

// ProblemTypeUnavailable is the problem "type" of a 503 answer: the event
// was valid but could not be enqueued; the client should retry.
const ProblemTypeUnavailable = "urn:geodlq:problem:enqueue-failed"

// IngressOptions configures [NewIngress]. The zero value and nil are
// valid.
type IngressOptions struct {
	// Options are the gate's rules, as for ingress.Middleware: the same
	// schema, geometry and budget checks, problem types and Methods
	// (default POST, PUT and PATCH; other methods are answered 405).
	// MaxBytes defaults to the publisher's MaxMessageBytes for
	// destination when it is a broker.Limiter (258,048 bytes for an SQS
	// store's default), else ingress's 10 MiB, so that a valid event
	// always fits the queue.
	ingress.Options
	// Builder reads the event's own idempotency key (its
	// IdempotencyKeyPath, /idempotency_key by default), the key an event
	// without an Idempotency-Key request header is enqueued with. Nil:
	// envelope.NewBuilder(nil). Pass the consumer's Builder, so that both
	// read the key from the same member.
	Builder *envelope.Builder
}

// Ingress is the pre-flight gate of the seed behind Amazon API Gateway: it
// checks each event with the rules of package ingress and answers a
// refused one 400 (413 over a budget) with an RFC 9457 problem details
// body, or enqueues a valid one, byte for byte, and answers 202. Pass
// HandleV1 (REST APIs, payload format 1.0) or HandleV2 (HTTP APIs, 2.0) to
// lambda.Start. It is safe for concurrent use.
type Ingress struct {
	pub  broker.Publisher
	dest string
	o    ingress.Options
	b    *envelope.Builder
}

// NewIngress returns a gate that enqueues valid events with pub (the store
// geosqs.New returns: its encoding keeps any body SQS accepts) to
// destination (the source queue's name or URL), with its idempotency key
// assigned here, at ingestion, as the message's idempotency-key header: the
// Idempotency-Key request header, else the event's own key (see
// [IngressOptions].Builder), else one derived from the event's bytes
// (broker.IdempotencyKeyOf), then marked derived with the
// dlq-idempotency-key-derived header, so that its envelope says so if it
// is dead-lettered. The 202 answer carries the key.
func NewIngress(pub broker.Publisher, destination string, opts *IngressOptions) (*Ingress, error) {
	if pub == nil || destination == "" {
		return nil, fmt.Errorf("sqslambda: NewIngress needs a publisher and a destination: %w", broker.ErrInvalidArgument)
	}
	var o IngressOptions
	if opts != nil {
		o = *opts
	}
	if o.MaxBytes == 0 {
		if l, ok := pub.(broker.Limiter); ok && l.MaxMessageBytes(destination) > 0 {
			o.MaxBytes = int64(l.MaxMessageBytes(destination))
		}
	}
	if len(o.Methods) == 0 {
		o.Methods = []string{http.MethodPost, http.MethodPut, http.MethodPatch}
	}
	b := o.Builder
	if b == nil {
		var err error
		if b, err = envelope.NewBuilder(nil); err != nil {
			return nil, fmt.Errorf("sqslambda: %w", err)
		}
	}
	return &Ingress{pub: pub, dest: destination, o: o.Options, b: b}, nil
}

// answer is an API Gateway response of either payload format.
type answer struct {
	status  int
	headers map[string]string
	body    string
}

// HandleV1 handles a REST API (payload format 1.0) request.
func (g *Ingress) HandleV1(ctx context.Context, r events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error) {
	a := g.handle(ctx, r.HTTPMethod, r.Path, r.Headers, r.Body, r.IsBase64Encoded)
	return events.APIGatewayProxyResponse{StatusCode: a.status, Headers: a.headers, Body: a.body}, nil
}

// HandleV2 handles an HTTP API (payload format 2.0) request.
func (g *Ingress) HandleV2(ctx context.Context, r events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	a := g.handle(ctx, r.RequestContext.HTTP.Method, r.RawPath, r.Headers, r.Body, r.IsBase64Encoded)
	return events.APIGatewayV2HTTPResponse{StatusCode: a.status, Headers: a.headers, Body: a.body}, nil
}

func header(h map[string]string, name string) string {
	for k, v := range h {
		if strings.EqualFold(k, name) {
			return v
		}
	}
	return ""
}

func (g *Ingress) handle(ctx context.Context, method, path string, headers map[string]string, body string, b64 bool) answer {
	allowed := false
	for _, m := range g.o.Methods {
		allowed = allowed || strings.EqualFold(m, method)
	}
	if !allowed {
		return g.problem(&ingress.Problem{Type: ingress.ProblemTypeInvalid, Title: "Method not allowed", Status: http.StatusMethodNotAllowed,
			Detail: "The event was not enqueued: method " + method + " is not accepted.", Instance: path, Errors: []ingress.Violation{}},
			map[string]string{"Allow": strings.Join(g.o.Methods, ", ")})
	}
	payload := []byte(body)
	if b64 {
		// Refuse a body over the budget before decoding it, with the
		// verdict ingress.Validate gives the decoded bytes.
		if n := decodedLen(body); g.o.MaxBytes >= 0 && n > g.o.MaxBytes {
			return g.refuse([]ingress.Violation{{Class: classify.ClassResourceExhausted, Kind: classify.KindByteBudget,
				Message: fmt.Sprintf("the event is %d bytes, over the budget of %d bytes", n, g.o.MaxBytes)}}, path)
		}
		var err error
		if payload, err = base64.StdEncoding.DecodeString(body); err != nil {
			return g.refuse([]ingress.Violation{{Class: classify.ClassSchemaViolation, Kind: classify.KindMalformed,
				Message: "the request body is not valid base64: " + err.Error()}}, path)
		}
	}
	if vs := ingress.Validate(payload, &g.o); len(vs) > 0 {
		return g.refuse(vs, path)
	}
	m := &broker.Message{Body: payload, Headers: map[string]string{}}
	if k := header(headers, "Idempotency-Key"); k != "" {
		m.Headers[broker.HeaderIdempotencyKey] = k
	}
	key, derived := broker.IdempotencyKeyOf(m, g.b)
	m.Headers[broker.HeaderIdempotencyKey] = key
	if derived {
		m.Headers[broker.HeaderIdempotencyKeyDerived] = "true"
	}
	if err := g.pub.Publish(ctx, g.dest, m); err != nil {
		if errors.Is(err, classify.ErrTooLarge) {
			return g.refuse([]ingress.Violation{{Class: classify.ClassResourceExhausted, Kind: classify.KindByteBudget, Message: err.Error()}}, path)
		}
		return g.problem(&ingress.Problem{Type: ProblemTypeUnavailable, Title: "Event not enqueued", Status: http.StatusServiceUnavailable,
			Detail: "The event is valid but could not be enqueued; retry later.", Instance: path, Errors: []ingress.Violation{}},
			map[string]string{"Retry-After": "1"})
	}
	ans, _ := json.Marshal(struct {
		Status         string `json:"status"`
		IdempotencyKey string `json:"idempotency_key"`
		Derived        bool   `json:"idempotency_key_derived,omitempty"`
	}{"accepted", key, derived})
	return answer{status: http.StatusAccepted, headers: map[string]string{"Content-Type": "application/json"}, body: string(ans) + "\n"}
}

// decodedLen is the length of what padded base64 s decodes to (an upper
// bound when s is not valid base64, which decoding then refuses).
func decodedLen(s string) int64 {
	n := int64(len(s)) / 4 * 3
	if len(s)%4 != 0 {
		return int64(base64.StdEncoding.DecodedLen(len(s)))
	}
	for i := 0; i < 2 && len(s) > i && s[len(s)-1-i] == '='; i++ {
		n--
	}
	return n
}

func (g *Ingress) refuse(vs []ingress.Violation, path string) answer {
	return g.problem(ingress.NewProblem(vs, path, &g.o), nil)
}

func (g *Ingress) problem(p *ingress.Problem, extra map[string]string) answer {
	body, err := ingress.MarshalProblem(p)
	if err != nil {
		return answer{status: http.StatusInternalServerError, body: "sqslambda: encoding problem details: " + err.Error()}
	}
	h := map[string]string{"Content-Type": ingress.ContentTypeProblem, "X-Content-Type-Options": "nosniff"}
	for k, v := range extra {
		h[k] = v
	}
	return answer{status: p.Status, headers: h, body: string(body)}
}
