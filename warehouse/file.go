package warehouse

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress"
	"github.com/parquet-go/parquet-go/compress/gzip"
	"github.com/parquet-go/parquet-go/compress/snappy"
	"github.com/parquet-go/parquet-go/compress/uncompressed"
	"github.com/parquet-go/parquet-go/compress/zstd"
)

// The Parquet compression codecs [Options.Compression] names.
const (
	CompressionSnappy = "snappy"
	CompressionZstd   = "zstd"
	CompressionGzip   = "gzip"
	CompressionNone   = "none"
)

func codec(name string) (compress.Codec, error) {
	switch name {
	case "", CompressionSnappy:
		return &snappy.Codec{}, nil
	case CompressionZstd:
		return &zstd.Codec{}, nil
	case CompressionGzip:
		return &gzip.Codec{}, nil
	case CompressionNone:
		return &uncompressed.Codec{}, nil
	}
	return nil, fmt.Errorf("warehouse: compression %q (want snappy, zstd, gzip or none): %w", name, ErrInvalidOptions)
}

// rowGroupRows is the most rows one row group holds: large enough for
// the warehouses' loaders (BigQuery asks for row groups of 16 MiB or
// more), small enough that a writer's buffered row group stays tens of
// megabytes.
const rowGroupRows = 65_536

// pageBuffer is the size of a column's page buffer.
const pageBuffer = 64 << 10

// writeBatch is how many rows are handed to the Parquet writer at a time.
const writeBatch = 256

// fileWriter writes one GeoParquet file.
type fileWriter struct {
	pw      *parquet.GenericWriter[Row]
	batch   []Row
	rows    int64
	crsName string
	crs     json.RawMessage
	mixed   bool
	crsSeen bool
	bboxes  extent
	faults  extent
	closed  bool
}

// newFileWriter returns a writer of a GeoParquet file to w. The geometry
// CRS of its rows is settled by the first row; rows in another CRS make
// the file's crs null ("unknown"), which [Sync] avoids by writing one
// file per CRS.
func newFileWriter(w io.Writer, comp compress.Codec, kv map[string]string) *fileWriter {
	opts := []parquet.WriterOption{
		parquet.Compression(comp),
		parquet.MaxRowsPerRowGroup(rowGroupRows),
		parquet.DataPageVersion(1), // read by every warehouse's loader
		// Pages of 64 KiB rather than 256: a writer holds one page per
		// column (49).
		parquet.PageBufferSize(pageBuffer),
		parquet.CreatedBy("geodlq", "warehouse", ""),
	}
	for k, v := range kv {
		opts = append(opts, parquet.KeyValueMetadata(k, v))
	}
	return &fileWriter{pw: parquet.NewGenericWriter[Row](w, opts...), batch: make([]Row, 0, writeBatch)}
}

// write adds r, whose geometry CRS resolves (through crs) to projjson.
func (f *fileWriter) write(r *Row, projjson json.RawMessage) error {
	switch {
	case !f.crsSeen:
		f.crsSeen, f.crsName, f.crs = true, r.GeometryCRS, projjson
	case r.GeometryCRS != f.crsName:
		f.mixed = true
	}
	if r.BBox != nil {
		f.bboxes.add(*r.BBox)
	}
	if r.FaultPoint != nil {
		f.faults.add(pointBox(r.FaultPoint))
	}
	f.batch = append(f.batch, *r)
	f.rows++
	if len(f.batch) == cap(f.batch) {
		return f.flushBatch()
	}
	return nil
}

func (f *fileWriter) flushBatch() error {
	if len(f.batch) == 0 {
		return nil
	}
	_, err := f.pw.Write(f.batch)
	clear(f.batch)
	f.batch = f.batch[:0]
	if err != nil {
		return fmt.Errorf("warehouse: write parquet: %w", err)
	}
	return nil
}

// close writes the geo metadata and the footer. It does not close the
// underlying writer.
func (f *fileWriter) close() error {
	if f.closed {
		return nil
	}
	f.closed = true
	if err := f.flushBatch(); err != nil {
		return err
	}
	crs := f.crs
	if f.mixed {
		crs = nullCRS
	}
	geo, err := buildGeo(crs, &f.bboxes, &f.faults, !f.mixed)
	if err != nil {
		return fmt.Errorf("warehouse: geo metadata: %w", err)
	}
	f.pw.SetKeyValueMetadata("geo", string(geo))
	if err := f.pw.Close(); err != nil {
		return fmt.Errorf("warehouse: close parquet: %w", err)
	}
	return nil
}

// pointBox returns the box of a WKB point written by appendWKBPoint.
func pointBox(wkb []byte) BBox {
	x, y := wkbPointXY(wkb)
	return BBox{XMin: x, YMin: y, XMax: x, YMax: y}
}
