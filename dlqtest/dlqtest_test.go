package dlqtest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/memory"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/dlqtest"
	"github.com/geodlq/geodlq/envelope"
)

// fakeTB records failures instead of stopping the test.
type fakeTB struct {
	testing.TB
	failed bool
	msg    string
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failed, f.msg = true, fmt.Sprintf(format, args...)
	panic(f)
}
func (f *fakeTB) Errorf(format string, args ...any) {
	f.failed, f.msg = true, fmt.Sprintf(format, args...)
}

func run(fn func(tb testing.TB)) (f *fakeTB) {
	f = &fakeTB{}
	defer func() {
		if r := recover(); r != nil && r != f {
			panic(r)
		}
	}()
	fn(f)
	return f
}

func setup(t *testing.T) *broker.Store {
	b := memory.New(nil)
	p, err := broker.NewProcessor(&broker.ProcessorOptions{Publisher: b})
	require.NoError(t, err)
	_, err = p.Process(context.Background(), &broker.Message{
		Body:   []byte(`{"event_id":"evt-9","crs":"EPSG:3857","geometry":{"type":"Point","coordinates":[1,2]}}`),
		Source: &envelope.Source{System: "memory", Topic: "parcels"},
	}, func(context.Context, *broker.Message) error {
		return classify.WithStage(classify.CRSMismatch(errors.New("EPSG:3857 is not EPSG:4326"), 3857), classify.StageCRSTransform)
	})
	require.NoError(t, err)
	return b
}

func TestRequireDeadLettered(t *testing.T) {
	ctx := context.Background()
	b := setup(t)
	env := dlqtest.RequireDeadLettered(ctx, t, b, "parcels.poison.dlt", &dlqtest.Want{
		EventID: "evt-9", Class: classify.ClassCRSMismatch, Stage: classify.StageCRSTransform, EPSG: 3857, ReasonContains: "3857",
	})
	require.Equal(t, "evt-9", env.EventID)
	require.Equal(t, 1, memory.Len(b, "parcels.poison.dlt"), "the store is left as found")
	recs, err := b.Fetch(ctx, "parcels.poison.dlt", broker.Filter{}, 10)
	require.NoError(t, err)
	require.Len(t, recs, 1, "and nothing stays leased")

	f := run(func(tb testing.TB) {
		dlqtest.RequireDeadLettered(ctx, tb, memory.New(nil), "x", &dlqtest.Want{Class: classify.ClassTransient})
	})
	require.True(t, f.failed)
	require.Contains(t, f.msg, "no envelope")

	b2 := setup(t)
	f = run(func(tb testing.TB) {
		dlqtest.RequireDeadLettered(ctx, tb, b2, "parcels.poison.dlt", &dlqtest.Want{Class: classify.ClassInvalidGeometry})
	})
	require.True(t, f.failed)
	require.True(t, strings.Contains(f.msg, "failure_class = crs_mismatch, want invalid_geometry"), f.msg)

	f = run(func(tb testing.TB) { dlqtest.RequireNotDeadLettered(ctx, tb, b2, "parcels.poison.dlt", "evt-9") })
	require.True(t, f.failed)
	f = run(func(tb testing.TB) { dlqtest.RequireNotDeadLettered(ctx, tb, b2, "parcels.poison.dlt", "evt-10") })
	require.False(t, f.failed)
}
