package warehouse

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/parquet-go/parquet-go/compress"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/envelope"
)

// SyncOptions configure [Sync].
type SyncOptions struct {
	Options
	// Destinations are the destinations to read, each with a cursor of
	// its own; empty reads every destination the store lists, as one.
	Destinations []string
	// Filter selects records by class, stage, reason kind, EPSG code or
	// time (Since, Until); IDs, EventIDs and BBox are refused. The seed's
	// warehouse path is Classes: crs_mismatch and schema_violation.
	Filter broker.Filter
	// ExcludeReplayed leaves out records already replayed. By default
	// they are exported too: the warehouse is the history of failures,
	// and a record replayed before the next sync would otherwise never
	// reach it.
	ExcludeReplayed bool
	// StoreID names the store (its URL without credentials): a dataset
	// refuses to be synced from another store.
	StoreID string
	// Settle leaves records younger than this (by the store's
	// published_at, else dead_lettered_at) for the next run. A store that
	// numbers records before it commits them (PostgreSQL, MySQL) can
	// commit a lower number after a higher one is visible; a settle delay
	// longer than its longest write makes the cursor never pass a record
	// that is still to appear. Default 0; the geodlq command uses 1m.
	Settle time.Duration
	// MaxRows ends a run after this many rows (0: no limit); the next run
	// goes on from there. For a first sync of a large store in steps.
	MaxRows int64
	// MaxRowsPerFile starts a new file in a partition past this many rows.
	// Default 1,000,000.
	MaxRowsPerFile int64
	// MaxBufferBytes bounds the rows a run holds in memory before it
	// writes them (an estimate of their size). A run gathers each
	// partition's rows and writes a partition's file when it has
	// MaxRowsPerFile rows, when the run ends, or, past this budget, when
	// it is the largest partition held — so records that arrive out of
	// time order make no more files, only fewer large ones. Default
	// 256 MiB.
	MaxBufferBytes int64
	// PageSize is the List page size. Default broker.MaxListLimit.
	PageSize int

	// hook, in tests, is called at each step of a commit and may fail it.
	hook func(step string) error
	// decode, in tests and benchmarks, replaces fastEnvelopeOf (with
	// envelopeOf, the reference).
	decode func(broker.Entry) (*envelope.Envelope, error)
}

// SyncResult reports a [Sync].
type SyncResult struct {
	// Run is the run's number; 0 when it added no files.
	Run int64
	// Rows is how many rows it added.
	Rows int64
	// Skipped counts records passed over that are not dlq.v1 envelopes.
	Skipped int64
	// Files are the data files it added, relative to the dataset
	// directory ("/" separators).
	Files []string
	// Recovered is true when the sync first completed a run that had been
	// interrupted after its commit record was written.
	Recovered bool
	// Settling is true when the run stopped at a record younger than
	// SyncOptions.Settle (or at MaxRows): there is more to sync.
	Settling bool
	// Watermark is the dataset's watermark after the sync.
	Watermark *Watermark
}

// commitRecord is a run's decision to commit: written (atomically) once
// every file is complete in the staging area, it lists the renames still
// to do and the watermark to write after them. A sync that finds one
// completes it before anything else.
type commitRecord struct {
	Format    string       `json:"format"`
	Run       int64        `json:"run"`
	Files     []commitFile `json:"files"`
	Watermark *Watermark   `json:"watermark"`
}

type commitFile struct {
	Staged string `json:"staged"` // relative to the staging directory
	Path   string `json:"path"`   // relative to the dataset, "/" separators
	Rows   int64  `json:"rows"`
}

