package classify

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/paulmach/orb"
)

// ErrUnknownName is wrapped by [ParseClass], [ParseStage], [ParseRoute]
// and the text unmarshalers when a name is not a defined class, stage or
// route.
var ErrUnknownName = errors.New("unknown name")

// ErrTooLarge is wrapped by every [*TooLargeError].
var ErrTooLarge = errors.New("too large")

// TooLargeError reports that something is over a size limit: a message
// over its destination's limit (refused by a dead-letter store, never
// truncated), an envelope that does not fit even after every reduction, a
// blob over a blob store's maximum. It wraps [ErrTooLarge]. The default
// rules classify it [ClassResourceExhausted].
type TooLargeError struct {
	// What is too large: "message", "envelope", "blob", "event", ….
	What string
	// Destination is the destination whose limit it is, or "".
	Destination string
	// Size is the size in bytes (for an envelope, the smallest achieved).
	Size int
	// Limit is the limit in bytes.
	Limit int
	// Hint says what would help, or "".
	Hint string
}

// Error implements error.
func (e *TooLargeError) Error() string {
	what := e.What
	if what == "" {
		what = "message"
	}
	msg := fmt.Sprintf("%s of %d bytes exceeds the %d-byte limit", what, e.Size, e.Limit)
	if e.Destination != "" {
		msg += fmt.Sprintf(" of %q", e.Destination)
	}
	if e.Hint != "" {
		msg += " (" + e.Hint + ")"
	}
	return msg
}

// Unwrap returns [ErrTooLarge].
func (e *TooLargeError) Unwrap() error { return ErrTooLarge }

// Error is a classified failure. It is found through any chain of %w
// wrapping (and [errors.Join]) by [Classify], [StageOf], [DetailOf] and
// [errors.As].
//
// A zero Class means the Error only annotates a stage or geometry detail and
// the class comes from the error it wraps (see [WithStage]).
type Error struct {
	// Class is the failure class; zero defers to the wrapped error.
	Class Class
	// Stage is the stage that failed; zero if not known here.
	Stage Stage
	// Geometry carries the geometry detail (reason, location, EPSG, fault
	// indexes), or nil.
	Geometry *GeometryDetail
	// RetryAfter, when positive, is the least time to wait before the
	// next attempt (see [RetryAfter]).
	RetryAfter time.Duration
	// Err is the underlying cause, or nil.
	Err error
}

