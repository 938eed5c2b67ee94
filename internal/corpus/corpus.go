// Package corpus is geodlq's shared set of sample geospatial events: valid
// ones, and one for each way an event can fail, each with the verdict
// spatial.Checker.CheckEvent must reach in a pipeline expecting EPSG:4326.
// Tests, the PostGIS store test, the demo and the CLI all drive off it, so
// they agree on what "a bowtie" or "Web Mercator metres labelled 4326"
// looks like and how it is classified.
//
// The payloads are embedded files under events/ (see [FS]); the large
// multipolygons the demo and benchmarks need are generated on demand by
// [LargeMultiPolygon], deterministically, instead of being committed.
package corpus

import (
	"embed"
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/paulmach/orb"

	"github.com/geodlq/geodlq/classify"
)

// FS holds the payloads, one file per item: events/<name>.json.
//
//go:embed events/*.json
var FS embed.FS

// Item is a sample event and the verdict expected for it.
type Item struct {
	// Name identifies the item; its payload is events/<Name>.json.
	Name string
	// Description says what the item exercises.
	Description string
	// Payload is the event as a producer sent it (not always JSON).
	Payload []byte
	// Class is the expected failure class, or 0 for a valid event.
	Class classify.Class
	// Stage is the stage expected to fail, or 0 for a valid event.
	Stage classify.Stage
	// Kind is the expected reason kind, or "" for a valid event.
	Kind classify.ReasonKind
	// Reason is the exact expected reason (GEOS's, verbatim, for topology
	// faults), or "" when only the kind is asserted.
	Reason string
	// Location is the expected offending point, or nil.
	Location *orb.Point
	// Fault is the expected position of the fault in the input, or nil.
	Fault *classify.Fault
	// EPSG is the EPSG code expected in the error's detail, or for a valid
	// event the code its CRS resolves to; 0 when none is expected.
	EPSG int
}

// Valid reports whether the item is expected to pass.
func (it Item) Valid() bool { return it.Class == "" }

func pt(x, y float64) *orb.Point { return &orb.Point{x, y} }

func fault(part, ring, vertex int, onSegment bool) *classify.Fault {
	return &classify.Fault{Part: part, Ring: ring, Vertex: vertex, OnSegment: onSegment}
}

const (
	topo   = classify.StageTopologyValidation
	crsT   = classify.StageCRSTransform
	parse  = classify.StageParse
	invGeo = classify.ClassInvalidGeometry
	schema = classify.ClassSchemaViolation
	crsMis = classify.ClassCRSMismatch
)