// Sync appends to the Hive-partitioned GeoParquet dataset in dir the
// records src has listed since the last sync, and moves the watermark
// past them. It reads without leasing or altering anything.
//
// Layout:
//
//	dir/dead_lettered_date=2026-05-04/class=crs_mismatch/part-r000007-00003-epsg3857.parquet
//	dir/_geodlq/watermark.json
//
// A run writes its files under dir/_geodlq/staging, where no *.parquet
// glob of the dataset sees them, then writes a commit record, renames
// the files into place and writes the watermark last. Killed before the
// commit record, a run leaves nothing visible and the watermark as it
// was; killed after it, the next Sync (or [Recover]) completes the
// renames and the watermark before it reads the store. A record is in
// the dataset exactly once: a run starts where the committed watermark
// says, and a run that did not commit left no file.
//
// Two syncs of one dataset exclude each other (ErrLocked). A dataset
// keeps its selection: syncing it with another one fails with
// [ErrSelectionChanged].
func Sync(ctx context.Context, src Lister, dir string, opts *SyncOptions) (res *SyncResult, err error) {
	var o SyncOptions
	if opts != nil {
		o = *opts
	}
	if err := o.Options.fill(); err != nil {
		return nil, err
	}
	if o.MaxRows < 0 || o.MaxRowsPerFile < 0 || o.MaxBufferBytes < 0 || o.PageSize < 0 || o.Settle < 0 {
		return nil, fmt.Errorf("negative limit: %w", ErrInvalidOptions)
	}
	if o.MaxRowsPerFile == 0 {
		o.MaxRowsPerFile = 1_000_000
	}
	if o.MaxBufferBytes == 0 {
		o.MaxBufferBytes = 256 << 20
	}
	if o.PageSize == 0 {
		o.PageSize = broker.MaxListLimit
	}
	sel, err := selectionOf(&o)
	if err != nil {
		return nil, err
	}
	comp, err := codec(o.Compression)
	if err != nil {
		return nil, err
	}
	meta := filepath.Join(dir, MetaDir)
	if err := os.MkdirAll(meta, 0o755); err != nil {
		return nil, fmt.Errorf("warehouse: %w", err)
	}
	unlock, err := lockDataset(filepath.Join(meta, lockFile))
	if err != nil {
		return nil, fmt.Errorf("warehouse: %w", err)
	}
	defer unlock()

	res = &SyncResult{}
	if res.Recovered, err = recoverDataset(dir, o.hook); err != nil {
		return nil, err
	}
	wm, err := ReadWatermark(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		wm = &Watermark{Format: DatasetFormat, Selection: sel, Cursors: map[string]Cursor{}}
	case err != nil:
		return nil, fmt.Errorf("warehouse: %w", err)
	case !wm.Selection.equal(sel):
		return nil, fmt.Errorf("%w: %s holds %s; sync into a new directory to change it", ErrSelectionChanged, dir, wm.Selection.diff(sel))
	}
	if wm.Cursors == nil {
		wm.Cursors = map[string]Cursor{}
	}

	if o.decode == nil {
		o.decode = fastEnvelopeOf
	}
	s := &syncer{o: &o, src: src, dir: dir, run: wm.Run + 1, comp: comp, start: o.Now(),
		conv: converter{o: o.rowOptions()}, crs: crsCache{resolve: o.CRS}, bufs: map[partKey]*partBuf{}}
	s.staging = filepath.Join(meta, stagingDir, "run-"+strconv.FormatInt(s.run, 10))
	if err := os.RemoveAll(filepath.Join(meta, stagingDir)); err != nil {
		return nil, fmt.Errorf("warehouse: clear staging: %w", err)
	}
	if err := os.MkdirAll(s.staging, 0o755); err != nil {
		return nil, fmt.Errorf("warehouse: %w", err)
	}
	keepStaging := false // once the commit record is written, its files are the commit's
	defer func() {
		if !keepStaging {
			_ = os.RemoveAll(filepath.Join(meta, stagingDir))
		}
	}()

	next := &Watermark{Format: DatasetFormat, Selection: sel, Run: wm.Run, Rows: wm.Rows, Files: wm.Files,
		Skipped: wm.Skipped, Cursors: map[string]Cursor{}, LastRun: wm.LastRun}
	dests := sel.Destinations
	if len(dests) == 0 {
		dests = []string{""}
	}
	for _, d := range dests {
		cur, stopped, err := s.scan(ctx, d, wm.Cursors[d])
		if err != nil {
			return nil, err
		}
		next.Cursors[d] = cur
		res.Settling = res.Settling || stopped
	}
	files, err := s.finish()
	if err != nil {
		return nil, err
	}
	res.Rows, res.Skipped = s.rows, s.skipped
	next.Skipped += s.skipped
	if len(files) == 0 {
		if cursorsEqual(wm.Cursors, next.Cursors) && s.skipped == 0 {
			res.Watermark = wm
			return res, nil
		}
		// Only records that are not envelopes were passed over, or the
		// cursor moved past records the filter dropped: no files, a new
		// watermark.
		next.UpdatedAt = o.Now().UTC()
		b, err := json.MarshalIndent(next, "", "  ")
		if err != nil {
			return nil, err
		}
		if err := writeFileAtomic(filepath.Join(meta, WatermarkFile), b); err != nil {
			return nil, fmt.Errorf("warehouse: write watermark: %w", err)
		}
		res.Watermark = next
		return res, nil
	}
	next.Run = s.run
	next.Rows += s.rows
	next.Files += int64(len(files))
	info := &RunInfo{Run: s.run, StartedAt: s.start.UTC(), FinishedAt: o.Now().UTC(), Rows: s.rows}
	for _, f := range files {
		info.Files = append(info.Files, f.Path)
	}
	next.LastRun = info
	next.UpdatedAt = info.FinishedAt
	cr := &commitRecord{Format: DatasetFormat, Run: s.run, Files: files, Watermark: next}
	b, err := json.MarshalIndent(cr, "", "  ")
	if err != nil {
		return nil, err
	}
	keepStaging = true // even if the write fails: it may have been renamed into place
	if err := writeFileAtomic(filepath.Join(meta, commitName), b); err != nil {
		return nil, fmt.Errorf("warehouse: write commit record: %w", err)
	}
	if err := step(o.hook, "committed"); err != nil {
		return nil, err
	}
	if err := applyCommit(dir, cr, o.hook); err != nil {
		return nil, err
	}
	keepStaging = false
	o.Logger.Info("geodlq warehouse: sync committed", slog.String("dir", dir), slog.Int64("run", s.run),
		slog.Int64("rows", s.rows), slog.Int("files", len(files)), slog.Int64("skipped", s.skipped))
	res.Run, res.Files, res.Watermark = s.run, info.Files, next
	return res, nil
}

