package main

import (
	"bufio"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/paulmach/orb"
	"github.com/spf13/cobra"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/cmd/geodlq/internal/native"
	"github.com/geodlq/geodlq/internal/geojson"
	"github.com/geodlq/geodlq/offload"
	"github.com/geodlq/geodlq/spatial"
)

// The export formats.
var exportFormats = []string{"geojson", "gpkg", "jsonl", "csv", "parquet"}

// formatOfFile guesses the export format from a file name's extension.
func formatOfFile(name string) string {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".geojson", ".json":
		return "geojson"
	case ".gpkg":
		return "gpkg"
	case ".jsonl", ".ndjson":
		return "jsonl"
	case ".csv":
		return "csv"
	case ".parquet", ".geoparquet":
		return "parquet"
	}
	return ""
}

type exportOptions struct {
	f           filterFlags
	gpkg        bool // features are kept parsed (GeoPackage), not as GeoJSON
	format      string
	withPayload bool
	toEPSG      int
	split       bool
	faults      bool
	out         *output
}

func newExportCmd(a *app) *cobra.Command {
	var o exportOptions
	cmd := &cobra.Command{
		Use:   "export [FILE|-]",
		Short: "Export dead-lettered records: GeoJSON or GeoPackage for QGIS, JSON lines, CSV, GeoParquet",
		Long: `export writes the selected records to FILE (its extension names the format
unless --format does; "-" or no FILE is standard output):

  geojson  a FeatureCollection for QGIS, in one CRS: every geometry and fault
           point is reprojected with PROJ to --to-epsg (default 4326, so the
           file is RFC 7946 GeoJSON). --split-by-epsg instead writes one file
           per source CRS, untouched, named FILE.epsgNNNN.geojson, each with
           its named "crs". Each record is a feature (property
           feature=geometry) with the envelope's fields as flat properties;
           with --faults (default) each fault location is one more, a Point
           (feature=fault), for a layer of fault points. A geometry that
           cannot be written (NaN or infinite coordinates, unparseable,
           missing, offloaded without --blobs, an unknown CRS, outside the
           valid area of its CRS or the target's, as metres labelled
           EPSG:4326 are) becomes a null geometry with its properties kept;
           geometry_status says why; so does a fault point;
  gpkg     a GeoPackage (OGC 1.3) with two layers, dead_letters (the
           geometries) and fault_points, both in --to-epsg, for QGIS;
  jsonl    one JSON object per line: the record's fields (as list -o json)
           and its envelope, verbatim;
  csv      one row per envelope, flat columns, header first;
  parquet  one GeoParquet 1.1 file with a typed column per field, the fault
           point and the geometry's bounding box as geometry columns (see
           warehouse sync for an incremental, partitioned dataset);
           --with-payload adds the restored, verified payloads.

Invalid geometries are exported as they are: that is the point. The file is
written under a temporary name and renamed when complete: an interrupted or
failed export leaves what FILE held before.`,
		Args: maxArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return a.export(cmd, args, o) },
	}
	o.f.register(cmd.Flags(), true)
	fs := cmd.Flags()
	fs.StringVar(&o.format, "format", "", "geojson, gpkg, jsonl, csv or parquet (default: from FILE's extension, else geojson)")
	fs.BoolVar(&o.withPayload, "with-payload", false, "parquet: add each event's original payload, restored and verified (may hold sensitive data)")
	fs.IntVar(&o.toEPSG, "to-epsg", 4326, "geojson, gpkg: reproject geometries and fault points to this EPSG code")
	fs.BoolVar(&o.split, "split-by-epsg", false, "geojson: one file per source CRS, not reprojected (FILE.epsgNNNN.geojson)")
	fs.BoolVar(&o.faults, "faults", true, "geojson, gpkg: add the fault locations as points")
	o.out = addOutput(cmd, fmtTable, fmtJSON)
	return cmd
}

// exportSummary is what export writes with -o json (the data goes to
// FILE). Field names are stable.
type exportSummary struct {
	Format  string         `json:"format"`
	Files   []string       `json:"files"`
	Records int            `json:"records"`
	Status  map[string]int `json:"geometry_status,omitempty"`
}

