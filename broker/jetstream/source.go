package jetstream

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/classify"
)

// SourcePublisher returns a [broker.Publisher] that publishes to subjects
// by name — the subjects of a source stream that [NewConsumer] reads —
// on the connection of store s (made by [New] or opened by URL). It is
// the replayer's target for re-injecting dead-lettered events into the
// subjects they came from (replay.Options.Target), and a producer's way to
// publish what NewConsumer reads back whole.
//
// Publish(ctx, subject, m) publishes m's body exactly, its headers as NATS
// headers and its key base64 in [HeaderKey], and returns once a stream
// acknowledged it (PubAck). It sets no Nats-Msg-Id of its own: put one in
// m's headers to have the stream's duplicate window absorb a retry. A
// subject that is empty, has a wildcard, whitespace or an empty token, a
// header NATS cannot carry, or a nil message is [broker.ErrInvalidArgument];
// a message over max_payload or the stream's max_msg_size is a
// *classify.TooLargeError; a subject no stream captures fails with the
// server's no-responders error. A read-only store refuses with
// [broker.ErrReadOnly], a closed connection is [broker.ErrClosed], and a
// store of another adapter is errors.ErrUnsupported. Without a deadline
// in ctx, the store's WriteTimeout bounds the wait. It is safe for
// concurrent use.
func SourcePublisher(s *broker.Store) broker.Publisher {
	var d *driver
	if s != nil {
		d, _ = s.Driver().(*driver)
	}
	return sourcePublisher{s: s, d: d}
}

type sourcePublisher struct {
	s *broker.Store
	d *driver
}

// Publish publishes m to subject and waits for the stream's PubAck.
func (p sourcePublisher) Publish(ctx context.Context, subject string, m *broker.Message) error {
	switch {
	case p.d == nil:
		return fmt.Errorf("jetstream: SourcePublisher on a store that is not a JetStream store: %w", errors.ErrUnsupported)
	case p.s.ReadOnly():
		return fmt.Errorf("jetstream: publishing to %q: %w", subject, broker.ErrReadOnly)
	case !validSubject(subject):
		return fmt.Errorf("jetstream: %q is not a subject to publish to (empty, a wildcard, whitespace or an empty token): %w", subject, broker.ErrInvalidArgument)
	case m == nil:
		return fmt.Errorf("jetstream: publishing to %q: nil message: %w", subject, broker.ErrInvalidArgument)
	}
	msg := nats.NewMsg(subject)
	msg.Data = m.Body
	for k, v := range m.Headers {
		if k == "" || strings.ContainsAny(k, ":\r\n \t") || strings.ContainsAny(v, "\r\n") {
			return fmt.Errorf("jetstream: header %q cannot be carried by NATS (empty, or contains ':', whitespace or a line break): %w", k, broker.ErrInvalidArgument)
		}
		if k != HeaderKey {
			msg.Header[k] = []string{v}
		}
	}
	if m.Key != nil {
		msg.Header[HeaderKey] = []string{base64.StdEncoding.EncodeToString(m.Key)}
	}
	if maxPayload, hl := int(p.d.nc.MaxPayload()), headerLen(msg.Header); maxPayload > 0 && len(m.Body)+hl > maxPayload {
		return fmt.Errorf("jetstream: %w", &classify.TooLargeError{What: "message", Destination: subject, Size: len(m.Body), Limit: max(0, maxPayload-hl),
			Hint: fmt.Sprintf("its headers take %d of the %d bytes of max_payload", hl, maxPayload)})
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	ctx, cancel := p.d.withTimeout(ctx)
	defer cancel()
	if _, err := p.d.js.PublishMsg(ctx, msg); err != nil {
		var apiErr *natsjs.APIError
		switch {
		case errors.Is(err, nats.ErrMaxPayload):
			return fmt.Errorf("jetstream: %w: %w", &classify.TooLargeError{What: "message", Destination: subject, Size: len(m.Body),
				Limit: max(0, int(p.d.nc.MaxPayload())-headerLen(msg.Header))}, err)
		case errors.As(err, &apiErr) && apiErr.ErrorCode == jsErrCodeMessageExceedsMaximum:
			return fmt.Errorf("jetstream: %w: %w", &classify.TooLargeError{What: "message", Destination: subject, Size: len(m.Body),
				Limit: p.streamLimit(ctx, subject, headerLen(msg.Header)), Hint: "the stream's max_msg_size, headers included"}, err)
		case errors.Is(err, nats.ErrConnectionClosed):
			return fmt.Errorf("jetstream: publishing to %q: %w: %w", subject, broker.ErrClosed, err)
		}
		return fmt.Errorf("jetstream: publishing to %q: %w", subject, err)
	}
	return nil
}

// streamLimit returns the body limit of the stream that captures subject
// (its max_msg_size less hl header bytes), or 0 when it cannot tell.
func (p sourcePublisher) streamLimit(ctx context.Context, subject string, hl int) int {
	name, err := p.d.js.StreamNameBySubject(ctx, subject)
	if err != nil {
		return 0
	}
	st, err := p.d.js.Stream(ctx, name)
	if err != nil {
		return 0
	}
	return max(0, int(st.CachedInfo().Config.MaxMsgSize)-hl)
}

// validSubject reports whether s is a subject a message can be published
// to: non-empty dot-separated tokens, no wildcard, no whitespace.
func validSubject(s string) bool {
	if s == "" || strings.ContainsAny(s, " \t\r\n") {
		return false
	}
	for tok := range strings.SplitSeq(s, ".") {
		if tok == "" || tok == "*" || tok == ">" {
			return false
		}
	}
	return true
}
