// Package broker defines the small interfaces geodlq needs from a message
// broker, and the [Processor] that wires a consumer's handler to
// classification, in-place retries and the dead-letter write.
//
// Adapters live under this package, one per broker (broker/memory,
// broker/sqlite, …). Each implements some of:
//
//   - [Publisher]: write a message to a named destination, durably. Used for
//     dead-letter writes and for replay's re-injection.
//   - [DeadLetterSource]: lease, acknowledge and release dead-lettered
//     records, with a [Filter]. Used by the replayer.
//
// and proves itself with the shared conformance suite in broker/brokertest.
//
// The ordering that keeps events safe is the Processor's job: it writes the
// envelope and waits for the write to be durable before it tells the caller
// to acknowledge the source message. If the write fails, the caller is told
// not to acknowledge, and the source redelivers.
//
// Each message's idempotency key is settled before its handler runs, by
// [IdempotencyKeyOf]: the idempotency-key header, else the event's own key
// in the body (an idempotency_key member by default), else one derived
// from the source and the body and marked derived. The handler, the
// envelope and a replay all use that one key.
package broker

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/geodlq/geodlq/envelope"
)

// Header names set on dead-letter and re-injected messages. Adapters map
// them onto their broker's header or attribute mechanism.
const (
	// HeaderIdempotencyKey carries the event's idempotency key, verbatim.
	HeaderIdempotencyKey = "idempotency-key"
	// HeaderIdempotencyKeyDerived is "true" on a message whose
	// idempotency-key header was derived (from its source and body) rather
	// than assigned by its producer: set by an ingress that derived it,
	// by the Processor on the message a handler sees, and by replay when
	// the envelope says idempotency_key_derived, so that a second failure
	// records the key as derived again.
	HeaderIdempotencyKeyDerived = "dlq-idempotency-key-derived"
	// HeaderEventID carries the event id.
	HeaderEventID = "dlq-event-id"
	// HeaderClass carries the failure class of a dead-lettered event.
	HeaderClass = "dlq-class"
	// HeaderStage carries the failed stage of a dead-lettered event.
	HeaderStage = "dlq-stage"
	// HeaderRoute carries the envelope's route, "retry" or "poison" (the
	// header keeps the envelope's wire name, "destination").
	HeaderRoute = "dlq-destination"
	// HeaderEPSG carries the EPSG code of the payload's CRS, when known.
	HeaderEPSG = "dlq-epsg"
	// HeaderSchema carries the envelope schema version ("dlq.v1").
	HeaderSchema = "dlq-schema"
	// HeaderFirstSeenAt carries, on a re-injected message, when the event
	// was first seen (RFC 3339, nanoseconds), so a second failure keeps its
	// history.
	HeaderFirstSeenAt = "dlq-first-seen-at"
	// HeaderReplayOf carries, on a re-injected message, the id of the
	// dead-letter record it was replayed from.
	HeaderReplayOf = "dlq-replay-of"
	// HeaderRepaired is "true" on a re-injected message whose payload a
	// repair changed.
	HeaderRepaired = "dlq-repaired"
	// HeaderRepair describes the repair ("make_valid:structure 5->7 vertices").
	HeaderRepair = "dlq-repair"
	// HeaderQuarantinedFrom carries, on a message that triage moved to a
	// quarantine destination, the dead-letter destination it came from. A
	// record carrying it is already in quarantine: triage never moves it
	// again.
	HeaderQuarantinedFrom = "dlq-quarantined-from"
)

// Message is a message as a broker carries it.
type Message struct {
	// Key is the ordering or partition key, or nil.
	Key []byte
	// Body is the payload, exactly as received.
	Body []byte
	// Headers are the message's headers or attributes.
	Headers map[string]string
	// DeliveryAttempt is the broker's own count of deliveries of this
	// message, first delivery = 1 (SQS ApproximateReceiveCount, Pub/Sub
	// delivery attempt, Service Bus DeliveryCount, JetStream NumDelivered);
	// 0 when the broker does not report one.
	DeliveryAttempt int
	// Source is where the message came from, recorded in the envelope.
	Source *envelope.Source
	// Envelope, on a dead-letter message, is the envelope Body encodes,
	// when the caller has it: the Processor sets it to the envelope it
	// built, so that adapters read the fields they index or put in headers
	// (class, stage, EPSG, event id, …) without decoding Body again. Whoever
	// sets it must set it to exactly what Body encodes, and nobody modifies
	// it afterwards. Nil: adapters decode Body (see [EnvelopeOf]).
	Envelope *envelope.Envelope
}

// EnvelopeOf returns the dlq.v1 envelope m carries: m.Envelope when set,
// else Body decoded with [envelope.Decode], whose typed errors it returns
// when Body is not a valid envelope.
func EnvelopeOf(m *Message) (*envelope.Envelope, error) {
	if m == nil {
		return nil, errors.New("broker: nil message")
	}
	if m.Envelope != nil {
		return m.Envelope, nil
	}
	return envelope.Decode(m.Body)
}

