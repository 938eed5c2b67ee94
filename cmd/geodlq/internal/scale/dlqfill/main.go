// Command dlqfill fills a dead-letter store with realistic dead letters,
// fast (internal/dlqgen): for the scale benchmarks (make bench-scale) and
// for trying a command on a store of a million records.
//
//	go run ./cmd/geodlq/internal/scale/dlqfill -store sqlite://./big.db -n 1000000
//	go run ./cmd/geodlq/internal/scale/dlqfill -store sqlite://./large.db -n 0 -large 40 -large-bytes 10000000
//
// The store is created when missing (sqlite, postgres and mysql tables
// alike) and written through Store.PublishBatch: one transaction per
// batch for the SQL stores, one produce or pipeline per batch elsewhere.
// Records -from to -from+n-1 are written, so that a store can be filled
// in several runs; the same -seed makes the same records.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"time"

	"github.com/geodlq/geodlq/broker"
	_ "github.com/geodlq/geodlq/broker/jetstream"
	_ "github.com/geodlq/geodlq/broker/kafka"
	_ "github.com/geodlq/geodlq/broker/mysql"
	_ "github.com/geodlq/geodlq/broker/postgis"
	_ "github.com/geodlq/geodlq/broker/redisstream"
	_ "github.com/geodlq/geodlq/broker/sqlite"
	"github.com/geodlq/geodlq/internal/dlqgen"
	"github.com/geodlq/geodlq/offload"
	_ "github.com/geodlq/geodlq/offload/blobstore"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "dlqfill:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		storeURL, blobsURL, dest string
		n, from, large, batch    int
		largeBytes, workers      int
		seed                     uint64
		quiet                    bool
	)
	flag.StringVar(&storeURL, "store", "", "store URL (sqlite://…, postgres://…, mysql://…, kafka://…, redis://…, nats://…)")
	flag.StringVar(&blobsURL, "blobs", "", "blob store URL: offload geometries over 256 KiB there, as a Processor would")
	flag.StringVar(&dest, "dest", "spatial.events.poison.dlt", "destination")
	flag.IntVar(&n, "n", 1_000_000, "records to write")
	flag.IntVar(&from, "from", 0, "index of the first record")
	flag.IntVar(&large, "large", 0, "large records to write after them")
	flag.IntVar(&largeBytes, "large-bytes", 10_000_000, "geometry bytes of each large record (its envelope holds about twice that)")
	flag.IntVar(&batch, "batch", 500, "records per PublishBatch")
	flag.IntVar(&workers, "workers", 4, "batches built and written at once")
	flag.Uint64Var(&seed, "seed", 1, "seed of the records")
	flag.BoolVar(&quiet, "q", false, "no progress on stderr")
	flag.Parse()
	if storeURL == "" {
		return fmt.Errorf("-store is required")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	// A batch waits for the others' transactions: on a busy machine that
	// can take longer than the default 30 s.
	s, err := broker.OpenStore(ctx, storeURL, &broker.OpenOptions{Create: true, ConnectTimeout: 30 * time.Second,
		Store: broker.StoreOptions{WriteTimeout: 30 * time.Minute}})
	if err != nil {
		return err
	}
	defer s.Close()
	var off *offload.Offloader
	if blobsURL != "" {
		bs, err := offload.OpenStore(ctx, blobsURL, &offload.OpenOptions{Create: true})
		if err != nil {
			return err
		}
		defer bs.Close()
		if off, err = offload.New(bs, &offload.Options{Threshold: 256 << 10}); err != nil {
			return err
		}
	}
	g, err := dlqgen.New(&dlqgen.Options{Seed: seed, Offloader: off})
	if err != nil {
		return err
	}
	start := time.Now()
	last := start
	progress := func(w int) {
		if quiet || time.Since(last) < 2*time.Second {
			return
		}
		last = time.Now()
		fmt.Fprintf(os.Stderr, "dlqfill: %d of %d records, %.0f/s\n", w, n, float64(w)/time.Since(start).Seconds())
	}
	if n > 0 {
		if err := dlqgen.Fill(ctx, s, dest, g, n, &dlqgen.FillOptions{From: from, Batch: batch, Workers: workers, Progress: progress}); err != nil {
			return err
		}
	}
	for i := range large {
		m, err := g.Large(ctx, from+i, largeBytes)
		if err != nil {
			return err
		}
		if err := s.Publish(ctx, dest, m); err != nil {
			return err
		}
	}
	el := time.Since(start)
	fmt.Fprintf(os.Stderr, "dlqfill: %d records and %d large ones into %s in %s (%.0f records/s)\n", n, large, dest, el.Round(time.Millisecond), float64(n+large)/el.Seconds())
	return nil
}
