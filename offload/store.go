// Package offload keeps oversized geometries (and, as a last resort, whole
// payloads) out of dead-letter messages: the bytes go to an object store
// under a content-addressed key, and the envelope carries only a pointer,
// the byte size and the SHA-256.
//
// The portable type is [Offloader]: it hashes, deduplicates (identical
// geometries are stored once), writes, and on the way back verifies size
// and hash while reading: [Offloader.Fetch] returns the verified blob,
// [Offloader.Open] streams it and ends with io.EOF only once it has
// verified, else with an [*IntegrityError] (the one verifier, also
// available over any reader as [NewVerifier], serves both). It also
// guards the way back: an offload_uri read
// from an envelope is untrusted input, and [Offloader.KeyFor] accepts only
// the exact form the Offloader itself writes ([Offloader.Resolve] also
// reads a file:// URI of a blob directory that has since moved, from the
// Offloader's own store, verified by hash).
//
// Storage is behind the small [Store] interface. This package provides an
// in-memory store ([NewMemStore]) and a local-directory store
// ([NewDirStore]); adapters for object stores live elsewhere and prove
// themselves against the conformance suite in package offloadtest.
//
// The package imports no cloud SDK and needs no cgo.
package offload

import (
	"context"
	"errors"
	"fmt"
	"io"
)

var (
	// ErrNotFound is wrapped by every error a [Store] returns for a key that
	// holds no object.
	ErrNotFound = errors.New("offload: object not found")
	// ErrInvalidKey is wrapped by every error a [Store] returns for a key
	// that [ValidKey] rejects.
	ErrInvalidKey = errors.New("offload: invalid key")
	// ErrSizeMismatch is wrapped by the error a [Store] returns from Put when
	// the reader yields more or fewer bytes than the declared size.
	ErrSizeMismatch = errors.New("offload: size mismatch")
	// ErrNotRegular is wrapped by the error a file-backed [Store] returns
	// when a key names something other than a regular file: a FIFO, a
	// socket, a device, a directory or a symbolic link. Such a key holds no
	// object, so Get and Delete wrap [ErrNotFound] too, and Exists reports
	// false. A store never opens such a file for reading, so a FIFO planted
	// at a key cannot block a reader.
	ErrNotRegular = errors.New("offload: not a regular file")
	// ErrOutsideStore is wrapped by the error a file-backed [Store] returns
	// when the path of a key goes through a symbolic link that leads
	// outside the store's directory (or cannot be resolved inside it).
	// Nothing is read, written or removed through such a link. Get and
	// Delete wrap [ErrNotFound] too.
	ErrOutsideStore = errors.New("offload: path leads outside the store")
)

// Store holds immutable blobs under slash-separated keys. It is the small
// interface storage providers implement; users hold an [*Offloader].
//
// Every method must be safe for concurrent use by multiple goroutines,
// including concurrent calls for the same key. Every method must reject a
// key that [ValidKey] refuses, with an error wrapping [ErrInvalidKey] and
// without touching storage, so that no key can address anything outside
// the store's own namespace.
//
// Every method honours its context: a done ctx fails it, and no method,
// nor a Read from the reader Get returns, may block past the end of ctx.
//
// A store kept in a file system holds objects as regular files under one
// directory (its root). It refuses to treat anything else as an object
// ([ErrNotRegular]: FIFOs, sockets, devices, directories and symbolic links
// at a key) and never reads, writes or removes anything through a symbolic
// link that leads outside its root ([ErrOutsideStore]). Symbolic links to
// directories that stay inside the root are followed. The conformance
// suite in package offloadtest holds every store to these rules.
type Store interface {
	// Put stores exactly size bytes read from r under key, replacing any
	// object already there.
	//
	// Put is atomic: a concurrent or later Get sees either the previous
	// object (or ErrNotFound) or the complete new one, never a partial
	// object. If r yields fewer or more than size bytes, Put must fail
	// with an error wrapping [ErrSizeMismatch] and store nothing; if r or
	// the storage fails, or ctx is done, Put must fail and store nothing.
	// Put reads r at most once and should stream it: it must not require
	// the caller to hold the object in memory twice. Put does not retain r
	// after it returns.
	Put(ctx context.Context, key string, r io.Reader, size int64) error

	// Get opens the object stored under key for reading. The caller must
	// close the returned reader. A key holding no object yields an error
	// wrapping [ErrNotFound]. The reader sees one complete object even if
	// the key is replaced while it is being read. A Read that would block
	// (a stalled network stream) must fail once ctx is done.
	//
	// The reader may report the object's size with a Size() int64 method
	// (as *blob.Reader, *bytes.Reader and *strings.Reader do) or a Stat
	// method (as *os.File does); [Offloader.Fetch] then allocates once for
	// the smaller of that size and the size it expects, instead of growing
	// its buffer as the bytes arrive.
	Get(ctx context.Context, key string) (io.ReadCloser, error)

	// Exists reports whether an object is stored under key. A missing
	// object is (false, nil), not an error.
	Exists(ctx context.Context, key string) (bool, error)

	// Delete removes the object stored under key. A key holding no object
	// yields an error wrapping [ErrNotFound].
	Delete(ctx context.Context, key string) error
}

// MaxKeyLen is the longest key a [Store] must accept.
const MaxKeyLen = 1024

// ValidKey reports whether key may name an object in a [Store]: one or more
// segments separated by single slashes, each made of ASCII letters, digits,
// '.', '_' and '-', and not starting with '.'. So no key is empty, absolute,
// has "." or ".." segments, a backslash, a percent sign, a control byte or
// more than [MaxKeyLen] bytes: a valid key maps onto any file system or
// object store without escaping or normalisation. Segments starting with
// '.' are reserved to stores (temporary files).
func ValidKey(key string) bool {
	if key == "" || len(key) > MaxKeyLen {
		return false
	}
	segStart := true
	for i := 0; i < len(key); i++ {
		c := key[i]
		switch {
		case c == '/':
			if segStart {
				return false // empty segment: leading "/" or "//"
			}
			segStart = true
			continue
		case c == '.':
			if segStart {
				return false
			}
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '-':
		default:
			return false
		}
		segStart = false
	}
	return !segStart // no trailing "/"
}

func checkKey(op, key string) error {
	if !ValidKey(key) {
		return fmt.Errorf("offload: %s %q: %w", op, truncate(key, 80), ErrInvalidKey)
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// copyExactly copies exactly size bytes from r to w, failing with
// ErrSizeMismatch if r yields more or fewer. It reads at most size+1 bytes.
func copyExactly(w io.Writer, r io.Reader, size int64) error {
	if size < 0 {
		return fmt.Errorf("offload: negative size %d: %w", size, ErrSizeMismatch)
	}
	n, err := io.Copy(w, io.LimitReader(r, size+1))
	if err != nil {
		return fmt.Errorf("offload: reading object: %w", err)
	}
	if n != size {
		return fmt.Errorf("offload: reader yielded %s bytes, declared %d: %w", countString(n, size, n > size), size, ErrSizeMismatch)
	}
	return nil
}

func countString(n, size int64, over bool) string {
	if over {
		return "more than " + fmt.Sprint(size)
	}
	return fmt.Sprint(n)
}
