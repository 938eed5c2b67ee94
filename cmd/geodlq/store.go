package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"

	"github.com/geodlq/geodlq/broker"
	_ "github.com/geodlq/geodlq/broker/jetstream"   // nats://
	_ "github.com/geodlq/geodlq/broker/kafka"       // kafka://
	_ "github.com/geodlq/geodlq/broker/mysql"       // mysql://
	_ "github.com/geodlq/geodlq/broker/postgis"     // postgres://, postgresql://
	_ "github.com/geodlq/geodlq/broker/rabbitmq"    // amqp://, amqps://
	_ "github.com/geodlq/geodlq/broker/redisstream" // redis://, rediss://
	_ "github.com/geodlq/geodlq/broker/sqlite"      // sqlite://
	"github.com/geodlq/geodlq/offload"
	_ "github.com/geodlq/geodlq/offload/blobstore" // s3://, gs://, azblob://, mem:// (file:// is offload's)
	_ "gocloud.dev/blob/azureblob"                 // azblob://
	_ "gocloud.dev/blob/gcsblob"                   // gs://
)

// access is how a command opens the store: read-only commands never
// write, migrate or create; commands that act on records open read-write;
// only commands that write a new store may create it.
type access int

const (
	readOnly access = iota
	readWrite
	create
)

// cancelGrace is how long a write the user interrupted may still finish
// (broker.StoreOptions.CancelGrace): short, so that Ctrl-C stops a command
// within a second, and long enough for a local store to answer, so that
// the outcome reported is the true one.
const cancelGrace = 500 * time.Millisecond

// openStore opens --store.
func (a *app) openStore(ctx context.Context, acc access) (*broker.Store, error) {
	return a.openStoreURL(ctx, a.storeURL, acc)
}

func (a *app) openStoreURL(ctx context.Context, url string, acc access) (*broker.Store, error) {
	return broker.OpenStore(ctx, url, &broker.OpenOptions{
		ReadOnly: acc == readOnly, Create: acc == create, ConnectTimeout: a.connectTimeout,
		Store: broker.StoreOptions{Logger: a.logger(), CancelGrace: cancelGrace},
	})
}

// openBlobs opens --blobs, or returns nil (and a no-op closer) when it is
// not set.
func (a *app) openBlobs(ctx context.Context, acc access) (*offload.Offloader, func(), error) {
	if a.blobsURL == "" {
		return nil, func() {}, nil
	}
	st, err := offload.OpenStore(ctx, a.blobsURL, &offload.OpenOptions{
		ReadOnly: acc == readOnly, Create: acc == create, ConnectTimeout: a.connectTimeout})
	if err != nil {
		return nil, nil, err
	}
	off, err := offload.New(st, &offload.Options{BaseURI: a.blobsBase, Prefix: a.blobsPrefix})
	if err != nil {
		_ = st.Close()
		return nil, nil, fmt.Errorf("blobs %s: %w", a.blobsURL, err)
	}
	return off, func() { _ = st.Close() }, nil
}

var quietOnce sync.Once

// quietClientLibraries routes the process-wide loggers of client libraries
// (go-redis's dial failures, the MySQL driver's packet errors, amqp091's)
// to the command's log: -v shows them, and otherwise they never reach the
// terminal — the command's own error says what went wrong, once.
func quietClientLibraries(l *slog.Logger) {
	quietOnce.Do(func() {
		redis.SetLogger(libLog{l: l, lib: "go-redis"})
		_ = mysql.SetLogger(libLog{l: l, lib: "go-sql-driver/mysql"})
		amqp.SetLogger(amqpLog{l: l})
	})
}

// libLog adapts slog to the loggers client libraries take.
type libLog struct {
	l   *slog.Logger
	lib string
}

// Printf serves go-redis (with a context) through print.
func (g libLog) Printf(ctx context.Context, format string, v ...any) {
	g.l.InfoContext(ctx, fmt.Sprintf(format, v...), slog.String("library", g.lib))
}

// Print serves the MySQL driver.
func (g libLog) Print(v ...any) {
	g.l.Info(fmt.Sprint(v...), slog.String("library", g.lib))
}

// amqpLog serves amqp091's logger, whose Printf takes no context.
type amqpLog struct{ l *slog.Logger }

// Printf logs one amqp091 line.
func (g amqpLog) Printf(format string, v ...any) {
	g.l.Info(fmt.Sprintf(format, v...), slog.String("library", "amqp091-go"))
}

// destinations returns --dest, or every destination the store holds
// envelopes in (a destination holding only re-injected events, such as
// the source topic of a replay into the same store, is left out: name it
// with --dest).
func (a *app) destinations(ctx context.Context, s *broker.Store) ([]string, error) {
	if len(a.dests) > 0 {
		for _, d := range a.dests {
			if err := broker.ValidDestination(d); err != nil {
				return nil, usagef("--dest: %v", err)
			}
		}
		return a.dests, nil
	}
	counts, err := s.Stats(ctx, broker.StatsOptions{})
	if errors.Is(err, errors.ErrUnsupported) {
		return nil, usagef("this store (%s) cannot list its records without leasing them: name the destinations with --dest (replay, triage and discard lease records; list, show, stats, export and verify cannot read this store)", s.Name())
	}
	if err != nil {
		return nil, err
	}
	var ds []string
	for _, c := range counts {
		if c.Class != "" && !slices.Contains(ds, c.Destination) {
			ds = append(ds, c.Destination)
		}
	}
	slices.Sort(ds)
	return ds, nil
}

// cannotList turns a store's "unsupported" listing error into advice.
func cannotList(s *broker.Store, err error) error {
	if errors.Is(err, errors.ErrUnsupported) {
		return usagef("this store (%s) cannot list records without leasing them; replay, triage and discard work on it", s.Name())
	}
	return err
}
