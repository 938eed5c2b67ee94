package offload

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"iter"
	"log/slog"
	"strconv"
	"strings"
	"time"
)

// Garbage collection.
//
// Blob keys are content-addressed, so one blob serves every envelope whose
// geometry (or payload) has the same bytes: purging one dead-letter record
// must not delete a blob another record still needs. [Offloader.Sweep] is a
// mark-and-sweep over the offloader's prefix; what is live is whatever the
// caller's enumeration of kept envelopes says (package offload/gcref turns
// envelopes into offload URIs).

// ObjectInfo describes one stored object, as a [Lister] reports it.
type ObjectInfo struct {
	// Key is the object's key, as the [Store] methods take it.
	Key string
	// Size is the object's length in bytes.
	Size int64
	// ModTime is when the object was last written, by the store's clock;
	// zero when unknown ([Offloader.Sweep] never removes such a blob).
	ModTime time.Time
}

// Lister is implemented by stores that can enumerate their objects;
// [Offloader.Sweep] needs one. The blob stores of offload/blobstore
// implement it; for a [DirStore] use [DirLister]. [MemStore] records no
// write times and has no Lister.
type Lister interface {
	// List calls fn once for every object whose key starts with prefix (a
	// plain string prefix, as in S3), in any order, and stops at the first
	// error fn returns, returning it. Objects written or deleted while List
	// runs may or may not be reported. Keys that [ValidKey] refuses (a
	// store's temporary files) are not reported. List must be safe for
	// concurrent use with every [Store] method.
	List(ctx context.Context, prefix string, fn func(ObjectInfo) error) error
}

// ListerFunc adapts a function to a [Lister].
type ListerFunc func(ctx context.Context, prefix string, fn func(ObjectInfo) error) error

// List calls f.
func (f ListerFunc) List(ctx context.Context, prefix string, fn func(ObjectInfo) error) error {
	return f(ctx, prefix, fn)
}

// Copier is implemented by stores that copy an object to another key
// without streaming it through the caller (S3 CopyObject, say).
// [Offloader.Sweep] uses it to quarantine and restore blobs, and falls back
// to Get and Put for stores without it.
type Copier interface {
	// Copy replaces the object under dstKey with a copy of the one under
	// srcKey, atomically as [Store.Put] does. A missing source yields an
	// error wrapping [ErrNotFound]; keys are checked as by every Store
	// method.
	Copy(ctx context.Context, dstKey, srcKey string) error
}

// ErrNotListable is returned by [Offloader.Sweep] when neither
// SweepOptions.Lister nor the store is a [Lister].
var ErrNotListable = errors.New("offload: store cannot list its objects (set SweepOptions.Lister)")

// DefaultSweepMinAge is the default grace period of [Offloader.Sweep].
const DefaultSweepMinAge = 24 * time.Hour

// TrashSegment is the key segment under the offloader's prefix where
// [Offloader.Sweep] quarantines blobs: Prefix/gc-trash/<unix seconds>/<name>.
// No envelope URI can name a key there ([Offloader.KeyFor] refuses it).
const TrashSegment = "gc-trash"

// SweepOptions configures [Offloader.Sweep]. The zero value and nil use
// the defaults.
type SweepOptions struct {
	// MinAge is the grace period. A blob written less than MinAge ago is
	// kept even if nothing refers to it, because the envelope it was
	// written for may not be published yet; a quarantined blob is kept
	// restorable for MinAge before it is deleted for good. It must exceed
	// the longest time between an offload (Offloader.Put, including a
	// deduplicated one) and the durable publication of its envelope, plus
	// the clock skew between this process and the store. Default
	// [DefaultSweepMinAge] (24h); negative means zero.
	MinAge time.Duration
	// DryRun computes and reports what a sweep would do, and changes
	// nothing.
	DryRun bool
	// Lister lists the store. Default: the store itself, when it
	// implements [Lister] (wrappers such as offloadtest.CountingStore hide
	// it; pass the inner store's Lister then).
	Lister Lister
	// Now returns the current time; tests move it forward. Default
	// time.Now.
	Now func() time.Time
	// Logger receives one Info line per sweep and a Debug line per action.
	// Default: discard.
	Logger *slog.Logger
}

