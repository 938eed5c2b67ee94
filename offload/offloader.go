package offload

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"

	"github.com/geodlq/geodlq/classify"
)

// DefaultThreshold is the default size above which a geometry is offloaded
// rather than carried inline: 256 KiB, small enough to keep dead-letter
// messages scannable and far below common broker limits (1 MB for Kafka,
// 256 KiB for SQS counts the whole message).
const DefaultThreshold = 256 << 10

// DefaultPrefix is the default key prefix.
const DefaultPrefix = "geodlq"

// DefaultMaxSize is the default largest object [Offloader.Put] writes and
// [Offloader.Fetch] reads: 1 GiB.
const DefaultMaxSize = 1 << 30

// The extensions an [Offloader] writes and accepts back.
const (
	// ExtGeoJSON names an offloaded geometry.
	ExtGeoJSON = "geojson"
	// ExtJSON names an offloaded whole payload.
	ExtJSON = "json"
)

var (
	// ErrIntegrity is wrapped by every [*IntegrityError].
	ErrIntegrity = errors.New("offload: integrity check failed")
	// ErrForbiddenURI is wrapped by every [*URIError].
	ErrForbiddenURI = errors.New("offload: forbidden offload URI")
)

// Options configures an [Offloader]. The zero value (and nil) uses the
// defaults.
type Options struct {
	// BaseURI is the address of the store, without a trailing slash, e.g.
	// "mem://geodlq", "file:///var/lib/dlq" or "s3://dlq-geom". Blob URIs
	// are BaseURI + "/" + key. Default: the store's own URI when it has a
	// URI() string method ([MemStore] and [DirStore] do); otherwise
	// required. It must be scheme "://" followed by printable ASCII with no
	// '?', '#', '\\', whitespace, "." or ".." segments or "//"; percent
	// escapes are allowed, except of '.', '/', '\\' and NUL.
	BaseURI string
	// Prefix is prepended to every key; a valid key itself (see
	// [ValidKey]), so "dlq/2026" is fine. Default "geodlq".
	Prefix string
	// Threshold is the size in bytes above which a geometry is offloaded
	// rather than carried inline. Default [DefaultThreshold] (256 KiB).
	// The Offloader itself does not use it; envelope builders read it with
	// [Offloader.Threshold].
	Threshold int
	// MaxSize bounds the size of an object Put writes and Fetch reads, so
	// that a forged byte_size cannot make Fetch allocate without limit.
	// Default [DefaultMaxSize] (1 GiB).
	MaxSize int64
}

// Ref points at an offloaded blob: the triple recorded in a dead-letter
// envelope.
type Ref struct {
	// URI is BaseURI/Prefix/<sha256>.<ext>.
	URI string
	// Size is the blob's length in bytes.
	Size int64
	// SHA256 is the lowercase hex SHA-256 of the blob.
	SHA256 string
}

// Offloader writes blobs to a [Store] under content-addressed keys and
// reads them back verified. It is immutable after [New] and safe for
// concurrent use.
type Offloader struct {
	store     Store
	base      string
	prefix    string
	threshold int
	maxSize   int64
}

