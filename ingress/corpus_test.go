package ingress_test

import (
	"bytes"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/ingress"
	"github.com/geodlq/geodlq/internal/corpus"
)

// topologyOnly are the reason kinds only GEOS reports: the gate, without a
// GeometryChecker, lets such events through to the consumer.
var topologyOnly = []classify.ReasonKind{
	classify.KindSelfIntersection, classify.KindRingSelfIntersection, classify.KindHoleOutsideShell,
	classify.KindNestedHoles, classify.KindNestedShells, classify.KindDisconnectedInterior, classify.KindDuplicateRings,
}

// asGateEvent adds the members the gate requires to a corpus payload.
func asGateEvent(it corpus.Item) []byte {
	p := it.Payload
	i := bytes.IndexByte(p, '{')
	if i < 0 || !bytes.HasPrefix(bytes.TrimSpace(p), []byte("{")) {
		return p
	}
	head := []byte(`{"source_uri":"s3://corpus/` + it.Name + `.json","processing_mode":"vector",`)
	if bytes.HasPrefix(bytes.TrimSpace(p[i+1:]), []byte("}")) {
		head = head[:len(head)-1]
	}
	return append(head, p[i+1:]...)
}

// TestCorpusVerdictsMatchSpatial runs the shared event corpus — whose
// expected verdicts are spatial.Checker's — through the gate: every
// failure the gate can see without GEOS or PROJ is reported with the same
// class, kind, reason, location and fault, because both use
// internal/geojson; topology faults pass; CRSs are judged by the pure-Go
// EPSGChecker, which agrees on every corpus CRS.
func TestCorpusVerdictsMatchSpatial(t *testing.T) {
	for _, it := range corpus.All() {
		t.Run(it.Name, func(t *testing.T) {
			got := ingress.Validate(asGateEvent(it), nil)
			if it.Valid() || slices.Contains(topologyOnly, it.Kind) {
				require.Empty(t, got, "%v", got)
				return
			}
			require.Len(t, got, 1, "%v", got)
			v := got[0]
			require.Equal(t, it.Class, v.Class, "%v", v)
			require.Equal(t, it.Kind, v.Kind, "%v", v)
			if it.Reason != "" && (it.Class == classify.ClassInvalidGeometry || it.Kind == classify.KindOutOfRange) {
				require.Equal(t, it.Reason, v.Message, "the reason comes from the shared code")
			}
			if it.Location != nil {
				require.Equal(t, it.Location, v.Location)
			}
			if it.Fault != nil {
				require.Equal(t, it.Fault, v.Fault)
				require.Contains(t, v.Pointer, "/geometry/coordinates")
			}
			if it.Kind == classify.KindCRSDiffers {
				require.Equal(t, it.EPSG, v.EPSG)
			}
		})
	}
}
