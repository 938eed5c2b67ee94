package postgis_test

import (
	"context"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/postgis"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/internal/corpus"
	"github.com/geodlq/geodlq/spatial"
)

// corpusRow is what the store holds for one dead-lettered corpus item,
// with PostGIS's own verdict on the stored geometry.
type corpusRow struct {
	geomStatus, geomError string
	hasGeom               bool
	srid                  int
	// ST_IsValidDetail(geom); nil when geom is NULL.
	valid                  *bool
	reason                 *string
	detailX, detailY       *float64
	locX, locY             *float64
	locSRID                int
	ringClosed             *bool
	ringStartX, ringStartY *float64
	empty                  *bool
	body                   []byte
}

func readCorpusRow(t *testing.T, s *broker.Store, destination, idemKey string) corpusRow {
	t.Helper()
	var r corpusRow
	err := poolOf(t, s).QueryRow(context.Background(), `
		SELECT r.geom_status, COALESCE(r.geom_error, ''), r.geom IS NOT NULL, COALESCE(ST_SRID(r.geom), 0),
			d.valid, d.reason, ST_X(d.location), ST_Y(d.location),
			ST_X(r.location), ST_Y(r.location), COALESCE(ST_SRID(r.location), 0),
			CASE WHEN GeometryType(r.geom) = 'POLYGON' AND NOT ST_IsEmpty(r.geom) THEN ST_IsClosed(ST_ExteriorRing(r.geom)) END,
			CASE WHEN GeometryType(r.geom) = 'POLYGON' AND NOT ST_IsEmpty(r.geom) THEN ST_X(ST_StartPoint(ST_ExteriorRing(r.geom))) END,
			CASE WHEN GeometryType(r.geom) = 'POLYGON' AND NOT ST_IsEmpty(r.geom) THEN ST_Y(ST_StartPoint(ST_ExteriorRing(r.geom))) END,
			ST_IsEmpty(r.geom), r.body
		FROM `+postgis.Table(s)+` AS r LEFT JOIN LATERAL ST_IsValidDetail(r.geom) AS d ON r.geom IS NOT NULL
		WHERE r.destination = $1 AND r.idempotency_key = $2`, destination, idemKey).Scan(
		&r.geomStatus, &r.geomError, &r.hasGeom, &r.srid,
		&r.valid, &r.reason, &r.detailX, &r.detailY,
		&r.locX, &r.locY, &r.locSRID,
		&r.ringClosed, &r.ringStartX, &r.ringStartY, &r.empty, &r.body)
	require.NoError(t, err)
	return r
}

// splitReason splits a GEOS-style reason "Self-intersection[0.5 0.5]" into
// its text and point. The coordinates may be NaN or ±Infinity.
func splitReason(reason string) (text string, x, y float64, ok bool) {
	i := strings.LastIndexByte(reason, '[')
	if i < 0 || !strings.HasSuffix(reason, "]") {
		return reason, 0, 0, false
	}
	parts := strings.Fields(reason[i+1 : len(reason)-1])
	if len(parts) != 2 {
		return reason, 0, 0, false
	}
	x, err1 := strconv.ParseFloat(parts[0], 64)
	y, err2 := strconv.ParseFloat(parts[1], 64)
	if err1 != nil || err2 != nil {
		return reason, 0, 0, false
	}
	return reason[:i], x, y, true
}

// sameCoord compares within 1e-9, NaN equal to NaN and infinities by sign.
func sameCoord(a, b float64) bool {
	switch {
	case math.IsNaN(a) || math.IsNaN(b):
		return math.IsNaN(a) && math.IsNaN(b)
	case math.IsInf(a, 0) || math.IsInf(b, 0):
		return a == b
	}
	return math.Abs(a-b) <= 1e-9
}