// Error returns the cause's message, or else the geometry reason, or else
// the class name: the message is the one the user's code produced, so it is
// recorded verbatim in the envelope's error_message.
func (e *Error) Error() string {
	switch {
	case e.Err != nil:
		return e.Err.Error()
	case e.Geometry != nil && e.Geometry.Reason != "":
		return e.Geometry.Reason
	case e.Class.Valid():
		return e.Class.String()
	default:
		return "classify: unclassified error"
	}
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// ReasonKind is a bounded, machine-friendly label for a geometry reason:
// safe as a metric label, unlike the reason itself, which carries
// coordinates.
type ReasonKind string

// The reason kinds. GEOS reasons map to the first group through
// [KindOfReason].
const (
	KindSelfIntersection     ReasonKind = "self_intersection"
	KindRingSelfIntersection ReasonKind = "ring_self_intersection"
	KindRingNotClosed        ReasonKind = "ring_not_closed"
	KindTooFewPoints         ReasonKind = "too_few_points"
	KindInvalidCoordinate    ReasonKind = "invalid_coordinate"
	KindHoleOutsideShell     ReasonKind = "hole_outside_shell"
	KindNestedHoles          ReasonKind = "nested_holes"
	KindNestedShells         ReasonKind = "nested_shells"
	KindDisconnectedInterior ReasonKind = "disconnected_interior"
	KindDuplicateRings       ReasonKind = "duplicate_rings"
	KindEmpty                ReasonKind = "empty"
	KindOutOfRange           ReasonKind = "out_of_range"
	KindCRSUnparseable       ReasonKind = "crs_unparseable"
	KindCRSDiffers           ReasonKind = "crs_differs"
	KindMalformed            ReasonKind = "malformed"
	KindMissingGeometry      ReasonKind = "missing_geometry"
	KindVertexBudget         ReasonKind = "vertex_budget"
	KindByteBudget           ReasonKind = "byte_budget"
	KindOther                ReasonKind = "other"
	kindNone                 ReasonKind = ""
)

// ReasonKinds lists every reason kind.
func ReasonKinds() []ReasonKind {
	return []ReasonKind{KindSelfIntersection, KindRingSelfIntersection, KindRingNotClosed, KindTooFewPoints,
		KindInvalidCoordinate, KindHoleOutsideShell, KindNestedHoles, KindNestedShells, KindDisconnectedInterior,
		KindDuplicateRings, KindEmpty, KindOutOfRange, KindCRSUnparseable, KindCRSDiffers, KindMalformed,
		KindMissingGeometry, KindVertexBudget, KindByteBudget, KindOther}
}

// Valid reports whether k is one of the defined reason kinds.
func (k ReasonKind) Valid() bool { return k != kindNone && slices.Contains(ReasonKinds(), k) }

// ParseReasonKind returns the reason kind named s; an unknown name is an
// error wrapping [ErrUnknownName].
func ParseReasonKind(s string) (ReasonKind, error) {
	if k := ReasonKind(s); k.Valid() {
		return k, nil
	}
	return "", fmt.Errorf("classify: %w: reason kind %q", ErrUnknownName, s)
}

var geosReasons = []struct {
	prefix string
	kind   ReasonKind
}{
	// Longest first: "Ring Self-intersection" before "Self-intersection".
	{"Ring Self-intersection", KindRingSelfIntersection},
	{"Self-intersection", KindSelfIntersection},
	{"Ring is not closed", KindRingNotClosed},
	{"Too few points", KindTooFewPoints},
	{"Invalid Coordinate", KindInvalidCoordinate},
	{"Hole lies outside shell", KindHoleOutsideShell},
	{"Nested holes", KindNestedHoles},
	{"Holes are nested", KindNestedHoles}, // GEOS 3.11's wording
	{"Nested shells", KindNestedShells},
	{"Interior is disconnected", KindDisconnectedInterior},
	{"Duplicate Rings", KindDuplicateRings},
}

// KindOfReason maps a GEOS (or PostGIS ST_IsValidReason) reason such as
// "Self-intersection[0.5 0.5]" to its [ReasonKind]. Unrecognised reasons map
// to [KindOther]; the empty string to "".
func KindOfReason(reason string) ReasonKind {
	if reason == "" {
		return kindNone
	}
	for _, r := range geosReasons {
		if strings.HasPrefix(reason, r.prefix) {
			return r.kind
		}
	}
	return KindOther
}

// GeometryDetail says what is wrong with a geometry and where.
type GeometryDetail struct {
	// Reason is the validity reason verbatim, e.g. GEOS's
	// "Self-intersection[0.5 0.5]", or a sentence of ours for faults GEOS
	// does not see (NaN coordinates, unparseable CRS).
	Reason string
	// Kind is the bounded label for Reason.
	Kind ReasonKind
	// Location is the offending point [x, y] in the payload's coordinates,
	// or nil.
	Location *orb.Point
	// EPSG is the EPSG code involved: the payload's CRS for a CRS mismatch
	// (0 when it could not be parsed or has no EPSG code).
	EPSG int
	// Fault locates the offending vertex or segment in the input, or nil.
	Fault *Fault
	// GeometryType is the GeoJSON type ("Polygon", …), if known.
	GeometryType string
	// VertexCount is the number of positions in the geometry, if known.
	VertexCount int
}

// Fault locates a fault in the input geometry's coordinate arrays, so an
// operator can go straight to the offending position. Indexes are zero
// based; -1 means "not applicable" (a Polygon has no part index, a
// LineString no ring index).
type Fault struct {
	// Part is the index of the member of a Multi* geometry or of a
	// GeometryCollection's geometries, or -1.
	Part int `json:"part"`
	// Ring is the index of the ring within a polygon (0 = exterior), or -1.
	Ring int `json:"ring"`
	// Vertex is the index of the position within its ring, line or
	// MultiPoint; for a segment fault, the segment's first vertex.
	Vertex int `json:"vertex"`
	// OnSegment is true when the location lies on the segment from Vertex to
	// Vertex+1 rather than on a vertex.
	OnSegment bool `json:"on_segment,omitempty"`
}

func newError(class Class, err error) error {
	if err == nil {
		return nil
	}
	return &Error{Class: class, Err: err}
}

// Every marker below follows one rule: a nil err yields nil (so that
// "return classify.Transient(err)" is safe on the success path), and the
// returned error unwraps to err.

// Mark returns err marked with class.
func Mark(err error, class Class) error { return newError(class, err) }

// Transient marks err as transient: retried in place with backoff, then
// dead-lettered to the retry destination once the budget is spent.
func Transient(err error) error { return newError(ClassTransient, err) }

// RetryAfter marks err as transient and asks for at least d before the
// next attempt, as River's JobSnooze does: the [Processor] of package
// broker waits d (not a jittered backoff) when the policy retries, and a d
// over [Policy.MaxRetryAfter] dead-letters to the retry destination at
// once. Use it for a server's Retry-After on HTTP 429 and 503.
func RetryAfter(err error, d time.Duration) error {
	if err == nil {
		return nil
	}
	return &Error{Class: ClassTransient, Err: err, RetryAfter: max(d, 0)}
}

// InvalidGeometry marks err as an invalid geometry: dead-lettered to the
// poison destination at once.
func InvalidGeometry(err error) error { return newError(ClassInvalidGeometry, err) }

// SchemaViolation marks err as a schema violation: dead-lettered to the
// poison destination at once.
func SchemaViolation(err error) error { return newError(ClassSchemaViolation, err) }

// CRSMismatch marks err as a CRS mismatch involving the given EPSG code (0
// if unknown): dead-lettered to the poison destination at once.
func CRSMismatch(err error, epsg int) error {
	if err == nil {
		return nil
	}
	kind := KindCRSDiffers
	if epsg == 0 {
		kind = KindCRSUnparseable
	}
	return &Error{Class: ClassCRSMismatch, Err: err,
		Geometry: &GeometryDetail{EPSG: epsg, Kind: kind, Reason: err.Error()}}
}

// ResourceExhausted marks err as resource exhaustion (oversized payload,
// vertex budget, out of memory): quarantined, never retried automatically.
func ResourceExhausted(err error) error { return newError(ClassResourceExhausted, err) }

// WithStage annotates err with the stage it happened in, keeping its class.
// An inner stage (closer to the cause) wins over an outer one, so library
// code can be precise and callers can add a default.
func WithStage(err error, stage Stage) error {
	if err == nil {
		return nil
	}
	return &Error{Stage: stage, Err: err}
}

// walk visits err and its chain depth first (following both Unwrap() error
// and Unwrap() []error) and stops when visit returns true. It allocates
// nothing for plain chains.
func walk(err error, visit func(error) bool) bool {
	for err != nil {
		if visit(err) {
			return true
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				if walk(e, visit) {
					return true
				}
			}
			return false
		default:
			return false
		}
	}
	return false
}

