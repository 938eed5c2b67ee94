// Package gpkg writes OGC GeoPackage 1.3 files of vector features in
// EPSG:4326 — what `geodlq export --format gpkg` writes for QGIS.
//
// No Go GeoPackage library is both maintained and free of a second
// SQLite (the maintained ones drive mattn/go-sqlite3 through cgo, next to
// the modernc.org/sqlite the command already links for its embedded
// store), and the part of the standard a feature export needs is small:
// the application id and version, the gpkg_spatial_ref_sys,
// gpkg_contents and gpkg_geometry_columns tables, and geometry blobs
// (the GeoPackage header, an envelope, and the geometry as WKB, written by
// github.com/paulmach/orb/encoding/wkb). So this package writes those
// through database/sql and modernc.org/sqlite (pure Go). A file it writes
// opens in QGIS and GDAL (ogrinfo) as layers of features.
package gpkg

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/paulmach/orb"
	"github.com/paulmach/orb/encoding/wkb"
	_ "modernc.org/sqlite" // the "sqlite" database/sql driver
)

// SRSID is the only spatial reference system of the layers: WGS 84.
const SRSID = 4326

// wgs84WKT is EPSG:4326 as GeoPackage's gpkg_spatial_ref_sys carries it.
const wgs84WKT = `GEOGCS["WGS 84",DATUM["WGS_1984",SPHEROID["WGS 84",6378137,298.257223563,AUTHORITY["EPSG","7030"]],AUTHORITY["EPSG","6326"]],PRIMEM["Greenwich",0,AUTHORITY["EPSG","8901"]],UNIT["degree",0.0174532925199433,AUTHORITY["EPSG","9122"]],AUTHORITY["EPSG","4326"]]`

// Column types of a layer's attributes.
const (
	Text    = "TEXT"
	Integer = "INTEGER"
	Real    = "REAL"
	Boolean = "BOOLEAN"
)

// Column is one attribute of a layer.
type Column struct {
	Name string
	Type string // Text, Integer, Real or Boolean
}

// Writer writes one GeoPackage file. It is not safe for concurrent use.
type Writer struct {
	db     *sql.DB
	tx     *sql.Tx
	layers map[string]*layer
	order  []string
}

type layer struct {
	cols   []Column
	insert *sql.Stmt
	bound  orb.Bound
	any    bool
}

