package warehouse

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"time"

	"github.com/geodlq/geodlq/broker"
)

// Writer writes dead letters to one GeoParquet file: the rows of [Row],
// the geo metadata of fault_point and geometry_bbox, and their CRS. A
// file holds one CRS: when the rows are in several, the file's crs is
// null (unknown) and its geometry_crs column names each row's; [Sync]
// writes one file per CRS instead.
//
// A Writer is not safe for concurrent use.
type Writer struct {
	o     Options
	conv  converter
	crs   crsCache
	bw    *bufio.Writer
	fw    *fileWriter
	start time.Time
	mixed map[string]bool
}

// NewWriter returns a Writer to w. Close it to complete the file; it
// does not close w.
func NewWriter(w io.Writer, opts *Options) (*Writer, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if err := o.fill(); err != nil {
		return nil, err
	}
	c, err := codec(o.Compression)
	if err != nil {
		return nil, err
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	return &Writer{o: o, conv: converter{o: o.rowOptions()}, crs: crsCache{resolve: o.CRS}, bw: bw,
		fw: newFileWriter(bw, c, map[string]string{"geodlq": `{"format":"` + DatasetFormat + `"}`}), start: o.Now(), mixed: map[string]bool{}}, nil
}

// Write adds the record e. A record whose body is not a dlq.v1 envelope
// is not written: the error wraps [ErrNotEnvelope].
func (w *Writer) Write(ctx context.Context, e broker.Entry) error {
	env, err := envelopeOf(e)
	if err != nil {
		return err
	}
	var r Row
	w.conv.row(ctx, &r, e, env, w.start)
	w.mixed[r.GeometryCRS] = true
	return w.fw.write(&r, w.crs.projjson(r.GeometryCRS))
}

// Rows returns how many rows were written.
func (w *Writer) Rows() int64 { return w.fw.rows }

// CRSs returns the geometry CRSs of the rows written so far
// ("EPSG:3857", "OGC:CRS84", "" for unknown). More than one makes the
// file's crs null.
func (w *Writer) CRSs() []string {
	var out []string
	for k := range w.mixed {
		out = append(out, k)
	}
	return out
}

// Close writes the metadata and footer and flushes.
func (w *Writer) Close() error {
	if err := w.fw.close(); err != nil {
		return err
	}
	if err := w.bw.Flush(); err != nil {
		return fmt.Errorf("warehouse: %w", err)
	}
	return nil
}

// ExportOptions select the records of [Export].
type ExportOptions struct {
	Options
	// Destination exports one destination; "" every destination.
	Destination string
	// Filter selects records (see broker.Filter).
	Filter broker.Filter
	// ExcludeReplayed leaves out records that were replayed (acknowledged):
	// by default the export holds every dead letter the store keeps.
	ExcludeReplayed bool
}

// ExportResult reports what [Export] wrote.
type ExportResult struct {
	// Rows is the number of rows written.
	Rows int64
	// Skipped counts records that are not dlq.v1 envelopes.
	Skipped int64
}

// Export writes every record src lists for opts to w as one GeoParquet
// file, reading without leasing or altering anything. For a warehouse
// that is fed again and again, use [Sync].
func Export(ctx context.Context, src Lister, w io.Writer, opts *ExportOptions) (ExportResult, error) {
	var o ExportOptions
	if opts != nil {
		o = *opts
	}
	wr, err := NewWriter(w, &o.Options)
	if err != nil {
		return ExportResult{}, err
	}
	var res ExportResult
	lo := broker.ListOptions{Destination: o.Destination, Filter: o.Filter, IncludeReplayed: !o.ExcludeReplayed, Limit: broker.MaxListLimit}
	for {
		p, err := src.List(ctx, lo)
		if err != nil {
			return res, fmt.Errorf("warehouse: list: %w", err)
		}
		for _, e := range p.Entries {
			if err := wr.Write(ctx, e); err != nil {
				if isNotEnvelope(err) {
					res.Skipped++
					continue
				}
				return res, err
			}
		}
		if p.Next == "" || p.Next == lo.After {
			break
		}
		lo.After = p.Next
	}
	if err := wr.Close(); err != nil {
		return res, err
	}
	res.Rows = wr.Rows()
	return res, nil
}