// New returns an Offloader over store. nil opts means the defaults.
func New(store Store, opts *Options) (*Offloader, error) {
	if store == nil {
		return nil, errors.New("offload: New: nil store")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.BaseURI == "" {
		if u, ok := store.(interface{ URI() string }); ok && u.URI() != "" {
			o.BaseURI = u.URI()
		} else {
			return nil, errors.New("offload: New: Options.BaseURI is required for this store")
		}
	}
	o.BaseURI = strings.TrimRight(o.BaseURI, "/")
	if err := checkBaseURI(o.BaseURI); err != nil {
		return nil, err
	}
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if !ValidKey(o.Prefix) {
		return nil, fmt.Errorf("offload: New: prefix %q: %w", o.Prefix, ErrInvalidKey)
	}
	if o.Threshold <= 0 {
		o.Threshold = DefaultThreshold
	}
	if o.MaxSize <= 0 {
		o.MaxSize = DefaultMaxSize
	}
	return &Offloader{store: store, base: o.BaseURI, prefix: o.Prefix, threshold: o.Threshold, maxSize: o.MaxSize}, nil
}

func checkBaseURI(s string) error {
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok || scheme == "" || rest == "" && scheme != "file" {
		return fmt.Errorf("offload: base URI %q: want scheme://location", s)
	}
	for i := 0; i < len(scheme); i++ {
		c := scheme[i]
		if !(c >= 'a' && c <= 'z' || i > 0 && (c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.')) {
			return fmt.Errorf("offload: base URI %q: bad scheme", s)
		}
	}
	if !safeBaseChars(rest) || strings.Contains(rest, "//") || hasDotSegment(rest) {
		return fmt.Errorf("offload: base URI %q: forbidden characters or segments", s)
	}
	return nil
}

// safeBaseChars is safeURIChars for the trusted base URI, which may hold
// percent escapes (a directory with a space), except escapes of '.', '/'
// and '\\'.
func safeBaseChars(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '%' {
			if !safeURIChars(s[i : i+1]) {
				return false
			}
			continue
		}
		if i+2 >= len(s) || !isHexDigit(s[i+1]) || !isHexDigit(s[i+2]) {
			return false
		}
		switch strings.ToLower(s[i+1 : i+3]) {
		case "2e", "2f", "5c", "00":
			return false
		}
		i += 2
	}
	return true
}

func isHexDigit(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func safeURIChars(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || c == '?' || c == '#' || c == '%' || c == '\\' {
			return false
		}
	}
	return true
}

func hasDotSegment(s string) bool {
	for seg := range strings.SplitSeq(s, "/") {
		if seg == "." || seg == ".." {
			return true
		}
	}
	return false
}

// Store returns the underlying store.
func (o *Offloader) Store() Store { return o.store }

// BaseURI returns the base URI blobs are addressed under.
func (o *Offloader) BaseURI() string { return o.base }

// Prefix returns the key prefix.
func (o *Offloader) Prefix() string { return o.prefix }

// Threshold returns the size above which geometries are offloaded.
func (o *Offloader) Threshold() int { return o.threshold }

// Key returns the key of a blob with the given hex SHA-256 and extension:
// Prefix/<sha256>.<ext>.
func (o *Offloader) Key(sha256hex, ext string) string {
	return o.prefix + "/" + sha256hex + "." + ext
}

// URI returns the URI of key: BaseURI/key.
func (o *Offloader) URI(key string) string { return o.base + "/" + key }

func checkExt(ext string) error {
	if ext != ExtGeoJSON && ext != ExtJSON {
		return fmt.Errorf("offload: extension %q: want %q or %q", ext, ExtGeoJSON, ExtJSON)
	}
	return nil
}

// Put stores data under Prefix/<sha256 of data>.<ext> and returns its
// [Ref]. The hash is of exactly the bytes given, never of a re-encoding.
// ext is [ExtGeoJSON] or [ExtJSON].
//
// Identical blobs are stored once: when the key already exists, Put
// writes nothing (a stored object is trusted here; [Offloader.Fetch]
// verifies it). data is handed to the store as a reader, so the only copy
// made is the store's own.
func (o *Offloader) Put(ctx context.Context, data []byte, ext string) (Ref, error) {
	if err := checkExt(ext); err != nil {
		return Ref{}, err
	}
	if int64(len(data)) > o.maxSize {
		return Ref{}, fmt.Errorf("offload: put: %w", &classify.TooLargeError{What: "blob", Size: len(data), Limit: int(o.maxSize), Hint: "Options.MaxSize"})
	}
	return o.putSum(ctx, data, sha256Hex(data), ext)
}

// putSum is Put of data whose hex SHA-256 is hexsum.
func (o *Offloader) putSum(ctx context.Context, data []byte, hexsum, ext string) (Ref, error) {
	key := o.Key(hexsum, ext)
	ref := Ref{URI: o.URI(key), Size: int64(len(data)), SHA256: hexsum}
	exists, err := o.store.Exists(ctx, key)
	if err != nil {
		return Ref{}, fmt.Errorf("offload: put: %w", err)
	}
	if exists {
		return ref, nil
	}
	if err := o.store.Put(ctx, key, bytes.NewReader(data), int64(len(data))); err != nil {
		return Ref{}, fmt.Errorf("offload: put: %w", err)
	}
	return ref, nil
}

// Fetch reads the blob ref points at and verifies it: its URI must pass
// [Offloader.Resolve] — [Offloader.KeyFor], or a file:// URI of a blob
// directory that has moved since — and name the same hash as ref.SHA256;
// the blob must hold
// exactly ref.Size bytes and hash to ref.SHA256. Fetch reads at most
// ref.Size+1 bytes and hashes while reading. A blob that is missing yields
// an error wrapping [ErrNotFound]; one that is truncated, extended or
// altered, an [*IntegrityError]; a reference claiming more than MaxSize
// bytes, an [*IntegrityError] (ProblemBadRef) that also matches
// [classify.ErrTooLarge], before the store is asked. Fetch is
// [Offloader.Open] read to the end: the two verify alike.
//
// ref.Size comes from an envelope and is not trusted: Fetch never
// allocates from it alone. It allocates once for the smaller of ref.Size
// and the size the store's reader reports (see [Store.Get]); when the
// reader reports none, the buffer starts small and grows with the bytes
// that actually arrive, never past ref.Size.
//
// Fetch returns when ctx is done, with an error wrapping ctx's error, even
// if the store is blocked in Get or in a Read of its reader: that call is
// then abandoned (and the reader closed when it returns).
func (o *Offloader) Fetch(ctx context.Context, ref Ref) ([]byte, error) {
	key, ie, err := o.checkRef(ref)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("offload: fetch %s: %w", ref.URI, err)
	}
	if ctx.Done() == nil {
		// Nothing can end this context: read here.
		return o.fetch(ctx, key, ref, ie)
	}
	// Open and read on another goroutine, so that a store that blocks
	// without honouring ctx cannot hold the caller past ctx.
	res := make(chan fetched, 1)
	go func() {
		b, err := o.fetch(ctx, key, ref, ie)
		res <- fetched{b, err}
	}()
	select {
	case r := <-res:
		return r.b, r.err
	case <-ctx.Done():
		select {
		case r := <-res: // finished meanwhile
			return r.b, r.err
		default:
		}
		return nil, fmt.Errorf("offload: fetch %s: %w", ref.URI, ctx.Err())
	}
}