// TestCorpusValidityAgreesWithPostGIS dead-letters every failing corpus
// event the way a pipeline does — spatial.Checker.CheckEvent's error
// through broker.Processor, which builds the dlq.v1 envelope and publishes
// it to the store — and then asks PostGIS about the stored geometry. For
// every invalid geometry, ST_IsValidDetail's reason must equal the
// envelope's geometry_error reason text (GEOS is the same library on both
// sides) and its location the envelope's within 1e-9. The items where
// PostGIS cannot say the same thing are listed in exceptions, each with
// what PostGIS does say, asserted.
func TestCorpusValidityAgreesWithPostGIS(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, nil)
	checker, err := spatial.NewChecker(nil)
	require.NoError(t, err)
	defer checker.Close()
	proc, err := broker.NewProcessor(&broker.ProcessorOptions{
		Publisher: s,
		Sleep:     func(context.Context, time.Duration) error { return nil },
	})
	require.NoError(t, err)
	const topic = "corpus.events" // the store's schema is unique to this test

	// exceptions: invalid geometries whose PostGIS verdict cannot be the
	// envelope's, and why. Every other invalid geometry must agree.
	exceptions := map[string]func(t *testing.T, env *envelope.Envelope, r corpusRow){
		// geodlq reports an unclosed ring itself ("Ring is not closed",
		// at its first position), because GEOS would close it silently
		// when reading GeoJSON through geodlq. PostGIS stores the ring as
		// sent, unclosed; GEOS then refuses to build it at all, so
		// ST_IsValidDetail has an exception's text and no location. What
		// PostGIS does agree with: the exterior ring is not closed, and
		// it starts at the envelope's location.
		"unclosed_ring": func(t *testing.T, env *envelope.Envelope, r corpusRow) {
			require.True(t, r.hasGeom, "the unclosed ring is stored")
			require.False(t, *r.valid)
			require.Equal(t, "IllegalArgumentException: Points of LinearRing do not form a closed linestring", *r.reason)
			require.Nil(t, r.detailX, "GEOS could not build the ring, so there is no location")
			require.NotNil(t, r.ringClosed)
			require.False(t, *r.ringClosed, "PostGIS agrees the exterior ring is not closed")
			require.True(t, sameCoord(env.GeometryError.Location[0], *r.ringStartX))
			require.True(t, sameCoord(env.GeometryError.Location[1], *r.ringStartY), "…and that it starts at the envelope's location")
		},
		// An empty polygon is valid to GEOS (and so to PostGIS); geodlq
		// refuses it as an event geometry. PostGIS stores POLYGON EMPTY.
		"empty_polygon": func(t *testing.T, env *envelope.Envelope, r corpusRow) {
			require.Equal(t, string(classify.KindEmpty), env.GeometryError.Kind)
			require.True(t, r.hasGeom)
			require.True(t, *r.empty, "stored as an empty geometry")
			require.True(t, *r.valid, "GEOS calls an empty polygon valid")
			require.Nil(t, r.locX)
		},
	}

	dests := map[string]bool{}
	checkedInvalid := 0
	for _, it := range corpus.All() {
		if it.Valid() {
			continue
		}
		t.Run(it.Name, func(t *testing.T) {
			msg := &broker.Message{Body: it.Payload, Source: &envelope.Source{System: "test", Topic: topic}}
			out, err := proc.Process(ctx, msg, func(_ context.Context, m *broker.Message) error {
				_, err := checker.CheckEvent(m.Body)
				return err
			})
			require.NoError(t, err)
			require.True(t, out.DeadLettered)
			env := out.Envelope
			require.Equal(t, it.Class, env.FailureClass)
			dests[out.Destination] = true
			r := readCorpusRow(t, s, out.Destination, env.IdempotencyKey)
			restored, err := envelope.Decode(r.body)
			require.NoError(t, err)
			require.Equal(t, env.PayloadSHA256, restored.PayloadSHA256, "the stored body is the envelope")

			// The location column is the envelope's location, in the
			// geometry's SRID.
			if ge := env.GeometryError; ge != nil && len(ge.Location) == 2 {
				require.NotNil(t, r.locX)
				require.Equal(t, ge.Location[0], *r.locX)
				require.Equal(t, ge.Location[1], *r.locY)
				require.Equal(t, r.srid, r.locSRID)
			} else {
				require.Nil(t, r.locX, "no location in the envelope, none stored")
			}

			if it.Class != classify.ClassInvalidGeometry {
				checkOtherFailure(t, it, env, r)
				return
			}
			checkedInvalid++
			require.Equal(t, postgis.GeomParsed, r.geomStatus, "PostGIS parses every invalid geometry of the corpus: %s", r.geomError)
			require.Equal(t, 4326, r.srid)
			if check, ok := exceptions[it.Name]; ok {
				check(t, env, r)
				return
			}
			text, x, y, ok := splitReason(env.GeometryError.Reason)
			require.True(t, ok, "a GEOS reason with its point: %q", env.GeometryError.Reason)
			require.False(t, *r.valid, "PostGIS finds the geometry invalid too")
			require.Equal(t, text, *r.reason, "ST_IsValidDetail's reason is the envelope's")
			require.NotNil(t, r.detailX)
			require.True(t, sameCoord(x, *r.detailX) && sameCoord(y, *r.detailY),
				"ST_IsValidDetail's location (%v %v) is the envelope's (%v %v)", *r.detailX, *r.detailY, x, y)
			t.Logf("envelope %q; ST_IsValidDetail %q at (%v %v)", env.GeometryError.Reason, *r.reason, *r.detailX, *r.detailY)
			if ge := env.GeometryError; len(ge.Location) == 2 {
				require.True(t, sameCoord(ge.Location[0], *r.detailX) && sameCoord(ge.Location[1], *r.detailY))
			} else {
				// NaN and ±Infinity: JSON cannot carry the location, so the
				// envelope spells it out in the reason only, and PostGIS
				// (which parses bare NaN and Infinity tokens) reports the
				// same non-finite point.
				require.True(t, math.IsNaN(x) || math.IsInf(x, 0) || math.IsNaN(y) || math.IsInf(y, 0))
				require.Equal(t, string(classify.KindInvalidCoordinate), ge.Kind)
			}
		})
	}
	require.Positive(t, checkedInvalid)
	for name := range exceptions {
		it, ok := corpus.Lookup(name)
		require.True(t, ok && it.Class == classify.ClassInvalidGeometry, "exception %q is an invalid-geometry corpus item", name)
	}
}

