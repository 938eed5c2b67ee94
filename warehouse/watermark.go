package warehouse

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/geodlq/geodlq/broker"
)

// DatasetFormat identifies the layout and watermark format of a dataset.
const DatasetFormat = "geodlq.warehouse.v1"

// Names inside a dataset directory. Hive-style readers skip names that
// start with "_" or ".", and the data files are the only *.parquet.
const (
	// MetaDir holds the watermark, the commit record and the staging
	// area.
	MetaDir = "_geodlq"
	// WatermarkFile is the watermark, inside MetaDir.
	WatermarkFile = "watermark.json"
	commitName    = "commit.json"
	stagingDir    = "staging"
	lockFile      = "lock"
)

// Watermark is a dataset's state: what it holds and where each
// destination's next sync starts. It lives in _geodlq/watermark.json and
// is replaced (written to a temporary name, then renamed) only after every
// file of a run is in place.
type Watermark struct {
	// Format is [DatasetFormat].
	Format string `json:"format"`
	// Selection is what the dataset holds; every sync must ask for the
	// same.
	Selection Selection `json:"selection"`
	// Run is the number of the last committed run that wrote files.
	Run int64 `json:"run"`
	// Rows is the number of rows in the dataset's files.
	Rows int64 `json:"rows"`
	// Files is the number of data files.
	Files int64 `json:"files"`
	// Skipped counts records passed over because they are not dlq.v1
	// envelopes.
	Skipped int64 `json:"skipped"`
	// Cursors holds, per destination ("" when every destination is read
	// as one), where the next sync starts.
	Cursors map[string]Cursor `json:"cursors"`
	// UpdatedAt is when the watermark was written.
	UpdatedAt time.Time `json:"updated_at"`
	// LastRun describes the last run that wrote files.
	LastRun *RunInfo `json:"last_run,omitempty"`
}

// Cursor is where a sync resumes reading a destination: the store's list
// cursor of the page it stopped in, and the records of that page already
// in the dataset.
type Cursor struct {
	// After is the store's opaque cursor (broker.ListOptions.After).
	After string `json:"after,omitempty"`
	// Seen lists, as [destination, record id] pairs, the records of the
	// page that starts at After that are already exported.
	Seen [][2]string `json:"seen,omitempty"`
}

// RunInfo describes one sync run that wrote files.
type RunInfo struct {
	// Run is its number, 1 for the first.
	Run int64 `json:"run"`
	// StartedAt and FinishedAt bound it; StartedAt is every row's exported_at.
	StartedAt  time.Time `json:"started_at"`
	FinishedAt time.Time `json:"finished_at"`
	// Rows is how many rows it added.
	Rows int64 `json:"rows"`
	// Files are the data files it added, relative to the dataset
	// directory, with "/" separators: what an incremental load loads.
	Files []string `json:"files"`
}

// Selection is what a dataset holds.
type Selection struct {
	// StoreID names the store (SyncOptions.StoreID).
	StoreID string `json:"store_id,omitempty"`
	// Destinations are the destinations read, each with its cursor; empty
	// means every destination, read as one.
	Destinations []string `json:"destinations,omitempty"`
	// Classes, Stages, ReasonKinds and EPSG are the filter's lists.
	Classes     []string `json:"classes,omitempty"`
	Stages      []string `json:"stages,omitempty"`
	ReasonKinds []string `json:"reason_kinds,omitempty"`
	EPSG        []int    `json:"epsg,omitempty"`
	// Since and Until are the filter's time bounds, if any.
	Since *time.Time `json:"since,omitempty"`
	Until *time.Time `json:"until,omitempty"`
	// IncludeReplayed is true unless replayed records are excluded.
	IncludeReplayed bool `json:"include_replayed"`
	// PrefixDepth is the source_prefix depth.
	PrefixDepth int `json:"prefix_depth"`
	// SourcePointer is the pointer the source_uri column reads; empty
	// for the default (/source_uri).
	SourcePointer string `json:"source_pointer,omitempty"`
	// WithPayload is true when rows carry payloads.
	WithPayload bool `json:"with_payload"`
}

