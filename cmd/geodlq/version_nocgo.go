//go:build !cgo

package main

// Built without cgo: no GEOS or PROJ is linked.
const (
	geosVersion = ""
	projVersion = ""
)
