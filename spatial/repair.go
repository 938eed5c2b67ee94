package spatial

import (
	"context"
	"fmt"
	"strconv"

	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/internal/jsonscan"
	"github.com/geodlq/geodlq/replay"
)

// RepairOptions configures the repairers a Checker hands to a
// [replay.Replayer].
type RepairOptions struct {
	// GeometryPath locates the geometry in an event, as a JSON pointer.
	// Default "/geometry" (envelope.DefaultGeometryPath).
	GeometryPath string
	// CRSPath locates the declared CRS in an event. Default "/crs".
	CRSPath string
	// TargetEPSG is the CRS reprojection repairs to. Default the checker's
	// Options.ExpectedEPSG.
	TargetEPSG int
}

type repairer struct {
	c      *Checker
	geom   jsonscan.Path
	crs    jsonscan.Path
	target int
}

func (c *Checker) newRepairer(opts *RepairOptions) (*repairer, error) {
	r := &repairer{c: c, target: c.opts.ExpectedEPSG}
	gp, cp := envelope.DefaultGeometryPath, "/crs"
	if opts != nil {
		if opts.GeometryPath != "" {
			gp = opts.GeometryPath
		}
		if opts.CRSPath != "" {
			cp = opts.CRSPath
		}
		if opts.TargetEPSG > 0 {
			r.target = opts.TargetEPSG
		}
	}
	var err error
	if r.geom, err = jsonscan.Compile(gp); err != nil {
		return nil, fmt.Errorf("spatial: GeometryPath: %w", err)
	}
	if r.crs, err = jsonscan.Compile(cp); err != nil {
		return nil, fmt.Errorf("spatial: CRSPath: %w", err)
	}
	return r, nil
}

// Repairers returns the repairs a [replay.Replayer] applies to
// deterministic failures: GEOS MakeValid for invalid_geometry, and PROJ
// reprojection to the pipeline's CRS for a crs_mismatch whose EPSG code is
// known. The repaired payload differs from the original only in the
// geometry's value (and, for a reprojection, the crs member's value): every
// other byte is kept. A nil opts uses the defaults. Without Options.GEOS
// and Options.Reprojector (spatial/geos and spatial/proj, a cgo build) it
// fails with an error wrapping [ErrNeedsCGO].
func (c *Checker) Repairers(opts *RepairOptions) (map[classify.Class]replay.Repairer, error) {
	if c.opts.GEOS == nil || c.opts.Reprojector == nil {
		return nil, fmt.Errorf("spatial: Repairers (GEOS MakeValid, PROJ reprojection): %w", ErrNeedsCGO)
	}
	r, err := c.newRepairer(opts)
	if err != nil {
		return nil, err
	}
	return map[classify.Class]replay.Repairer{
		classify.ClassInvalidGeometry: replay.RepairFunc(r.makeValid),
		classify.ClassCRSMismatch:     replay.RepairFunc(r.reproject),
	}, nil
}

// ReplayCheck returns a function that validates a payload as [Checker.CheckEvent]
// does, for replay.Options.Check: a repaired event is re-injected only if it
// now passes, and a dry run reports what would pass now.
func (c *Checker) ReplayCheck() func(ctx context.Context, payload []byte) error {
	return func(ctx context.Context, payload []byte) error {
		_, err := c.CheckEventContext(ctx, payload)
		return err
	}
}

func notRepairable(format string, args ...any) error {
	return fmt.Errorf("spatial: "+format+": %w", append(args, replay.ErrNotRepairable)...)
}

// splice returns payload with the value at span s replaced by v.
func splice(payload []byte, s jsonscan.Span, v []byte) []byte {
	out := make([]byte, 0, len(payload)-(s.End-s.Start)+len(v))
	out = append(out, payload[:s.Start]...)
	out = append(out, v...)
	return append(out, payload[s.End:]...)
}

func (r *repairer) geometrySpan(payload []byte) (jsonscan.Span, error) {
	var spans [1]jsonscan.Span
	if err := jsonscan.FindAll(payload, []jsonscan.Path{r.geom}, spans[:]); err != nil {
		return jsonscan.Span{}, notRepairable("locating the geometry: %v", err)
	}
	if !spans[0].Found() {
		return jsonscan.Span{}, notRepairable("the event has no geometry at %s", r.geom)
	}
	return spans[0], nil
}

func (r *repairer) makeValid(_ context.Context, _ *envelope.Envelope, payload []byte) ([]byte, replay.Repair, error) {
	span, err := r.geometrySpan(payload)
	if err != nil {
		return nil, replay.Repair{}, err
	}
	fixed, info, err := r.c.MakeValid(payload[span.Start:span.End])
	if err != nil {
		return nil, replay.Repair{}, notRepairable("MakeValid: %v", err)
	}
	if info.WasValid {
		return nil, replay.Repair{}, notRepairable("the geometry is valid to GEOS; the failure was not topological")
	}
	detail := info.Method
	if info.TypeBefore != info.TypeAfter {
		detail += " " + info.TypeBefore + "->" + info.TypeAfter
	}
	return splice(payload, span, fixed), replay.Repair{
		Method: "make_valid", Detail: detail,
		VerticesBefore: info.VerticesBefore, VerticesAfter: info.VerticesAfter,
	}, nil
}

func (r *repairer) reproject(_ context.Context, env *envelope.Envelope, payload []byte) ([]byte, replay.Repair, error) {
	from := env.SourceEPSG
	if ge := env.GeometryError; ge != nil && ge.EPSG != nil && *ge.EPSG != 0 {
		from = *ge.EPSG
	}
	switch {
	case from == 0:
		return nil, replay.Repair{}, notRepairable("the payload's CRS has no known EPSG code")
	case from == r.target:
		// Coordinates outside the declared CRS's range (Web Mercator
		// metres labelled EPSG:4326): the label is wrong, and which CRS the
		// numbers are really in is a guess we do not make.
		return nil, replay.Repair{}, notRepairable("the payload already declares EPSG:%d; its coordinates are out of range, which reprojection cannot fix", from)
	}
	spans := make([]jsonscan.Span, 2)
	if err := jsonscan.FindAll(payload, []jsonscan.Path{r.geom, r.crs}, spans); err != nil {
		return nil, replay.Repair{}, notRepairable("locating geometry and crs: %v", err)
	}
	g, c := spans[0], spans[1]
	if !g.Found() {
		return nil, replay.Repair{}, notRepairable("the event has no geometry at %s", r.geom)
	}
	moved, err := r.c.Reproject(payload[g.Start:g.End], from, r.target)
	if err != nil {
		return nil, replay.Repair{}, notRepairable("reprojecting EPSG:%d to EPSG:%d: %v", from, r.target, err)
	}
	out := payload
	crs := []byte(strconv.Quote("EPSG:" + strconv.Itoa(r.target)))
	// Splice the later span first so the earlier offsets stay right.
	if c.Found() && c.Start > g.Start {
		out = splice(splice(out, c, crs), g, moved)
	} else if c.Found() {
		out = splice(splice(out, g, moved), c, crs)
	} else {
		out = splice(out, g, moved)
	}
	return out, replay.Repair{
		Method: "reproject", Detail: "EPSG:" + strconv.Itoa(from) + "->EPSG:" + strconv.Itoa(r.target),
	}, nil
}
