// Command servicebus-consumer is an Azure Service Bus consumer with
// geodlq's dead-letter path, ready to copy: it validates each GeoJSON event
// of a queue (GEOS's verdicts, in pure Go), retries transient failures in place, and
// dead-letters what cannot be processed into the queue's own
// $DeadLetterQueue — DeadLetterReason "<class>/<stage>", the error as
// DeadLetterErrorDescription, the dlq.v1 envelope in application
// properties — completing nothing it could not dead-letter: such a message
// is abandoned and redelivered, and Service Bus dead-letters it itself
// after MaxDeliveryCount.
//
// It first prints the queue settings it expects (MaxDeliveryCount and
// LockDuration from the longest spatial operation).
//
//	SERVICEBUS_CONNECTION_STRING='Endpoint=sb://…' go run ./examples/servicebus-consumer -queue vector-jobs
//	go run ./examples/servicebus-consumer -settings   # print the settings and exit
//
// geodlq's Service Bus adapter has NOT been run against a real namespace
// (see broker/servicebus); try this on a non-production namespace first.
// Everything it uses is public API.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/servicebus"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/offload"
	"github.com/geodlq/geodlq/spatial"
)

type config struct {
	queue            string
	maxDeliveryCount int
	longestOp        time.Duration
	offloadDir       string
	settingsOnly     bool
}

func main() {
	var c config
	flag.StringVar(&c.queue, "queue", "vector-jobs", "source queue")
	flag.IntVar(&c.maxDeliveryCount, "max-delivery-count", 4, "queue MaxDeliveryCount (the seed recommends 3-5)")
	flag.DurationVar(&c.longestOp, "longest-op", 12*time.Second, "longest expected spatial operation (sets LockDuration)")
	flag.StringVar(&c.offloadDir, "offload-dir", filepath.Join(os.TempDir(), "geodlq-offload"), "directory for offloaded geometries")
	flag.BoolVar(&c.settingsOnly, "settings", false, "print the queue settings and exit")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, c, os.Getenv("SERVICEBUS_CONNECTION_STRING"), os.Stdout, log); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "servicebus-consumer:", err)
		os.Exit(1)
	}
}

// printSettings prints the queue settings the consumer expects.
func printSettings(out io.Writer, c config, log *slog.Logger) (servicebus.QueueSettings, error) {
	s, err := servicebus.QueueConfig{MaxDeliveryCount: c.maxDeliveryCount, LongestOperation: c.longestOp, Logger: log}.Settings()
	if err != nil {
		return s, err
	}
	fmt.Fprintf(out, "Queue settings (MaxDeliveryCount %d, LockDuration %s):\n%s\n",
		s.MaxDeliveryCount, servicebus.ISO8601(s.LockDuration), s.CLI("<resource-group>", "<namespace>", c.queue))
	return s, nil
}

// newConsumer wires the DeadLetterer, the envelope builder with its
// offloader, the processor and the consumer over recv.
func newConsumer(ctx context.Context, recv servicebus.Receiver, c config, s servicebus.QueueSettings, log *slog.Logger) (*broker.Consumer, broker.Handler, func(), error) {
	dl, err := servicebus.NewDeadLetterer(nil) // Standard tier: 256 KiB, shared with the original body
	if err != nil {
		return nil, nil, nil, err
	}
	chk, err := spatial.NewChecker(nil) // expects EPSG:4326
	if err != nil {
		return nil, nil, nil, err
	}
	if err := os.MkdirAll(c.offloadDir, 0o755); err != nil {
		return nil, nil, nil, err
	}
	blobs, err := offload.NewDirStore(c.offloadDir)
	if err != nil {
		return nil, nil, nil, err
	}
	off, err := offload.New(blobs, nil)
	if err != nil {
		return nil, nil, nil, err
	}
	builder, err := envelope.NewBuilder(&envelope.BuilderOptions{Offloader: off, ResolveEPSG: chk.ResolveEPSG})
	if err != nil {
		return nil, nil, nil, err
	}
	proc, err := broker.NewProcessor(&broker.ProcessorOptions{
		Publisher: dl, // into <queue>/$DeadLetterQueue
		Builder:   builder,
		Policy:    classify.Policy{MaxAttempts: 3, BaseDelay: 100 * time.Millisecond},
		Logger:    log,
	})
	if err != nil {
		return nil, nil, nil, err
	}
	cons, err := servicebus.NewConsumer(ctx, recv, c.queue, proc, &servicebus.ConsumerOptions{
		ConsumerOptions: broker.ConsumerOptions{Concurrency: 4, Logger: log}, ExtendEvery: s.LockDuration / 3, DeadLetterer: dl})
	if err != nil {
		return nil, nil, nil, err
	}
	h := func(ctx context.Context, m *broker.Message) error {
		_, err := chk.CheckEventContext(ctx, m.Body)
		return err
	}
	return cons, h, func() { _ = chk.Close() }, nil
}

func run(ctx context.Context, c config, connStr string, out io.Writer, log *slog.Logger) error {
	s, err := printSettings(out, c, log)
	if err != nil || c.settingsOnly {
		return err
	}
	if connStr == "" {
		return errors.New("set SERVICEBUS_CONNECTION_STRING (or pass -settings)")
	}
	client, err := azservicebus.NewClientFromConnectionString(connStr, nil)
	if err != nil {
		return err
	}
	defer client.Close(context.Background())
	recv, err := client.NewReceiverForQueue(c.queue, nil) // PeekLock
	if err != nil {
		return err
	}
	defer recv.Close(context.Background())
	cons, h, closeFn, err := newConsumer(ctx, recv, c, s, log)
	if err != nil {
		return err
	}
	defer closeFn()
	fmt.Fprintf(out, "consuming %s; failures go to %s\n", c.queue, servicebus.DeadLetterQueue(c.queue))
	return cons.Run(ctx, h)
}
