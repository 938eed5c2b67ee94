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
	"strings"
)

// Class is the failure class of a dead-lettered event. Its string form is
// the value written to the dlq.v1 envelope's failure_class field.
type Class uint8

// The failure classes. The zero value is not a valid class.
const (
	// ClassTransient: broker, network or downstream failures (timeouts,
	// resets, HTTP 429/5xx) that are likely to succeed on a later attempt.
	ClassTransient Class = iota + 1
	// ClassInvalidGeometry: the geometry is topologically invalid (self
	// intersection, unclosed ring, NaN coordinates, empty geometry). It will
	// fail identically until it is repaired.
	ClassInvalidGeometry
	// ClassSchemaViolation: the payload breaks the contract (not JSON,
	// missing or null geometry, malformed GeoJSON). Needs an upstream fix.
	ClassSchemaViolation
	// ClassCRSMismatch: the declared CRS cannot be parsed, differs from the
	// pipeline's, or the coordinates lie outside its valid range.
	ClassCRSMismatch
	// ClassResourceExhausted: the event exceeds a size or vertex budget, or
	// processing ran out of memory. Quarantined, never retried automatically.
	ClassResourceExhausted
	// ClassUnknown: nothing recognised the error. Dead-lettered to the retry
	// destination and worth a human's attention.
	ClassUnknown
)

var classNames = [...]string{
	ClassTransient:         "transient",
	ClassInvalidGeometry:   "invalid_geometry",
	ClassSchemaViolation:   "schema_violation",
	ClassCRSMismatch:       "crs_mismatch",
	ClassResourceExhausted: "resource_exhausted",
	ClassUnknown:           "unknown",
}

// Classes lists every valid class, in declaration order.
func Classes() []Class {
	return []Class{ClassTransient, ClassInvalidGeometry, ClassSchemaViolation, ClassCRSMismatch, ClassResourceExhausted, ClassUnknown}
}

// String returns the wire name of c ("transient", "invalid_geometry", …), or
// "Class(N)" for an invalid value.
func (c Class) String() string {
	if c.Valid() {
		return classNames[c]
	}
	return fmt.Sprintf("Class(%d)", uint8(c))
}

// Valid reports whether c is one of the defined classes.
func (c Class) Valid() bool { return c >= ClassTransient && c <= ClassUnknown }

// Replayable reports whether events of class c may be replayed
// automatically. Only [ClassTransient] and [ClassUnknown] are.
func (c Class) Replayable() bool { return c == ClassTransient || c == ClassUnknown }

// Deterministic reports whether c fails identically on every attempt, so
// retrying is pointless. It is the negation of [Class.Replayable] for valid
// classes.
func (c Class) Deterministic() bool { return c.Valid() && !c.Replayable() }

// MarshalText implements [encoding.TextMarshaler].
func (c Class) MarshalText() ([]byte, error) {
	if !c.Valid() {
		return nil, fmt.Errorf("classify: invalid class %d", uint8(c))
	}
	return []byte(classNames[c]), nil
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
	for i, n := range classNames {
		if n != "" && n == s {
			return Class(i), nil
		}
	}
	return 0, fmt.Errorf("classify: %w: failure class %q", ErrUnknownName, s)
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

// Stage is the pipeline stage at which an event failed. Its string form is
// the value written to the envelope's failed_stage field.
type Stage uint8

// The pipeline stages. The zero value means "not known"; the envelope
// builder replaces it with the stage the caller was running.
const (
	// StageParse: decoding the payload and its GeoJSON.
	StageParse Stage = iota + 1
	// StageCRSTransform: resolving the CRS and reprojecting.
	StageCRSTransform
	// StageTopologyValidation: checking the geometry's validity.
	StageTopologyValidation
	// StageSpatialJoin: joining against reference layers.
	StageSpatialJoin
	// StagePersist: writing results (database, tiles, downstream topics).
	StagePersist
)

var stageNames = [...]string{
	StageParse:              "parse",
	StageCRSTransform:       "crs_transform",
	StageTopologyValidation: "topology_validation",
	StageSpatialJoin:        "spatial_join",
	StagePersist:            "persist",
}

// Stages lists every valid stage, in pipeline order.
func Stages() []Stage {
	return []Stage{StageParse, StageCRSTransform, StageTopologyValidation, StageSpatialJoin, StagePersist}
}

// String returns the wire name of s ("parse", "crs_transform", …), or
// "Stage(N)" for an invalid value.
func (s Stage) String() string {
	if s.Valid() {
		return stageNames[s]
	}
	return fmt.Sprintf("Stage(%d)", uint8(s))
}

// Valid reports whether s is one of the defined stages.
func (s Stage) Valid() bool { return s >= StageParse && s <= StagePersist }

// MarshalText implements [encoding.TextMarshaler].
func (s Stage) MarshalText() ([]byte, error) {
	if !s.Valid() {
		return nil, fmt.Errorf("classify: invalid stage %d", uint8(s))
	}
	return []byte(stageNames[s]), nil
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
	for i, n := range stageNames {
		if n != "" && n == s {
			return Stage(i), nil
		}
	}
	return 0, fmt.Errorf("classify: %w: pipeline stage %q", ErrUnknownName, s)
}
