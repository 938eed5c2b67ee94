//go:build !cgo

package main

// headerVersions: a build without cgo links neither GEOS nor PROJ.
func headerVersions() (geosVersion, projVersion string) { return "", "" }
