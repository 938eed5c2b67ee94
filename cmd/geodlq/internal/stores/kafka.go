package stores

import (
	"context"
	"net/url"

	"github.com/geodlq/geodlq/broker"
	_ "github.com/geodlq/geodlq/broker/kafka" // registers kafka:// with broker.OpenStore
)

// kafka://HOST:PORT[,HOST:PORT…]?lease_ttl=5m&join_wait=10s opens the Kafka
// store through broker.OpenStore (the URL form is in broker/kafka's package
// doc). The command still reads it through Fetch and Release here (--dest
// is required); the store itself lists without leasing (broker.Store.List).
// Commands that may create the store create missing dead-letter topics.
func init() {
	register("kafka", func(ctx context.Context, _ *url.URL, raw string, opts Options) (Store, error) {
		return broker.OpenStore(ctx, raw, &broker.OpenOptions{Create: opts.Create, Store: broker.StoreOptions{Logger: opts.Logger}})
	})
}