// markedClass returns the class of the first *Error in err's chain that has
// one. The common case — err itself is a classified *Error — costs a type
// assertion and no allocation.
func markedClass(err error) (Class, bool) {
	if e, ok := err.(*Error); ok && e.Class.Valid() {
		return e.Class, true
	}
	var c Class
	found := walk(err, func(e error) bool {
		if ce, ok := e.(*Error); ok && ce.Class.Valid() {
			c = ce.Class
			return true
		}
		return false
	})
	return c, found
}

// RetryAfterOf returns the longest delay err's chain asks for: the
// RetryAfter of a [*Error] (see [RetryAfter]), or of any error with a
// RetryAfter() time.Duration method (an HTTP client's 429/503 error
// carrying the Retry-After header, say). 0 when none asks.
func RetryAfterOf(err error) time.Duration {
	var d time.Duration
	walk(err, func(e error) bool {
		switch v := e.(type) {
		case *Error:
			d = max(d, v.RetryAfter)
		case interface{ RetryAfter() time.Duration }:
			d = max(d, v.RetryAfter())
		}
		return false
	})
	return d
}

// StageOf returns the innermost stage recorded in err's chain, or "".
func StageOf(err error) Stage {
	var s Stage
	walk(err, func(e error) bool {
		if ce, ok := e.(*Error); ok && ce.Stage.Valid() {
			s = ce.Stage
		}
		return false
	})
	return s
}

// DetailOf returns the innermost geometry detail recorded in err's chain,
// or nil.
func DetailOf(err error) *GeometryDetail {
	var d *GeometryDetail
	walk(err, func(e error) bool {
		if ce, ok := e.(*Error); ok && ce.Geometry != nil {
			d = ce.Geometry
		}
		return false
	})
	return d
}
