package projcrs_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/warehouse"
	"github.com/geodlq/geodlq/warehouse/projcrs"
)

func TestResolve(t *testing.T) {
	r := projcrs.New()
	for _, tc := range []struct {
		code int
		typ  string
		name string
	}{
		{4326, "GeographicCRS", "WGS 84"},
		{3857, "ProjectedCRS", "WGS 84 / Pseudo-Mercator"},
		{27700, "ProjectedCRS", "OSGB36 / British National Grid"},
		{25832, "ProjectedCRS", "ETRS89 / UTM zone 32N"},
	} {
		v, err := r.Resolve(tc.code)
		require.NoError(t, err, tc.code)
		var crs struct {
			Type string `json:"type"`
			Name string `json:"name"`
			ID   struct {
				Authority string `json:"authority"`
				Code      int    `json:"code"`
			} `json:"id"`
		}
		require.NoError(t, json.Unmarshal(v, &crs))
		require.Equal(t, tc.typ, crs.Type)
		require.Equal(t, tc.name, crs.Name)
		require.Equal(t, "EPSG", crs.ID.Authority)
		require.Equal(t, tc.code, crs.ID.Code)
		again, err := r.Resolve(tc.code)
		require.NoError(t, err)
		require.Equal(t, v, again)
	}
	for _, code := range []int{0, -1, 1, 99999, 1_000_000, 1 << 40} {
		_, err := r.Resolve(code)
		require.ErrorIs(t, err, projcrs.ErrUnknownCode, code)
	}
	// A datum is not a CRS.
	_, err := r.Resolve(6326)
	require.ErrorIs(t, err, projcrs.ErrUnknownCode)
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
