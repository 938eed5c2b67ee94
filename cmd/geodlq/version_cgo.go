//go:build cgo

package main

import (
	"fmt"

	"github.com/twpayne/go-geos"
	"github.com/twpayne/go-proj/v11"
)

// The versions of GEOS and PROJ whose headers the binary was built with.
var (
	geosVersion = fmt.Sprintf("%d.%d.%d", geos.VersionMajor, geos.VersionMinor, geos.VersionPatch)
	projVersion = fmt.Sprintf("%d.%d.%d", proj.VersionMajor, proj.VersionMinor, proj.VersionPatch)
)
