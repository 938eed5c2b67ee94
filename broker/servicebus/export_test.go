package servicebus

import "github.com/geodlq/geodlq/broker"

// Test hooks: the fake namespace of fake_test.go stands in at the SDK
// boundary, through the connector.
type (
	Connector = connector
	Sender    = sender
)

// NewWithConnector is New over a connector.
func NewWithConnector(conn Connector, opts *Options) (*broker.Store, error) {
	d, err := newDriver(conn, opts)
	if err != nil {
		return nil, err
	}
	return broker.NewStore("servicebus", d, &d.opts.StoreOptions), nil
}

// IsLockLost is isLockLost.
var IsLockLost = isLockLost
