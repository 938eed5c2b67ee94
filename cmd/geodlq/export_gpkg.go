package main

import (
	"context"
	"io"
	"os"
	"path/filepath"

	"github.com/paulmach/orb"

	"github.com/geodlq/geodlq/cmd/geodlq/internal/gpkg"
)

// The GeoPackage layers of an export.
const (
	gpkgGeometries = "dead_letters"
	gpkgFaults     = "fault_points"
)

// writeGPKG writes the features as a GeoPackage to file ("-": standard
// output, through a temporary file), committed by a rename.
func (a *app) writeGPKG(ctx context.Context, file string, fs *featureSet, epsg int) error {
	if epsg != gpkg.SRSID {
		return usagef("--format gpkg is written in EPSG:4326 (--to-epsg 4326); use --format geojson for other CRSs")
	}
	target := file
	if file == "-" {
		dir, err := os.MkdirTemp("", "geodlq-export-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		target = filepath.Join(dir, "export.gpkg")
	}
	err := writeFileAtomic(target, func(tmp string) error {
		if err := os.Remove(tmp); err != nil { // SQLite creates it
			return err
		}
		return writeGPKGFile(ctx, tmp, fs)
	})
	if err != nil || file != "-" {
		return err
	}
	f, err := os.Open(target)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(a.stdout, f)
	return err
}

func writeGPKGFile(ctx context.Context, path string, fs *featureSet) (err error) {
	w, err := gpkg.Create(ctx, path)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			w.Abort()
		}
	}()
	var cols []gpkg.Column
	if len(fs.feats) > 0 {
		for _, c := range fs.feats[0].props {
			if c.name == "feature" {
				continue
			}
			cols = append(cols, gpkg.Column{Name: c.name, Type: gpkgType(c.name)})
		}
	}
	if err := w.CreateLayer(ctx, gpkgGeometries, "GEOMETRY", "dead-lettered geometries (geodlq export)", cols); err != nil {
		return err
	}
	faultCols := cols[:0:0]
	for _, c := range cols {
		if c.Name != "geometry_status" {
			faultCols = append(faultCols, c)
		}
	}
	if err := w.CreateLayer(ctx, gpkgFaults, "POINT", "fault locations of the dead-lettered geometries (geodlq export)", faultCols); err != nil {
		return err
	}
	for _, f := range fs.feats {
		if err := ctx.Err(); err != nil {
			return err
		}
		var vals []any
		for _, c := range f.props {
			if c.name != "feature" {
				vals = append(vals, c.value)
			}
		}
		var g orb.Geometry
		if f.parsed != nil {
			g = f.parsed
		}
		layer := gpkgGeometries
		if f.fault {
			layer = gpkgFaults
		}
		if err := w.Insert(ctx, layer, g, vals); err != nil {
			return err
		}
	}
	return w.Close(ctx)
}

// gpkgType is the SQL type of an exported column.
func gpkgType(name string) string {
	switch name {
	case "location_x", "location_y":
		return gpkg.Real
	case "fault_part", "fault_ring", "fault_vertex", "epsg", "vertex_count", "geometry_bytes", "payload_size", "attempts":
		return gpkg.Integer
	case "fault_on_segment":
		return gpkg.Boolean
	}
	return gpkg.Text
}
