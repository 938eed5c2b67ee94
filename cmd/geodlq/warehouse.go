package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/offload"
	"github.com/geodlq/geodlq/warehouse"
	"github.com/geodlq/geodlq/warehouse/projcrs"
)

func newWarehouseCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "warehouse",
		Short: "Keep a GeoParquet dataset of the dead letters for BigQuery, Redshift, Synapse and DuckDB",
		Long: `warehouse keeps a Hive-partitioned GeoParquet 1.1 dataset of the dead letters
in a directory, for a warehouse to load:

  DIR/dead_lettered_date=2026-05-04/class=crs_mismatch/part-r000007-00003-epsg3857.parquet
  DIR/_geodlq/watermark.json

"sync" appends what the store received since the last sync; "status" shows
the watermark. Records are read without leasing or altering them. See
docs/operator-guide.md for the columns and the load commands.`,
		Args: noArgs,
	}
	cmd.AddCommand(newWarehouseSyncCmd(a), newWarehouseStatusCmd(a))
	return cmd
}

// syncReport is what warehouse sync writes with --json. Field names are
// stable.
type syncReport struct {
	Dir          string   `json:"dir"`
	Run          int64    `json:"run"`
	Rows         int64    `json:"rows"`
	Skipped      int64    `json:"skipped"`
	Files        []string `json:"files"`
	Recovered    bool     `json:"recovered"`
	MoreToSync   bool     `json:"more_to_sync"`
	DatasetRows  int64    `json:"dataset_rows"`
	DatasetFiles int64    `json:"dataset_files"`
}

