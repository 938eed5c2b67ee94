package spatial

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"

	"github.com/geodlq/geodlq/internal/epsg"
)

// maxCRSDepth bounds the nesting of a WKT or PROJJSON definition read in
// pure Go. PROJ's own WKT for EPSG codes nests at most 6 levels; a
// definition nested deeper is refused before anything descends into it.
const maxCRSDepth = 32

// ErrNeedsPROJ is wrapped by the [CRSError] of a definition that only
// PROJ resolves — a PROJ string, WKT or PROJJSON without an EPSG or OGC
// identifier at its top level, a compound, bound or other non-horizontal
// CRS, or an authority other than EPSG and OGC — by a Checker without
// Options.ResolveCRS (spatial/proj, which a build without cgo lacks).
// It is a crs_unparseable verdict, never a default CRS. (Unlike
// [ErrNeedsCGO] it is a verdict on the event, not the failure of an
// operation.)
var ErrNeedsPROJ = errors.New("only PROJ resolves this definition (WKT or PROJJSON without a top-level EPSG or OGC identifier, a PROJ string, a compound, bound or non-horizontal CRS, or a non-EPSG code), and this is a build without cgo; the pure-Go registry resolves EPSG codes and OGC's CRS84, CRS83 and CRS27 in every form, and WKT or PROJJSON of a geographic or projected CRS naming its EPSG code at the top level")

// identifiedCRS resolves, without PROJ, a WKT (1 or 2) or PROJJSON
// definition of a geographic or projected CRS that names its EPSG (or
// OGC CRS84, CRS83, CRS27) identifier at its top level, as PROJ does:
// PROJ takes the first EPSG or OGC identifier of the object as its code
// (whether or not its database holds it), the object's name as the name,
// and its type for Geographic. ok is false for anything else, which only
// PROJ can resolve: other CRS types, no such identifier, text that is not
// well-formed WKT or JSON, or nesting deeper than maxCRSDepth.
//
// Only the syntax and the top level are read: a definition whose inner
// parts PROJ would refuse (a GEOGCS without a DATUM, say) resolves here
// by its identifier. TestIdentifiedAgreesWithPROJ checks the answers
// against PROJ for the WKT1, WKT2 and PROJJSON PROJ writes for EPSG codes.
func identifiedCRS(def string) (CRSInfo, bool) {
	if len(def) > maxCRSLen {
		return CRSInfo{}, false
	}
	if strings.HasPrefix(def, "{") {
		return projjsonIdentified(def)
	}
	if isWKT(def) {
		return wktIdentified(def)
	}
	return CRSInfo{}, false
}

// wktNode is a WKT keyword with its children: quoted strings, numbers,
// bare words (enumerations such as "north") and nested nodes.
type wktNode struct {
	keyword string
	args    []wktArg
}

type wktArg struct {
	node   *wktNode
	text   string
	quoted bool
}

// wktParser reads WKT with depth and length bounds.
type wktParser struct {
	s   string
	pos int
}

func (p *wktParser) space() {
	for p.pos < len(p.s) && (p.s[p.pos] == ' ' || p.s[p.pos] == '\t' || p.s[p.pos] == '\n' || p.s[p.pos] == '\r') {
		p.pos++
	}
}

func isWordByte(c byte) bool {
	return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-' || c == '+'
}

func (p *wktParser) word() string {
	start := p.pos
	for p.pos < len(p.s) && isWordByte(p.s[p.pos]) {
		p.pos++
	}
	return p.s[start:p.pos]
}

