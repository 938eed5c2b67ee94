// Package pubsubpush runs geodlq's dead-letter path behind a Pub/Sub push
// subscription — Cloud Run, Cloud Functions 2nd gen, or an Eventarc
// trigger — as an [http.Handler]. It is built on the portable pieces: a
// broker.Processor for the dead-letter path and a broker.Consumer's Handle
// for the acknowledgement discipline.
//
//	h, _ := pubsubpush.New(check, &pubsubpush.Options{Processor: broker.ProcessorOptions{Publisher: store},
//		Auth: &pubsubpush.Auth{Audience: "https://geo-consumer-xyz.a.run.app/push"}})
//	http.Handle("POST /push", h)
//
// # Bodies
//
// It accepts the push JSON of a push subscription ({"message": {"data",
// "attributes", "messageId", "publishTime", "orderingKey"},
// "subscription", "deliveryAttempt"}) and the CloudEvents Eventarc
// delivers for a Pub/Sub trigger, in binary mode (ce-* headers, the
// MessagePublishedData as body) or structured mode
// (application/cloudevents+json). Anything else is answered 400.
//
// # Answers
//
// The answer settles the message: 204 once the handler succeeded or the
// envelope is durably in the dead-letter store, 503 otherwise — the
// dead-letter publish failed, a retryable failure has attempts left, or
// the request's context ended — so that Pub/Sub delivers the message
// again. Attempts come from deliveryAttempt, which Pub/Sub sends only when
// the subscription has a dead-letter policy: give the push subscription
// one, with maxDeliveryAttempts of at least 5 (Pub/Sub's minimum), above
// Policy.MaxAttempts. With a delivery count, a retryable failure is not
// retried inside the request (the push deadline would run out) but
// answered 503 until the attempt reaching Policy.MaxAttempts dead-letters
// it; without one (Eventarc's CloudEvents carry none), the Processor
// retries in place within the request.
//
// # Authentication
//
// With [Auth], every request must carry the OIDC token Pub/Sub signs for
// the push subscription's service account (Authorization: Bearer …): its
// signature is checked against Google's public keys, which the validator
// fetches from Google (so the check needs outbound HTTPS to
// www.googleapis.com; tests inject their own keys through the
// validator's HTTP client), its issuer must be Google's, its audience
// Auth.Audience, and its email Auth.ServiceAccountEmail when set. A
// request that fails is answered 401 and not processed. Cloud Run can do
// the same check itself (--no-allow-unauthenticated); this one also works
// behind a load balancer or on another platform.
package pubsubpush

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"os"
	"strings"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"google.golang.org/api/idtoken"

	"github.com/geodlq/geodlq/broker"
	geopubsub "github.com/geodlq/geodlq/broker/pubsub"
)

// defaultMaxBodyBytes bounds a push body: Pub/Sub's 10 MB message, base64
// and wrapped in JSON.
const defaultMaxBodyBytes = 16 << 20

// Options configures [New]. Processor.Publisher is required.
type Options struct {
	// Processor configures the dead-letter path (see the package doc for
	// how attempts are counted). Sleep is used only for messages without a
	// delivery count.
	Processor broker.ProcessorOptions
	// Consumer: OnResult, Logger and TracerProvider as for any consumer;
	// SettleTimeout does not apply (the answer settles the message), nor
	// do MaxBatch, Concurrency, NackDelay and ReceiveBackoff.
	Consumer broker.ConsumerOptions
	// Auth, when set, requires and checks Pub/Sub's OIDC token. Default
	// nil: no check (leave it to the platform).
	Auth *Auth
	// MaxBodyBytes bounds the request body. Default 16 MiB (Pub/Sub's
	// 10 MB message, base64-encoded in JSON).
	MaxBodyBytes int64
	// BodyTimeout bounds reading the request body, from the moment the
	// handler starts: a client that sends it slowly is answered 408 and
	// its connection closed. Default 30s. The server's own timeouts
	// (http.Server's ReadHeaderTimeout, ReadTimeout) still apply; this one
	// holds even on a server started without them.
	BodyTimeout time.Duration
}

// defaultBodyTimeout is Options.BodyTimeout's default.
const defaultBodyTimeout = 30 * time.Second