// SweepReport says what a sweep found and did (or, in a dry run, would
// do). Keys are store keys.
type SweepReport struct {
	// DryRun is true when nothing was changed.
	DryRun bool
	// Listed counts the objects listed under the offloader's prefix.
	Listed int
	// Ignored counts listed objects that are neither blobs of this
	// offloader (Prefix/<sha256>.<ext>) nor quarantined ones; they are
	// never touched.
	Ignored int
	// LiveRefs counts the references the live set yielded that name a blob
	// of this offloader (duplicates included).
	LiveRefs int
	// ForeignRefs counts live references under another base URI that end
	// in this offloader's Prefix/<sha256>.<ext>: they are honoured, to err
	// on the side of keeping.
	ForeignRefs int
	// Referenced counts blobs kept because a live envelope refers to them.
	Referenced int
	// Young counts unreferenced blobs kept because they are younger than
	// MinAge.
	Young int
	// Quarantined lists blobs moved to quarantine: no longer readable
	// under their key, restorable until they have been there for MinAge.
	Quarantined []string
	// Restored lists blobs brought back from quarantine because a live
	// envelope refers to them again (an envelope published after an
	// earlier sweep's snapshot that reused a deduplicated blob).
	Restored []string
	// Deleted lists quarantine keys deleted for good.
	Deleted []string
	// Pending counts quarantined blobs kept because they have been in
	// quarantine for less than MinAge.
	Pending int
}

// blobID identifies a blob by content and extension: what a reference
// must match. 33 bytes, so a live set of millions of envelopes stays small.
type blobID struct {
	sum [32]byte
	ext uint8 // 0 geojson, 1 json
}

// parseBlobName parses "<64 lowercase hex>.<ext>".
func parseBlobName(name string) (blobID, bool) {
	var id blobID
	hexsum, ext, ok := strings.Cut(name, ".")
	if !ok || !isHex64(hexsum) {
		return id, false
	}
	switch ext {
	case ExtGeoJSON:
	case ExtJSON:
		id.ext = 1
	default:
		return id, false
	}
	if _, err := hex.Decode(id.sum[:], []byte(hexsum)); err != nil {
		return id, false
	}
	return id, true
}

// refOf maps a live URI to the blob it names, or reports false for a URI
// that cannot name a blob of this offloader.
func (o *Offloader) refOf(uri string) (id blobID, foreign, ok bool) {
	if key, err := o.KeyFor(uri); err == nil {
		id, ok = parseBlobName(key[len(o.prefix)+1:])
		return id, false, ok
	}
	i := strings.LastIndexByte(uri, '/')
	if i < 0 || !strings.HasSuffix(uri[:i], "/"+o.prefix) {
		return id, false, false
	}
	id, ok = parseBlobName(uri[i+1:])
	return id, ok, ok
}

// LiveURIs returns a live set for [Offloader.Sweep] that yields uris.
func LiveURIs(uris ...string) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		for _, u := range uris {
			if !yield(u, nil) {
				return
			}
		}
	}
}

type sweepObj struct {
	key       string
	id        blobID
	size      int64
	mod       time.Time // blobs: write time
	trashedAt time.Time // quarantined blobs: from the key
}

