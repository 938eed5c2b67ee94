package mysql

import (
	"time"

	"github.com/geodlq/geodlq/broker"
)

// ConsumerOptions configures [NewConsumer]. The zero value and nil are
// valid.
type ConsumerOptions struct {
	broker.ConsumerOptions
	// Filter selects the records consumed. Zero: all.
	Filter broker.Filter
	// PollInterval is how long the consumer waits after finding no
	// record. Default 1s.
	PollInterval time.Duration
}

// NewConsumer returns a consumer of destination of a store made by [New]
// (or opened by URL) that processes with proc: a work queue in a MySQL
// table. Records are leased with FOR UPDATE SKIP LOCKED, so any number of
// consumers, in any number of processes, share a destination without
// taking the same record twice; each is acknowledged (acked_at) once
// proc's handler succeeded or its envelope is durably in proc's
// dead-letter store, and otherwise given back. A consumer that crashes
// loses nothing: its records come back when their lease expires
// (Options.LeaseTTL). Message.DeliveryAttempt counts the leases of a
// record. Closing the consumer does not close the store.
func NewConsumer(store *broker.Store, destination string, proc *broker.Processor, opts *ConsumerOptions) (*broker.Consumer, error) {
	var o ConsumerOptions
	if opts != nil {
		o = *opts
	}
	return broker.NewStoreConsumer(store, destination, proc, &o.ConsumerOptions,
		&broker.StoreSourceOptions{Filter: o.Filter, PollInterval: o.PollInterval})
}