// Header returns the named header, or "".
func (m *Message) Header(name string) string {
	if m == nil || m.Headers == nil {
		return ""
	}
	return m.Headers[name]
}

// Clone returns a deep copy of m. The Envelope pointer is shared: it is
// never modified.
func (m *Message) Clone() *Message {
	if m == nil {
		return nil
	}
	c := *m
	c.Key = slices.Clone(m.Key)
	c.Body = slices.Clone(m.Body)
	if m.Headers != nil {
		c.Headers = make(map[string]string, len(m.Headers))
		for k, v := range m.Headers {
			c.Headers[k] = v
		}
	}
	if m.Source != nil {
		s := *m.Source
		s.Key = slices.Clone(m.Source.Key)
		c.Source = &s
	}
	return &c
}

// Publisher writes messages to named destinations: topics, queues, streams
// or tables.
//
// Publish must return nil only once the message is durable: acknowledged by
// the broker under its strongest setting the adapter was configured with
// (Kafka acks=all, publisher confirms, a committed transaction). It must
// not retain m after it returns. A message larger than the adapter accepts
// is refused with a [*classify.TooLargeError] (wrapping
// [classify.ErrTooLarge]), never truncated.
// Implementations must be safe for concurrent use.
type Publisher interface {
	Publish(ctx context.Context, destination string, m *Message) error
}

// Limiter is implemented by publishers whose destinations have a message
// size limit. The [Processor] passes the limit to the envelope builder so
// that envelopes are shrunk (by offloading) before they are published.
type Limiter interface {
	// MaxMessageBytes returns the largest message body the destination
	// accepts, or 0 for no limit.
	MaxMessageBytes(destination string) int
}

// Record is a dead-lettered message held by a [DeadLetterSource].
type Record struct {
	// ID identifies the record within its destination: a row id, stream
	// entry id, or partition/offset. Stable across redeliveries.
	ID string
	// Destination is the dead-letter destination the record is in.
	Destination string
	// Message is the dead-letter message; its Body is the encoded envelope.
	Message *Message
	// Envelope is the decoded envelope, when the source decoded it.
	Envelope *envelope.Envelope
	// Deliveries counts how many times the record was leased, this time
	// included, when the source tracks it (0 otherwise).
	Deliveries int
	// Lease is an opaque handle the source sets when it leases the record,
	// so that Ack, Release and Renew can detect a lost lease. Callers must
	// not change it; Renew may.
	Lease string
	// LeaseExpires is when the lease ends at the earliest, by this
	// process's clock: the moment Fetch (or the latest successful Renew)
	// sent its request, plus the lease's length. Until then no other
	// fetcher is given the record (provided every fetcher grants leases of
	// the same length and clocks run at the same rate; a store that times
	// leases on its server's clock grants them after the request was
	// sent, so later). A holder acts on the record only well before it
	// (see replay.LeaseKeeper). Zero when the source does not know.
	LeaseExpires time.Time
}

// DeadLetterSource is the replay side of a dead-letter store.
//
// Fetch leases up to max records of destination that match f and are
// neither acknowledged nor leased by anyone else, oldest first, and sets
// each record's LeaseExpires. A leased record is invisible to other
// fetchers until it is acknowledged, released, or its lease expires — a
// replayer that crashes loses nothing; its records come back. Renew
// extends a held lease by the source's lease length from now (a
// heartbeat), updating the record's Lease and LeaseExpires. Ack removes a
// record for good (or marks it replayed); it must be called only after
// the record's effect is durable elsewhere. Release gives a leased record
// back at once. Renew, Ack and Release of a record whose lease was lost —
// taken over by another fetcher, released, acknowledged — return an error
// wrapping [ErrLeaseLost] and change nothing.
//
// Implementations must be safe for concurrent use; two concurrent fetchers
// never receive the same record under live leases. Renew changes the
// record it is given, so a caller must not use one record in two calls at
// once.
type DeadLetterSource interface {
	Fetch(ctx context.Context, destination string, f Filter, max int) ([]*Record, error)
	Renew(ctx context.Context, r *Record) error
	Ack(ctx context.Context, r *Record) error
	Release(ctx context.Context, r *Record) error
}

// Errors shared by adapters.
var (
	// ErrLeaseLost is wrapped when renewing, acknowledging or releasing a
	// record whose lease expired or was taken by another consumer.
	ErrLeaseLost = errors.New("lease lost")
	// ErrClosed is returned by operations on a closed store, consumer or
	// adapter handle. A closed spatial.Checker has its own ErrClosed
	// (docs/api.md).
	ErrClosed = errors.New("broker: closed")
	// ErrNotAcked is wrapped by the error [Processor.Process] returns when
	// the source message must not be acknowledged.
	ErrNotAcked = errors.New("broker: do not acknowledge the source message")
)