// checkOtherFailure asserts how the store keeps the corpus's CRS mismatches
// and schema violations.
func checkOtherFailure(t *testing.T, it corpus.Item, env *envelope.Envelope, r corpusRow) {
	t.Helper()
	type want struct {
		status string
		srid   int
	}
	wants := map[string]want{
		"epsg_3857_declared": {postgis.GeomParsed, 3857},
		"named_crs_3857":     {postgis.GeomParsed, 3857},
		// No EPSG code could be resolved: SRID 0, unknown, not 4326.
		"unparseable_crs": {postgis.GeomParsed, 0},
		// Stored with the SRID it claims; GEOS has no notion of a
		// geographic range, so PostGIS calls it valid.
		"webmercator_labelled_4326": {postgis.GeomParsed, 4326},
		"missing_geometry":          {postgis.GeomMissing, 0},
		"null_geometry":             {postgis.GeomMissing, 0},
		"not_json":                  {postgis.GeomMissing, 0},
		// PostGIS refuses these; the row is stored with a NULL geometry.
		"null_coordinates": {postgis.GeomUnparseable, 0},
		"wrong_nesting":    {postgis.GeomUnparseable, 0},
		"unknown_type":     {postgis.GeomUnparseable, 0},
	}
	w, ok := wants[it.Name]
	require.True(t, ok, "corpus item %q (%s) needs an expectation here", it.Name, it.Class)
	require.Equal(t, w.status, r.geomStatus, r.geomError)
	require.Equal(t, w.status == postgis.GeomParsed, r.hasGeom)
	require.Equal(t, w.srid, r.srid)
	if r.hasGeom {
		require.True(t, *r.valid, "the corpus's non-topology failures have valid geometries")
	}
	if w.status == postgis.GeomUnparseable {
		require.NotEmpty(t, r.geomError, "PostGIS's message is kept")
	}
}