// Sweep deletes the blobs under the offloader's prefix that no live
// envelope refers to, in two phases so that a blob reused by a
// deduplicated offload while the sweep runs is never lost.
//
// live enumerates the offload URIs (geometry.offload_uri and
// raw_payload_offload_uri) of every envelope that is kept — in every
// dead-letter destination, retry and poison alike, and in anything else
// that may fetch blobs later; package offload/gcref builds it from
// envelopes. It is enumerated once, after the store is listed. If it
// yields an error, Sweep returns that error and changes nothing: a partial
// live set would make referenced blobs look dead. URIs of other offloaders
// are ignored.
//
// For every content-addressed blob (Prefix/<sha256>.<ext>; other objects
// under the prefix are never touched), Sweep:
//
//   - keeps it if a live URI names it;
//   - keeps it if it was written less than MinAge ago (the grace period
//     for envelopes not yet published);
//   - otherwise moves it to quarantine, Prefix/gc-trash/<now>/<name>.
//
// and for every quarantined blob:
//
//   - restores it (copies it back unless the blob exists again, and
//     removes the quarantined copy) if a live URI names it;
//   - keeps it if it was quarantined less than MinAge ago;
//   - otherwise deletes it for good.
//
// So an unreferenced blob is deleted by the first sweep at least MinAge
// after it was quarantined, itself at least MinAge after it was written.
//
// The quarantine closes the race every content-addressed collector has:
// [Offloader.Put] writes nothing when the blob exists, so an envelope
// built while a sweep runs can reuse an old, unreferenced blob the sweep
// has already judged dead, and be published after the live set was
// enumerated. Its blob is quarantined rather than deleted, so Fetch fails
// with ErrNotFound until the next sweep restores it; it is lost only if
// the envelope is published more than MinAge after its offload.
//
// Sweeps should not overlap (one sweeper per prefix); overlapping sweeps
// are safe but do work twice. Sweep stops at the first store error and
// returns it with the report so far; a later sweep picks up where it
// stopped.
func (o *Offloader) Sweep(ctx context.Context, live iter.Seq2[string, error], opts *SweepOptions) (SweepReport, error) {
	var so SweepOptions
	if opts != nil {
		so = *opts
	}
	if so.MinAge == 0 {
		so.MinAge = DefaultSweepMinAge
	}
	so.MinAge = max(so.MinAge, 0)
	if so.Now == nil {
		so.Now = time.Now
	}
	log := so.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	rep := SweepReport{DryRun: so.DryRun}
	if live == nil {
		return rep, errors.New("offload: sweep: nil live set")
	}
	lister := so.Lister
	if lister == nil {
		l, ok := o.store.(Lister)
		if !ok {
			return rep, ErrNotListable
		}
		lister = l
	}
	now := so.Now()

	// Phase 1: list. Only then enumerate the live set, so that every
	// envelope published before a blob was listed is in it.
	var blobs, trash []sweepObj
	pfx := o.prefix + "/"
	trashPfx := pfx + TrashSegment + "/"
	err := lister.List(ctx, pfx, func(info ObjectInfo) error {
		rep.Listed++
		rest, ok := strings.CutPrefix(info.Key, pfx)
		if !ok {
			rep.Ignored++
			return nil
		}
		if id, ok := parseBlobName(rest); ok {
			blobs = append(blobs, sweepObj{key: info.Key, id: id, size: info.Size, mod: info.ModTime})
			return nil
		}
		if t, ok := strings.CutPrefix(info.Key, trashPfx); ok {
			ts, name, _ := strings.Cut(t, "/")
			secs, err := strconv.ParseInt(ts, 10, 64)
			id, ok := parseBlobName(name)
			if err == nil && ok && secs >= 0 {
				trash = append(trash, sweepObj{key: info.Key, id: id, size: info.Size, trashedAt: time.Unix(secs, 0)})
				return nil
			}
		}
		rep.Ignored++
		return nil
	})
	if err != nil {
		return rep, fmt.Errorf("offload: sweep: listing %s: %w", pfx, err)
	}

	// Phase 2: mark.
	marked := make(map[blobID]struct{})
	for uri, err := range live {
		if err != nil {
			return rep, fmt.Errorf("offload: sweep: enumerating live references: %w", err)
		}
		if err := ctx.Err(); err != nil {
			return rep, fmt.Errorf("offload: sweep: %w", err)
		}
		if id, foreign, ok := o.refOf(uri); ok {
			marked[id] = struct{}{}
			rep.LiveRefs++
			if foreign {
				rep.ForeignRefs++
			}
		}
	}

	// Phase 3: restore or purge quarantined blobs.
	for _, t := range trash {
		if err := ctx.Err(); err != nil {
			return rep, fmt.Errorf("offload: sweep: %w", err)
		}
		orig := o.Key(hex.EncodeToString(t.id.sum[:]), extName(t.id.ext))
		if _, ok := marked[t.id]; ok {
			rep.Restored = append(rep.Restored, orig)
			log.DebugContext(ctx, "offload: sweep: restoring", "key", orig, "from", t.key, "dry_run", so.DryRun)
			if !so.DryRun {
				if err := o.restore(ctx, t, orig); err != nil {
					return rep, err
				}
			}
			continue
		}
		if now.Sub(t.trashedAt) < so.MinAge {
			rep.Pending++
			continue
		}
		rep.Deleted = append(rep.Deleted, t.key)
		log.DebugContext(ctx, "offload: sweep: deleting", "key", t.key, "dry_run", so.DryRun)
		if !so.DryRun {
			if err := o.store.Delete(ctx, t.key); err != nil && !errors.Is(err, ErrNotFound) {
				return rep, fmt.Errorf("offload: sweep: deleting %s: %w", t.key, err)
			}
		}
	}

	// Phase 4: quarantine unreferenced, old blobs.
	stamp := strconv.FormatInt(max(now.Unix(), 0), 10)
	for _, b := range blobs {
		if err := ctx.Err(); err != nil {
			return rep, fmt.Errorf("offload: sweep: %w", err)
		}
		if _, ok := marked[b.id]; ok {
			rep.Referenced++
			continue
		}
		if b.mod.IsZero() || now.Sub(b.mod) < so.MinAge {
			rep.Young++
			continue
		}
		dst := trashPfx + stamp + "/" + b.key[len(pfx):]
		rep.Quarantined = append(rep.Quarantined, b.key)
		log.DebugContext(ctx, "offload: sweep: quarantining", "key", b.key, "to", dst, "dry_run", so.DryRun)
		if !so.DryRun {
			if err := o.move(ctx, dst, b.key, b.size); err != nil {
				return rep, err
			}
		}
	}
	log.InfoContext(ctx, "offload: sweep", "prefix", o.prefix, "dry_run", so.DryRun, "listed", rep.Listed,
		"live_refs", rep.LiveRefs, "referenced", rep.Referenced, "young", rep.Young,
		"quarantined", len(rep.Quarantined), "restored", len(rep.Restored), "deleted", len(rep.Deleted),
		"pending", rep.Pending, "ignored", rep.Ignored)
	return rep, nil
}

