package stores

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"

	"github.com/redis/go-redis/v9"

	"github.com/geodlq/geodlq/broker"
	_ "github.com/geodlq/geodlq/broker/redisstream" // registers redis:// and rediss://
)

// redis://[:PASSWORD@]HOST:PORT/DB?geodlq_prefix=geodlq&lease_ttl=30s and
// rediss:// (TLS) open the Redis Streams store through broker.OpenStore:
// broker/redisstream's opener, whose package doc has the URL form. A
// read-only command (create false) on a Redis without the store's
// catalog or streams under the prefix fails with "no geodlq store here".
// The store lists without leasing (Lister), for every destination.
func init() {
	register("redis", openRedis)
	register("rediss", openRedis)
}

func openRedis(ctx context.Context, _ *url.URL, raw string, opts Options) (Store, error) {
	// go-redis logs through one process-wide logger (there is no
	// per-client one), to stderr by default; the command routes its
	// lines to its own log, which -v shows and which is discarded
	// otherwise.
	redis.SetLogger(goRedisLog{opts.Logger})
	s, err := broker.OpenStore(ctx, raw, &broker.OpenOptions{Create: opts.Create, Store: broker.StoreOptions{Logger: opts.Logger}})
	if err != nil {
		if inner := errors.Unwrap(err); inner != nil {
			err = inner // Open names the store already
		}
		return nil, err
	}
	return redisStore{s}, nil
}

// redisStore adapts the portable store's List to the command's [Lister].
type redisStore struct{ *broker.Store }

func (r redisStore) Scan(ctx context.Context, dest string, f broker.Filter, replayed bool, fn func(Entry) error) error {
	return r.ScanAll(ctx, broker.ListOptions{Destination: dest, Filter: f, IncludeReplayed: replayed, Limit: broker.MaxListLimit},
		func(e broker.Entry) error {
			return fn(Entry{Record: e.Record, Status: string(e.Status), PublishedAt: e.PublishedAt, ReplayedAt: e.ReplayedAt})
		})
}

// goRedisLog writes go-redis's log lines to the command's logger.
type goRedisLog struct{ l *slog.Logger }

func (g goRedisLog) Printf(ctx context.Context, format string, v ...any) {
	g.l.InfoContext(ctx, fmt.Sprintf(format, v...), slog.String("library", "go-redis"))
}
