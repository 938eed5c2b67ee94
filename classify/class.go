// Package classify decides what a failed spatial event is and where it goes.
//
// Every failure is mapped to one [Class]. Only [Transient] and [Unknown] are
// candidates for automatic replay; the deterministic classes
// ([InvalidGeometry], [SchemaViolation], [CRSMismatch], [ResourceExhausted])
// fail identically on every attempt and are routed at once to a poison
// destination where they wait for repair.
//
// User code marks its own errors with the constructors [Transient],
// [InvalidGeometry], … (in the style of River's JobCancel), or with [Mark]
// for an arbitrary class, and the library finds the mark through any chain of
// %w wrapping. Errors without a mark are classified by a [Classifier]'s
// rules: context deadlines, network timeouts, refused or reset connections
// and HTTP 429/502/503/504 are transient; JSON syntax and type errors are
// schema violations; everything else is unknown.
//
// [Policy.Decide] turns an error and an attempt number into a [Decision]:
// retry after a fully jittered exponential delay, dead-letter to the retry
// destination once the budget is spent, or dead-letter to the poison
// destination immediately.
package classify

import (
	"fmt"
	"slices"
	"strings"
)

// Class is the failure class of a dead-lettered event. Its value is the
// name written to the dlq.v1 envelope's failure_class field
// ("transient", "invalid_geometry", …), so string(c) is the wire name.
type Class string

// The failure classes. The zero value "" is not a valid class.
const (
	// ClassTransient: broker, network or downstream failures (timeouts,
	// resets, HTTP 429/5xx) that are likely to succeed on a later attempt.
	ClassTransient Class = "transient"
	// ClassInvalidGeometry: the geometry is topologically invalid (self
	// intersection, unclosed ring, NaN coordinates, empty geometry). It will
	// fail identically until it is repaired.
	ClassInvalidGeometry Class = "invalid_geometry"
	// ClassSchemaViolation: the payload breaks the contract (not JSON,
	// missing or null geometry, malformed GeoJSON). Needs an upstream fix.
	ClassSchemaViolation Class = "schema_violation"
	// ClassCRSMismatch: the declared CRS cannot be parsed, differs from the
	// pipeline's, or the coordinates lie outside its valid range.
	ClassCRSMismatch Class = "crs_mismatch"
	// ClassResourceExhausted: the event exceeds a size or vertex budget, or
	// processing ran out of memory. Quarantined, never retried automatically.
	ClassResourceExhausted Class = "resource_exhausted"
	// ClassUnknown: nothing recognised the error. Dead-lettered to the retry
	// destination and worth a human's attention.
	ClassUnknown Class = "unknown"
)

// Classes lists every valid class, in declaration order.
func Classes() []Class {
	return []Class{ClassTransient, ClassInvalidGeometry, ClassSchemaViolation, ClassCRSMismatch, ClassResourceExhausted, ClassUnknown}
}

// String returns the wire name of c ("transient", "invalid_geometry", …), or
// Class("…") quoted for an invalid value.
func (c Class) String() string {
	if c.Valid() {
		return string(c)
	}
	return fmt.Sprintf("Class(%q)", string(c))
}

// Valid reports whether c is one of the defined classes.
func (c Class) Valid() bool {
	switch c {
	case ClassTransient, ClassInvalidGeometry, ClassSchemaViolation, ClassCRSMismatch, ClassResourceExhausted, ClassUnknown:
		return true
	}
	return false
}

// Replayable reports whether events of class c may be replayed
// automatically. Only [ClassTransient] and [ClassUnknown] are.
func (c Class) Replayable() bool { return c == ClassTransient || c == ClassUnknown }

// Deterministic reports whether c fails identically on every attempt, so
// retrying is pointless. It is the negation of [Class.Replayable] for valid
// classes.
func (c Class) Deterministic() bool { return c.Valid() && !c.Replayable() }

// MarshalText implements [encoding.TextMarshaler]; an invalid class is an
// error wrapping [ErrUnknownName].
func (c Class) MarshalText() ([]byte, error) {
	if !c.Valid() {
		return nil, fmt.Errorf("classify: %w: failure class %q", ErrUnknownName, string(c))
	}
	return []byte(c), nil
}