// Create creates a GeoPackage at path, which must not exist.
func Create(ctx context.Context, path string) (*Writer, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(OFF)&_pragma=synchronous(OFF)")
	if err != nil {
		return nil, fmt.Errorf("gpkg: %w", err)
	}
	db.SetMaxOpenConns(1)
	w := &Writer{db: db, layers: map[string]*layer{}}
	stmts := []string{
		"PRAGMA application_id = 1196444487", // "GPKG"
		"PRAGMA user_version = 10300",
		`CREATE TABLE gpkg_spatial_ref_sys (srs_name TEXT NOT NULL, srs_id INTEGER PRIMARY KEY, organization TEXT NOT NULL,
			organization_coordsys_id INTEGER NOT NULL, definition TEXT NOT NULL, description TEXT)`,
		`CREATE TABLE gpkg_contents (table_name TEXT NOT NULL PRIMARY KEY, data_type TEXT NOT NULL, identifier TEXT UNIQUE,
			description TEXT DEFAULT '', last_change DATETIME NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')),
			min_x DOUBLE, min_y DOUBLE, max_x DOUBLE, max_y DOUBLE, srs_id INTEGER,
			CONSTRAINT fk_gc_r_srs_id FOREIGN KEY (srs_id) REFERENCES gpkg_spatial_ref_sys(srs_id))`,
		`CREATE TABLE gpkg_geometry_columns (table_name TEXT NOT NULL, column_name TEXT NOT NULL, geometry_type_name TEXT NOT NULL,
			srs_id INTEGER NOT NULL, z TINYINT NOT NULL, m TINYINT NOT NULL,
			CONSTRAINT pk_geom_cols PRIMARY KEY (table_name, column_name),
			CONSTRAINT fk_gc_tn FOREIGN KEY (table_name) REFERENCES gpkg_contents(table_name),
			CONSTRAINT fk_gc_srs FOREIGN KEY (srs_id) REFERENCES gpkg_spatial_ref_sys (srs_id))`,
		`INSERT INTO gpkg_spatial_ref_sys VALUES
			('Undefined cartesian SRS', -1, 'NONE', -1, 'undefined', 'undefined cartesian coordinate reference system'),
			('Undefined geographic SRS', 0, 'NONE', 0, 'undefined', 'undefined geographic coordinate reference system'),
			('WGS 84 geodetic', 4326, 'EPSG', 4326, '` + wgs84WKT + `', 'longitude/latitude coordinates in decimal degrees on the WGS 84 spheroid')`,
	}
	for _, s := range stmts {
		if _, err := db.ExecContext(ctx, s); err != nil {
			db.Close()
			return nil, fmt.Errorf("gpkg: %w", err)
		}
	}
	if w.tx, err = db.BeginTx(ctx, nil); err != nil {
		db.Close()
		return nil, fmt.Errorf("gpkg: %w", err)
	}
	return w, nil
}

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// CreateLayer adds a feature table name with a geometry column "geom" of
// geomType (GEOMETRY, POINT, …) in EPSG:4326 and the given attributes.
func (w *Writer) CreateLayer(ctx context.Context, name, geomType, description string, cols []Column) error {
	if _, dup := w.layers[name]; dup || name == "" {
		return fmt.Errorf("gpkg: layer %q: empty or defined twice", name)
	}
	defs := []string{"fid INTEGER PRIMARY KEY AUTOINCREMENT NOT NULL", "geom " + geomType}
	marks := []string{"?"}
	names := []string{"geom"}
	for _, c := range cols {
		switch c.Type {
		case Text, Integer, Real, Boolean:
		default:
			return fmt.Errorf("gpkg: column %q: type %q", c.Name, c.Type)
		}
		defs = append(defs, quoteIdent(c.Name)+" "+c.Type)
		marks = append(marks, "?")
		names = append(names, quoteIdent(c.Name))
	}
	if _, err := w.tx.ExecContext(ctx, "CREATE TABLE "+quoteIdent(name)+" ("+strings.Join(defs, ", ")+")"); err != nil {
		return fmt.Errorf("gpkg: layer %q: %w", name, err)
	}
	if _, err := w.tx.ExecContext(ctx, `INSERT INTO gpkg_contents (table_name, data_type, identifier, description, srs_id)
		VALUES (?, 'features', ?, ?, ?)`, name, name, description, SRSID); err != nil {
		return fmt.Errorf("gpkg: layer %q: %w", name, err)
	}
	if _, err := w.tx.ExecContext(ctx, `INSERT INTO gpkg_geometry_columns VALUES (?, 'geom', ?, ?, 0, 0)`, name, geomType, SRSID); err != nil {
		return fmt.Errorf("gpkg: layer %q: %w", name, err)
	}
	st, err := w.tx.PrepareContext(ctx, "INSERT INTO "+quoteIdent(name)+" ("+strings.Join(names, ", ")+") VALUES ("+strings.Join(marks, ", ")+")")
	if err != nil {
		return fmt.Errorf("gpkg: layer %q: %w", name, err)
	}
	w.layers[name] = &layer{cols: cols, insert: st}
	w.order = append(w.order, name)
	return nil
}

