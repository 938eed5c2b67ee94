package sqlite

import (
	"fmt"
	"time"

	"github.com/geodlq/geodlq/broker"
)

// ConsumerOptions configures [NewConsumer]. The zero value and nil are
// valid.
type ConsumerOptions struct {
	broker.ConsumerOptions
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
	if store == nil {
		return nil, fmt.Errorf("sqlite: NewConsumer: nil store: %w", broker.ErrInvalidArgument)
	}
	if d, ok := store.Driver().(*drv); ok && d.ro != nil {
		return nil, fmt.Errorf("sqlite: NewConsumer: %w", errReadOnly("consume"))
	}
	if err := broker.ValidDestination(destination); err != nil {
		return nil, fmt.Errorf("sqlite: NewConsumer: %w", err)
	}
	var o ConsumerOptions
	if opts != nil {
		o = *opts
	}
	return broker.NewConsumer(broker.StoreSource(store, destination, &broker.StoreSourceOptions{PollInterval: o.PollInterval}),
		proc, &o.ConsumerOptions)
}
