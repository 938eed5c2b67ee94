package postgis

import (
	"time"

	"github.com/geodlq/geodlq/broker"
)

// ConsumerOptions configures [NewConsumer]. The zero value and nil are
// valid.
type ConsumerOptions struct {
	// ConsumerOptions: Concurrency default 1; MaxBatch, the rows one
	// Fetch leases, default 10 (at most broker.MaxFetch); NackDelay is
	// moot here: a record given back with a delay stays leased and is
	// delivered again when its lease (Options.LeaseTTL) runs out.
	broker.ConsumerOptions
	// Filter selects the records consumed (in SQL, as Fetch does). Zero:
	// all.
	Filter broker.Filter
	// PollInterval is how long the consumer waits after finding no
	// pending record. Default 1s.
	PollInterval time.Duration
}

// NewConsumer returns a consumer of destination of store — a table of
// events fed by Publish, as an outbox or a work queue — that processes
// every record with proc: the handler, in-place retries, and the
// dead-letter write, which must be durable before the record is
// acknowledged (marked replayed). Records are leased with FOR UPDATE SKIP
// LOCKED, so any number of consumers in any number of processes share the
// destination; a record whose consumer crashes, or that is not
// acknowledged, comes again when its lease runs out, with
// Message.DeliveryAttempt counting its deliveries. It is
// [broker.StoreSource] over store, which may be any store.
func NewConsumer(store *broker.Store, destination string, proc *broker.Processor, opts *ConsumerOptions) (*broker.Consumer, error) {
	var o ConsumerOptions
	if opts != nil {
		o = *opts
	}
	return broker.NewStoreConsumer(store, destination, proc, &o.ConsumerOptions,
		&broker.StoreSourceOptions{Filter: o.Filter, PollInterval: o.PollInterval})
}
