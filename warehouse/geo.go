package warehouse

import (
	"encoding/json"
	"math"
	"slices"
)

// GeoParquetVersion is the GeoParquet version of the files geodlq writes.
const GeoParquetVersion = "1.1.0"

// The geometry columns, as the geo metadata names them.
const (
	// ColumnGeometryBBox is the primary geometry column: each event's
	// geometry extent as a Polygon.
	ColumnGeometryBBox = "geometry_bbox"
	// ColumnFaultPoint is the geometry error's location as a Point.
	ColumnFaultPoint = "fault_point"
	// ColumnBBoxCovering is the bbox covering struct of geometry_bbox.
	ColumnBBoxCovering = "bbox"
)

// CRSResolver returns the PROJJSON definition of an EPSG code, for the
// crs member of a file's geo metadata. An error or a nil result leaves the
// code unresolved: the file's crs is then null (GeoParquet's "unknown"),
// and the geometry_crs column still names the code. Implementations must
// be safe for concurrent use. Package projcrs resolves every code PROJ
// knows; [BuiltinCRS] the few that need no PROJ.
type CRSResolver func(epsg int) (json.RawMessage, error)

// geoColumn is one column of the geo metadata.
type geoColumn struct {
	Encoding      string          `json:"encoding"`
	GeometryTypes []string        `json:"geometry_types"`
	CRS           json.RawMessage `json:"crs,omitempty"`
	Orientation   string          `json:"orientation,omitempty"`
	Edges         string          `json:"edges,omitempty"`
	BBox          []float64       `json:"bbox,omitempty"`
	Covering      *geoCovering    `json:"covering,omitempty"`
}

type geoCovering struct {
	BBox struct {
		XMin []string `json:"xmin"`
		YMin []string `json:"ymin"`
		XMax []string `json:"xmax"`
		YMax []string `json:"ymax"`
	} `json:"bbox"`
}

// geoMetadata is the value of a GeoParquet file's "geo" key.
type geoMetadata struct {
	Version       string               `json:"version"`
	PrimaryColumn string               `json:"primary_column"`
	Columns       map[string]geoColumn `json:"columns"`
}

// extent accumulates a bounding box.
type extent struct {
	bb  BBox
	any bool
}

func (e *extent) add(b BBox) {
	if !e.any {
		e.bb, e.any = b, true
		return
	}
	e.bb.XMin, e.bb.YMin = math.Min(e.bb.XMin, b.XMin), math.Min(e.bb.YMin, b.YMin)
	e.bb.XMax, e.bb.YMax = math.Max(e.bb.XMax, b.XMax), math.Max(e.bb.YMax, b.YMax)
}

func (e *extent) slice() []float64 {
	if !e.any {
		return nil
	}
	return []float64{e.bb.XMin, e.bb.YMin, e.bb.XMax, e.bb.YMax}
}

// buildGeo returns the geo metadata of a file whose geometries are all in
// crs (PROJJSON; nil: GeoParquet's default, OGC:CRS84; "null": unknown).
// withExtent adds each column's bbox.
func buildGeo(crs json.RawMessage, bboxes, faults *extent, withExtent bool) ([]byte, error) {
	box := geoColumn{Encoding: "WKB", GeometryTypes: []string{"Polygon"}, CRS: crs, Orientation: "counterclockwise", Edges: "planar"}
	cov := &geoCovering{}
	cov.BBox.XMin = []string{ColumnBBoxCovering, "xmin"}
	cov.BBox.YMin = []string{ColumnBBoxCovering, "ymin"}
	cov.BBox.XMax = []string{ColumnBBoxCovering, "xmax"}
	cov.BBox.YMax = []string{ColumnBBoxCovering, "ymax"}
	box.Covering = cov
	pt := geoColumn{Encoding: "WKB", GeometryTypes: []string{"Point"}, CRS: crs, Edges: "planar"}
	if withExtent {
		box.BBox, pt.BBox = bboxes.slice(), faults.slice()
	}
	return json.Marshal(geoMetadata{Version: GeoParquetVersion, PrimaryColumn: ColumnGeometryBBox,
		Columns: map[string]geoColumn{ColumnGeometryBBox: box, ColumnFaultPoint: pt}})
}

// nullCRS is the crs of a column whose CRS is unknown.
var nullCRS = json.RawMessage("null")

// crsCache resolves each geometry_crs value once.
type crsCache struct {
	resolve CRSResolver
	m       map[string]json.RawMessage
}

// projjson returns the crs member for a geometry_crs value: nil for
// OGC:CRS84 (the default, so omitted), PROJJSON for a resolvable code,
// null otherwise.
func (c *crsCache) projjson(name string) json.RawMessage {
	if name == CRS84 {
		return nil
	}
	if v, ok := c.m[name]; ok {
		return v
	}
	v := nullCRS
	var code int
	if n, ok := parseEPSGName(name); ok {
		code = n
	}
	if code > 0 {
		if b, err := BuiltinCRS(code); err == nil && b != nil {
			v = b
		}
		if c.resolve != nil && slices.Equal(v, nullCRS) {
			if b, err := c.resolve(code); err == nil && json.Valid(b) && len(b) > 0 && b[0] == '{' {
				v = b
			}
		}
	}
	if c.m == nil {
		c.m = map[string]json.RawMessage{}
	}
	c.m[name] = v
	return v
}

func parseEPSGName(name string) (int, bool) {
	const p = "EPSG:"
	if len(name) <= len(p) || name[:len(p)] != p {
		return 0, false
	}
	n := 0
	for _, r := range name[len(p):] {
		if r < '0' || r > '9' || n > math.MaxInt32/10 {
			return 0, false
		}
		n = n*10 + int(r-'0')
	}
	return n, true
}
