package spatial

import "errors"

// ErrNoProjDB is wrapped by [NewChecker] when PROJ cannot read its
// database, proj.db (Debian's proj-data package; PROJ_DATA names its
// directory).
var ErrNoProjDB = errors.New("spatial: cannot read PROJ's database (is proj.db installed?)")

// ErrUnknownEPSG is wrapped by [PROJJSON] for a code PROJ has no CRS for.
var ErrUnknownEPSG = errors.New("spatial: no CRS for this EPSG code")

// maxEPSG bounds the codes passed to PROJ: EPSG codes have at most six
// digits, and larger ones are refused before PROJ sees them.
const maxEPSG = 999_999

// ErrNeedsCGO is wrapped by the errors of what needs GEOS or PROJ
// (MakeValid, Reproject, Repairers, PROJJSON, EngineGEOS, and CRS
// definitions the pure-Go registry cannot resolve: WKT, PROJ strings,
// PROJJSON, authorities other than EPSG and OGC) in a build without cgo
// (CGO_ENABLED=0). Checking needs neither: CheckEvent, CheckGeometry,
// CheckCRS and ResolveCRS of EPSG and OGC codes work in every build.
var ErrNeedsCGO = errors.New("spatial: needs the cgo build of geodlq (GEOS and PROJ); this binary was built with CGO_ENABLED=0")
