package proj

import "errors"

// DefaultTransformCacheSize is the default of Options.TransformCacheSize.
const DefaultTransformCacheSize = 64

// Options configures a [PROJ]. The zero value and nil use the defaults.
type Options struct {
	// TransformCacheSize bounds the number of PROJ transformations, one
	// per (from, to) pair, that Transform keeps. Default 64.
	TransformCacheSize int
}

// ErrNoProjDB is wrapped by [New] when PROJ cannot read its database,
// proj.db (Debian's proj-data package; PROJ_DATA names its directory).
var ErrNoProjDB = errors.New("proj: cannot read PROJ's database (is proj.db installed?)")

// ErrUnknownEPSG is wrapped by [PROJJSON] for a code PROJ has no CRS for.
var ErrUnknownEPSG = errors.New("proj: no CRS for this EPSG code")

// maxEPSG bounds the codes passed to PROJ: EPSG codes have at most six
// digits, and larger ones are refused before PROJ sees them.
const maxEPSG = 999_999
