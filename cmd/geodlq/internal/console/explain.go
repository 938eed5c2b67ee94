package console

import (
	"fmt"
	"strconv"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
)

// explain says, in a sentence or two for the record panel, what went
// wrong with an envelope and what would fix it: one explanation for every
// class and reason kind, so that no record is shown without one.
func explain(env *envelope.Envelope, expectedEPSG int) string {
	ge := env.GeometryError
	kind := classify.ReasonKind("")
	if ge != nil {
		kind = classify.ReasonKind(ge.Kind)
	}
	declared := "its CRS"
	if env.SourceCRS != "" {
		declared = strconv.Quote(clip(env.SourceCRS, 120))
	}
	epsg := broker.EPSGOf(env)
	switch kind {
	case classify.KindSelfIntersection:
		return "Two edges of the geometry cross each other (a bowtie): GEOS reports the crossing point, and the map marks both crossing segments. " +
			"MakeValid splits it into valid polygons (Preview make-valid)."
	case classify.KindRingSelfIntersection:
		return "A ring touches or crosses itself at a point: GEOS reports where. MakeValid splits it at that point (Preview make-valid)."
	case classify.KindRingNotClosed:
		return "A polygon ring does not end where it starts: its closing segment is missing (dashed on the map). MakeValid closes it."
	case classify.KindTooFewPoints:
		return "A ring or line has fewer distinct positions than it needs (4 for a ring, 2 for a line). MakeValid collapses it to what it can be."
	case classify.KindInvalidCoordinate:
		return "A position is not a finite number (NaN or Infinity): it has no place, so it is marked between its neighbours. " +
			"No repair can guess the missing value: the producer must resend the event."
	case classify.KindHoleOutsideShell:
		return "A hole lies outside the polygon it belongs to. MakeValid turns it into a shell of its own."
	case classify.KindNestedHoles:
		return "A hole lies inside another hole of the same polygon. MakeValid rebuilds the polygon."
	case classify.KindNestedShells:
		return "A polygon of the MultiPolygon lies inside another one. MakeValid merges them."
	case classify.KindDisconnectedInterior:
		return "Holes split the polygon's interior into disconnected pieces. MakeValid separates them into polygons."
	case classify.KindDuplicateRings:
		return "The same ring appears twice. MakeValid removes the duplicate."
	case classify.KindEmpty:
		return "The geometry is empty: it has no positions, so there is nothing to draw or to repair. The producer must send a geometry."
	case classify.KindOutOfRange:
		return fmt.Sprintf("A position lies outside the valid range of EPSG:%d (longitude ±180, latitude ±90): most often metres (Web Mercator) labelled as degrees. "+
			"Reprojection cannot fix a wrong label; the producer must declare the CRS its numbers are in.", orExpected(epsg, expectedEPSG))
	case classify.KindCRSUnparseable:
		return fmt.Sprintf("The payload declares the CRS %s, which PROJ cannot read: it has no EPSG code, so it can be neither drawn on the map nor reprojected. "+
			"The producer must send a valid CRS (such as \"EPSG:4326\").", declared)
	case classify.KindCRSDiffers:
		if epsg != 0 {
			return fmt.Sprintf("The payload is in EPSG:%d (declared %s), the pipeline expects EPSG:%d: the geometry is drawn reprojected with PROJ, "+
				"and the reproject repair (Preview reproject) converts its coordinates.", epsg, declared, expectedEPSG)
		}
		return fmt.Sprintf("The payload's CRS %s differs from the pipeline's EPSG:%d and has no EPSG code to reproject from.", declared, expectedEPSG)
	case classify.KindMalformed:
		return "The payload is not the JSON or GeoJSON the consumer reads (a schema violation): nothing can repair it; fix the producer and discard or keep the record."
	case classify.KindMissingGeometry:
		return "The event has no geometry member (a schema violation): nothing can repair it; fix the producer."
	case classify.KindVertexBudget:
		return "The geometry has more vertices than the consumer's budget allows (resource exhausted): it is never replayed automatically; " +
			"triage moves it to quarantine for a person to look at."
	case classify.KindByteBudget:
		return "The geometry is larger in bytes than the consumer's budget allows (resource exhausted): it is never replayed automatically; " +
			"triage moves it to quarantine."
	}
	switch env.FailureClass {
	case classify.ClassTransient:
		return "A transient failure (a timeout, an unavailable service): the event itself is fine, and a replay re-injects it unchanged."
	case classify.ClassUnknown:
		return "A failure the classifier does not know: the error is shown as the consumer reported it. A replay re-injects the event unchanged."
	case classify.ClassSchemaViolation:
		return "The event does not have the shape the consumer expects (a schema violation): nothing can repair it; fix the producer."
	case classify.ClassResourceExhausted:
		return "The event is over a size or resource limit: it is never replayed automatically; triage moves it to quarantine."
	case classify.ClassInvalidGeometry:
		return "GEOS finds the geometry invalid (see the reason). MakeValid may repair it (Preview make-valid)."
	case classify.ClassCRSMismatch:
		return "The payload's CRS is not the pipeline's (see the reason)."
	}
	return "See the error message."
}

func orExpected(epsg, expected int) int {
	if epsg != 0 {
		return epsg
	}
	return expected
}

// applies says whether a repair method applies to an envelope, and when
// it does not, why (so that a preview of the wrong repair says so instead
// of what the repairer would make of a record it was never meant for).
func applies(env *envelope.Envelope, method string, expectedEPSG int) (bool, string) {
	class := env.FailureClass
	switch method {
	case "make-valid":
		if class == classify.ClassInvalidGeometry {
			return true, ""
		}
		return false, fmt.Sprintf("make-valid repairs invalid_geometry records; this one is %s", orNone(string(class)))
	case "reproject", "reproject+make-valid":
		epsg := broker.EPSGOf(env)
		switch {
		case class != classify.ClassCRSMismatch && (epsg == expectedEPSG || epsg == 0 && env.SourceCRS == ""):
			return false, fmt.Sprintf("the payload is already in EPSG:%d, the pipeline's CRS: there is nothing to reproject (this record is %s)",
				expectedEPSG, orNone(string(class)))
		case class != classify.ClassCRSMismatch:
			return false, fmt.Sprintf("%s repairs crs_mismatch records; this one is %s", method, orNone(string(class)))
		case epsg == 0:
			return false, "the payload's CRS has no EPSG code to reproject from"
		}
		return true, ""
	}
	return false, "unknown repair"
}