func extName(e uint8) string {
	if e == 1 {
		return ExtJSON
	}
	return ExtGeoJSON
}

// copyObject copies src to dst, server-side when the store can.
func (o *Offloader) copyObject(ctx context.Context, dst, src string, size int64) error {
	if c, ok := o.store.(Copier); ok {
		return c.Copy(ctx, dst, src)
	}
	rc, err := o.store.Get(ctx, src)
	if err != nil {
		return err
	}
	defer rc.Close()
	return o.store.Put(ctx, dst, rc, size)
}

// move quarantines a blob: copy, then delete the original. A blob deleted
// meanwhile (by an overlapping sweep) is not an error.
func (o *Offloader) move(ctx context.Context, dst, src string, size int64) error {
	if err := o.copyObject(ctx, dst, src, size); err != nil {
		if errors.Is(err, ErrNotFound) {
			return nil
		}
		return fmt.Errorf("offload: sweep: quarantining %s: %w", src, err)
	}
	if err := o.store.Delete(ctx, src); err != nil && !errors.Is(err, ErrNotFound) {
		return fmt.Errorf("offload: sweep: quarantining %s: %w", src, err)
	}
	return nil
}

// restore copies a quarantined blob back unless the blob exists again,
// then removes the quarantined copy.
func (o *Offloader) restore(ctx context.Context, t sweepObj, orig string) error {
	exists, err := o.store.Exists(ctx, orig)
	if err != nil {
		return fmt.Errorf("offload: sweep: restoring %s: %w", orig, err)
	}
	if !exists {
		if err := o.copyObject(ctx, orig, t.key, t.size); err != nil {
			return fmt.Errorf("offload: sweep: restoring %s: %w", orig, err)
		}
	}
	if err := o.store.Delete(ctx, t.key); err != nil && !errors.Is(err, ErrNotFound) {
		return fmt.Errorf("offload: sweep: restoring %s: %w", orig, err)
	}
	return nil
}

// DirLister returns a [Lister] over a [DirStore]'s directory. It walks the
// directory through the store's [os.Root], reports regular files only
// (not symbolic links), skips the store's temporary files (names starting
// with '.') and takes ModTime from the file system.
func DirLister(s *DirStore) Lister {
	return ListerFunc(func(ctx context.Context, prefix string, fn func(ObjectInfo) error) error {
		dir := "."
		if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
			dir = prefix[:i]
			if !ValidKey(dir) {
				return fmt.Errorf("offload: list %q: %w", truncate(prefix, 80), ErrInvalidKey)
			}
		}
		err := fs.WalkDir(s.root.FS(), dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if p == dir && errors.Is(err, fs.ErrNotExist) {
					return fs.SkipAll // nothing stored under the prefix yet
				}
				return err
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			if p == dir {
				return nil
			}
			if d.IsDir() {
				if strings.HasPrefix(d.Name(), ".") || !strings.HasPrefix(p+"/", prefix) && !strings.HasPrefix(p, prefix) {
					return fs.SkipDir
				}
				return nil
			}
			if !d.Type().IsRegular() || !strings.HasPrefix(p, prefix) || !ValidKey(p) {
				return nil
			}
			info, err := d.Info()
			if errors.Is(err, fs.ErrNotExist) {
				return nil // deleted while walking
			}
			if err != nil {
				return err
			}
			return fn(ObjectInfo{Key: p, Size: info.Size(), ModTime: info.ModTime()})
		})
		if err != nil {
			return fmt.Errorf("offload: list %q: %w", truncate(prefix, 80), err)
		}
		return nil
	})
}
