package main

import (
	"context"
	"io"
	"os"
	"path/filepath"

	"github.com/geodlq/geodlq/cmd/geodlq/internal/gpkg"
)

// The GeoPackage layers of an export, and their CRS.
const (
	gpkgGeometries = "dead_letters"
	gpkgFaults     = "fault_points"
	gpkgSRS        = gpkg.SRSID
)

// gpkgSink writes the features into a GeoPackage as they come: a
// temporary file, renamed to file on commit ("-": copied to standard
// output).
type gpkgSink struct {
	ctx     context.Context
	a       *app
	file    string
	target  string // where the file is committed
	tmp     string
	tmpDir  string // for "-"
	w       *gpkg.Writer
	layered bool
	done    bool
}

func newGPKGSink(ctx context.Context, a *app, file string) (*gpkgSink, error) {
	s := &gpkgSink{ctx: ctx, a: a, file: file, target: file}
	if file == "-" {
		dir, err := os.MkdirTemp("", "geodlq-export-")
		if err != nil {
			return nil, err
		}
		s.tmpDir, s.target = dir, filepath.Join(dir, "export.gpkg")
	}
	f, err := os.CreateTemp(filepath.Dir(s.target), "."+filepath.Base(s.target)+".*.tmp")
	if err != nil {
		s.abort()
		return nil, err
	}
	s.tmp = f.Name()
	_ = f.Close()
	_ = os.Remove(s.tmp) // SQLite creates it
	if s.w, err = gpkg.Create(ctx, s.tmp); err != nil {
		s.abort()
		return nil, err
	}
	return s, nil
}

// layers creates the two layers with the columns of the first feature.
func (s *gpkgSink) layers(f feature) error {
	var cols, faultCols []gpkg.Column
	for _, c := range f.props {
		if c.name == "feature" {
			continue
		}
		col := gpkg.Column{Name: c.name, Type: gpkgType(c.name)}
		cols = append(cols, col)
		faultCols = append(faultCols, col)
	}
	if err := s.w.CreateLayer(s.ctx, gpkgGeometries, "GEOMETRY", "dead-lettered geometries (geodlq export)", cols); err != nil {
		return err
	}
	if err := s.w.CreateLayer(s.ctx, gpkgFaults, "POINT", "fault locations of the dead-lettered geometries (geodlq export)", faultCols); err != nil {
		return err
	}
	s.layered = true
	return nil
}

func (s *gpkgSink) add(f feature) error {
	if err := s.ctx.Err(); err != nil {
		return err
	}
	if !s.layered {
		if err := s.layers(f); err != nil {
			return err
		}
	}
	var vals []any
	for _, c := range f.props {
		if c.name != "feature" {
			vals = append(vals, c.value)
		}
	}
	layer := gpkgGeometries
	if f.fault {
		layer = gpkgFaults
	}
	return s.w.Insert(s.ctx, layer, f.parsed, vals)
}

func (s *gpkgSink) commit() ([]string, error) {
	if !s.layered {
		if err := s.layers(feature{props: append(columns(view{}), column{"geometry_status", nil})}); err != nil {
			return nil, err
		}
	}
	w := s.w
	s.w = nil
	if err := w.Close(s.ctx); err != nil {
		return nil, err
	}
	if err := syncFile(s.tmp); err != nil {
		return nil, err
	}
	if err := os.Rename(s.tmp, s.target); err != nil {
		return nil, err
	}
	s.done = true
	if s.file != "-" {
		return []string{s.file}, nil
	}
	f, err := os.Open(s.target)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	_, err = io.Copy(s.a.stdout, f)
	return nil, err
}

func (s *gpkgSink) abort() {
	if s.w != nil {
		s.w.Abort()
		s.w = nil
	}
	if !s.done && s.tmp != "" {
		_ = os.Remove(s.tmp)
	}
	if s.tmpDir != "" {
		_ = os.RemoveAll(s.tmpDir)
	}
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
