package geojson

import (
	"bytes"
	"math"
	"strconv"

	"github.com/paulmach/orb"

	"github.com/geodlq/geodlq/classify"
)

// Default limits, used for zero fields of [Limits].
const (
	DefaultMaxVertices     = 5_000_000
	DefaultMaxParts        = 1_000_000
	DefaultMaxHoles        = 10_000
	DefaultMaxNesting      = 8
	DefaultMaxDepth        = 512
	DefaultMaxNumberLength = 512
)

// maxWorkers bounds Limits.Workers.
const maxWorkers = 64

// CeilingMaxNesting is the most GeometryCollection nesting any [Limits]
// allows: a larger MaxNesting is lowered to it. Parsing a collection is
// recursive (a few hundred bytes of stack per level), and the walkers of
// parsed geometries recurse on collections too, so this bounds their stack
// whatever the configuration.
const CeilingMaxNesting = 64

// Limits bounds the work a parse may do. The zero value uses the defaults.
//
// Every limit is enforced before the work it bounds: a position over
// MaxVertices is refused as it is read, and an array, object or
// GeometryCollection over its nesting limit before it is entered, so
// hostile input costs at most the limits, never the input's own claims.
type Limits struct {
	// MaxVertices is the largest number of positions accepted; one more
	// fails with classify.KindVertexBudget as soon as it is read. Default
	// DefaultMaxVertices; negative means no limit.
	MaxVertices int
	// MaxParts is the largest number of coordinate arrays above the
	// positions (every ring, hole, line, polygon, and the outer array of
	// each geometry) plus GeometryCollection members accepted; one more
	// fails with classify.KindVertexBudget as soon as it is opened. It
	// bounds the memory of geometries with many parts and few positions
	// (a million empty rings). Default DefaultMaxParts; negative means no
	// limit.
	MaxParts int
	// MaxHoles is the most holes (interior rings) a polygon may have; one
	// more fails with classify.KindVertexBudget before it is read. GEOS
	// keeps about a kilobyte per hole while it checks a polygon's
	// validity, and its repair grows faster than linearly with them.
	// Default DefaultMaxHoles; negative means no limit.
	MaxHoles int
	// MaxNumberLength is the longest number, in bytes, accepted in
	// coordinates and as an integer "crs"; a longer one fails
	// (classify.KindMalformed) before it is converted. Numbers in skipped
	// values are scanned, never converted, and have no limit. Default
	// DefaultMaxNumberLength.
	MaxNumberLength int
	// MaxNesting bounds GeometryCollections nested inside each other: a
	// collection inside MaxNesting others fails (classify.KindMalformed)
	// before its members are read. Default DefaultMaxNesting; at most
	// CeilingMaxNesting.
	MaxNesting int
	// Workers is the most goroutines a parse may use: the coordinates of a
	// large MultiPolygon (4 MiB or more of the document left when they
	// start) are read in chunks of whole polygons in parallel, each checked
	// to end where the next begins, so that the result (positions,
	// structure, errors and their offsets) is the sequential parse's.
	// Default 1.
	Workers int
	// MaxDepth bounds the nesting of arrays and objects inside each JSON
	// value that is skipped rather than parsed (properties, bbox, unknown
	// members, and coordinates or geometries met before their "type"): a
	// container MaxDepth levels down fails (classify.KindMalformed)
	// before it is entered. Skipping is iterative, one bit of memory per
	// level. Default DefaultMaxDepth.
	MaxDepth int
}

func (l Limits) withDefaults() Limits {
	if l.MaxVertices == 0 {
		l.MaxVertices = DefaultMaxVertices
	}
	if l.MaxVertices < 0 {
		l.MaxVertices = math.MaxInt
	}
	if l.MaxParts == 0 {
		l.MaxParts = DefaultMaxParts
	}
	if l.MaxParts < 0 {
		l.MaxParts = math.MaxInt
	}
	if l.MaxHoles == 0 {
		l.MaxHoles = DefaultMaxHoles
	}
	if l.MaxHoles < 0 {
		l.MaxHoles = math.MaxInt
	}
	if l.MaxNumberLength <= 0 {
		l.MaxNumberLength = DefaultMaxNumberLength
	}
	if l.MaxNesting <= 0 {
		l.MaxNesting = DefaultMaxNesting
	}
	l.MaxNesting = min(l.MaxNesting, CeilingMaxNesting)
	if l.MaxDepth <= 0 {
		l.MaxDepth = DefaultMaxDepth
	}
	l.Workers = min(max(l.Workers, 1), maxWorkers)
	return l
}