// Auth configures the OIDC token check.
type Auth struct {
	// Audience is the audience the push subscription's token is for (the
	// push endpoint's URL, or the audience set on the subscription).
	// Required.
	Audience string
	// ServiceAccountEmail, when set, is the only service account whose
	// tokens are accepted (the push subscription's), with a verified
	// email. Default: any Google-signed token for Audience.
	ServiceAccountEmail string
	// Validator checks signatures. Default: idtoken.NewValidator with
	// Google's keys, fetched over HTTPS and cached as their headers allow.
	// Tests pass one whose HTTP client serves their own keys
	// (option.WithHTTPClient).
	Validator *idtoken.Validator
}

// Handler is the push endpoint. It is safe for concurrent use.
type Handler struct {
	h                  broker.Handler
	redeliver, inPlace *broker.Consumer
	auth               *Auth
	max                int64
	bodyTimeout        time.Duration
	log                *slog.Logger
}

// errRedeliver ends the Processor's in-place retry: the push is answered
// 503 and Pub/Sub delivers the message again.
var errRedeliver = errors.New("pubsubpush: retried by Pub/Sub, not in place")

// New returns a push handler that runs h on every pushed message.
// opts.Processor.Publisher is required, so nil opts fails; opts is
// copied.
func New(h broker.Handler, opts *Options) (*Handler, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if h == nil {
		return nil, fmt.Errorf("pubsubpush: nil handler: %w", broker.ErrInvalidArgument)
	}
	if o.Auth != nil && o.Auth.Audience == "" {
		return nil, fmt.Errorf("pubsubpush: Auth.Audience is required: %w", broker.ErrInvalidArgument)
	}
	inPlace, err := broker.NewProcessor(&o.Processor)
	if err != nil {
		return nil, fmt.Errorf("pubsubpush: %w", err)
	}
	po := o.Processor
	po.Sleep = func(context.Context, time.Duration) error { return errRedeliver }
	redeliver, err := broker.NewProcessor(&po)
	if err != nil {
		return nil, fmt.Errorf("pubsubpush: %w", err)
	}
	co := o.Consumer
	co.Concurrency, co.MaxBatch = 1, 1
	hd := &Handler{h: h, auth: o.Auth, max: o.MaxBodyBytes, bodyTimeout: o.BodyTimeout, log: co.Logger}
	if hd.bodyTimeout <= 0 {
		hd.bodyTimeout = defaultBodyTimeout
	}
	if hd.redeliver, err = broker.NewConsumer(source{}, redeliver, &co); err != nil {
		return nil, fmt.Errorf("pubsubpush: %w", err)
	}
	if hd.inPlace, err = broker.NewConsumer(source{}, inPlace, &co); err != nil {
		return nil, fmt.Errorf("pubsubpush: %w", err)
	}
	if hd.max <= 0 {
		hd.max = defaultMaxBodyBytes
	}
	if hd.log == nil {
		hd.log = slog.New(slog.DiscardHandler)
	}
	if hd.auth != nil && hd.auth.Validator == nil {
		a := *hd.auth
		if a.Validator, err = idtoken.NewValidator(context.Background()); err != nil {
			return nil, fmt.Errorf("pubsubpush: %w", err)
		}
		hd.auth = &a
	}
	return hd, nil
}

// pushMessage is PubsubMessage as a push delivers it (JSON; the fields
// have snake_case twins, which Pub/Sub also sends).
type pushMessage struct {
	Data         []byte            `json:"data"`
	Attributes   map[string]string `json:"attributes"`
	MessageID    string            `json:"messageId"`
	MessageID2   string            `json:"message_id"`
	PublishTime  string            `json:"publishTime"`
	PublishTime2 string            `json:"publish_time"`
	OrderingKey  string            `json:"orderingKey"`
}

// pushBody is the push envelope, and Eventarc's MessagePublishedData.
type pushBody struct {
	Message         *pushMessage `json:"message"`
	Subscription    string       `json:"subscription"`
	DeliveryAttempt *int         `json:"deliveryAttempt"`
}

// structured is a CloudEvent in structured mode.
type structured struct {
	SpecVersion string          `json:"specversion"`
	Type        string          `json:"type"`
	Data        json.RawMessage `json:"data"`
}

