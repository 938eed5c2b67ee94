package nesting_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/internal/corpus/nesting"
)

func TestBuild(t *testing.T) {
	require.Greater(t, nesting.Shapes(), 10)
	names := map[string]bool{}
	for s := range nesting.Shapes() {
		name := nesting.Name(s)
		require.False(t, names[name], name)
		names[name] = true
		shallow := nesting.Build(s, 3, nil)
		require.Equal(t, name != "unclosed", json.Valid(shallow), "%s: %s", name, shallow)
		deep := nesting.Build(s, 100_000, []byte(" "))
		require.Equal(t, len(deep), cap(deep), "allocated once")
		require.Greater(t, len(deep), 200_000)
	}
	require.Equal(t, nesting.Name(1), nesting.Name(1+nesting.Shapes()))
	require.Equal(t, nesting.Name(nesting.Shapes()-1), nesting.Name(-1))
	require.True(t, strings.HasPrefix(string(nesting.Build(0, 2, []byte("\n"))), `{"crs":"EPSG:4326","geometry":{"type":"GeometryCollection","geometries":[`+"\n"))
	require.NotEmpty(t, nesting.Build(0, -5, nil))
}

func ExampleBuild() {
	fmt.Println(string(nesting.Build(14, 3, nil))) // top level
	// Output: [[[]]]
}