// Type is a GeoJSON geometry type.
type Type uint8

// The GeoJSON geometry types.
const (
	Point Type = iota + 1
	MultiPoint
	LineString
	MultiLineString
	Polygon
	MultiPolygon
	GeometryCollection
)

var typeNames = [...]string{
	Point:              "Point",
	MultiPoint:         "MultiPoint",
	LineString:         "LineString",
	MultiLineString:    "MultiLineString",
	Polygon:            "Polygon",
	MultiPolygon:       "MultiPolygon",
	GeometryCollection: "GeometryCollection",
}

// String returns the GeoJSON name of t ("Polygon", …), or "" for an invalid
// type.
func (t Type) String() string {
	if t >= Point && t <= GeometryCollection {
		return typeNames[t]
	}
	return ""
}

// depth is the nesting depth of t's coordinates: 1 for a position.
func (t Type) depth() int {
	switch t {
	case Point:
		return 1
	case MultiPoint, LineString:
		return 2
	case MultiLineString, Polygon:
		return 3
	case MultiPolygon:
		return 4
	}
	return 0
}

func lookupType(b []byte) Type {
	for t, n := range typeNames {
		if n != "" && n == string(b) {
			return Type(t)
		}
	}
	return 0
}

// Geometry is a parsed GeoJSON geometry.
type Geometry struct {
	// Geom holds the coordinates as orb values: orb.Point, orb.MultiPoint,
	// orb.LineString, orb.MultiLineString, orb.Polygon, orb.MultiPolygon or
	// orb.Collection. Rings are exactly as written: an unclosed ring is not
	// closed, so validation can report it. All positions share one backing
	// array; every slice is capped so appending to one never overwrites
	// another.
	Geom orb.Geometry
	// Z holds the third ordinate of every position, in document order (the
	// order of [Walk]), when at least one position has one; NaN marks a
	// position with only two. A non-finite third ordinate (NaN, ±Infinity)
	// is kept as NaN, that is, as absent: validity ignores Z, as GEOS
	// does, and JSON cannot carry it. Nil for a 2D geometry. Ordinates
	// beyond the third are read and discarded.
	Z []float64
	// Points holds every position in document order (the order of
	// [Walk]); Geom's slices alias it, so transforming Points in place
	// transforms Geom.
	Points []orb.Point
	// Vertices is the number of positions, len(Points).
	Vertices int
	// CRS is the geometry object's own "crs" member (GeoJSON 2008), if any.
	CRS CRS
}

// Type returns the geometry's GeoJSON type, or 0 when Geom is nil.
func (g Geometry) Type() Type {
	if g.Geom == nil {
		return 0
	}
	return lookupType([]byte(g.Geom.GeoJSONType()))
}

// CRSForm says how a "crs" member was written.
type CRSForm uint8

// The forms of a "crs" member.
const (
	// CRSAbsent: no "crs" member; RFC 7946's default, OGC:CRS84, applies.
	CRSAbsent CRSForm = iota
	// CRSNull: "crs": null, which GeoJSON 2008 defined as "no CRS can be
	// assumed" and RFC 7946 producers emit meaning the default.
	CRSNull
	// CRSString: a bare string such as "EPSG:4326".
	CRSString
	// CRSNamed: a GeoJSON 2008 named CRS object,
	// {"type":"name","properties":{"name":"urn:ogc:def:crs:EPSG::3857"}}.
	CRSNamed
	// CRSCode: a bare integer, read as an EPSG code.
	CRSCode
	// CRSLinked: a GeoJSON 2008 linked CRS object, which refers to a
	// document elsewhere and cannot be resolved here.
	CRSLinked
)