// checkRef validates ref before the store is asked (see [Offloader.Fetch])
// and returns the key it names and the IntegrityError to fill in should
// the blob not match.
func (o *Offloader) checkRef(ref Ref) (string, *IntegrityError, error) {
	key, _, err := o.Resolve(ref.URI)
	if err != nil {
		return "", nil, err
	}
	ie := &IntegrityError{URI: ref.URI, WantSize: ref.Size, WantSHA256: ref.SHA256, GotSize: -1}
	if !isHex64(ref.SHA256) {
		ie.Problem = ProblemBadRef
		ie.Detail = "content_sha256 is not 64 lowercase hex digits"
		return "", nil, ie
	}
	if !strings.HasPrefix(key[len(o.prefix)+1:], ref.SHA256) {
		ie.Problem = ProblemBadRef
		ie.Detail = "offload_uri names a different hash than content_sha256"
		return "", nil, ie
	}
	if ref.Size < 0 || ref.Size > o.maxSize {
		ie.Problem = ProblemBadRef
		ie.Detail = fmt.Sprintf("byte_size %d outside [0, %d]", ref.Size, o.maxSize)
		ie.Limit = o.maxSize
		return "", nil, ie
	}
	return key, ie, nil
}

// fetch opens the blob under key and reads it verified.
func (o *Offloader) fetch(ctx context.Context, key string, ref Ref, ie *IntegrityError) ([]byte, error) {
	vr, err := o.open(ctx, "fetch", key, ref, ie)
	if err != nil {
		return nil, err
	}
	defer vr.Close()
	return vr.readAll()
}

type fetched struct {
	b   []byte
	err error
}

// fetchInitial is the first allocation of a Fetch whose reader does not
// report the object's size.
const fetchInitial = 64 << 10

// maxEmptyReads is how many reads in a row may return no bytes and no
// error before a Fetch gives up (io.ErrNoProgress).
const maxEmptyReads = 100