func newWarehouseSyncCmd(a *app) *cobra.Command {
	var (
		classes, stages       []string
		epsg                  []int
		depth                 int
		withPayload, excluded bool
		settle                time.Duration
		maxRows, perFile      int64
		compression           string
		sourcePointer         string
		out                   *output
	)
	cmd := &cobra.Command{
		Use:   "sync DIR",
		Short: "Append the dead letters that are new since the last sync to the dataset in DIR",
		Long: `sync appends to the GeoParquet dataset in DIR the records of --store (every
destination, or --dest) that arrived since the last sync, one file per
partition (dead_lettered_date, class) and geometry CRS, and then moves the
watermark in DIR/_geodlq/watermark.json past them. Run it as often as you
like: each record lands exactly once. A run that is interrupted leaves no
file visible and the watermark as it was, or, past its commit point, is
completed by the next sync.

The dataset keeps the selection of its first sync (store, --dest, --class,
--stage, --epsg, --prefix-depth, --source-pointer, --with-payload,
--exclude-replayed); sync into a new directory to change it.

--source-pointer names the member that is the event's source, as list and
stats --source-pointer do (/properties/provider): the source_uri column holds
its value and source_prefix is cut from it. Default /source_uri.

--with-payload adds each event's original payload, restored (offloaded
parts fetched from --blobs) and verified: only for a warehouse that may hold
whatever producers put in payloads (personal data, customer geometries).`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) (err error) {
			if err := out.resolve(a, cmd); err != nil {
				return err
			}
			if depth < 1 {
				return usageFor(cmd, "--prefix-depth must be at least 1")
			}
			if err := checkSourcePointer(sourcePointer); err != nil {
				return usageFor(cmd, "%v", err)
			}
			var f broker.Filter
			for _, c := range classes {
				cl, err := classify.ParseClass(c)
				if err != nil {
					return usageFor(cmd, "--class %q: want one of %s", c, strings.Join(classNames(), ", "))
				}
				f.Classes = append(f.Classes, cl)
			}
			for _, st := range stages {
				sg, err := classify.ParseStage(st)
				if err != nil {
					return usageFor(cmd, "--stage %q: want one of %s", st, strings.Join(stageNames(), ", "))
				}
				f.Stages = append(f.Stages, sg)
			}
			f.EPSG = epsg
			ctx := cmd.Context()
			s, err := a.openStore(ctx, readOnly)
			if err != nil {
				return err
			}
			defer closeWith(&err, s)
			off, closeBlobs, err := a.openBlobs(ctx, readOnly)
			if err != nil {
				return err
			}
			defer closeBlobs()
			wo := a.warehouseOptions(off, withPayload, depth, compression)
			wo.SourcePointer = sourcePointer
			opts := &warehouse.SyncOptions{
				Options:      wo,
				Destinations: a.dests, Filter: f, ExcludeReplayed: excluded, StoreID: broker.Redact(a.storeURL),
				Settle: settle, MaxRows: maxRows, MaxRowsPerFile: perFile,
			}
			// One page of records at a time: see releasingLister.
			res, err := warehouse.Sync(ctx, &releasingLister{l: s}, args[0], opts)
			if err != nil {
				if errors.Is(err, warehouse.ErrSelectionChanged) || errors.Is(err, warehouse.ErrInvalidOptions) {
					return &usageError{err: err, cmd: cmd.CommandPath()}
				}
				return err
			}
			rep := syncReport{Dir: args[0], Run: res.Run, Rows: res.Rows, Skipped: res.Skipped, Files: res.Files,
				Recovered: res.Recovered, MoreToSync: res.Settling, DatasetRows: res.Watermark.Rows, DatasetFiles: res.Watermark.Files}
			if rep.Files == nil {
				rep.Files = []string{}
			}
			if out.json() {
				return writeJSON(a.stdout, rep)
			}
			if res.Recovered {
				fmt.Fprintln(a.stdout, "completed an interrupted sync first")
			}
			if res.Rows == 0 {
				fmt.Fprintf(a.stdout, "nothing new; %s holds %d rows in %d files\n", args[0], rep.DatasetRows, rep.DatasetFiles)
			} else {
				fmt.Fprintf(a.stdout, "run %d: %d rows in %d files; %s holds %d rows in %d files\n",
					res.Run, res.Rows, len(res.Files), args[0], rep.DatasetRows, rep.DatasetFiles)
				for _, f := range res.Files {
					fmt.Fprintln(a.stdout, "  "+f)
				}
			}
			if res.Skipped > 0 {
				fmt.Fprintf(a.stdout, "%d records are not dlq.v1 envelopes and were skipped\n", res.Skipped)
			}
			if res.Settling {
				fmt.Fprintf(a.stdout, "more to sync (records younger than --settle %s, or --max-rows reached)\n", settle)
			}
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringSliceVar(&classes, "class", nil, "failure classes to keep (the seed's warehouse path: crs_mismatch,schema_violation)")
	fs.StringSliceVar(&stages, "stage", nil, "failed stages to keep")
	fs.IntSliceVar(&epsg, "epsg", nil, "EPSG codes to keep")
	fs.IntVar(&depth, "prefix-depth", 1, "parts of source_uri kept in source_prefix (1: scheme://host), as stats --prefix-depth")
	fs.StringVar(&sourcePointer, "source-pointer", "", "JSON pointer to the event's source, whose value fills source_uri and source_prefix, as list and stats --source-pointer (default /source_uri; /properties/provider)")
	fs.BoolVar(&withPayload, "with-payload", false, "add each event's original payload, restored and verified (sensitive data: see --help)")
	fs.BoolVar(&excluded, "exclude-replayed", false, "leave out records already replayed (default: the whole history)")
	fs.DurationVar(&settle, "settle", time.Minute, "leave records younger than this for the next sync (a SQL store can commit a lower id after a higher one)")
	fs.Int64Var(&maxRows, "max-rows", 0, "stop after this many rows; the next sync goes on (0: no limit)")
	fs.Int64Var(&perFile, "max-rows-per-file", 1_000_000, "start a new file in a partition past this many rows")
	fs.StringVar(&compression, "compression", warehouse.CompressionSnappy, "snappy, zstd, gzip or none")
	out = addOutput(cmd, fmtTable, fmtJSON)
	return cmd
}

func newWarehouseStatusCmd(a *app) *cobra.Command {
	var out *output
	cmd := &cobra.Command{
		Use:   "status DIR",
		Short: "Show the watermark of the dataset in DIR",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.resolve(a, cmd); err != nil {
				return err
			}
			wm, err := warehouse.ReadWatermark(args[0])
			if errors.Is(err, os.ErrNotExist) {
				return usageFor(cmd, "%s: not a geodlq warehouse dataset (no %s/%s)", args[0], warehouse.MetaDir, warehouse.WatermarkFile)
			}
			if err != nil {
				return err
			}
			_, cerr := os.Stat(filepath.Join(args[0], warehouse.MetaDir, "commit.json"))
			pending := cerr == nil
			if out.json() {
				return writeJSON(a.stdout, struct {
					*warehouse.Watermark
					CommitPending bool `json:"commit_pending"`
				}{wm, pending})
			}
			fmt.Fprintf(a.stdout, "%s: %d rows in %d files, %d runs, updated %s\n", args[0], wm.Rows, wm.Files, wm.Run, stamp(wm.UpdatedAt))
			fmt.Fprintf(a.stdout, "store %s, prefix depth %d, payloads %v, replayed records %v\n",
				orDash(wm.Selection.StoreID), wm.Selection.PrefixDepth, wm.Selection.WithPayload, wm.Selection.IncludeReplayed)
			if r := wm.LastRun; r != nil {
				fmt.Fprintf(a.stdout, "last run %d: %d rows in %d files, %s\n", r.Run, r.Rows, len(r.Files), stamp(r.FinishedAt))
			}
			if pending {
				fmt.Fprintln(a.stdout, "an interrupted sync is waiting to be completed: run warehouse sync")
			}
			return nil
		},
	}
	out = addOutput(cmd, fmtTable, fmtJSON)
	return cmd
}