// CRS is a "crs" member as written.
type CRS struct {
	// Form is how the member was written.
	Form CRSForm
	// Name is the CRS definition: the string, the named object's name,
	// "EPSG:<n>" for an integer, the link's href; "" when absent or null.
	Name string
}

// Event is a parsed event payload: a JSON object with a "geometry" member
// and optionally a "crs" member, such as a GeoJSON Feature.
type Event struct {
	// CRS is the event's "crs" member, or when it has none, the geometry
	// object's own "crs" member.
	CRS CRS
	// Geometry is the parsed geometry.
	Geometry Geometry
}

// node is a geometry while parsing: ranges into the parser's flat arrays,
// turned into orb values once all positions are read.
type node struct {
	typ      Type
	pt0, npt int // positions
	c0, nc   int // counts (pre-order child counts of nested arrays)
	kids     []node
}

type parser struct {
	scanner
	lim    Limits
	pts    []orb.Point // nil until the first position is read
	zs     []float64   // nil until a position has a third ordinate
	counts []int
	parts  int // len(counts) plus collection members read
}

func newParser(data []byte, lim Limits) *parser {
	lim = lim.withDefaults()
	p := &parser{scanner: scanner{data: data, maxDepth: lim.MaxDepth, maxNumber: lim.MaxNumberLength}, lim: lim}
	p.counts = make([]int, 0, 8)
	return p
}

// sizePoints allocates the position array, once, when the first position
// is read (so a document that fails before has cost nothing), sized so it
// never grows: every position opens with '[', holds a ',' and takes at
// least 6 bytes ("[0,0],"). Counting both brackets and commas keeps a
// document that is all brackets (or all commas) from reserving room for
// positions it cannot hold.
func (p *parser) sizePoints() {
	d := p.data
	n := min(bytes.Count(d, []byte{'['}), bytes.Count(d, []byte{','})+1, len(d)/6+1, p.lim.MaxVertices)
	p.pts = make([]orb.Point, 0, max(n, 1))
}

// addPart counts one more coordinate array or collection member against
// MaxParts; at is the offset to report.
func (p *parser) addPart(at int) *Error {
	if p.parts >= p.lim.MaxParts {
		p.pos = at
		return p.errf(classify.KindVertexBudget, "geometry has more than %d parts (rings, lines, polygons and collection members)", p.lim.MaxParts)
	}
	p.parts++
	return nil
}

// ParseGeometry parses a GeoJSON geometry object. A JSON null, a missing or
// null "coordinates" (or "geometries") member fail with
// classify.KindMissingGeometry; other problems with classify.KindMalformed
// or classify.KindVertexBudget. The error is always an [*Error].
//
// Outside coordinate arrays the input must be RFC 8259 JSON. Inside them
// the bare tokens NaN, Infinity and -Infinity are accepted, because Python
// producers emit them; [Validate] then reports them as invalid coordinates.
func ParseGeometry(data []byte, lim Limits) (Geometry, error) {
	p := newParser(data, lim)
	if p.null() {
		return Geometry{}, p.errf(classify.KindMissingGeometry, "geometry is null")
	}
	n, crs, err := p.geometry(0)
	if err != nil {
		return Geometry{}, err
	}
	if err := p.end(); err != nil {
		return Geometry{}, err
	}
	g := p.finish(&n)
	g.CRS = crs
	return g, nil
}