func selectionOf(o *SyncOptions) (Selection, error) {
	f := o.Filter
	if len(f.IDs) > 0 || len(f.EventIDs) > 0 || f.BBox != nil {
		return Selection{}, fmt.Errorf("a sync's filter selects by class, stage, reason kind, EPSG and time only (IDs, EventIDs and BBox pick records, not a table): %w", ErrInvalidOptions)
	}
	if err := f.Validate(); err != nil {
		return Selection{}, fmt.Errorf("%w: %w", ErrInvalidOptions, err)
	}
	s := Selection{StoreID: o.StoreID, IncludeReplayed: !o.ExcludeReplayed, PrefixDepth: o.PrefixDepth, WithPayload: o.WithPayload}
	if o.SourcePointer != broker.DefaultSourcePointer {
		s.SourcePointer = o.SourcePointer
	}
	s.Destinations = sortedUnique(o.Destinations)
	for _, d := range s.Destinations {
		if err := broker.ValidDestination(d); err != nil {
			return Selection{}, fmt.Errorf("%w: %w", ErrInvalidOptions, err)
		}
	}
	for _, c := range f.Classes {
		s.Classes = append(s.Classes, string(c))
	}
	for _, st := range f.Stages {
		s.Stages = append(s.Stages, string(st))
	}
	for _, k := range f.ReasonKinds {
		s.ReasonKinds = append(s.ReasonKinds, string(k))
	}
	s.Classes, s.Stages, s.ReasonKinds = sortedUnique(s.Classes), sortedUnique(s.Stages), sortedUnique(s.ReasonKinds)
	s.EPSG = slices.Compact(slices.Sorted(slices.Values(f.EPSG)))
	if !f.Since.IsZero() {
		t := f.Since.UTC()
		s.Since = &t
	}
	if !f.Until.IsZero() {
		t := f.Until.UTC()
		s.Until = &t
	}
	return s, nil
}

func sortedUnique(ss []string) []string {
	if len(ss) == 0 {
		return nil
	}
	return slices.Compact(slices.Sorted(slices.Values(ss)))
}

func (s Selection) equal(t Selection) bool {
	a, _ := json.Marshal(s)
	b, _ := json.Marshal(t)
	return string(a) == string(b)
}

// diff says how t differs from s, member by member in their JSON names:
// `source_pointer "/properties/provider", this sync unset (the default)`.
func (s Selection) diff(t Selection) string {
	var a, b map[string]json.RawMessage
	ja, _ := json.Marshal(s)
	jb, _ := json.Marshal(t)
	_ = json.Unmarshal(ja, &a)
	_ = json.Unmarshal(jb, &b)
	keys := slices.Sorted(maps.Keys(a))
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	val := func(v json.RawMessage) string {
		if v == nil {
			return "unset (the default)"
		}
		return string(v)
	}
	var out []string
	for _, k := range keys {
		if string(a[k]) != string(b[k]) {
			out = append(out, fmt.Sprintf("%s %s, this sync %s", k, val(a[k]), val(b[k])))
		}
	}
	return strings.Join(out, "; ")
}

// maxMetaBytes bounds the metadata files read back (a watermark holds at
// most a page of seen records per destination, a commit record a run's
// file list).
const maxMetaBytes = 64 << 20

// ReadWatermark returns the watermark of the dataset in dir. A directory
// without one (never synced) is an error wrapping fs.ErrNotExist; one
// that cannot be read as a watermark wraps [ErrCorrupt].
func ReadWatermark(dir string) (*Watermark, error) {
	var w Watermark
	if err := readJSON(filepath.Join(dir, MetaDir, WatermarkFile), &w); err != nil {
		return nil, err
	}
	if w.Format != DatasetFormat {
		return nil, fmt.Errorf("%s: format %q, want %q: %w", filepath.Join(dir, MetaDir, WatermarkFile), w.Format, DatasetFormat, ErrCorrupt)
	}
	return &w, nil
}

func readJSON(path string, v any) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if st.Size() > maxMetaBytes {
		return fmt.Errorf("%s: %d bytes (limit %d): %w", path, st.Size(), maxMetaBytes, ErrCorrupt)
	}
	b := make([]byte, st.Size())
	if _, err := f.ReadAt(b, 0); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w: %w", path, ErrCorrupt, err)
	}
	return nil
}

// writeFileAtomic writes data to path through a temporary file in the
// same directory, synced, then renamed over path, and syncs the
// directory: readers see the old content or the new, never a part.
func writeFileAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	// 0644 less the umask, as an ordinary create (os.CreateTemp's 0600
	// would keep other readers of the warehouse out).
	tmp, err := os.OpenFile(filepath.Join(dir, "."+filepath.Base(path)+"."+strconv.FormatInt(time.Now().UnixNano(), 36)+".tmp"),
		os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	name := tmp.Name()
	defer os.Remove(name) // after a successful rename, a no-op
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(name, path); err != nil {
		return err
	}
	return syncDir(dir)
}

// syncDir makes the directory's entries (renames, new files) durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, fs.ErrInvalid) {
		return err
	}
	return nil
}

// fileName is a data file's name: the run, a sequence number and the
// geometry CRS, so that every run's files are new names.
func fileName(run int64, seq int, crs string) string {
	tag := "unknowncrs"
	switch {
	case crs == CRS84:
		tag = "crs84"
	case crs != "":
		if n, ok := parseEPSGName(crs); ok {
			tag = "epsg" + strconv.Itoa(n)
		}
	}
	return fmt.Sprintf("part-r%06d-%05d-%s.parquet", run, seq, tag)
}
