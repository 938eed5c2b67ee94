package envelope_test

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/offload"
)

// bigGeometry returns a MultiPoint of about size bytes.
func bigGeometry(size int) string {
	var b strings.Builder
	b.WriteString(`{"type":"MultiPoint","coordinates":[`)
	for i := 0; b.Len() < size; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`[12.345678,-45.678901]`)
	}
	b.WriteString(`]}`)
	return b.String()
}

// TestBuildSameOnEveryCoreCount: with more than one core, Build hashes a
// large payload's geometry speculatively while it scans; the envelope,
// its encoding and the stored blobs must be exactly those of one core,
// for every shape of payload, including those where the speculation
// guesses wrong.
func TestBuildSameOnEveryCoreCount(t *testing.T) {
	big := bigGeometry(2 << 20)
	small := bigGeometry(10 << 10)
	props := `{"name":"` + strings.Repeat("x", 1<<20) + `","note":"[{\"geometry\":1}]"}`
	cases := []struct {
		name, payload, path string
	}{
		{"geometry first", `{"geometry":` + big + `,"id":1}`, ""},
		{"geometry last", `{"event_id":"e1","properties":` + props + `,"geometry":` + big + `}`, ""},
		{"geometry in the middle", `{"properties":` + props + `,"geometry":` + big + `,"tail":` + props + `}`, ""},
		{"small geometry in a big payload", `{"properties":` + props + `,"geometry":` + small + `}`, ""},
		{"duplicate names, the last wins", `{"geometry":` + small + `,"x":1,"geometry":` + big + `}`, ""},
		{"duplicate names, big first", `{"geometry":` + big + `,"x":1,"geometry":` + small + `}`, ""},
		{"escaped name", `{"geo\u006detry":` + big + `}`, ""},
		{"whitespace", "\n{\n  \"id\" : 7 ,\n  \"geometry\" :\n" + big + "\n}\n", ""},
		{"null geometry", `{"geometry":null,"properties":` + props + `}`, ""},
		{"no geometry", `{"properties":` + props + `}`, ""},
		{"not an object", `[` + big + `]`, ""},
		{"truncated", `{"geometry":` + big[:len(big)-10], ""},
		{"nested path", `{"feature":{"type":"Feature","geometry":` + big + `}}`, "/feature/geometry"},
		{"path with an index", `{"features":[{"geometry":` + big + `}]}`, "/features/0/geometry"},
	}
	ctx := context.Background()
	fixed := time.Date(2026, 3, 14, 12, 0, 0, 0, time.UTC)
	build := func(t *testing.T, procs int, payload, path string) ([]byte, *envelope.Envelope, *offload.MemStore, *offload.Offloader) {
		t.Helper()
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
		mem := offload.NewMemStore()
		off, err := offload.New(mem, nil)
		require.NoError(t, err)
		b, err := envelope.NewBuilder(&envelope.BuilderOptions{Offloader: off, GeometryPath: path, Now: func() time.Time { return fixed }})
		require.NoError(t, err)
		env, data, err := b.Build(ctx, envelope.Input{Payload: []byte(payload), Err: errors.New("boom")})
		require.NoError(t, err)
		return data, env, mem, off
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			require.GreaterOrEqual(t, len(tc.payload), 1<<20, "large enough to speculate")
			want, wantEnv, wantMem, _ := build(t, 1, tc.payload, tc.path)
			for _, procs := range []int{2, 4} {
				got, env, mem, off := build(t, procs, tc.payload, tc.path)
				require.True(t, bytes.Equal(want, got), "GOMAXPROCS=%d: encodings differ", procs)
				require.Equal(t, wantEnv.Geometry, env.Geometry)
				wantKeys, gotKeys := wantMem.Keys(), mem.Keys()
				slices.Sort(wantKeys)
				slices.Sort(gotKeys)
				require.Equal(t, wantKeys, gotKeys)
				restored, err := env.Restore(ctx, off)
				require.NoError(t, err)
				require.True(t, bytes.Equal([]byte(tc.payload), restored), "restores byte for byte")
			}
		})
	}
}