// ParseEvent parses an event payload: a JSON object whose "geometry" member
// is a GeoJSON geometry and whose optional "crs" member is a string, a
// GeoJSON 2008 CRS object, an integer EPSG code or null. Other members are
// skipped but must be JSON. A missing or null geometry fails with
// classify.KindMissingGeometry.
func ParseEvent(data []byte, lim Limits) (Event, error) {
	p := newParser(data, lim)
	if err := p.expect('{', "a JSON object"); err != nil {
		err.Msg = "payload is not a JSON object: " + err.Msg
		return Event{}, err
	}
	var (
		ev         Event
		n          node
		gcrs       CRS
		seenGeom   bool
		nullGeom   bool
		seenCRS    bool
		geomOffset int
	)
	if p.ws() == '}' {
		p.pos++
	} else {
		for {
			keyAt := p.pos
			key, err := p.str()
			if err != nil {
				return Event{}, err
			}
			if err := p.expect(':', "':'"); err != nil {
				return Event{}, err
			}
			switch string(key) {
			case "geometry":
				if seenGeom {
					p.pos = keyAt
					return Event{}, p.malformed(`duplicate "geometry" member`)
				}
				seenGeom = true
				p.ws()
				geomOffset = p.pos
				if p.null() {
					nullGeom = true
					break
				}
				if n, gcrs, err = p.geometry(0); err != nil {
					return Event{}, err
				}
			case "crs":
				if seenCRS {
					p.pos = keyAt
					return Event{}, p.malformed(`duplicate "crs" member`)
				}
				seenCRS = true
				if ev.CRS, err = p.crs(); err != nil {
					return Event{}, err
				}
			default:
				if err := p.skip(false); err != nil {
					return Event{}, err
				}
			}
			if c := p.ws(); c == ',' {
				p.pos++
				continue
			} else if c == '}' {
				p.pos++
				break
			}
			return Event{}, p.malformed("expected ',' or '}' in object, found %s", p.describe())
		}
	}
	if err := p.end(); err != nil {
		return Event{}, err
	}
	switch {
	case !seenGeom:
		return Event{}, &Error{Offset: 0, Kind: classify.KindMissingGeometry, Msg: `event has no "geometry" member`}
	case nullGeom:
		return Event{}, &Error{Offset: geomOffset, Kind: classify.KindMissingGeometry, Msg: "geometry is null"}
	}
	ev.Geometry = p.finish(&n)
	ev.Geometry.CRS = gcrs
	if ev.CRS.Form == CRSAbsent {
		ev.CRS = gcrs
	}
	return ev, nil
}

// crs reads a "crs" member's value.
func (p *parser) crs() (CRS, *Error) {
	switch c := p.ws(); {
	case c == 'n':
		if p.literal("null") {
			return CRS{Form: CRSNull}, nil
		}
	case c == '"':
		s, err := p.str()
		if err != nil {
			return CRS{}, err
		}
		return CRS{Form: CRSString, Name: string(s)}, nil
	case c >= '0' && c <= '9':
		at := p.pos
		b, ok := p.numberSpan()
		if ok && len(b) <= p.maxNumber {
			if code, err := strconv.ParseUint(string(b), 10, 31); err == nil && code > 0 {
				return CRS{Form: CRSCode, Name: "EPSG:" + strconv.FormatUint(code, 10)}, nil
			}
		}
		p.pos = at
		return CRS{}, p.malformed("crs member is a number but not a positive integer EPSG code")
	case c == '{':
		return p.crsObject()
	}
	return CRS{}, p.malformed("crs member must be a string, a CRS object or null, found %s", p.describe())
}

// crsObject reads a GeoJSON 2008 CRS object: {"type":"name",
// "properties":{"name":...}} or {"type":"link","properties":{"href":...}}.
func (p *parser) crsObject() (CRS, *Error) {
	start := p.pos
	p.pos++
	var typ, name, href []byte
	var seenType bool
	if p.ws() == '}' {
		p.pos++
	} else {
		for {
			key, err := p.str()
			if err != nil {
				return CRS{}, err
			}
			if err := p.expect(':', "':'"); err != nil {
				return CRS{}, err
			}
			switch string(key) {
			case "type":
				if typ, err = p.str(); err != nil {
					return CRS{}, err
				}
				seenType = true
			case "properties":
				if name, href, err = p.crsProperties(); err != nil {
					return CRS{}, err
				}
			default:
				if err := p.skip(false); err != nil {
					return CRS{}, err
				}
			}
			if c := p.ws(); c == ',' {
				p.pos++
				continue
			} else if c == '}' {
				p.pos++
				break
			}
			return CRS{}, p.malformed("expected ',' or '}' in object, found %s", p.describe())
		}
	}
	switch {
	case seenType && string(typ) == "name" && name != nil:
		return CRS{Form: CRSNamed, Name: string(name)}, nil
	case seenType && string(typ) == "link" && href != nil:
		return CRS{Form: CRSLinked, Name: string(href)}, nil
	}
	end := p.pos
	p.pos = start
	err := p.malformed(`crs object must be {"type":"name","properties":{"name":"..."}}`)
	p.pos = end
	return CRS{}, err
}