// UnmarshalText implements [encoding.TextUnmarshaler]. Unknown names are an
// error wrapping [ErrUnknownName].
func (c *Class) UnmarshalText(b []byte) error {
	v, err := ParseClass(string(b))
	if err != nil {
		return err
	}
	*c = v
	return nil
}

// ParseClass returns the class whose wire name is s.
func ParseClass(s string) (Class, error) {
	if c := Class(s); c.Valid() {
		return c, nil
	}
	return "", fmt.Errorf("classify: %w: failure class %q", ErrUnknownName, s)
}

// ParseClasses parses a comma-separated list of class wire names, as a
// command-line flag gives it ("transient, unknown"). Blank items are
// ignored, so "" returns no classes; an unknown name is an error wrapping
// [ErrUnknownName].
func ParseClasses(list string) ([]Class, error) {
	var out []Class
	for s := range strings.SplitSeq(list, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		c, err := ParseClass(s)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// ClassList is a list of failure classes that is also a command-line flag:
// it implements [flag.Value] (and, with Type, spf13/pflag's Value), so
//
//	var classes classify.ClassList
//	flag.Var(&classes, "class", "only these failure classes (comma-separated)")
//
// parses "-class transient,unknown" with [ParseClasses] and refuses an
// unknown name while the flags are parsed. Repeating the flag adds to the
// list; a class given twice is kept once. The zero value is an empty
// list, which a broker.Filter's Classes reads as "every class".
type ClassList []Class

// Set adds the classes of a comma-separated list of wire names. An
// unknown name is an error wrapping [ErrUnknownName], and nothing is
// added.
func (l *ClassList) Set(list string) error {
	cs, err := ParseClasses(list)
	if err != nil {
		return err
	}
	for _, c := range cs {
		if !slices.Contains(*l, c) {
			*l = append(*l, c)
		}
	}
	return nil
}

// String returns the wire names, comma-separated ("transient,unknown").
func (l ClassList) String() string {
	names := make([]string, len(l))
	for i, c := range l {
		names[i] = c.String()
	}
	return strings.Join(names, ",")
}

// Type returns "classes", the value's name in spf13/pflag's usage lines.
func (ClassList) Type() string { return "classes" }

// Stage is the pipeline stage at which an event failed. Its value is the
// name written to the envelope's failed_stage field ("parse", …).
type Stage string

// The pipeline stages. The zero value "" means "not known"; the envelope
// builder replaces it with the stage the caller was running.
const (
	// StageParse: decoding the payload and its GeoJSON.
	StageParse Stage = "parse"
	// StageCRSTransform: resolving the CRS and reprojecting.
	StageCRSTransform Stage = "crs_transform"
	// StageTopologyValidation: checking the geometry's validity.
	StageTopologyValidation Stage = "topology_validation"
	// StageSpatialJoin: joining against reference layers.
	StageSpatialJoin Stage = "spatial_join"
	// StagePersist: writing results (database, tiles, downstream topics).
	StagePersist Stage = "persist"
)

// Stages lists every valid stage, in pipeline order.
func Stages() []Stage {
	return []Stage{StageParse, StageCRSTransform, StageTopologyValidation, StageSpatialJoin, StagePersist}
}

// String returns the wire name of s ("parse", "crs_transform", …), or
// Stage("…") quoted for an invalid value.
func (s Stage) String() string {
	if s.Valid() {
		return string(s)
	}
	return fmt.Sprintf("Stage(%q)", string(s))
}

// Valid reports whether s is one of the defined stages.
func (s Stage) Valid() bool {
	switch s {
	case StageParse, StageCRSTransform, StageTopologyValidation, StageSpatialJoin, StagePersist:
		return true
	}
	return false
}

// MarshalText implements [encoding.TextMarshaler]; an invalid stage is an
// error wrapping [ErrUnknownName].
func (s Stage) MarshalText() ([]byte, error) {
	if !s.Valid() {
		return nil, fmt.Errorf("classify: %w: pipeline stage %q", ErrUnknownName, string(s))
	}
	return []byte(s), nil
}

// UnmarshalText implements [encoding.TextUnmarshaler].
func (s *Stage) UnmarshalText(b []byte) error {
	v, err := ParseStage(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// ParseStage returns the stage whose wire name is s.
func ParseStage(s string) (Stage, error) {
	if st := Stage(s); st.Valid() {
		return st, nil
	}
	return "", fmt.Errorf("classify: %w: pipeline stage %q", ErrUnknownName, s)
}