func (a *app) export(cmd *cobra.Command, args []string, o exportOptions) (err error) {
	if err := o.out.resolve(a, cmd); err != nil {
		return err
	}
	sel, err := o.f.parse(cmd, time.Now())
	if err != nil {
		return err
	}
	file := "-"
	if len(args) == 1 {
		file = args[0]
	}
	format := o.format
	if format == "" {
		if format = formatOfFile(file); format == "" {
			format = "geojson"
		}
	}
	if !slices.Contains(exportFormats, format) {
		return usageFor(cmd, "--format %q: want %s", format, strings.Join(exportFormats, ", "))
	}
	switch {
	case o.split && format != "geojson":
		return usageFor(cmd, "--split-by-epsg is for --format geojson")
	case o.split && file == "-":
		return usageFor(cmd, "--split-by-epsg writes one file per CRS: name FILE")
	case (format == "gpkg" || format == "parquet") && file == "-" && a.tty:
		return usageFor(cmd, "--format %s writes binary: name a FILE (or - to write to a pipe)", format)
	case o.toEPSG <= 0:
		return usageFor(cmd, "--to-epsg must be a positive EPSG code")
	}
	if o.out.json() && file == "-" {
		return usageFor(cmd, "-o json reports on the export; the data needs a FILE")
	}
	ctx := cmd.Context()
	s, err := a.openStore(ctx, readOnly)
	if err != nil {
		return err
	}
	defer closeWith(&err, s)
	off, closeBlobs, err := a.openBlobs(ctx, readOnly)
	if err != nil {
		return err
	}
	defer closeBlobs()
	m := a.startMeter("export", "records", a.total(ctx, s, sel))
	defer m.finish()
	counted := func(fn func(item) error) func(item) error {
		return func(it item) error {
			m.add(1)
			return fn(it)
		}
	}

	sum := exportSummary{Format: format, Files: []string{}}
	switch format {
	case "parquet":
		n, err := a.exportParquet(ctx, s, sel, off, file, o.withPayload, counted)
		if err != nil {
			return err
		}
		sum.Records = n
		if file != "-" {
			sum.Files = append(sum.Files, file)
		}
	case "geojson", "gpkg":
		o.gpkg = format == "gpkg"
		if o.gpkg && o.toEPSG != gpkgSRS {
			return usageFor(cmd, "--format gpkg is written in EPSG:4326 (--to-epsg 4326); use --format geojson for other CRSs")
		}
		var sink featureSink
		if o.gpkg {
			sink, err = newGPKGSink(ctx, a, file)
		} else {
			sink, err = newGeoJSONSink(a, file, o)
		}
		if err != nil {
			return err
		}
		defer sink.abort()
		st, err := a.streamFeatures(ctx, s, sel, off, o, counted, sink)
		if err != nil {
			return err
		}
		sum.Records, sum.Status = st.records, st.status
		files, err := sink.commit()
		if err != nil {
			return err
		}
		sum.Files = append(sum.Files, files...)
	default:
		write := func(w io.Writer) (int, error) {
			bw := bufio.NewWriter(w)
			var n int
			var err error
			if format == "jsonl" {
				n, err = a.exportJSONL(ctx, bw, s, sel, counted)
			} else {
				n, err = a.exportCSV(ctx, bw, s, sel, counted)
			}
			if err != nil {
				return n, err
			}
			return n, bw.Flush()
		}
		if file == "-" {
			sum.Records, err = write(a.stdout)
			if err != nil {
				return err
			}
			break
		}
		err = writeFileAtomic(file, func(tmp string) error {
			f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_TRUNC, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			if sum.Records, err = write(f); err != nil {
				return err
			}
			return f.Close()
		})
		if err != nil {
			return err
		}
		sum.Files = append(sum.Files, file)
	}
	m.finish()
	if o.out.json() {
		return writeJSON(a.stdout, sum)
	}
	if len(sum.Files) > 0 {
		fmt.Fprintf(a.stderr, "exported %d records to %s\n", sum.Records, strings.Join(sum.Files, ", "))
	}
	return nil
}

// total counts the records a selection will read, for a progress bar: -1
// when the store cannot count them cheaply or a filter is applied here.
func (a *app) total(ctx context.Context, s *broker.Store, sel selection) int64 {
	if sel.clientSide() {
		return -1
	}
	dests, err := a.destinations(ctx, s)
	if err != nil {
		return -1
	}
	var n int64
	for _, d := range dests {
		counts, err := s.Stats(ctx, broker.StatsOptions{Destination: d, Filter: sel.filter})
		if err != nil {
			return -1
		}
		for _, c := range counts {
			n += int64(c.Pending + c.Leased)
			if sel.replayed {
				n += int64(c.Replayed)
			}
		}
	}
	return n
}