func (p *parser) crsProperties() (name, href []byte, err *Error) {
	if err := p.expect('{', "a properties object"); err != nil {
		return nil, nil, err
	}
	if p.ws() == '}' {
		p.pos++
		return nil, nil, nil
	}
	for {
		key, err := p.str()
		if err != nil {
			return nil, nil, err
		}
		if err := p.expect(':', "':'"); err != nil {
			return nil, nil, err
		}
		switch string(key) {
		case "name":
			if name, err = p.str(); err != nil {
				return nil, nil, err
			}
		case "href":
			if href, err = p.str(); err != nil {
				return nil, nil, err
			}
		default:
			if err := p.skip(false); err != nil {
				return nil, nil, err
			}
		}
		if c := p.ws(); c == ',' {
			p.pos++
			continue
		} else if c == '}' {
			p.pos++
			return name, href, nil
		}
		return nil, nil, p.malformed("expected ',' or '}' in object, found %s", p.describe())
	}
}

// geometry parses a geometry object; nest counts enclosing collections.
func (p *parser) geometry(nest int) (node, CRS, *Error) {
	p.ws()
	objAt := p.pos
	if err := p.expect('{', "a geometry object"); err != nil {
		return node{}, CRS{}, err
	}
	var (
		n                                  node
		crs                                CRS
		seenType, seenCoords, seenGeoms    bool
		seenCRS                            bool
		coordsNull, geomsNull, coordsDone  bool
		geomsDone                          bool
		coordsAt, coordsEnd, geomsAt, gEnd int
	)
	if p.ws() == '}' {
		p.pos++
	} else {
		for {
			keyAt := p.pos
			key, err := p.str()
			if err != nil {
				return node{}, CRS{}, err
			}
			if err := p.expect(':', "':'"); err != nil {
				return node{}, CRS{}, err
			}
			dup := func() (node, CRS, *Error) {
				p.pos = keyAt
				return node{}, CRS{}, p.malformed("duplicate %q member", key)
			}
			switch string(key) {
			case "type":
				if seenType {
					return dup()
				}
				seenType = true
				p.ws()
				at := p.pos
				s, err := p.str()
				if err != nil {
					return node{}, CRS{}, err
				}
				if n.typ = lookupType(s); n.typ == 0 {
					p.pos = at
					return node{}, CRS{}, p.malformed("unknown geometry type %q", s)
				}
			case "coordinates":
				if seenCoords {
					return dup()
				}
				seenCoords = true
				p.ws()
				coordsAt = p.pos
				switch {
				case p.null():
					coordsNull = true
				case seenType && n.typ != GeometryCollection:
					// The common order: parse in place.
					if err := p.coords(&n); err != nil {
						return node{}, CRS{}, err
					}
					coordsDone = true
				default:
					// Type not known yet: find the end now, parse later.
					if err := p.skip(true); err != nil {
						return node{}, CRS{}, err
					}
					coordsEnd = p.pos
				}
			case "geometries":
				if seenGeoms {
					return dup()
				}
				seenGeoms = true
				p.ws()
				geomsAt = p.pos
				switch {
				case p.null():
					geomsNull = true
				case seenType && n.typ == GeometryCollection:
					if err := p.members(&n, nest, objAt); err != nil {
						return node{}, CRS{}, err
					}
					geomsDone = true
				default:
					if err := p.skip(true); err != nil {
						return node{}, CRS{}, err
					}
					gEnd = p.pos
				}
			case "crs":
				if seenCRS {
					return dup()
				}
				seenCRS = true
				if crs, err = p.crs(); err != nil {
					return node{}, CRS{}, err
				}
			default:
				if err := p.skip(false); err != nil {
					return node{}, CRS{}, err
				}
			}
			if c := p.ws(); c == ',' {
				p.pos++
				continue
			} else if c == '}' {
				p.pos++
				break
			}
			return node{}, CRS{}, p.malformed("expected ',' or '}' in object, found %s", p.describe())
		}
	}
	end := p.pos
	fail := func(at int, kind classify.ReasonKind, format string, args ...any) (node, CRS, *Error) {
		p.pos = at
		return node{}, CRS{}, p.errf(kind, format, args...)
	}
	switch {
	case !seenType:
		return fail(objAt, classify.KindMalformed, `geometry has no "type" member`)
	case n.typ == GeometryCollection:
		if err := p.checkNesting(nest, objAt); err != nil {
			return node{}, CRS{}, err
		}
		switch {
		case !seenGeoms:
			return fail(objAt, classify.KindMissingGeometry, `GeometryCollection has no "geometries" member`)
		case geomsNull:
			return fail(geomsAt, classify.KindMissingGeometry, `GeometryCollection "geometries" is null`)
		case !geomsDone:
			p.pos = geomsAt
			if err := p.members(&n, nest, objAt); err != nil {
				return node{}, CRS{}, err
			}
			if p.pos != gEnd {
				return fail(geomsAt, classify.KindMalformed, "inconsistent geometries member")
			}
		}
	default:
		switch {
		case !seenCoords:
			return fail(objAt, classify.KindMissingGeometry, `%s has no "coordinates" member`, n.typ)
		case coordsNull:
			return fail(coordsAt, classify.KindMissingGeometry, `%s "coordinates" is null`, n.typ)
		case !coordsDone:
			p.pos = coordsAt
			if err := p.coords(&n); err != nil {
				return node{}, CRS{}, err
			}
			if p.pos != coordsEnd {
				return fail(coordsAt, classify.KindMalformed, "inconsistent coordinates member")
			}
		}
	}
	p.pos = end
	return n, crs, nil
}