// items is the table; payloads are filled from FS.
var items = []Item{
	{Name: "valid_polygon", Description: "a small valid polygon in EPSG:4326", EPSG: 4326},
	{Name: "valid_multipolygon", Description: "a valid multipolygon, one member with a hole", EPSG: 4326},
	{Name: "valid_point_feature", Description: "a GeoJSON Feature with a 3D point and no crs (RFC 7946 default)", EPSG: 4326},
	{Name: "valid_linestring", Description: "a valid linestring", EPSG: 4326},
	{Name: "crs84_ogc", Description: `"crs": "OGC:CRS84", RFC 7946's own CRS`, EPSG: 4326},
	{Name: "crs84_urn", Description: "a named CRS object urn:ogc:def:crs:OGC:1.3:CRS84", EPSG: 4326},
	{Name: "crs84_bare", Description: `"crs": "CRS84"`, EPSG: 4326},
	{Name: "crs_null", Description: `"crs": null means the RFC 7946 default`, EPSG: 4326},
	{Name: "crs_missing", Description: "no crs member means the RFC 7946 default", EPSG: 4326},
	{Name: "crs_proj_string", Description: "a PROJ string for WGS 84 lon/lat, identified as EPSG:4326", EPSG: 4326},
	{Name: "named_crs_4326", Description: "a GeoJSON 2008 named CRS object for EPSG:4326", EPSG: 4326},
	{
		Name: "bowtie", Description: "the seed's self-intersecting bowtie polygon",
		Class: invGeo, Stage: topo, Kind: classify.KindSelfIntersection,
		Reason: "Self-intersection[0.5 0.5]", Location: pt(0.5, 0.5), Fault: fault(-1, 0, 0, true), EPSG: 4326,
	},
	{
		Name: "unclosed_ring", Description: "a ring whose last position is not its first (GEOS would close it silently)",
		Class: invGeo, Stage: topo, Kind: classify.KindRingNotClosed,
		Reason: "Ring is not closed[10 10]", Location: pt(10, 10), Fault: fault(-1, 0, 0, false), EPSG: 4326,
	},
	{
		Name: "too_few_points", Description: "a closed ring of three positions",
		Class: invGeo, Stage: topo, Kind: classify.KindTooFewPoints,
		Reason: "Too few points in geometry component[10 10]", Location: pt(10, 10), Fault: fault(-1, 0, 0, false), EPSG: 4326,
	},
	{
		Name: "hole_outside_shell", Description: "a hole entirely outside its shell",
		Class: invGeo, Stage: topo, Kind: classify.KindHoleOutsideShell,
		Reason: "Hole lies outside shell[20 20]", Location: pt(20, 20), Fault: fault(-1, 1, 0, false), EPSG: 4326,
	},
	{
		Name: "nested_holes", Description: "a hole inside another hole",
		Class: invGeo, Stage: topo, Kind: classify.KindNestedHoles,
		Reason: "Holes are nested[2 2]", Location: pt(2, 2), Fault: fault(-1, 2, 0, false), EPSG: 4326,
	},
	{
		Name: "ring_self_intersection", Description: "a shell touching itself at a vertex",
		Class: invGeo, Stage: topo, Kind: classify.KindRingSelfIntersection,
		Reason: "Ring Self-intersection[5 0]", Location: pt(5, 0), Fault: fault(-1, 0, 3, false), EPSG: 4326,
	},
	{
		Name: "nan_coordinates", Description: "a bare NaN token, as Python's json.dumps writes it",
		Class: invGeo, Stage: topo, Kind: classify.KindInvalidCoordinate,
		Reason: "Invalid Coordinate[NaN 1]", Fault: fault(-1, 0, 2, false), EPSG: 4326,
	},
	{
		Name: "infinity_coordinates", Description: "bare Infinity and -Infinity tokens",
		Class: invGeo, Stage: topo, Kind: classify.KindInvalidCoordinate,
		Reason: "Invalid Coordinate[Infinity 0]", Fault: fault(-1, -1, 1, false), EPSG: 4326,
	},
	{
		Name: "empty_polygon", Description: `"coordinates": []`,
		Class: invGeo, Stage: topo, Kind: classify.KindEmpty, EPSG: 4326,
	},
	{
		Name: "geometry_collection_invalid_member", Description: "a GeometryCollection whose second member is a bowtie",
		Class: invGeo, Stage: topo, Kind: classify.KindSelfIntersection,
		Reason: "Self-intersection[0.5 0.5]", Location: pt(0.5, 0.5), Fault: fault(1, 0, 0, true), EPSG: 4326,
	},
	{
		Name: "epsg_3857_declared", Description: "Web Mercator declared as such",
		Class: crsMis, Stage: crsT, Kind: classify.KindCRSDiffers,
		Reason: "payload CRS is EPSG:3857 (WGS 84 / Pseudo-Mercator) but pipeline expects EPSG:4326", EPSG: 3857,
	},
	{
		Name: "named_crs_3857", Description: "a GeoJSON 2008 named CRS object for EPSG:3857",
		Class: crsMis, Stage: crsT, Kind: classify.KindCRSDiffers,
		Reason: "payload CRS is EPSG:3857 (WGS 84 / Pseudo-Mercator) but pipeline expects EPSG:4326", EPSG: 3857,
	},
	{
		Name: "unparseable_crs", Description: "a CRS PROJ cannot resolve",
		Class: crsMis, Stage: crsT, Kind: classify.KindCRSUnparseable,
		Reason: `unparseable CRS "EPSG:43x6": proj_create: crs not found`,
	},
	{
		Name: "webmercator_labelled_4326", Description: "Web Mercator metres labelled EPSG:4326",
		Class: crsMis, Stage: crsT, Kind: classify.KindOutOfRange,
		Reason:   "Coordinate outside geographic range[1113194.9079327357 6446275.841017158]",
		Location: pt(1113194.9079327357, 6446275.841017158), Fault: fault(-1, 0, 0, false), EPSG: 4326,
	},
	{
		Name: "missing_geometry", Description: "no geometry member",
		Class: schema, Stage: parse, Kind: classify.KindMissingGeometry,
	},
	{
		Name: "null_geometry", Description: `"geometry": null`,
		Class: schema, Stage: parse, Kind: classify.KindMissingGeometry,
	},
	{
		Name: "null_coordinates", Description: `"coordinates": null`,
		Class: schema, Stage: parse, Kind: classify.KindMissingGeometry,
	},
	{
		Name: "not_json", Description: "a body that is not JSON",
		Class: schema, Stage: parse, Kind: classify.KindMalformed,
	},
	{
		Name: "wrong_nesting", Description: "Polygon coordinates nested one level too shallow",
		Class: schema, Stage: parse, Kind: classify.KindMalformed,
	},
	{
		Name: "unknown_type", Description: "a geometry type GeoJSON does not define",
		Class: schema, Stage: parse, Kind: classify.KindMalformed,
	},
}