// sizeHint returns the object size rc reports, if it does.
func sizeHint(rc io.Reader) (int64, bool) {
	switch r := rc.(type) {
	case interface{ Size() int64 }:
		return r.Size(), true
	case interface{ Stat() (fs.FileInfo, error) }:
		if st, err := r.Stat(); err == nil && st.Mode().IsRegular() {
			return st.Size(), true
		}
	}
	return 0, false
}

func isHex64(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// KeyFor validates an offload URI read from an envelope — untrusted input
// — and returns its key. It accepts exactly
//
//	<BaseURI>/<Prefix>/<64 lowercase hex>.<ext>
//
// with ext [ExtGeoJSON] or [ExtJSON], compared byte for byte: no
// normalisation, no decoding. Anything else — another scheme, bucket or
// host, a different prefix, "." or ".." segments, double slashes,
// backslashes, percent escapes, query or fragment, control bytes, upper
// case hex — is refused with a [*URIError].
func (o *Offloader) KeyFor(uri string) (string, error) {
	fail := func(reason string) (string, error) {
		return "", &URIError{URI: uri, Reason: reason}
	}
	if len(uri) > len(o.base)+len(o.prefix)+2+64+1+len(ExtGeoJSON) {
		return fail("too long")
	}
	rest, ok := strings.CutPrefix(uri, o.base+"/")
	if !ok {
		return fail("not under the offloader's base URI " + o.base)
	}
	if !safeURIChars(rest) {
		return fail("forbidden character (control, space, '%', '?', '#', '\\' or non-ASCII)")
	}
	name, ok := strings.CutPrefix(rest, o.prefix+"/")
	if !ok {
		return fail("not under the offloader's prefix " + o.prefix)
	}
	hexsum, ext, ok := strings.Cut(name, ".")
	if !ok || !isHex64(hexsum) {
		return fail("object name is not <64 lowercase hex>.<ext>")
	}
	if checkExt(ext) != nil {
		return fail("extension is not ." + ExtGeoJSON + " or ." + ExtJSON)
	}
	return rest, nil
}

// Resolve returns the key, in this offloader's store, of the blob an
// offload URI read from an envelope names. It accepts what
// [Offloader.KeyFor] accepts, and one more form: a file:// URI under
// another base whose last two segments are exactly
// <Prefix>/<64 lowercase hex>.<ext> — written by an offloader over a blob
// directory that has since been copied or moved (to this store) — for
// which moved is true. That form reads only this offloader's store, under
// the key built from the validated prefix, hash and extension, never the
// path the URI names, and [Offloader.Fetch] verifies the blob's size and
// SHA-256 against the envelope as for any other: a moved directory just
// works, and nothing outside the store can be reached. The old base must
// itself be a well-formed base URI (see [Options].BaseURI). Anything else
// is a [*URIError]; one that is a blob URI of this prefix under another
// base (another bucket, another scheme) carries that base as
// [URIError].Base.
func (o *Offloader) Resolve(uri string) (key string, moved bool, err error) {
	key, err = o.KeyFor(uri)
	if err == nil {
		return key, false, nil
	}
	ue, ok := err.(*URIError)
	if !ok || len(uri) > maxURILen {
		return "", false, err
	}
	i := strings.LastIndexByte(uri, '/')
	if i < 0 {
		return "", false, err
	}
	tail := "/" + o.prefix + uri[i:]
	if !strings.HasSuffix(uri, tail) || len(uri) == len(tail) {
		return "", false, err
	}
	base := uri[:len(uri)-len(tail)]
	name := uri[i+1:]
	if checkBaseURI(base) != nil || !safeURIChars(name) {
		return "", false, err
	}
	hexsum, ext, ok := strings.Cut(name, ".")
	if !ok || !isHex64(hexsum) || checkExt(ext) != nil {
		return "", false, err
	}
	if !strings.HasPrefix(base, "file://") {
		ue.Base = base
		return "", false, ue
	}
	return o.Key(hexsum, ext), true, nil
}

// maxURILen is the longest offload URI an envelope holds.
const maxURILen = 2048

// URIError reports an offload URI that [Offloader.KeyFor] (or
// [Offloader.Resolve]) refuses. It wraps [ErrForbiddenURI].
type URIError struct {
	// URI is the refused URI.
	URI string
	// Reason says why.
	Reason string
	// Base is the base URI the refused URI is under when it is otherwise
	// a blob URI of this offloader's prefix — the blobs were written
	// under another base (another bucket, host or scheme), and an
	// offloader with that BaseURI over this store would read it. Empty
	// otherwise.
	Base string
}

// Error implements error.
func (e *URIError) Error() string {
	if e.Base != "" {
		return fmt.Sprintf("offload: forbidden offload URI %q: %s (it names a blob written under the base URI %s)",
			truncate(e.URI, 200), e.Reason, truncate(e.Base, 200))
	}
	return fmt.Sprintf("offload: forbidden offload URI %q: %s", truncate(e.URI, 200), e.Reason)
}

// Unwrap returns [ErrForbiddenURI].
func (e *URIError) Unwrap() error { return ErrForbiddenURI }

// Problem is what an [IntegrityError] found.
type Problem string

// The integrity problems.
const (
	// ProblemTruncated: the blob is shorter than the recorded size.
	ProblemTruncated Problem = "truncated"
	// ProblemExtended: the blob is longer than the recorded size.
	ProblemExtended Problem = "extended"
	// ProblemHash: the blob has the recorded size but another SHA-256.
	ProblemHash Problem = "hash_mismatch"
	// ProblemBadRef: the reference itself is inconsistent (size out of
	// range, malformed hash, URI naming another hash).
	ProblemBadRef Problem = "bad_ref"
)

// IntegrityError reports a blob (or restored payload) that is not what its
// reference says. It wraps [ErrIntegrity].
type IntegrityError struct {
	// URI is the blob's URI (empty for a payload checked in memory).
	URI string
	// Problem is what was found.
	Problem Problem
	// WantSize and GotSize are the recorded and observed sizes; GotSize is
	// -1 when not known (an extended blob is read only one byte past
	// WantSize).
	WantSize, GotSize int64
	// WantSHA256 and GotSHA256 are the recorded and observed hashes;
	// GotSHA256 is empty when the blob was not hashed to the end.
	WantSHA256, GotSHA256 string
	// Detail explains a ProblemBadRef.
	Detail string
	// Limit is the Offloader's MaxSize when the reference claims more
	// (WantSize > Limit); the error then also matches [classify.ErrTooLarge].
	// Zero otherwise.
	Limit int64
}

// Error implements error.
func (e *IntegrityError) Error() string {
	var b strings.Builder
	b.WriteString("offload: integrity check failed")
	if e.URI != "" {
		fmt.Fprintf(&b, " for %s", truncate(e.URI, 200))
	}
	fmt.Fprintf(&b, ": %s", e.Problem)
	switch e.Problem {
	case ProblemTruncated:
		fmt.Fprintf(&b, " (%d of %d bytes)", e.GotSize, e.WantSize)
	case ProblemExtended:
		fmt.Fprintf(&b, " (more than %d bytes)", e.WantSize)
	case ProblemHash:
		fmt.Fprintf(&b, " (sha256 %s, want %s)", e.GotSHA256, e.WantSHA256)
	case ProblemBadRef:
		fmt.Fprintf(&b, " (%s)", e.Detail)
	}
	return b.String()
}

// Unwrap returns [ErrIntegrity].
func (e *IntegrityError) Unwrap() error { return ErrIntegrity }

// Is reports whether the error matches target: [classify.ErrTooLarge]
// when the reference claims more than Limit bytes.
func (e *IntegrityError) Is(target error) bool {
	return target == classify.ErrTooLarge && e.Limit > 0 && e.WantSize > e.Limit
}

// hashChunk bounds one call into the hash's assembly, which cannot be
// preempted: hashing 40 MB in one call would stall a garbage collection
// (and the goroutines it stops) for tens of milliseconds.
const hashChunk = 256 << 10

// sha256Hex returns the lowercase hex SHA-256 of b, hashed in chunks so
// that hashing a large blob stays preemptible.
func sha256Hex(b []byte) string {
	h := sha256.New()
	for len(b) > 0 {
		n := min(len(b), hashChunk)
		h.Write(b[:n])
		b = b[n:]
	}
	return hex.EncodeToString(h.Sum(nil))
}