// checkNesting fails when a GeometryCollection (at objAt) inside nest
// others is one too many.
func (p *parser) checkNesting(nest, objAt int) *Error {
	if nest < p.lim.MaxNesting {
		return nil
	}
	end := p.pos
	p.pos = objAt
	err := p.malformed("GeometryCollections nested deeper than %d levels", p.lim.MaxNesting)
	p.pos = end
	return err
}

// members parses the "geometries" array of the GeometryCollection at objAt,
// nested in nest others, into n.kids. The nesting limit is checked here,
// before any member is read: parsing a member is a recursive call, and
// recursion must never be driven by the input beyond the limit.
func (p *parser) members(n *node, nest, objAt int) *Error {
	if err := p.checkNesting(nest, objAt); err != nil {
		return err
	}
	if p.ws() != '[' {
		return p.malformed(`"geometries" must be an array of geometry objects, found %s`, p.describe())
	}
	p.pos++
	n.pt0 = len(p.pts)
	if p.ws() == ']' {
		p.pos++
		return nil
	}
	for {
		if p.null() {
			return p.errf(classify.KindMissingGeometry, "GeometryCollection member %d is null", len(n.kids))
		}
		if err := p.addPart(p.pos); err != nil {
			return err
		}
		kid, _, err := p.geometry(nest + 1)
		if err != nil {
			return err
		}
		n.kids = append(n.kids, kid)
		n.npt = len(p.pts) - n.pt0
		switch p.ws() {
		case ',':
			p.pos++
		case ']':
			p.pos++
			return nil
		default:
			return p.malformed("expected ',' or ']' in array, found %s", p.describe())
		}
	}
}

// coords parses the coordinates of n.typ at the current position.
func (p *parser) coords(n *node) *Error {
	n.pt0, n.c0 = len(p.pts), len(p.counts)
	depth := n.typ.depth()
	if depth == 1 {
		if err := p.position(n.typ); err != nil {
			return err
		}
	} else if err := p.array(n.typ, depth); err != nil {
		return err
	}
	n.npt = len(p.pts) - n.pt0
	n.nc = len(p.counts) - n.c0
	return nil
}

var shapeNames = [...]string{
	2: "an array of positions",
	3: "an array of arrays of positions",
	4: "an array of arrays of arrays of positions",
}