// warehouseOptions are the row and file options export and sync share.
func (a *app) warehouseOptions(off *offload.Offloader, withPayload bool, depth int, compression string) warehouse.Options {
	return warehouse.Options{WithPayload: withPayload, Fetcher: fetcherOf(off), PrefixDepth: depth, Compression: compression,
		CRS: projcrs.New().Resolve, Logger: a.logger()}
}

// exportParquet writes the selected records as one GeoParquet file to out
// ("-": standard output), through a temporary file renamed on success.
func (a *app) exportParquet(ctx context.Context, s *broker.Store, sel selection, off *offload.Offloader, out string, withPayload bool,
	wrap func(func(item) error) func(item) error) (n int, err error) {
	if out == "-" {
		out = ""
	}
	var w io.Writer = a.stdout
	var tmp *os.File
	if out != "" && out != "-" {
		if tmp, err = createTemp(out); err != nil {
			return 0, err
		}
		defer func() {
			if tmp != nil {
				tmp.Close()
				os.Remove(tmp.Name())
			}
		}()
		w = tmp
	}
	wr, err := warehouse.NewWriter(w, &warehouse.Options{WithPayload: withPayload, Fetcher: fetcherOf(off), SourcePointer: sel.filter.SourcePointer,
		CRS: projcrs.New().Resolve, Logger: a.logger()})
	if err != nil {
		return 0, err
	}
	err = a.eachRecord(ctx, s, sel, wrap(func(it item) error {
		if it.env == nil {
			return nil
		}
		return wr.Write(ctx, it.Entry)
	}))
	if err != nil {
		return 0, err
	}
	if err := wr.Close(); err != nil {
		return 0, err
	}
	if crs := wr.CRSs(); len(crs) > 1 {
		fmt.Fprintf(a.stderr, "geodlq: the rows are in %d CRSs, so the file's geo metadata says crs null; its geometry_crs column names each row's (warehouse sync writes one file per CRS)\n", len(crs))
	}
	if tmp != nil {
		if err := tmp.Sync(); err != nil {
			return 0, err
		}
		if err := tmp.Close(); err != nil {
			return 0, err
		}
		if err := os.Rename(tmp.Name(), out); err != nil {
			return 0, err
		}
		tmp = nil
	}
	return int(wr.Rows()), nil
}

// fetcherOf keeps a nil offloader a nil interface.
func fetcherOf(off *offload.Offloader) interface {
	Fetch(context.Context, offload.Ref) ([]byte, error)
} {
	if off == nil {
		return nil
	}
	return off
}
