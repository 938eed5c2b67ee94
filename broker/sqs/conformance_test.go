package sqs_test

import (
	"context"
	"testing"
	"time"

	"github.com/geodlq/geodlq/broker/brokertest"
	geosqs "github.com/geodlq/geodlq/broker/sqs"
)

type harness struct {
	t    *testing.T
	open []*geosqs.Store
}

// The suite's fixtures give some envelopes the provenance of an SQS FIFO
// queue ("vector-jobs.fifo") and write them to the suite's own standard
// queues, a pairing the store refuses by default (FIFOMismatchError, see
// TestFIFOSourceNeedsFIFODeadLetterQueue). The harness allows it: the
// suite tests storage, not the pairing.
var harnessOpts = &geosqs.Options{Lease: 2 * time.Second, CreateQueues: true, AllowFIFOToStandard: true}

func (h *harness) MakeStore(ctx context.Context) (brokertest.Store, error) { return h.Reopen(ctx) }

// Reopen makes a new SDK client and store, as another process would.
func (h *harness) Reopen(ctx context.Context) (brokertest.Store, error) {
	s, err := geosqs.New(ctx, newClient(h.t), harnessOpts)
	if err != nil {
		return nil, err
	}
	h.open = append(h.open, s)
	return s, nil
}

func (h *harness) Capabilities() brokertest.Capabilities {
	s, _ := geosqs.New(context.Background(), newClient(h.t), harnessOpts)
	return brokertest.Capabilities{LeaseExpiry: harnessOpts.Lease, MaxMessageBytes: s.MaxMessageBytes("")}
}

func (h *harness) Close() {
	for _, s := range h.open {
		_ = s.Close()
	}
}

func TestConformance(t *testing.T) {
	endpoint(t)
	brokertest.RunConformanceTests(t, func(_ context.Context, t *testing.T) (brokertest.Harness, error) {
		return &harness{t: t}, nil
	})
}
