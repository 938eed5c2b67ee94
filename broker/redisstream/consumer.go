package redisstream

import (
	"time"

	"github.com/geodlq/geodlq/broker"
)

// ConsumerOptions configures [NewConsumer]. The zero value and nil are
// valid.
type ConsumerOptions struct {
	// ConsumerOptions: Concurrency (default 1), MaxBatch (default 10),
	// NackDelay, ReceiveBackoff, SettleTimeout, OnResult, Logger,
	// TracerProvider.
	broker.ConsumerOptions
	// Filter selects the records consumed. Zero: all.
	Filter broker.Filter
	// PollInterval is how long the consumer waits after finding nothing to
	// read. Default 1s.
	PollInterval time.Duration
}

// NewConsumer returns a consumer of destination of store (made by [New]
// or opened by URL) that processes with proc: the store's Fetch leases
// entries through its consumer group and the consumer acknowledges each
// (Ack: XACK, then XDEL unless KeepAcked) only once the handler succeeded
// or the event is durably in the dead-letter store. Entries a crashed
// consumer left pending are taken over after the store's LeaseTTL (the
// XAUTOCLAIM min-idle-time), with the group's delivery count as the
// message's DeliveryAttempt. A message that is not acknowledged stays
// pending until its lease expires, then comes again. Entries with the
// same key are delivered in stream order, but a key's later entries are
// not held back while an earlier one waits for redelivery.
//
// To consume a stream another program writes (a producer's source
// stream), open a store over it with Options.RawKeys (the destination is
// then the stream key) and Options.KeepAcked (acknowledged entries stay in
// the producer's stream), and the consumer group and name to use:
//
//	src, _ := redisstream.New(rdb, &redisstream.Options{RawKeys: true, KeepAcked: true,
//		Group: "spatial-app", Consumer: "worker-1", StoreOptions: broker.StoreOptions{LeaseTTL: time.Minute}})
//	c, _ := redisstream.NewConsumer(src, "spatial.events", proc, nil)
//
// The producer writes the event in the field "body", the ordering key in
// "key" and headers in "h:<name>" fields (the layout Publish writes); an
// entry without a body field is processed as its fields in JSON: an
// object of name to value, or, when names repeat or are not UTF-8, an
// array of [name, value] pairs (a string that is not UTF-8 as
// {"base64": "…"}), so that nothing of it is lost.
//
// Closing the consumer does not close the store.
func NewConsumer(store *broker.Store, destination string, proc *broker.Processor, opts *ConsumerOptions) (*broker.Consumer, error) {
	var o ConsumerOptions
	if opts != nil {
		o = *opts
	}
	return broker.NewStoreConsumer(store, destination, proc, &o.ConsumerOptions,
		&broker.StoreSourceOptions{Filter: o.Filter, PollInterval: o.PollInterval})
}
