// Package epsg is the CRS registry geodlq resolves EPSG and OGC codes with
// when PROJ is not there: the coordinate reference systems of PROJ's
// database, proj.db, generated into Go source (registry_gen.go) by gen.go.
// It holds what checking needs of each CRS — its code, name, kind,
// first axes' orientation and unit, and the area of use PROJ reports —
// and nothing to transform coordinates with.
//
// Regenerate it after a PROJ upgrade with go generate (in the repository's
// go.work); spatial's differential test, run in the cgo build, fails when
// the registry and PROJ answer a code differently.
package epsg

//go:generate go run gen.go

import (
	"strconv"
	"strings"
	"sync"
)

// Kind is the kind of a CRS.
type Kind uint8

// The kinds of CRS in the registry.
const (
	Geographic2D Kind = iota + 1
	Geographic3D
	Geocentric
	Projected
	Vertical
	Compound
)

// String returns the kind's name as proj.db spells it ("geographic 2D",
// "projected", ...).
func (k Kind) String() string {
	switch k {
	case Geographic2D:
		return "geographic 2D"
	case Geographic3D:
		return "geographic 3D"
	case Geocentric:
		return "geocentric"
	case Projected:
		return "projected"
	case Vertical:
		return "vertical"
	case Compound:
		return "compound"
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// Area is a CRS's area of use, in degrees of longitude and latitude.
// West may exceed East for an area that crosses the antimeridian.
type Area struct {
	West, South, East, North float64
}

// CRS is one coordinate reference system of the registry.
type CRS struct {
	// Authority is "EPSG" or "OGC".
	Authority string
	// Code is the CRS's code within its authority: "4326", "CRS84".
	Code string
	// Name is the CRS's name, as PROJ reports it ("WGS 84").
	Name string
	// Kind is the CRS's kind.
	Kind Kind
	// HorizontalKind is the kind of a compound CRS's horizontal part; for
	// other CRSs it equals Kind.
	HorizontalKind Kind
	// Axes are the first two axes' orientations: "en" (east, north), "ne"
	// (north, east: EPSG:4326's official order), "u" (a vertical CRS's
	// up), "" for a compound CRS, "x" for an orientation of another kind.
	Axes string
	// Unit is the first axis's unit ("metre", "US survey foot"; EPSG calls
	// the degree "degree (supplier to define representation)").
	Unit string
	// Area is the area of use; HasArea is false when proj.db gives none.
	Area    Area
	HasArea bool
	// Deprecated is true for a CRS EPSG has deprecated. PROJ still
	// resolves it.
	Deprecated bool
}

// Geographic reports whether the CRS (a compound CRS's horizontal part)
// is geographic, 2D or 3D: PROJ's proj_get_type test in spatial.
func (c CRS) Geographic() bool {
	return c.HorizontalKind == Geographic2D || c.HorizontalKind == Geographic3D
}

type registry struct {
	epsg map[int]string // code → the table's line, without the code
	ogc  map[string]string
	auth map[string]bool
}

// load parses the generated table once.
var load = sync.OnceValue(func() *registry {
	r := &registry{epsg: make(map[int]string, 8192), ogc: map[string]string{}, auth: map[string]bool{}}
	for _, a := range authorities {
		r.auth[strings.ToUpper(a)] = true
	}
	for line := range strings.SplitSeq(table, "\n") {
		code, rest, ok := strings.Cut(line, "\t")
		if !ok {
			continue
		}
		if c, ok := strings.CutPrefix(code, "OGC:"); ok {
			r.ogc[c] = rest
			continue
		}
		n, err := strconv.Atoi(code)
		if err != nil {
			panic("epsg: generated table holds code " + strconv.Quote(code))
		}
		r.epsg[n] = rest
	}
	return r
})

// Lookup returns EPSG's CRS with the given code.
func Lookup(code int) (CRS, bool) {
	line, ok := load().epsg[code]
	if !ok {
		return CRS{}, false
	}
	return parse("EPSG", strconv.Itoa(code), line), true
}

// LookupOGC returns OGC's CRS with the given code ("CRS84", "CRS83",
// "CRS27"; codes are case-sensitive, as in PROJ).
func LookupOGC(code string) (CRS, bool) {
	line, ok := load().ogc[code]
	if !ok {
		return CRS{}, false
	}
	return parse("OGC", code, line), true
}

// Codes returns every EPSG code in the registry, ascending.
func Codes() []int {
	var out []int
	for line := range strings.SplitSeq(table, "\n") {
		code, _, _ := strings.Cut(line, "\t")
		if n, err := strconv.Atoi(code); err == nil {
			out = append(out, n)
		}
	}
	return out
}

// IsAuthority reports whether proj.db knows the CRS authority (compared
// case-insensitively): EPSG, ESRI, IAU_2015, IGNF, NKG, OGC for PROJ 9.1.
func IsAuthority(name string) bool {
	return load().auth[strings.ToUpper(name)]
}

// parse decodes a table line: kind, axes, unit, area, name.
func parse(auth, code, line string) CRS {
	f := strings.SplitN(line, "\t", 5)
	if len(f) != 5 {
		panic("epsg: generated table line for " + code + " has too few fields")
	}
	c := CRS{Authority: auth, Code: code, Name: f[4]}
	kind := f[0]
	if strings.HasSuffix(kind, "d") {
		c.Deprecated, kind = true, kind[:len(kind)-1]
	}
	if rest, ok := strings.CutPrefix(kind, "C"); ok {
		c.Kind, c.HorizontalKind = Compound, kindOf(rest)
	} else {
		c.Kind = kindOf(kind)
		c.HorizontalKind = c.Kind
	}
	if f[1] != "-" {
		c.Axes = f[1]
	}
	if u, err := strconv.Atoi(f[2]); err == nil && u >= 0 && u < len(units) {
		c.Unit = units[u]
	}
	if a := strings.Fields(f[3]); len(a) == 4 {
		var v [4]float64
		ok := true
		for i, s := range a {
			x, err := strconv.ParseFloat(s, 64)
			ok = ok && err == nil
			v[i] = x
		}
		if ok {
			c.Area, c.HasArea = Area{West: v[0], South: v[1], East: v[2], North: v[3]}, true
		}
	}
	return c
}

func kindOf(letter string) Kind {
	switch letter {
	case "g":
		return Geographic2D
	case "G":
		return Geographic3D
	case "c":
		return Geocentric
	case "p":
		return Projected
	case "v":
		return Vertical
	}
	return 0
}
