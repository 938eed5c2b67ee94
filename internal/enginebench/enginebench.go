// Package enginebench compares geodlq's check path with other Go
// libraries' validity checks on the same events, from bytes to verdict:
// go-geos (GEOS's own GeoJSON reader and GEOSisValidReason_r, through cgo)
// and simplefeatures (pure Go: its GeoJSON reader and Validate). It is a
// module of its own so that the libraries it measures never enter the
// module graph of geodlq's core; BenchmarkEngines runs the comparison over
// the benchmark corpus of internal/benchcorpus (docs/benchmarks.md).
package enginebench

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/peterstace/simplefeatures/geom"
	"github.com/twpayne/go-geos"
)

// SimpleFeatures checks an event's geometry with simplefeatures: the
// "geometry" member read by its GeoJSON reader without validation, then
// Validate. It returns nil for a valid geometry.
func SimpleFeatures(event []byte) error {
	var f struct {
		Geometry json.RawMessage `json:"geometry"`
	}
	if err := json.Unmarshal(event, &f); err != nil {
		return err
	}
	if len(f.Geometry) == 0 {
		return errors.New("event has no geometry")
	}
	g, err := geom.UnmarshalGeoJSON(f.Geometry, geom.NoValidate{})
	if err != nil {
		return err
	}
	return g.Validate()
}

// GEOS checks events with go-geos. It is not safe for concurrent use.
type GEOS struct {
	ctx *geos.Context
}

// NewGEOS returns a GEOS with a context of its own.
func NewGEOS() *GEOS { return &GEOS{ctx: geos.NewContext()} }

// Check reads an event (a GeoJSON Feature) with GEOS's GeoJSON reader and
// returns GEOSisValidReason_r's answer ("Valid Geometry" for a valid
// geometry), or the reader's error.
func (g *GEOS) Check(event []byte) (reason string, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("GEOS: %v", v)
		}
	}()
	geom, err := g.ctx.NewGeomFromGeoJSON(string(event))
	if err != nil {
		return "", err
	}
	defer geom.Destroy()
	return geom.IsValidReason(), nil
}