func (a *app) exportJSONL(ctx context.Context, w io.Writer, s *broker.Store, sel selection, wrap func(func(item) error) func(item) error) (int, error) {
	n := 0
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	err := a.eachRecord(ctx, s, sel, wrap(func(it item) error {
		line := struct {
			view
			Envelope json.RawMessage `json:"envelope,omitempty"`
		}{view: viewOf(it, sel.filter.SourcePointer)}
		if it.env != nil {
			line.Envelope = it.Record.Message.Body
		}
		n++
		return enc.Encode(line)
	}))
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
	var epsg any
	if v.EPSG != 0 {
		epsg = v.EPSG
	}
	return []column{
		{"record_id", v.ID}, {"destination", v.Destination}, {"status", str(v.Status)},
		{"event_id", str(v.EventID)}, {"idempotency_key", str(v.IdempotencyKey)},
		{"failure_class", str(v.FailureClass)}, {"failed_stage", str(v.FailedStage)},
		{"error_message", str(v.ErrorMessage)}, {"reason", str(v.Reason)}, {"reason_kind", str(v.ReasonKind)},
		{"location_x", lx}, {"location_y", ly},
		{"fault_part", part}, {"fault_ring", ring}, {"fault_vertex", vertex}, {"fault_on_segment", onSeg},
		{"epsg", epsg}, {"source_crs", str(v.SourceCRS)},
		{"geometry_type", str(v.GeometryType)}, {"vertex_count", v.VertexCount}, {"geometry_bytes", v.GeometryBytes},
		{"geometry_offload_uri", str(v.GeometryOffloadURI)},
		{"payload_size", v.PayloadSize}, {"payload_sha256", str(v.PayloadSHA256)}, {"attempts", v.Attempts},
		{"first_seen_at", str(v.FirstSeenAt)}, {"dead_lettered_at", str(v.DeadLetteredAt)}, {"replayed_at", str(v.ReplayedAt)},
		{"source_system", str(v.SourceSystem)}, {"source_topic", str(v.SourceTopic)}, {"source_uri", str(v.SourceURI)},
	}
}

func (a *app) exportCSV(ctx context.Context, w io.Writer, s *broker.Store, sel selection, wrap func(func(item) error) func(item) error) (int, error) {
	cw := csv.NewWriter(w)
	n := 0
	err := a.eachRecord(ctx, s, sel, wrap(func(it item) error {
		if it.env == nil {
			return nil
		}
		cols := columns(viewOf(it, sel.filter.SourcePointer))
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
				row[i] = csvSafe(v)
			case float64:
				row[i] = strconv.FormatFloat(v, 'g', -1, 64)
			default:
				row[i] = fmt.Sprint(v)
			}
		}
		n++
		return cw.Write(row)
	}))
	cw.Flush()
	if err == nil {
		err = cw.Error()
	}
	return n, err
}

// csvSafe keeps a spreadsheet from reading a cell that starts with = + -
// @ (or a tab or carriage return) as a formula: such cells come from
// untrusted payloads (an event id, an error message).
func csvSafe(s string) string {
	if s != "" && strings.ContainsRune("=+-@\t\r", rune(s[0])) {
		return "'" + s
	}
	return s
}

// The geometry_status values of a GeoJSON or GeoPackage export.
const (
	geomOK          = "ok"
	geomMissing     = "missing"
	geomUnparseable = "unparseable"
	geomNonFinite   = "non_finite"
	geomNotFetched  = "offloaded_not_fetched"
	geomFetchFailed = "fetch_failed"
	geomUnknownCRS  = "unknown_crs"
	geomNotProjects = "reprojection_failed"
	geomOutsideCRS  = "outside_crs_area"
)

// feature is one exported record (or fault point) before it is written.
type feature struct {
	id     string       // DEST/ID, and #fault for a fault point
	epsg   int          // the CRS of geom: the target's, or the source's with --split-by-epsg
	geom   []byte       // GeoJSON geometry, or "null"
	parsed orb.Geometry // geom parsed (for GeoPackage), or nil
	props  []column
	fault  bool
}

// featureSink receives the features of an export as they are read, so
// that an export holds one record at a time, whatever the store's size;
// commit makes the files appear (renamed from their temporary names) and
// returns them, abort (always deferred) removes what commit did not.
type featureSink interface {
	add(f feature) error
	commit() ([]string, error)
	abort()
}

// exportStats counts an export's records by geometry status.
type exportStats struct {
	records int
	status  map[string]int
}