// Recover completes a sync of the dataset in dir that was interrupted
// after it decided to commit, and clears what an interrupted run left in
// the staging area. [Sync] does it first thing; Recover is for tools
// that read a dataset without syncing it. It reports whether a commit
// was completed.
func Recover(dir string) (bool, error) {
	meta := filepath.Join(dir, MetaDir)
	if _, err := os.Stat(meta); errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	unlock, err := lockDataset(filepath.Join(meta, lockFile))
	if err != nil {
		return false, fmt.Errorf("warehouse: %w", err)
	}
	defer unlock()
	done, err := recoverDataset(dir, nil)
	if err != nil {
		return done, err
	}
	return done, os.RemoveAll(filepath.Join(meta, stagingDir))
}

func recoverDataset(dir string, hook func(string) error) (bool, error) {
	var cr commitRecord
	err := readJSON(filepath.Join(dir, MetaDir, commitName), &cr)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("warehouse: %w", err)
	}
	if cr.Format != DatasetFormat || cr.Watermark == nil {
		return false, fmt.Errorf("warehouse: %s: %w", commitName, ErrCorrupt)
	}
	if err := applyCommit(dir, &cr, hook); err != nil {
		return false, err
	}
	return true, nil
}

// applyCommit moves a committed run's files into place, writes its
// watermark, and removes the commit record. It may run again after being
// interrupted at any point: a file already in place is left there.
func applyCommit(dir string, cr *commitRecord, hook func(string) error) error {
	meta := filepath.Join(dir, MetaDir)
	staging := filepath.Join(meta, stagingDir, "run-"+strconv.FormatInt(cr.Run, 10))
	dirs := map[string]bool{}
	for _, f := range cr.Files {
		if !validDataPath(f.Path) || f.Staged != filepath.Base(f.Staged) {
			return fmt.Errorf("warehouse: commit record names %q: %w", f.Path, ErrCorrupt)
		}
		final := filepath.Join(dir, filepath.FromSlash(f.Path))
		staged := filepath.Join(staging, f.Staged)
		if _, err := os.Stat(staged); err != nil {
			if _, ferr := os.Stat(final); ferr == nil {
				continue // moved before the interruption
			}
			return fmt.Errorf("warehouse: %s is neither staged nor in place: %w", f.Path, ErrCorrupt)
		}
		if err := os.MkdirAll(filepath.Dir(final), 0o755); err != nil {
			return fmt.Errorf("warehouse: %w", err)
		}
		if err := os.Rename(staged, final); err != nil {
			return fmt.Errorf("warehouse: %w", err)
		}
		dirs[filepath.Dir(final)] = true
		if err := step(hook, "renamed"); err != nil {
			return err
		}
	}
	for d := range dirs {
		if err := syncDir(d); err != nil {
			return fmt.Errorf("warehouse: %w", err)
		}
	}
	b, err := json.MarshalIndent(cr.Watermark, "", "  ")
	if err != nil {
		return err
	}
	if err := writeFileAtomic(filepath.Join(meta, WatermarkFile), b); err != nil {
		return fmt.Errorf("warehouse: write watermark: %w", err)
	}
	if err := step(hook, "watermark"); err != nil {
		return err
	}
	if err := os.Remove(filepath.Join(meta, commitName)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("warehouse: %w", err)
	}
	return syncDir(meta)
}

