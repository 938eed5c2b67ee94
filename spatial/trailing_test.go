//go:build cgo

package spatial_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/ingress"
)

// TestTrailingBytesAgreeWithIngress: after a valid event, every byte value
// but JSON's four white-space bytes makes the event malformed — for
// CheckEvent exactly as for the ingress gate (a NUL used to pass
// CheckEvent, which took it for the end of the input).
func TestTrailingBytesAgreeWithIngress(t *testing.T) {
	c := newChecker(t, nil)
	const event = `{"source_uri":"s3://b/k.geojson","processing_mode":"vector","crs":"EPSG:4326",` +
		`"geometry":{"type":"Polygon","coordinates":[[[0,0],[1,0],[1,1],[0,1],[0,0]]]}}`
	_, err := c.CheckEvent([]byte(event))
	require.NoError(t, err)
	require.Empty(t, ingress.Validate([]byte(event), nil))
	for b := 0; b < 256; b++ {
		for _, tail := range []string{string([]byte{byte(b)}), string([]byte{byte(b)}) + "garbage"} {
			in := []byte(event + tail)
			_, err := c.CheckEvent(in)
			vs := ingress.Validate(in, nil)
			if (b == ' ' || b == '\t' || b == '\r' || b == '\n') && len(tail) == 1 {
				require.NoError(t, err, "byte 0x%02x", b)
				require.Empty(t, vs, "byte 0x%02x", b)
				continue
			}
			requireClassified(t, err, classify.ClassSchemaViolation, classify.StageParse, classify.KindMalformed)
			require.Len(t, vs, 1, "byte 0x%02x: %v", b, vs)
			require.Equal(t, classify.ClassSchemaViolation, vs[0].Class, "byte 0x%02x", b)
			require.Equal(t, classify.KindMalformed, vs[0].Kind, "byte 0x%02x", b)
		}
	}
}