// array parses an array nested depth deep (depth >= 2), recording its
// length in pre-order before its children's.
func (p *parser) array(t Type, depth int) *Error {
	c := p.ws()
	if c != '[' {
		if depth == t.depth() {
			return p.malformed("%s coordinates must be %s, found %s", t, shapeNames[depth], p.describe())
		}
		return p.nesting(t)
	}
	if err := p.addPart(p.pos); err != nil {
		return err
	}
	p.pos++
	slot := len(p.counts)
	p.counts = append(p.counts, 0)
	if p.ws() == ']' {
		p.pos++
		return nil
	}
	rings := depth == 3 && (t == Polygon || t == MultiPolygon) // an array of a polygon's rings
	if depth == 4 && p.lim.Workers > 1 && p.zs == nil && len(p.data)-p.pos >= parallelMinBytes {
		if n, ok := p.parallelPolygons(); ok {
			p.counts[slot] = n
			return nil
		}
	}
	count := 0
	for {
		var err *Error
		switch {
		case depth == 2:
			if n := p.fastPositions(); n > 0 {
				count += n - 1 // and one below
				break
			}
			err = p.position(t)
		case rings && count > p.lim.MaxHoles:
			p.ws()
			return p.errf(classify.KindVertexBudget, "polygon has more than %d holes", p.lim.MaxHoles)
		default:
			err = p.array(t, depth-1)
		}
		if err != nil {
			return err
		}
		count++
		switch p.ws() {
		case ',':
			p.pos++
		case ']':
			p.pos++
			p.counts[slot] = count
			return nil
		default:
			return p.malformed("expected ',' or ']' in %s coordinates, found %s", t, p.describe())
		}
	}
}

// nesting reports coordinates nested too shallowly: a number (or other
// scalar) where an array was expected.
func (p *parser) nesting(t Type) *Error {
	switch c := p.ws(); {
	case c == '-' || c >= '0' && c <= '9' || c == 'N' || c == 'I':
		return p.malformed("%s coordinates are nested too shallowly: found a number where %s expects an array", t, t)
	default:
		return p.malformed("%s coordinates: expected an array, found %s", t, p.describe())
	}
}

// position parses [x, y] or [x, y, z, ...] and appends it.
func (p *parser) position(t Type) *Error {
	if p.fastPosition() {
		return nil
	}
	if p.ws() != '[' {
		if t == Point {
			return p.malformed("Point coordinates must be a position [x, y], found %s", p.describe())
		}
		return p.nesting(t)
	}
	at := p.pos
	p.pos++
	var v [3]float64
	n := 0
	if p.ws() != ']' {
		for {
			switch c := p.ws(); {
			case c == '[':
				return p.malformed("%s coordinates are nested too deeply: found an array where a coordinate was expected", t)
			case c == '-' || c >= '0' && c <= '9' || c == 'N' || c == 'I':
				f, why := p.coordinate()
				if why != "" {
					return p.malformed("%s in %s coordinates", why, t)
				}
				if n < len(v) {
					v[n] = f
				}
				n++
			default:
				return p.malformed("non-numeric coordinate in %s: found %s", t, p.describe())
			}
			if c := p.ws(); c == ',' {
				p.pos++
				continue
			} else if c == ']' {
				break
			}
			return p.malformed("expected ',' or ']' in position, found %s", p.describe())
		}
	}
	p.pos++
	if n < 2 {
		end := p.pos
		p.pos = at
		err := p.malformed("position has %d coordinate(s), needs at least 2", n)
		p.pos = end
		return err
	}
	if len(p.pts) >= p.lim.MaxVertices {
		p.pos = at
		return p.errf(classify.KindVertexBudget, "geometry has more than %d positions", p.lim.MaxVertices)
	}
	if p.pts == nil {
		p.sizePoints()
	}
	if n >= 3 && p.zs == nil {
		p.zs = make([]float64, len(p.pts), cap(p.pts)+1)
		for i := range p.zs {
			p.zs[i] = math.NaN()
		}
	}
	p.pts = append(p.pts, orb.Point{v[0], v[1]})
	if p.zs != nil {
		z := math.NaN()
		if n >= 3 && !math.IsInf(v[2], 0) {
			z = v[2]
		}
		p.zs = append(p.zs, z)
	}
	return nil
}