// streamFeatures reads the selected envelopes as features — their
// geometries, and fault points — in o.toEPSG or, with o.split, in their
// own CRS, and hands each to sink.
func (a *app) streamFeatures(ctx context.Context, s *broker.Store, sel selection, off *offload.Offloader, o exportOptions,
	wrap func(func(item) error) func(item) error, sink featureSink) (exportStats, error) {
	st := exportStats{status: map[string]int{}}
	checker, err := native.NewChecker(&spatial.Options{ExpectedEPSG: o.toEPSG, MaxVertices: 50_000_000})
	if err != nil {
		return st, fmt.Errorf("spatial checker: %w", err)
	}
	defer checker.Close()
	area := newCRSArea(checker.Checker)
	// place sets f's geometry from parsed (in src's CRS): reprojected to
	// o.toEPSG unless o.split, kept in the one form the output needs —
	// parsed for a GeoPackage, GeoJSON (numbers written exactly) otherwise
	// — so that a record's geometry is held in memory once or twice, not
	// four times. Coordinates outside the valid area of their CRS (src's,
	// and the target's after a reprojection) are not placed.
	place := func(f *feature, parsed geojson.Geometry, src int) string {
		reproject := !o.split && src != o.toEPSG
		if reproject && src == 0 {
			return geomUnknownCRS
		}
		if src != 0 && !area.inside(parsed.Geom, parsed.Z, src) {
			return geomOutsideCRS
		}
		if !reproject && o.gpkg {
			f.parsed = parsed.Geom
			return geomOK
		}
		out, err := geojson.Append(nil, parsed.Geom, parsed.Z)
		if err != nil {
			return geomNonFinite
		}
		if reproject {
			if out, err = checker.Reproject(out, src, o.toEPSG); err != nil {
				if errors.Is(err, spatial.ErrNeedsCGO) {
					area.err = err
				}
				return geomNotProjects
			}
			p, err := geojson.ParseGeometry(out, geojson.Limits{MaxVertices: -1})
			if err != nil {
				return geomNotProjects
			}
			if !area.inside(p.Geom, p.Z, o.toEPSG) {
				return geomOutsideCRS
			}
			if o.gpkg {
				f.parsed = p.Geom
				return geomOK
			}
		}
		f.geom = out
		return geomOK
	}
	err = a.eachRecord(ctx, s, sel, wrap(func(it item) error {
		if it.env == nil {
			return nil
		}
		v := viewOf(it, sel.filter.SourcePointer)
		src := sourceEPSG(it)
		parsed, status := exportGeometry(ctx, it, off)
		f := feature{epsg: src, id: v.Destination + "/" + v.ID, props: columns(v)}
		if status == geomOK {
			status = place(&f, parsed, src)
			if !o.split {
				f.epsg = o.toEPSG
			}
		}
		if area.err != nil {
			// A build without cgo cannot reproject: say so, rather than
			// label the geometry not_projectable or outside_crs_area.
			return fmt.Errorf("export: %w", area.err)
		}
		parsed = geojson.Geometry{}
		if f.geom == nil {
			f.geom = []byte("null")
		}
		st.status[status]++
		st.records++
		f.props = append(f.props, column{"geometry_status", status}, column{"feature", "geometry"})
		if err := sink.add(f); err != nil {
			return err
		}
		if ge := it.env.GeometryError; o.faults && ge != nil && len(ge.Location) == 2 {
			// The fault point, like the geometry: null with its
			// geometry_status when it cannot be placed.
			pt := orb.Point{ge.Location[0], ge.Location[1]}
			fp := feature{epsg: f.epsg, id: f.id + "#fault", fault: true}
			fstatus := place(&fp, geojson.Geometry{Geom: pt}, src)
			if fp.geom == nil {
				fp.geom = []byte("null")
			}
			fp.props = append(columns(v), column{"geometry_status", fstatus}, column{"feature", "fault"})
			if err := sink.add(fp); err != nil {
				return err
			}
		}
		return nil
	}))
	return st, err
}

// sourceEPSG is the CRS a record's coordinates are in: its EPSG code, or
// 4326 for a payload that declared no CRS (GeoJSON's default, RFC 7946);
// 0 when unknown.
func sourceEPSG(it item) int {
	if code := broker.EPSGOf(it.env); code != 0 {
		return code
	}
	if it.env.SourceCRS == "" && it.env.FailureClass != classify.ClassCRSMismatch {
		return 4326
	}
	return 0
}

// geojsonSink writes FeatureCollections: one to file (or standard
// output), or with --split-by-epsg one per CRS, each in a temporary file
// opened when its first feature comes; commit closes and renames them all.
type geojsonSink struct {
	a     *app
	file  string
	o     exportOptions
	files map[int]*geojsonFile
	codes []int
}

