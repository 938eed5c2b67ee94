package dlqgen_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/memory"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/internal/dlqgen"
)

func TestGenerate(t *testing.T) {
	ctx := context.Background()
	g, err := dlqgen.New(nil)
	require.NoError(t, err)
	t.Logf("%d templates", g.Templates())
	classes, kinds := map[classify.Class]int{}, map[classify.ReasonKind]int{}
	sizes := 0
	for i := range 2000 {
		m, err := g.Message(ctx, i)
		require.NoError(t, err)
		again, err := g.Message(ctx, i)
		require.NoError(t, err)
		require.Equal(t, m.Body, again.Body, "Message is deterministic")
		x := broker.IndexOf(m)
		require.True(t, x.Summary.Envelope)
		classes[x.Summary.Class]++
		kinds[x.Summary.ReasonKind]++
		sizes += len(m.Body)
		require.NotEmpty(t, broker.SourceValue(x.Attrs, "/properties/provider"))
	}
	t.Logf("classes %v, kinds %v, mean body %d bytes", classes, kinds, sizes/2000)
	for _, c := range []classify.Class{classify.ClassInvalidGeometry, classify.ClassCRSMismatch, classify.ClassSchemaViolation, classify.ClassTransient, classify.ClassResourceExhausted} {
		require.Positive(t, classes[c], "class %s", c)
	}
	require.GreaterOrEqual(t, len(kinds), 5, "several reason kinds")

	s := memory.New(nil)
	require.NoError(t, dlqgen.Fill(ctx, s, "d", g, 1234, &dlqgen.FillOptions{Batch: 100, Workers: 3}))
	require.Equal(t, 1234, memory.Len(s, "d"))
	large, err := g.Large(ctx, 0, 1<<20)
	require.NoError(t, err)
	require.Greater(t, len(large.Body), 2<<20-100_000, "a large record holds its geometry twice")
	_ = filepath.Join
}