// fastPositions reads as many positions of a run as fastPosition can,
// with the commas between them, and returns how many. It stops just
// after a position, before the ',' or ']' that follows it, so that array
// goes on as if it had read them one by one.
func (p *parser) fastPositions() int {
	if !p.fastPosition() {
		return 0
	}
	n := 1
	for {
		save := p.pos
		i := spaces(p.data, p.pos)
		if i >= len(p.data) || p.data[i] != ',' {
			return n
		}
		p.pos = i + 1
		if !p.fastPosition() {
			p.pos = save
			return n
		}
		n++
	}
}

// fastPosition reads the common position, [x,y] (white space allowed) with two
// numbers fastNumber reads, when appending it can neither exceed a limit
// nor grow the position array, and reports whether it did. Everything
// else (the first position, a third ordinate, NaN, errors) is left to
// position.
func (p *parser) fastPosition() bool {
	if p.zs != nil || len(p.pts) >= min(cap(p.pts), p.lim.MaxVertices) || p.maxNumber < fastNumberRoom {
		return false
	}
	d, i := p.data, spaces(p.data, p.pos)
	if i >= len(d) || d[i] != '[' {
		return false
	}
	x, i, ok := fastNumber(d, spaces(d, i+1))
	if !ok {
		return false
	}
	if i = spaces(d, i); i >= len(d) || d[i] != ',' {
		return false
	}
	y, i, ok := fastNumber(d, spaces(d, i+1))
	if !ok {
		return false
	}
	if i = spaces(d, i); i >= len(d) || d[i] != ']' {
		return false
	}
	p.pts = append(p.pts, orb.Point{x, y})
	p.pos = i + 1
	return true
}

// spaces returns the offset of the first byte at or after i that is not
// white space.
func spaces(d []byte, i int) int {
	for i < len(d) && d[i] <= ' ' && (d[i] == ' ' || d[i] == '\n' || d[i] == '\r' || d[i] == '\t') {
		i++
	}
	return i
}

// finish builds the orb geometry for n once every position has been read.
func (p *parser) finish(n *node) Geometry {
	end := n.pt0 + n.npt
	g := Geometry{Geom: p.build(n), Points: p.pts[n.pt0:end:end], Vertices: n.npt}
	if p.zs != nil {
		g.Z = p.zs[n.pt0:end:end]
	}
	return g
}

// builder walks a node's counts in pre-order.
type builder struct {
	pts    []orb.Point
	counts []int
	pt, c  int
}

func (b *builder) points() []orb.Point {
	k := b.counts[b.c]
	b.c++
	s := b.pts[b.pt : b.pt+k : b.pt+k]
	b.pt += k
	return s
}

func (b *builder) polygon() orb.Polygon {
	k := b.counts[b.c]
	b.c++
	poly := make(orb.Polygon, k)
	for i := range poly {
		poly[i] = orb.Ring(b.points())
	}
	return poly
}

func (p *parser) build(n *node) orb.Geometry {
	b := &builder{pts: p.pts, counts: p.counts, pt: n.pt0, c: n.c0}
	switch n.typ {
	case Point:
		return p.pts[n.pt0]
	case MultiPoint:
		return orb.MultiPoint(b.points())
	case LineString:
		return orb.LineString(b.points())
	case MultiLineString:
		k := b.counts[b.c]
		b.c++
		mls := make(orb.MultiLineString, k)
		for i := range mls {
			mls[i] = orb.LineString(b.points())
		}
		return mls
	case Polygon:
		return b.polygon()
	case MultiPolygon:
		k := b.counts[b.c]
		b.c++
		mp := make(orb.MultiPolygon, k)
		for i := range mp {
			mp[i] = b.polygon()
		}
		return mp
	case GeometryCollection:
		c := make(orb.Collection, len(n.kids))
		for i := range n.kids {
			c[i] = p.build(&n.kids[i])
		}
		return c
	}
	return nil
}