// ServeHTTP implements http.Handler.
func (hd *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "pubsubpush: POST a push message", http.StatusMethodNotAllowed)
		return
	}
	if hd.auth != nil {
		if status, err := hd.authenticate(r); err != nil {
			hd.log.WarnContext(r.Context(), "geodlq: pubsubpush: push refused", slog.Any("error", err))
			http.Error(w, "pubsubpush: "+http.StatusText(status), status)
			return
		}
	}
	if r.ContentLength > hd.max {
		http.Error(w, "pubsubpush: body over the limit", http.StatusRequestEntityTooLarge)
		return
	}
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(hd.bodyTimeout)) // not supported: the server's own timeouts apply
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, hd.max))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			http.Error(w, "pubsubpush: body over the limit", http.StatusRequestEntityTooLarge)
			return
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			w.Header().Set("Connection", "close")
			http.Error(w, "pubsubpush: the body did not arrive in time", http.StatusRequestTimeout)
			return
		}
		http.Error(w, "pubsubpush: reading the body: "+err.Error(), http.StatusBadRequest)
		return
	}
	m, sub, err := decode(r.Header, raw)
	if err != nil {
		http.Error(w, "pubsubpush: "+err.Error(), http.StatusBadRequest)
		return
	}
	c := hd.inPlace
	if m.DeliveryAttempt != nil && *m.DeliveryAttempt > 0 {
		c = hd.redeliver
	}
	res := c.Handle(r.Context(), []*broker.Delivery{{Message: geopubsub.MessageOf(sub, m), OrderingKey: m.OrderingKey}}, hd.h)[0]
	if !res.Acked {
		http.Error(w, "pubsubpush: not processed; deliver again", http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// decode reads a push body: push JSON, or a CloudEvent in binary or
// structured mode.
func decode(h http.Header, raw []byte) (*pubsub.Message, string, error) {
	body := raw
	ct, _, _ := mime.ParseMediaType(h.Get("Content-Type"))
	if ct == "application/cloudevents+json" {
		var ev structured
		if err := json.Unmarshal(raw, &ev); err != nil {
			return nil, "", fmt.Errorf("not a CloudEvent: %w", err)
		}
		if ev.SpecVersion == "" || len(ev.Data) == 0 {
			return nil, "", errors.New("a CloudEvent without specversion or data")
		}
		body = ev.Data
	}
	var pb pushBody
	if err := json.Unmarshal(body, &pb); err != nil {
		return nil, "", fmt.Errorf("not a push message: %w", err)
	}
	if pb.Message == nil {
		return nil, "", errors.New("no message in the push body")
	}
	pm := pb.Message
	m := &pubsub.Message{ID: first(pm.MessageID, pm.MessageID2), Data: pm.Data, Attributes: pm.Attributes, OrderingKey: pm.OrderingKey,
		DeliveryAttempt: pb.DeliveryAttempt}
	if m.ID == "" {
		m.ID = h.Get("Ce-Id")
	}
	if t, err := time.Parse(time.RFC3339Nano, first(pm.PublishTime, pm.PublishTime2)); err == nil {
		m.PublishTime = t
	}
	sub := pb.Subscription
	if sub == "" {
		// Eventarc names the topic in ce-source:
		// //pubsub.googleapis.com/projects/<p>/topics/<t>.
		sub = strings.TrimPrefix(h.Get("Ce-Source"), "//pubsub.googleapis.com/")
	}
	return m, sub, nil
}

func first(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// authenticate checks the request's OIDC token; it returns the status to
// answer when the check fails.
func (hd *Handler) authenticate(r *http.Request) (int, error) {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || tok == "" {
		return http.StatusUnauthorized, errors.New("no bearer token")
	}
	p, err := hd.auth.Validator.Validate(r.Context(), tok, hd.auth.Audience)
	if err != nil {
		return http.StatusUnauthorized, err
	}
	if p.Issuer != "accounts.google.com" && p.Issuer != "https://accounts.google.com" {
		return http.StatusUnauthorized, fmt.Errorf("token issued by %q, not Google", p.Issuer)
	}
	if want := hd.auth.ServiceAccountEmail; want != "" {
		email, _ := p.Claims["email"].(string)
		verified, _ := p.Claims["email_verified"].(bool)
		if email != want || !verified {
			return http.StatusForbidden, fmt.Errorf("token of %q, not of %q", email, want)
		}
	}
	return 0, nil
}

// source settles nothing: the HTTP answer does.
type source struct{}

func (source) Receive(context.Context, int) ([]*broker.Delivery, error) {
	return nil, fmt.Errorf("pubsubpush: Pub/Sub pushes: %w", broker.ErrClosed)
}
func (source) Ack(context.Context, *broker.Delivery) error                 { return nil }
func (source) Nack(context.Context, *broker.Delivery, time.Duration) error { return nil }
func (source) Close() error                                                { return nil }
