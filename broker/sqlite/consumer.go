package sqlite

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
	// PollInterval is how long the consumer waits after finding the
	// destination empty. Default 1s.
	PollInterval time.Duration
}

// NewConsumer returns a consumer of destination in store that processes
// with proc: a [broker.StoreSource] over the store, so a delivery is a
// leased row, acknowledged once processed or durably dead-lettered, and
// given back (or left to its lease, Options.LeaseTTL) otherwise;
// Message.DeliveryAttempt counts the row's leases. store is one [Open]
// returned; a read-only store is refused.
func NewConsumer(store *broker.Store, destination string, proc *broker.Processor, opts *ConsumerOptions) (*broker.Consumer, error) {
	var o ConsumerOptions
	if opts != nil {
		o = *opts
	}
	return broker.NewStoreConsumer(store, destination, proc, &o.ConsumerOptions,
		&broker.StoreSourceOptions{Filter: o.Filter, PollInterval: o.PollInterval})
}