// validDataPath reports whether p is a data file path a sync writes:
// dead_lettered_date=…/class=…/part-….parquet, nothing that climbs out.
func validDataPath(p string) bool {
	parts := strings.Split(p, "/")
	return len(parts) == 3 && path.Clean(p) == p && !path.IsAbs(p) &&
		strings.HasPrefix(parts[0], "dead_lettered_date=") && strings.HasPrefix(parts[1], "class=") &&
		strings.HasPrefix(parts[2], "part-") && strings.HasSuffix(parts[2], ".parquet")
}

func step(hook func(string) error, name string) error {
	if hook == nil {
		return nil
	}
	return hook(name)
}

func cursorsEqual(a, b map[string]Cursor) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// partKey is a file's partition and geometry CRS.
type partKey struct {
	date, class, crs string
}

// partBuf holds a partition's rows until they are written.
type partBuf struct {
	rows  []Row
	bytes int64
}

type syncer struct {
	o        *SyncOptions
	src      Lister
	dir      string
	staging  string
	run      int64
	comp     compress.Codec
	start    time.Time
	conv     converter
	crs      crsCache
	bufs     map[partKey]*partBuf
	buffered int64
	done     []commitFile
	seq      int
	rows     int64
	skipped  int64
}

// scan reads dest from cur and writes what it finds; it returns the
// cursor to resume from and whether it stopped early (settle or MaxRows).
func (s *syncer) scan(ctx context.Context, dest string, cur Cursor) (Cursor, bool, error) {
	after := cur.After
	seen := map[[2]string]bool{}
	for _, k := range cur.Seen {
		seen[k] = true
	}
	lo := broker.ListOptions{Destination: dest, Filter: s.o.Filter, IncludeReplayed: !s.o.ExcludeReplayed, Limit: s.o.PageSize}
	now := s.o.Now()
	for {
		if err := ctx.Err(); err != nil {
			return cur, false, err
		}
		lo.After = after
		p, err := s.src.List(ctx, lo)
		if err != nil {
			return cur, false, fmt.Errorf("warehouse: list %q: %w", dest, err)
		}
		var pageSeen [][2]string
		stop := false
		for _, e := range p.Entries {
			if e.Record == nil {
				continue
			}
			k := [2]string{e.Record.Destination, e.Record.ID}
			if seen[k] {
				pageSeen = append(pageSeen, k)
				continue
			}
			if (s.o.MaxRows > 0 && s.rows >= s.o.MaxRows) || s.unsettled(e, now) {
				stop = true
				break
			}
			if err := s.add(ctx, e); err != nil {
				return cur, false, err
			}
			pageSeen = append(pageSeen, k)
		}
		if stop || p.Next == "" || p.Next == after {
			return Cursor{After: after, Seen: pageSeen}, stop, nil
		}
		after = p.Next
		seen = nil
	}
}

