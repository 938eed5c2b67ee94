//go:build cgo

package proj_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/spatial/proj"
)

func TestPROJJSON(t *testing.T) {
	for _, tc := range []struct {
		code int
		typ  string
		name string
	}{
		{4326, "GeographicCRS", "WGS 84"},
		{3857, "ProjectedCRS", "WGS 84 / Pseudo-Mercator"},
		{27700, "ProjectedCRS", "OSGB36 / British National Grid"},
	} {
		raw, err := proj.PROJJSON(tc.code)
		require.NoError(t, err, tc.code)
		var v struct {
			Type string `json:"type"`
			Name string `json:"name"`
			ID   struct {
				Authority string `json:"authority"`
				Code      int    `json:"code"`
			} `json:"id"`
		}
		require.NoError(t, json.Unmarshal(raw, &v))
		require.Equal(t, tc.typ, v.Type)
		require.Equal(t, tc.name, v.Name)
		require.Equal(t, "EPSG", v.ID.Authority)
		require.Equal(t, tc.code, v.ID.Code)
		require.NotContains(t, string(raw), "\n", "one line")
	}
	for _, code := range []int{0, -1, 1, 999_999, 1_000_000, 1 << 40} {
		_, err := proj.PROJJSON(code)
		require.ErrorIs(t, err, proj.ErrUnknownEPSG, "%d", code)
	}
}

// PROJJSON gives the crs member GeoParquet and STAC metadata take.
func ExamplePROJJSON() {
	raw, err := proj.PROJJSON(4326)
	if err != nil {
		panic(err)
	}
	var crs struct{ Name string }
	_ = json.Unmarshal(raw, &crs)
	fmt.Println(crs.Name)
	// Output: WGS 84
}

// TestMissingProjDB runs New in a child process whose PROJ looks for
// its database in an empty directory.
func TestMissingProjDB(t *testing.T) {
	if os.Getenv("GEODLQ_TEST_NO_PROJ_DB") == "1" {
		_, err := proj.New(nil)
		if !errors.Is(err, proj.ErrNoProjDB) {
			fmt.Printf("got %v\n", err)
			os.Exit(3)
		}
		os.Exit(0)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestMissingProjDB$")
	cmd.Env = append(os.Environ(), "GEODLQ_TEST_NO_PROJ_DB=1", "PROJ_DATA="+t.TempDir(), "PROJ_LIB="+t.TempDir())
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "New without proj.db must fail with ErrNoProjDB: %s", out)
}
