package stores

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/geodlq/geodlq/broker/redisstream"
)

// redis://[:PASSWORD@]HOST:PORT/DB?geodlq_prefix=geodlq&lease_ttl=30s opens
// the Redis Streams store (broker/redisstream), one stream per
// destination (<prefix>:<destination>). The geodlq_prefix and lease_ttl
// parameters are taken out; the rest is go-redis's ParseURL (rediss://
// for TLS). Streams cannot be listed without a consumer group, so --dest
// is required and list, stats, export, show and verify lease the pending
// entries and release them (an acknowledged entry is deleted).
func init() {
	register("redis", openRedis)
	register("rediss", openRedis)
}

func openRedis(_ context.Context, u *url.URL, _ string, opts Options) (Store, error) {
	q := u.Query()
	o := &redisstream.Options{Prefix: q.Get("geodlq_prefix"), Logger: opts.Logger}
	if v := q.Get("lease_ttl"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return nil, fmt.Errorf("redis: lease_ttl: %w", err)
		}
		o.LeaseTTL = d
	}
	q.Del("geodlq_prefix")
	q.Del("lease_ttl")
	clean := *u
	clean.RawQuery = q.Encode()
	ro, err := redis.ParseURL(clean.String())
	if err != nil {
		return nil, fmt.Errorf("redis: %w", err)
	}
	cl := redis.NewClient(ro)
	s, err := redisstream.New(cl, o)
	if err != nil {
		_ = cl.Close()
		return nil, err
	}
	return redisStore{s, cl}, nil
}

type redisStore struct {
	*redisstream.Store
	cl *redis.Client
}

// Close leaves the consumer group, then closes the client.
func (r redisStore) Close() error {
	return errors.Join(r.Store.Close(), r.cl.Close())
}
