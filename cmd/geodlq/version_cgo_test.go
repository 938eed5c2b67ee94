//go:build cgo

package main

import (
	"fmt"

	"github.com/twpayne/go-geos"
	"github.com/twpayne/go-proj/v11"
)

// headerVersions are the GEOS and PROJ versions of the headers the test
// was built with, read from go-geos and go-proj themselves (not through
// spatial/geos and spatial/proj, whose Version the command prints).
func headerVersions() (geosVersion, projVersion string) {
	return fmt.Sprintf("%d.%d.%d", geos.VersionMajor, geos.VersionMinor, geos.VersionPatch),
		fmt.Sprintf("%d.%d.%d", proj.VersionMajor, proj.VersionMinor, proj.VersionPatch)
}
