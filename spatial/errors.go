package spatial

import "errors"

// ErrNeedsCGO is wrapped by the errors of what needs GEOS or PROJ when
// the Checker has none: MakeValid and EngineGEOS without Options.GEOS,
// Reproject without Options.Reprojector, Repairers without both. Packages
// spatial/geos and spatial/proj give them in a cgo build; in a build
// without cgo (CGO_ENABLED=0) their constructors fail with this error, so
// a program that injects what it gets reports it for what it cannot do.
// Checking needs neither: CheckEvent, CheckGeometry, CheckCRS and
// ResolveCRS of EPSG and OGC codes work in every build (CRS definitions
// only PROJ resolves wrap [ErrNeedsPROJ]).
var ErrNeedsCGO = errors.New("spatial: needs the cgo build of geodlq (GEOS and PROJ); this binary was built with CGO_ENABLED=0")
