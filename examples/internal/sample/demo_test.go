package sample_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/memory"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/examples/internal/sample"
)

func TestTileServer(t *testing.T) {
	ev := sample.Events()
	byID := map[string]*broker.Message{}
	for _, e := range ev {
		m := &broker.Message{Body: []byte(e)}
		byID[e] = m
	}
	ctx := context.Background()
	ts := sample.NewTileServer()
	cases := []struct {
		event string
		want  []classify.Class // per call; "" means success
	}{
		{ev[0], []classify.Class{"", ""}},
		{ev[3], []classify.Class{classify.ClassSchemaViolation}},
		{ev[4], []classify.Class{classify.ClassTransient, classify.ClassTransient, "", ""}},
		{ev[5], []classify.Class{classify.ClassTransient, classify.ClassTransient}},
	}
	for _, tc := range cases {
		for i, want := range tc.want {
			err := ts.Enrich(ctx, byID[tc.event])
			if want == "" {
				require.NoError(t, err, "%s call %d", tc.event, i+1)
				continue
			}
			require.Equal(t, want, classify.Classify(err), "%s call %d", tc.event, i+1)
		}
	}
	ts.EndOutage()
	require.NoError(t, ts.Enrich(ctx, byID[ev[5]]), "the outage is over")
}

func TestCrashBeforeAck(t *testing.T) {
	ctx := context.Background()
	b := memory.New(nil)
	require.NoError(t, b.Publish(ctx, "d", &broker.Message{Body: []byte("x")}))
	src := sample.CrashBeforeAck{DeadLetterSource: b}
	recs, err := src.Fetch(ctx, "d", broker.Filter{}, 10)
	require.NoError(t, err)
	require.Len(t, recs, 1)
	require.Error(t, src.Ack(ctx, recs[0]))
	require.Equal(t, 1, memory.Len(b, "d"), "nothing was acknowledged")
}

func ExampleTileServer() {
	ts := sample.NewTileServer()
	flaky := &broker.Message{Body: []byte(sample.Events()[4])}
	for range 3 {
		if err := ts.Enrich(context.Background(), flaky); err != nil {
			fmt.Println(classify.Classify(err), err)
			continue
		}
		fmt.Println("ok")
	}
	// Output:
	// transient tile server: HTTP 503
	// transient tile server: HTTP 503
	// ok
}
