package warehouse

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/parquet-go/parquet-go"
	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/memory"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/warehouse/internal/fixture"
)

func TestSourcePrefix(t *testing.T) {
	for _, tc := range []struct {
		uri   string
		depth int
		want  string
	}{
		{"s3://provider-b/roads/x.geojson", 1, "s3://provider-b"},
		{"s3://provider-b/roads/x.geojson", 2, "s3://provider-b/roads"},
		{"s3://provider-b/roads/x.geojson", 9, "s3://provider-b/roads/x.geojson"},
		{"s3://provider-b", 2, "s3://provider-b"},
		{"https://tiles.example.org/v1/a", 0, "https://tiles.example.org"},
		{"bucket/key/x", 1, "bucket"},
		{"", 1, ""},
	} {
		require.Equal(t, tc.want, SourcePrefix(tc.uri, tc.depth), "%s %d", tc.uri, tc.depth)
	}
}

func TestGeometryCRSOf(t *testing.T) {
	require.Equal(t, "EPSG:3857", GeometryCRSOf(&envelope.Envelope{SourceCRS: "EPSG:3857", SourceEPSG: 3857}))
	require.Equal(t, CRS84, GeometryCRSOf(&envelope.Envelope{}))
	require.Equal(t, "", GeometryCRSOf(&envelope.Envelope{SourceCRS: "EPSG:nope"}))
}

func TestWKB(t *testing.T) {
	p := appendWKBPoint(nil, 1.5, -2)
	require.Len(t, p, 21)
	x, y := wkbPointXY(p)
	require.Equal(t, []float64{1.5, -2}, []float64{x, y})
	poly := appendWKBBox(nil, BBox{XMin: 0, YMin: 1, XMax: 2, YMax: 3})
	require.Len(t, poly, 1+4+4+4+5*16)
	require.Equal(t, byte(1), poly[0])
	require.Equal(t, []byte{3, 0, 0, 0}, poly[1:5])
}

// geoOf reads the geo metadata of a Parquet file in memory.
func geoOf(t *testing.T, b []byte) geoMetadata {
	t.Helper()
	f, err := parquet.OpenFile(bytes.NewReader(b), int64(len(b)))
	require.NoError(t, err)
	v, ok := f.Lookup("geo")
	require.True(t, ok)
	var g geoMetadata
	require.NoError(t, json.Unmarshal([]byte(v), &g))
	return g
}

func TestWriterMixedCRSIsUnknown(t *testing.T) {
	ctx := context.Background()
	s := filled(t, 12)
	var buf bytes.Buffer
	res, err := Export(ctx, s, &buf, nil)
	require.NoError(t, err)
	require.EqualValues(t, 12, res.Rows)
	g := geoOf(t, buf.Bytes())
	require.Equal(t, "1.1.0", g.Version)
	require.JSONEq(t, "null", string(g.Columns[ColumnGeometryBBox].CRS), "rows in several CRSs: crs unknown")
	require.Nil(t, g.Columns[ColumnGeometryBBox].BBox)

	// One CRS: its PROJJSON, and the extent.
	buf.Reset()
	_, err = Export(ctx, s, &buf, &ExportOptions{Filter: broker.Filter{EPSG: []int{3857}}})
	require.NoError(t, err)
	g = geoOf(t, buf.Bytes())
	require.Contains(t, string(g.Columns[ColumnFaultPoint].CRS), `"code":3857`)
	require.Len(t, g.Columns[ColumnGeometryBBox].BBox, 4)
}

func TestWriterRefusesNonEnvelopes(t *testing.T) {
	ctx := context.Background()
	s := memory.New(nil)
	require.NoError(t, s.Publish(ctx, "d", &broker.Message{Body: []byte("plain text")}))
	require.NoError(t, fixture.Fill(ctx, s, "d", 2, nil))
	var buf bytes.Buffer
	res, err := Export(ctx, s, &buf, nil)
	require.NoError(t, err)
	require.EqualValues(t, 2, res.Rows)
	require.EqualValues(t, 1, res.Skipped)
	w, err := NewWriter(&buf, nil)
	require.NoError(t, err)
	err = w.Write(ctx, broker.Entry{Record: &broker.Record{ID: "1", Destination: "d", Message: &broker.Message{Body: []byte("{}")}}})
	require.ErrorIs(t, err, ErrNotEnvelope)
	_, err = NewWriter(&buf, &Options{Compression: "lzma"})
	require.ErrorIs(t, err, ErrInvalidOptions)
}

// FuzzWriter feeds hostile envelope bodies (mutations of real ones) to a
// Writer: it must refuse or write them, never panic, and the file must
// stay readable.
func FuzzWriter(f *testing.F) {
	ctx := context.Background()
	s := filled(f, 6)
	p, err := s.List(ctx, broker.ListOptions{})
	require.NoError(f, err)
	for _, e := range p.Entries {
		f.Add(e.Record.Message.Body)
	}
	f.Add([]byte(`{"schema_version":"dlq.v1"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var buf bytes.Buffer
		w, err := NewWriter(&buf, nil)
		require.NoError(t, err)
		err = w.Write(ctx, broker.Entry{Record: &broker.Record{ID: "1", Destination: "d", Message: &broker.Message{Body: body}}})
		if err != nil {
			require.ErrorIs(t, err, ErrNotEnvelope)
		}
		require.NoError(t, w.Close())
		rows, err := parquet.Read[Row](bytes.NewReader(buf.Bytes()), int64(buf.Len()))
		require.NoError(t, err)
		require.EqualValues(t, w.Rows(), len(rows))
	})
}