// Insert adds a feature to a layer: g (nil for a null geometry; its
// coordinates must be finite) and one value per column (nil, string,
// int, int64, float64 or bool).
func (w *Writer) Insert(ctx context.Context, name string, g orb.Geometry, values []any) error {
	l, ok := w.layers[name]
	if !ok {
		return fmt.Errorf("gpkg: no layer %q", name)
	}
	if len(values) != len(l.cols) {
		return fmt.Errorf("gpkg: layer %q: %d values for %d columns", name, len(values), len(l.cols))
	}
	args := make([]any, 0, len(values)+1)
	if g == nil {
		args = append(args, nil)
	} else {
		blob, b, err := Blob(g)
		if err != nil {
			return fmt.Errorf("gpkg: layer %q: %w", name, err)
		}
		args = append(args, blob)
		if !l.any {
			l.bound, l.any = b, true
		} else {
			l.bound = l.bound.Union(b)
		}
	}
	args = append(args, values...)
	if _, err := l.insert.ExecContext(ctx, args...); err != nil {
		return fmt.Errorf("gpkg: layer %q: %w", name, err)
	}
	return nil
}

// Close records each layer's extent, commits, and closes the file.
func (w *Writer) Close(ctx context.Context) error {
	if w.tx == nil {
		return errors.New("gpkg: closed")
	}
	var err error
	for _, name := range w.order {
		l := w.layers[name]
		_ = l.insert.Close()
		if l.any && err == nil {
			_, err = w.tx.ExecContext(ctx, `UPDATE gpkg_contents SET min_x = ?, min_y = ?, max_x = ?, max_y = ?, last_change = ?
				WHERE table_name = ?`, l.bound.Min[0], l.bound.Min[1], l.bound.Max[0], l.bound.Max[1],
				time.Now().UTC().Format("2006-01-02T15:04:05.000Z"), name)
		}
	}
	if err == nil {
		err = w.tx.Commit()
	} else {
		_ = w.tx.Rollback()
	}
	w.tx = nil
	return errors.Join(err, w.db.Close())
}

// Abort discards the file's contents and closes it (the caller removes
// the file).
func (w *Writer) Abort() {
	if w.tx != nil {
		_ = w.tx.Rollback()
		w.tx = nil
	}
	_ = w.db.Close()
}

// wkbSize estimates the WKB size of g, to allocate its blob once: 21
// bytes a point (a point of a MultiPoint carries its own header), 16 a
// position of a line or ring, and a little per part.
func wkbSize(g orb.Geometry) int {
	n := 64
	switch g := g.(type) {
	case orb.Point:
		n += 21
	case orb.MultiPoint:
		n += 21 * len(g)
	case orb.LineString:
		n += 16 * len(g)
	case orb.Polygon:
		for _, r := range g {
			n += 4 + 16*len(r)
		}
	case orb.MultiPolygon:
		for _, p := range g {
			n += 9
			for _, r := range p {
				n += 4 + 16*len(r)
			}
		}
	case orb.MultiLineString:
		for _, l := range g {
			n += 9 + 16*len(l)
		}
	}
	return n
}

// Blob encodes g as a GeoPackage geometry blob (standard binary, version
// 0, little-endian, with an XY envelope, EPSG:4326) and returns it with
// g's bound. Coordinates must be finite.
func Blob(g orb.Geometry) ([]byte, orb.Bound, error) {
	b := g.Bound()
	for _, v := range []float64{b.Min[0], b.Min[1], b.Max[0], b.Max[1]} {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, b, errors.New("geometry has coordinates that are not finite")
		}
	}
	// The header, then the WKB encoded into the same buffer: a large
	// geometry's blob is held once.
	var buf bytes.Buffer
	buf.Grow(8 + 32 + wkbSize(g))
	head := make([]byte, 8, 40)
	head[0], head[1], head[2] = 'G', 'P', 0
	head[3] = 1<<1 | 1 // envelope [minx, maxx, miny, maxy]; little-endian
	binary.LittleEndian.PutUint32(head[4:], SRSID)
	for _, v := range []float64{b.Min[0], b.Max[0], b.Min[1], b.Max[1]} {
		head = binary.LittleEndian.AppendUint64(head, math.Float64bits(v))
	}
	buf.Write(head)
	if err := wkb.NewEncoder(&buf).SetByteOrder(binary.LittleEndian).Encode(g); err != nil {
		return nil, b, err
	}
	return buf.Bytes(), b, nil
}
