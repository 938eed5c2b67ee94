package projcrs_test

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/spatial/proj"
	"github.com/geodlq/geodlq/warehouse"
	"github.com/geodlq/geodlq/warehouse/projcrs"
)

// TestResolve checks what the Resolver adds to proj.PROJJSON (whose
// own tests check PROJ's answers): the same bytes, remembered, errors
// that wrap ErrUnknownCode, and codes out of range refused before PROJ.
func TestResolve(t *testing.T) {
	r := projcrs.New()
	var wg sync.WaitGroup
	for _, code := range []int{4326, 3857, 25832} {
		want, err := proj.PROJJSON(code)
		require.NoError(t, err)
		for range 4 { // concurrent first lookups of one code (go test -race)
			wg.Go(func() {
				got, err := r.Resolve(code)
				if assert.NoError(t, err, code) {
					assert.Equal(t, string(want), string(got), code)
				}
			})
		}
	}
	wg.Wait()
	a, err := r.Resolve(25832)
	require.NoError(t, err)
	b, err := r.Resolve(25832)
	require.NoError(t, err)
	require.Same(t, &a[0], &b[0], "remembered, not asked again")

	for _, code := range []int{0, -1, 1_000_000, 1 << 40} {
		_, err := r.Resolve(code)
		require.ErrorIs(t, err, projcrs.ErrUnknownCode, code)
		require.NotErrorIs(t, err, proj.ErrUnknownEPSG, "%d is refused before PROJ", code)
	}
	for _, code := range []int{1, 99999, 6326 /* a datum, not a CRS */} {
		_, err := r.Resolve(code)
		require.ErrorIs(t, err, projcrs.ErrUnknownCode, code)
		require.ErrorIs(t, err, proj.ErrUnknownEPSG, "PROJ's own answer is kept: %d", code)
	}
}

// The built-in table is PROJ's own output.
func TestBuiltinMatchesPROJ(t *testing.T) {
	r := projcrs.New()
	for _, code := range []int{4326, 3857, 4258, 4269} {
		b, err := warehouse.BuiltinCRS(code)
		require.NoError(t, err)
		p, err := r.Resolve(code)
		require.NoError(t, err)
		require.JSONEq(t, string(p), string(b), code)
	}
	b, err := warehouse.BuiltinCRS(27700)
	require.NoError(t, err)
	require.Nil(t, b)
}

func ExampleResolver_Resolve() {
	r := projcrs.New()
	v, _ := r.Resolve(3857)
	var crs struct {
		Name string `json:"name"`
	}
	_ = json.Unmarshal(v, &crs)
	fmt.Println(crs.Name)
	// Use it for a sync's geo metadata:
	_ = warehouse.Options{CRS: r.Resolve}
	// Output: WGS 84 / Pseudo-Mercator
}
