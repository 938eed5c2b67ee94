package main

import (
	"bufio"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/geodlq/geodlq/cmd/geodlq/internal/stores"
	"github.com/geodlq/geodlq/internal/geojson"
	"github.com/geodlq/geodlq/offload"
)

func newExportCmd(a *app) *cobra.Command {
	var f filterFlags
	var format, out string
	var withPayload bool
	cmd := &cobra.Command{
		Use:   "export --format jsonl|csv|geojson|parquet",
		Short: "Export dead-lettered records as JSON lines, CSV, GeoJSON for QGIS, or GeoParquet",
		Long: `export writes the selected records:

  jsonl    one JSON object per line: the record's fields (as list --json) and
           its envelope, verbatim;
  csv      one row per envelope, flat columns, header first;
  geojson  a FeatureCollection of the dead-lettered geometries with the
           envelope's fields as flat properties, ready for QGIS. Geometries
           that cannot be written as GeoJSON (NaN or infinite coordinates,
           unparseable, missing, or offloaded without --blobs) become null
           geometries with their properties kept; geometry_status says why.
           When every exported geometry has the same EPSG code other than
           4326, the collection carries a named "crs" member for it;
  parquet  one GeoParquet 1.1 file (-o FILE) with a typed column per field,
           the fault point and the geometry's bounding box as geometry
           columns (see warehouse sync for an incremental, partitioned
           dataset); --with-payload adds the restored, verified payloads.

Invalid geometries are exported as they are: that is the point.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) (err error) {
			sel, err := f.parse(time.Now())
			if err != nil {
				return err
			}
			if format != "jsonl" && format != "csv" && format != "geojson" && format != "parquet" {
				return usagef("--format %q: want jsonl, csv, geojson or parquet", format)
			}
			ctx := cmd.Context()
			s, err := a.openStore(ctx, false)
			if err != nil {
				return err
			}
			defer closeWith(&err, s)
			off, closeBlobs, err := a.openBlobs(ctx, false)
			if err != nil {
				return err
			}
			defer closeBlobs()
			if format == "parquet" {
				n, err := a.exportParquet(ctx, s, sel, off, out, withPayload)
				if err == nil && out != "" && out != "-" && !a.json {
					fmt.Fprintf(a.stderr, "exported %d records to %s\n", n, out)
				}
				return err
			}
			w := a.stdout
			if out != "" && out != "-" {
				fh, err := os.Create(out)
				if err != nil {
					return err
				}
				defer closeWith(&err, fh)
				w = fh
			}
			bw := bufio.NewWriter(w)
			var n int
			switch format {
			case "jsonl":
				n, err = a.exportJSONL(ctx, bw, s, sel)
			case "csv":
				n, err = a.exportCSV(ctx, bw, s, sel)
			default:
				n, err = a.exportGeoJSON(ctx, bw, s, sel, off)
			}
			if err != nil {
				return err
			}
			if err := bw.Flush(); err != nil {
				return err
			}
			if out != "" && out != "-" && !a.json {
				fmt.Fprintf(a.stderr, "exported %d records to %s\n", n, out)
			}
			return nil
		},
	}
	f.register(cmd.Flags(), true)
	cmd.Flags().StringVar(&format, "format", "geojson", "jsonl, csv, geojson or parquet")
	cmd.Flags().BoolVar(&withPayload, "with-payload", false, "parquet: add each event's original payload, restored and verified (may hold sensitive data)")
	cmd.Flags().StringVarP(&out, "output", "o", "", "output file (default standard output)")
	return cmd
}

func (a *app) exportJSONL(ctx context.Context, w io.Writer, s stores.Store, sel selection) (int, error) {
	n := 0
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	err := a.eachRecord(ctx, s, sel, func(it item) error {
		line := struct {
			view
			Envelope json.RawMessage `json:"envelope,omitempty"`
		}{view: viewOf(it)}
		if it.env != nil {
			line.Envelope = it.Record.Message.Body
		}
		n++
		return enc.Encode(line)
	})
	return n, err
}

// column is one flat field of an exported record.
type column struct {
	name  string
	value any // string, int, int64, float64, bool or nil
}

func columns(v view) []column {
	var lx, ly, part, ring, vertex, onSeg any
	if len(v.Location) == 2 {
		lx, ly = v.Location[0], v.Location[1]
	}
	if f := v.Fault; f != nil {
		part, ring, vertex, onSeg = f.Part, f.Ring, f.Vertex, f.OnSegment
	}
	str := func(s string) any {
		if s == "" {
			return nil
		}
		return s
	}
	return []column{
		{"record_id", v.ID}, {"destination", v.Destination}, {"status", str(v.Status)},
		{"event_id", str(v.EventID)}, {"idempotency_key", str(v.IdempotencyKey)},
		{"failure_class", str(v.FailureClass)}, {"failed_stage", str(v.FailedStage)},
		{"error_message", str(v.ErrorMessage)}, {"reason", str(v.Reason)}, {"reason_kind", str(v.ReasonKind)},
		{"location_x", lx}, {"location_y", ly},
		{"fault_part", part}, {"fault_ring", ring}, {"fault_vertex", vertex}, {"fault_on_segment", onSeg},
		{"epsg", v.EPSG}, {"source_crs", str(v.SourceCRS)},
		{"geometry_type", str(v.GeometryType)}, {"vertex_count", v.VertexCount}, {"geometry_bytes", v.GeometryBytes},
		{"geometry_offload_uri", str(v.GeometryOffloadURI)},
		{"payload_size", v.PayloadSize}, {"payload_sha256", str(v.PayloadSHA256)}, {"attempts", v.Attempts},
		{"first_seen_at", str(v.FirstSeenAt)}, {"dead_lettered_at", str(v.DeadLetteredAt)}, {"replayed_at", str(v.ReplayedAt)},
		{"source_system", str(v.SourceSystem)}, {"source_topic", str(v.SourceTopic)}, {"source_uri", str(v.SourceURI)},
	}
}

func (a *app) exportCSV(ctx context.Context, w io.Writer, s stores.Store, sel selection) (int, error) {
	cw := csv.NewWriter(w)
	n := 0
	err := a.eachRecord(ctx, s, sel, func(it item) error {
		if it.env == nil {
			return nil
		}
		cols := columns(viewOf(it))
		if n == 0 {
			header := make([]string, len(cols))
			for i, c := range cols {
				header[i] = c.name
			}
			if err := cw.Write(header); err != nil {
				return err
			}
		}
		row := make([]string, len(cols))
		for i, c := range cols {
			switch v := c.value.(type) {
			case nil:
			case string:
				row[i] = v
			case float64:
				row[i] = strconv.FormatFloat(v, 'g', -1, 64)
			default:
				row[i] = fmt.Sprint(v)
			}
		}
		n++
		return cw.Write(row)
	})
	cw.Flush()
	if err == nil {
		err = cw.Error()
	}
	return n, err
}

// The geometry_status values of a GeoJSON export.
const (
	geomOK          = "ok"
	geomMissing     = "missing"
	geomUnparseable = "unparseable"
	geomNonFinite   = "non_finite"
	geomNotFetched  = "offloaded_not_fetched"
	geomFetchFailed = "fetch_failed"
)

func (a *app) exportGeoJSON(ctx context.Context, w io.Writer, s stores.Store, sel selection, off *offload.Offloader) (int, error) {
	var feats [][]byte
	epsgs := map[int]bool{}
	err := a.eachRecord(ctx, s, sel, func(it item) error {
		if it.env == nil {
			return nil
		}
		v := viewOf(it)
		geom, status := exportGeometry(ctx, it, off)
		if status == geomOK {
			epsgs[v.EPSG] = true
		}
		b := []byte(`{"type":"Feature","id":`)
		b = appendJSON(b, v.Destination+"/"+v.ID)
		b = append(b, `,"geometry":`...)
		b = append(b, geom...)
		b = append(b, `,"properties":{`...)
		for i, c := range append(columns(v), column{"geometry_status", status}) {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSON(b, c.name)
			b = append(b, ':')
			b = appendJSON(b, c.value)
		}
		feats = append(feats, append(b, "}}"...))
		return nil
	})
	if err != nil {
		return 0, err
	}
	io.WriteString(w, `{"type":"FeatureCollection",`)
	if len(epsgs) == 1 {
		for code := range epsgs {
			if code != 0 && code != 4326 {
				fmt.Fprintf(w, `"crs":{"type":"name","properties":{"name":"urn:ogc:def:crs:EPSG::%d"}},`, code)
			}
		}
	}
	io.WriteString(w, `"features":[`)
	for i, f := range feats {
		if i > 0 {
			io.WriteString(w, ",")
		}
		io.WriteString(w, "\n")
		w.Write(f)
	}
	_, err = io.WriteString(w, "\n]}\n")
	return len(feats), err
}

// exportGeometry returns the record's geometry as GeoJSON that any reader
// accepts (numbers written exactly), or null and why not.
func exportGeometry(ctx context.Context, it item, off *offload.Offloader) ([]byte, string) {
	g := it.env.Geometry
	if g.Missing {
		return []byte("null"), geomMissing
	}
	data := g.Inline
	if g.OffloadURI != "" {
		if off == nil {
			return []byte("null"), geomNotFetched
		}
		var err error
		if data, err = off.Fetch(ctx, offload.Ref{URI: g.OffloadURI, Size: g.ByteSize, SHA256: g.ContentSHA256}); err != nil {
			return []byte("null"), geomFetchFailed
		}
	}
	parsed, err := geojson.ParseGeometry(data, geojson.Limits{MaxVertices: -1})
	if err != nil {
		return []byte("null"), geomUnparseable
	}
	if ferr := geojson.CheckFinite(parsed); ferr != nil {
		return []byte("null"), geomNonFinite
	}
	out, err := geojson.Append(nil, parsed.Geom, parsed.Z)
	if err != nil {
		return []byte("null"), geomNonFinite
	}
	return out, geomOK
}

func appendJSON(b []byte, v any) []byte {
	j, err := json.Marshal(v)
	if err != nil {
		return append(b, "null"...)
	}
	return append(b, j...)
}
