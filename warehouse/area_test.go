package warehouse

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/parquet-go/parquet-go"
	"github.com/paulmach/orb"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/memory"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
)

// TestOutsideCRSArea: rows whose geometry lies outside the valid area of
// its geographic geometry_crs — metres labelled EPSG:4326, or with no crs
// at all (OGC:CRS84) — have geometry_status outside_crs_area and no
// bounding box or fault point, and the file's extent leaves them out;
// coordinates in a projected CRS are not judged here, and the others are
// as before.
func TestOutsideCRSArea(t *testing.T) {
	ctx := context.Background()
	s := memory.New(nil)
	b, err := envelope.NewBuilder(nil)
	require.NoError(t, err)
	add := func(id, crs, coords string, loc orb.Point) {
		crsMember := ""
		if crs != "" {
			crsMember = `"crs":"` + crs + `",`
		}
		payload := `{"event_id":"` + id + `",` + crsMember + `"geometry":{"type":"Polygon","coordinates":` + coords + `}}`
		cause := &classify.Error{Class: classify.ClassCRSMismatch, Stage: classify.StageCRSTransform, Err: errors.New("out of range"),
			Geometry: &classify.GeometryDetail{Reason: "Coordinate outside geographic range", Kind: classify.KindOutOfRange, Location: &loc}}
		env, data, err := b.Build(ctx, envelope.Input{Payload: []byte(payload), Err: cause})
		require.NoError(t, err)
		require.NoError(t, s.Publish(ctx, "dlq", &broker.Message{Body: data, Envelope: env}))
	}
	for i := range 10 {
		x, y := 1_113_194.9+float64(i)*1_800_000, 6_446_275.8
		add(fmt.Sprintf("metres-%d", i), "EPSG:4326", fmt.Sprintf("[[[%g,%g],[%g,%g],[%g,%g],[%g,%g]]]", x, y, x+1e5, y, x+1e5, y+1e5, x, y), orb.Point{x, y})
	}
	add("metres-crs84", "", "[[[1113194.9,6446275.8],[1224514.4,6446275.8],[1224514.4,6621293.7],[1113194.9,6446275.8]]]", orb.Point{1113194.9, 6446275.8})
	add("degrees", "EPSG:4326", "[[[8.5,47.3],[8.6,47.3],[8.6,47.4],[8.5,47.3]]]", orb.Point{8.5, 47.3})
	add("mercator", "EPSG:3857", "[[[1113194.9,6446275.8],[1224514.4,6446275.8],[1224514.4,6621293.7],[1113194.9,6446275.8]]]", orb.Point{1113194.9, 6446275.8})

	var buf bytes.Buffer
	_, err = Export(ctx, s, &buf, nil)
	require.NoError(t, err)
	rows, err := parquet.Read[Row](bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	require.NoError(t, err)
	require.Len(t, rows, 13)
	for _, r := range rows {
		switch r.EventID {
		case "degrees", "mercator":
			require.Equal(t, GeometryOK, r.GeometryStatus, r.EventID)
			require.NotNil(t, r.BBox, r.EventID)
			require.NotNil(t, r.FaultPoint, r.EventID)
		default:
			require.Equal(t, GeometryOutsideCRS, r.GeometryStatus, r.EventID)
			require.Nil(t, r.BBox, r.EventID)
			require.Nil(t, r.GeometryBBox, r.EventID)
			require.Nil(t, r.FaultPoint, r.EventID)
		}
	}

	// One geographic CRS in the file: its extent is in degrees.
	buf.Reset()
	_, err = Export(ctx, s, &buf, &ExportOptions{Filter: broker.Filter{EPSG: []int{4326}}})
	require.NoError(t, err)
	g := geoOf(t, buf.Bytes())
	bb := g.Columns[ColumnGeometryBBox].BBox
	require.Len(t, bb, 4)
	require.Equal(t, []float64{8.5, 47.3, 8.6, 47.4}, bb)
	fp, err := json.Marshal(g.Columns[ColumnFaultPoint].BBox)
	require.NoError(t, err)
	require.JSONEq(t, `[8.5,47.3,8.5,47.3]`, string(fp))
}