// unsettled reports whether e is younger than the settle delay.
func (s *syncer) unsettled(e broker.Entry, now time.Time) bool {
	if s.o.Settle <= 0 {
		return false
	}
	t := e.PublishedAt
	if t.IsZero() {
		if env, err := s.o.decode(e); err == nil {
			t = env.DeadLetteredAt
		}
	}
	return !t.IsZero() && now.Sub(t) < s.o.Settle
}

func (s *syncer) add(ctx context.Context, e broker.Entry) error {
	env, err := s.o.decode(e)
	if err != nil {
		s.skipped++
		return nil
	}
	var r Row
	s.conv.row(ctx, &r, e, env, s.start)
	k := partKey{date: r.DeadLetteredAt.Format(time.DateOnly), class: pathValue(r.FailureClass), crs: r.GeometryCRS}
	b := s.bufs[k]
	if b == nil {
		b = &partBuf{}
		s.bufs[k] = b
	}
	size := rowSize(&r)
	b.rows = append(b.rows, r)
	b.bytes += size
	s.buffered += size
	s.rows++
	if int64(len(b.rows)) >= s.o.MaxRowsPerFile {
		return s.write(k)
	}
	for s.buffered > s.o.MaxBufferBytes {
		var big partKey
		var most int64 = -1
		for k, b := range s.bufs {
			if b.bytes > most {
				big, most = k, b.bytes
			}
		}
		if err := s.write(big); err != nil {
			return err
		}
	}
	return nil
}

// rowSize estimates the memory a buffered row holds.
func rowSize(r *Row) int64 {
	n := 512 + len(r.EventID) + len(r.IdempotencyKey) + len(r.Reason) + len(r.ErrorMessage) + len(r.SourceCRS) +
		len(r.SourceURI) + len(r.TraceID) + len(r.FaultPoint) + len(r.GeometryBBox) + len(r.Payload) + len(r.RecordID)
	return int64(n)
}

// pathValue keeps a partition value to [a-z0-9_-]: classes are, but the
// path must not depend on it.
func pathValue(v string) string {
	for i := 0; i < len(v); i++ {
		c := v[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return "other"
		}
	}
	if v == "" {
		return "other"
	}
	return v
}

// write writes the rows held for k to a new staged file.
func (s *syncer) write(k partKey) (err error) {
	b := s.bufs[k]
	delete(s.bufs, k)
	if b == nil || len(b.rows) == 0 {
		return nil
	}
	s.buffered -= b.bytes
	s.seq++
	staged := strconv.Itoa(s.seq) + ".parquet.tmp"
	f, err := os.OpenFile(filepath.Join(s.staging, staged), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("warehouse: %w", err)
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("warehouse: write %s: %w", staged, cerr)
		}
	}()
	kv := map[string]string{"geodlq": fmt.Sprintf(`{"format":%q,"run":%d,"geometry_crs":%q}`, DatasetFormat, s.run, k.crs)}
	// The Parquet writer buffers its output (parquet.WriteBufferSize).
	fw := newFileWriter(f, s.comp, kv)
	projjson := s.crs.projjson(k.crs)
	for i := range b.rows {
		if err := fw.write(&b.rows[i], projjson); err != nil {
			return err
		}
	}
	if err := fw.close(); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("warehouse: write %s: %w", staged, err)
	}
	p := "dead_lettered_date=" + k.date + "/class=" + k.class + "/" + fileName(s.run, s.seq, k.crs)
	s.done = append(s.done, commitFile{Staged: staged, Path: p, Rows: fw.rows})
	s.o.Logger.Debug("geodlq warehouse: file staged", slog.String("path", p), slog.Int64("rows", fw.rows))
	return nil
}

// finish writes every partition still held and returns the run's files,
// by path.
func (s *syncer) finish() ([]commitFile, error) {
	keys := make([]partKey, 0, len(s.bufs))
	for k := range s.bufs {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b partKey) int {
		return strings.Compare(a.date+"/"+a.class+"/"+a.crs, b.date+"/"+b.class+"/"+b.crs)
	})
	for _, k := range keys {
		if err := s.write(k); err != nil {
			return nil, err
		}
	}
	slices.SortFunc(s.done, func(a, b commitFile) int { return strings.Compare(a.Path, b.Path) })
	return s.done, nil
}