type geojsonFile struct {
	name   string
	w      *bufio.Writer
	n      int
	commit func() error
	abort  func()
}

func newGeoJSONSink(a *app, file string, o exportOptions) (*geojsonSink, error) {
	return &geojsonSink{a: a, file: file, o: o, files: map[int]*geojsonFile{}}, nil
}

func (g *geojsonSink) open(code int) (*geojsonFile, error) {
	if f, ok := g.files[code]; ok {
		return f, nil
	}
	f := &geojsonFile{name: g.file, commit: func() error { return nil }, abort: func() {}}
	if g.file == "-" {
		f.w = bufio.NewWriter(g.a.stdout)
	} else {
		if g.o.split {
			ext := filepath.Ext(g.file)
			tag := "epsg" + strconv.Itoa(code)
			if code == 0 {
				tag = "unknown-crs"
			}
			f.name = strings.TrimSuffix(g.file, ext) + "." + tag + ext
		}
		fh, commit, abort, err := createAtomic(f.name)
		if err != nil {
			return nil, err
		}
		f.w, f.abort = bufio.NewWriter(fh), abort
		f.commit = func() error {
			if err := f.w.Flush(); err != nil {
				return err
			}
			return commit()
		}
	}
	f.w.WriteString(`{"type":"FeatureCollection",`)
	if code != 4326 && code != 0 {
		fmt.Fprintf(f.w, `"crs":{"type":"name","properties":{"name":"urn:ogc:def:crs:EPSG::%d"}},`, code)
	}
	f.w.WriteString(`"features":[`)
	g.files[code] = f
	g.codes = append(g.codes, code)
	return f, nil
}

func (g *geojsonSink) add(ft feature) error {
	code := g.o.toEPSG
	if g.o.split {
		code = ft.epsg
	}
	f, err := g.open(code)
	if err != nil {
		return err
	}
	if f.n > 0 {
		f.w.WriteByte(',')
	}
	f.n++
	f.w.WriteString("\n")
	_, err = f.w.Write(featureJSON(ft))
	return err
}

func (g *geojsonSink) commit() ([]string, error) {
	if len(g.files) == 0 && !g.o.split {
		if _, err := g.open(g.o.toEPSG); err != nil { // an empty collection
			return nil, err
		}
	}
	// Every file is complete in its temporary name before any is renamed.
	for _, code := range g.codes {
		f := g.files[code]
		f.w.WriteString("\n]}\n")
		if err := f.w.Flush(); err != nil {
			return nil, err
		}
	}
	var names []string
	slices.Sort(g.codes)
	for _, code := range g.codes {
		f := g.files[code]
		if err := f.commit(); err != nil {
			return names, err
		}
		if g.file != "-" {
			names = append(names, f.name)
		}
	}
	return names, nil
}

func (g *geojsonSink) abort() {
	for _, f := range g.files {
		f.abort()
	}
}

func featureJSON(f feature) []byte {
	b := []byte(`{"type":"Feature","id":`)
	b = appendJSON(b, f.id)
	b = append(b, `,"geometry":`...)
	b = append(b, f.geom...)
	b = append(b, `,"properties":{`...)
	for i, c := range f.props {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSON(b, c.name)
		b = append(b, ':')
		b = appendJSON(b, c.value)
	}
	return append(b, "}}"...)
}

// exportGeometry returns the record's geometry parsed, or why it cannot
// be exported.
func exportGeometry(ctx context.Context, it item, off *offload.Offloader) (geojson.Geometry, string) {
	g := it.env.Geometry
	if g.Missing {
		return geojson.Geometry{}, geomMissing
	}
	data := g.Inline
	if g.OffloadURI != "" {
		if off == nil {
			return geojson.Geometry{}, geomNotFetched
		}
		var err error
		if data, err = off.Fetch(ctx, offload.Ref{URI: g.OffloadURI, Size: g.ByteSize, SHA256: g.ContentSHA256}); err != nil {
			return geojson.Geometry{}, geomFetchFailed
		}
	}
	parsed, err := geojson.ParseGeometry(data, geojson.Limits{MaxVertices: -1})
	if err != nil {
		return geojson.Geometry{}, geomUnparseable
	}
	if ferr := geojson.CheckFinite(parsed); ferr != nil {
		return geojson.Geometry{}, geomNonFinite
	}
	return parsed, geomOK
}

func appendJSON(b []byte, v any) []byte {
	j, err := json.Marshal(v)
	if err != nil {
		return append(b, "null"...)
	}
	return append(b, j...)
}