// node reads KEYWORD[args] at depth d: space (which PROJ's multi-line
// WKT has) is read only after an opening bracket or a comma.
func (p *wktParser) node(d int) (*wktNode, bool) {
	if d > maxCRSDepth {
		return nil, false
	}
	p.space()
	kw := p.word()
	if kw == "" {
		return nil, false
	}
	// PROJ wants the bracket right after the keyword; the parenthesis
	// form is left to it.
	if p.pos >= len(p.s) || p.s[p.pos] != '[' {
		return nil, false
	}
	const closer = ']'
	p.pos++
	n := &wktNode{keyword: strings.ToUpper(kw)}
	for {
		p.space()
		if p.pos >= len(p.s) {
			return nil, false
		}
		switch c := p.s[p.pos]; {
		case c == '"':
			p.pos++
			var b strings.Builder
			for {
				i := strings.IndexByte(p.s[p.pos:], '"')
				if i < 0 {
					return nil, false
				}
				b.WriteString(p.s[p.pos : p.pos+i])
				p.pos += i + 1
				if p.pos < len(p.s) && p.s[p.pos] == '"' { // "" is a quote
					b.WriteByte('"')
					p.pos++
					continue
				}
				break
			}
			n.args = append(n.args, wktArg{text: b.String(), quoted: true})
		case isWordByte(c):
			save := p.pos
			w := p.word()
			if p.pos < len(p.s) && (p.s[p.pos] == '[' || p.s[p.pos] == '(') {
				p.pos = save
				child, ok := p.node(d + 1)
				if !ok {
					return nil, false
				}
				n.args = append(n.args, wktArg{node: child})
			} else {
				n.args = append(n.args, wktArg{text: w})
			}
		default:
			return nil, false
		}
		// No space before a comma or the closing bracket.
		if p.pos >= len(p.s) {
			return nil, false
		}
		switch p.s[p.pos] {
		case ',':
			p.pos++
		case closer:
			p.pos++
			return n, true
		default:
			return nil, false
		}
	}
}

// wktGeographic maps the root keywords read here to Geographic; other
// CRS types (geodetic, whose kind depends on its coordinate system,
// compound, bound, vertical, engineering …) need PROJ.
var wktGeographic = map[string]bool{
	"GEOGCS": true, "GEOGCRS": true, "GEOGRAPHICCRS": true,
	"PROJCS": false, "PROJCRS": false, "PROJECTEDCRS": false,
}

func wktIdentified(def string) (CRSInfo, bool) {
	p := &wktParser{s: def}
	root, ok := p.node(0)
	if !ok {
		return CRSInfo{}, false
	}
	p.space()
	if p.pos != len(p.s) {
		return CRSInfo{}, false
	}
	geographic, ok := wktGeographic[root.keyword]
	if !ok || len(root.args) == 0 || !root.args[0].quoted {
		return CRSInfo{}, false
	}
	// PROJ's WKT reader drops the suffix its writer adds to a deprecated
	// object's name.
	info := CRSInfo{Name: strings.TrimSuffix(root.args[0].text, " (deprecated)"), Geographic: geographic}
	children := map[string]bool{}
	var axes string
	for _, a := range root.args[1:] {
		if a.node != nil {
			children[a.node.keyword] = true
			if a.node.keyword == "AXIS" && len(a.node.args) >= 2 {
				axes += orientation(a.node.args[1].text)
			}
		}
	}
	// The parts PROJ cannot build the CRS without.
	switch root.keyword {
	case "GEOGCS":
		ok = children["DATUM"]
	case "PROJCS":
		ok = children["GEOGCS"] && children["PROJECTION"]
	case "GEOGCRS", "GEOGRAPHICCRS":
		ok = (children["DATUM"] || children["ENSEMBLE"]) && children["CS"] && len(axes) >= 2
	default: // PROJCRS, PROJECTEDCRS
		ok = (children["BASEGEOGCRS"] || children["BASEGEODCRS"]) && children["CONVERSION"] && children["CS"] && len(axes) >= 2
	}
	if !ok {
		return CRSInfo{}, false
	}
	for _, a := range root.args[1:] {
		if a.node == nil || (a.node.keyword != "AUTHORITY" && a.node.keyword != "ID") || len(a.node.args) < 2 {
			continue
		}
		if authorityCode(&info, a.node.args[0].text, a.node.args[1].text) {
			if consistent(info, axes) {
				return info, true
			}
			return CRSInfo{}, false
		}
	}
	return CRSInfo{}, false
}

// orientation abbreviates an axis direction as the registry does.
func orientation(dir string) string {
	switch strings.ToLower(dir) {
	case "east":
		return "e"
	case "north":
		return "n"
	}
	return "x"
}