func init() {
	for i := range items {
		b, err := FS.ReadFile("events/" + items[i].Name + ".json")
		if err != nil {
			panic(fmt.Sprintf("corpus: item %q has no payload: %v", items[i].Name, err))
		}
		items[i].Payload = b
	}
}

// All returns every item, valid ones first. The items are copies; callers
// may modify them.
func All() []Item {
	out := make([]Item, len(items))
	for i, it := range items {
		out[i] = it.clone()
	}
	return out
}

// Lookup returns the item with the given name.
func Lookup(name string) (Item, bool) {
	for _, it := range items {
		if it.Name == name {
			return it.clone(), true
		}
	}
	return Item{}, false
}

// Names returns the item names in table order.
func Names() []string {
	names := make([]string, len(items))
	for i, it := range items {
		names[i] = it.Name
	}
	return names
}

func (it Item) clone() Item {
	it.Payload = slices.Clone(it.Payload)
	if it.Location != nil {
		l := *it.Location
		it.Location = &l
	}
	if it.Fault != nil {
		f := *it.Fault
		it.Fault = &f
	}
	return it
}

// Large multipolygon layout: regular polygons of largeSides sides, one per
// cell of a largeCell-degree grid swept west to east, then south to north.
const (
	largeSides  = 32
	largeCell   = 0.01
	largeRadius = 0.004
	largeCols   = 35_000
)

// LargeMultiPolygon returns a valid GeoJSON MultiPolygon geometry object of
// at least minBytes bytes (and at most one polygon, about 900 bytes, more):
// 32-sided polygons on a 0.01° lon/lat grid, coordinates rounded to seven
// decimals. The output depends only on minBytes. A 40 MB geometry has
// about 1.5 million positions.
func LargeMultiPolygon(minBytes int) []byte {
	b := make([]byte, 0, minBytes+1024)
	b = append(b, `{"type":"MultiPolygon","coordinates":[`...)
	b = appendLarge(b, minBytes)
	return append(b, "]}"...)
}

// LargeEvent returns an event (crs EPSG:4326) whose geometry is
// LargeMultiPolygon(minBytes).
func LargeEvent(minBytes int) []byte {
	b := make([]byte, 0, minBytes+1024)
	b = append(b, `{"event_id":"evt-large-`...)
	b = strconv.AppendInt(b, int64(minBytes), 10)
	b = append(b, `","crs":"EPSG:4326","geometry":{"type":"MultiPolygon","coordinates":[`...)
	b = appendLarge(b, len(b)+minBytes)
	return append(b, `]},"properties":{"source":"corpus.LargeEvent"}}`...)
}

func appendLarge(b []byte, until int) []byte {
	var ring [largeSides][2]float64
	for k := range ring {
		a := 2 * math.Pi * float64(k) / largeSides
		ring[k] = [2]float64{largeRadius * math.Cos(a), largeRadius * math.Sin(a)}
	}
	round := func(v float64) float64 { return math.Round(v*1e7) / 1e7 }
	for i := 0; ; i++ {
		cx := -175 + largeCell*float64(i%largeCols) + largeCell/2
		cy := -85 + largeCell*float64(i/largeCols) + largeCell/2
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, "[["...)
		for k := 0; k <= largeSides; k++ {
			o := ring[k%largeSides]
			if k > 0 {
				b = append(b, ',')
			}
			b = append(b, '[')
			b = strconv.AppendFloat(b, round(cx+o[0]), 'f', -1, 64)
			b = append(b, ',')
			b = strconv.AppendFloat(b, round(cy+o[1]), 'f', -1, 64)
			b = append(b, ']')
		}
		b = append(b, "]]"...)
		if len(b) >= until {
			return b
		}
	}
}