// consistent reports whether a definition identified as info.EPSG (or
// an OGC code) agrees with the registry's CRS of that code in what
// PROJ checks when it keeps an identifier: PROJ drops the identifier of
// a definition whose axis order is not the database's (a WKT2 GEOGCRS in
// lon/lat order naming EPSG:4326 resolves to no EPSG code), and what it
// then makes of the definition — proj_identify — needs PROJ. A code the
// registry does not hold, or of another kind, needs PROJ as well.
func consistent(info CRSInfo, axes string) bool {
	var crs epsg.CRS
	var found bool
	if info.LonLatTwin {
		code := map[int]string{4326: "CRS84", 4269: "CRS83", 4267: "CRS27"}[info.EPSG]
		crs, found = epsg.LookupOGC(code)
	} else {
		crs, found = epsg.Lookup(info.EPSG)
	}
	if !found || crs.Kind == epsg.Compound || crs.Geographic() != info.Geographic ||
		!info.Geographic && crs.Kind != epsg.Projected {
		return false
	}
	if len(axes) >= 2 && axes[:2] != crs.Axes {
		return false
	}
	return true
}

// authorityCode sets info's EPSG code from an identifier, as PROJ does
// (gdlq_from_ids in crs_shim.c): an EPSG code, or OGC's CRS84, CRS83 or
// CRS27 as their EPSG twin. It reports whether the identifier gave one.
func authorityCode(info *CRSInfo, auth, code string) bool {
	switch auth {
	case "EPSG":
		if !isDigits(code) || len(code) > 9 {
			return false
		}
		n, _ := strconv.Atoi(code)
		if n == 0 {
			return false
		}
		info.EPSG = n
		return true
	case "OGC":
		twin := map[string]int{"CRS84": 4326, "CRS83": 4269, "CRS27": 4267}[code]
		if twin == 0 {
			return false
		}
		info.EPSG, info.LonLatTwin = twin, true
		return true
	}
	return false
}

// jsonDepth reports whether s's nesting of objects and arrays stays within
// maxCRSDepth, scanning without descending.
func jsonDepth(s string) bool {
	depth, inStr := 0, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case inStr:
			if c == '\\' {
				i++
			} else if c == '"' {
				inStr = false
			}
		case c == '"':
			inStr = true
		case c == '{' || c == '[':
			if depth++; depth > maxCRSDepth {
				return false
			}
		case c == '}' || c == ']':
			depth--
		}
	}
	return true
}

// projjsonGeographic maps the PROJJSON types read here to Geographic.
var projjsonGeographic = map[string]bool{"GeographicCRS": true, "ProjectedCRS": false}

type projjsonID struct {
	Authority string          `json:"authority"`
	Code      json.RawMessage `json:"code"`
}

func projjsonIdentified(def string) (CRSInfo, bool) {
	if !jsonDepth(def) {
		return CRSInfo{}, false
	}
	var top struct {
		Type          string          `json:"type"`
		Name          *string         `json:"name"`
		Datum         json.RawMessage `json:"datum"`
		DatumEnsemble json.RawMessage `json:"datum_ensemble"`
		BaseCRS       json.RawMessage `json:"base_crs"`
		Conversion    json.RawMessage `json:"conversion"`
		CS            *struct {
			Axis []struct {
				Direction string `json:"direction"`
			} `json:"axis"`
		} `json:"coordinate_system"`
		ID  *projjsonID  `json:"id"`
		IDs []projjsonID `json:"ids"`
	}
	if err := json.Unmarshal([]byte(def), &top); err != nil || top.Name == nil || top.CS == nil || len(top.CS.Axis) < 2 {
		return CRSInfo{}, false
	}
	geographic, known := projjsonGeographic[top.Type]
	if !known {
		return CRSInfo{}, false
	}
	// The parts PROJ cannot build the CRS without.
	if geographic && top.Datum == nil && top.DatumEnsemble == nil || !geographic && (top.BaseCRS == nil || top.Conversion == nil) {
		return CRSInfo{}, false
	}
	var axes string
	for _, a := range top.CS.Axis {
		axes += orientation(a.Direction)
	}
	ids := top.IDs
	if top.ID != nil {
		ids = []projjsonID{*top.ID}
	}
	info := CRSInfo{Name: *top.Name, Geographic: geographic}
	for _, id := range ids {
		code := string(id.Code)
		if s, err := strconv.Unquote(code); err == nil {
			code = s
		}
		if authorityCode(&info, id.Authority, code) {
			if consistent(info, axes) {
				return info, true
			}
			return CRSInfo{}, false
		}
	}
	return CRSInfo{}, false
}
