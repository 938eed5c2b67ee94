package corpus

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/offload"
)

// TestHostileFamilies checks the corpus itself: enough families, every
// group the issue names, unique names, a description and a verdict each,
// deterministic output, and scaling families that fill (without
// exceeding) the size they are given.
func TestHostileFamilies(t *testing.T) {
	fams := Hostile()
	require.GreaterOrEqual(t, len(fams), 60)
	names := map[string]bool{}
	groups := map[string]int{}
	for _, f := range fams {
		require.False(t, names[f.Name], "duplicate %s", f.Name)
		names[f.Name] = true
		groups[f.Group]++
		require.NotEmpty(t, f.Description, f.Name)
		require.Equal(t, strings.ToLower(f.Name), f.Name)
		require.Contains(t, []Input{InputEvent, InputEnvelope}, f.Input, f.Name)
		if f.Input == InputEvent {
			require.Nil(t, f.DecodeErr, f.Name)
			require.Nil(t, f.RestoreErr, f.Name)
			require.True(t, f.Valid() || f.Class.Valid(), f.Name)
		}
		require.Equal(t, f.Large, len(f.Generate(MinHostileSize).Data) > MaxSeedSize, "%s: Large", f.Name)
		require.False(t, f.Large && f.Scales, f.Name)
		got, ok := HostileFamily(f.Name)
		require.True(t, ok)
		require.Equal(t, f.Name, got.Name)
	}
	for _, g := range []string{"depth", "number", "nan", "utf8", "duplicate", "trailing", "size", "structure", "crs", "envelope"} {
		require.NotZero(t, groups[g], "group %s", g)
	}
	_, ok := HostileFamily("no_such_family")
	require.False(t, ok)
}

func TestHostileGenerate(t *testing.T) {
	const size = 1 << 20
	for _, f := range Hostile() {
		if !f.Scales {
			continue
		}
		t.Run(f.Name, func(t *testing.T) {
			a, b := f.Generate(size), f.Generate(size)
			require.True(t, bytes.Equal(a.Data, b.Data), "deterministic")
			require.LessOrEqual(t, len(a.Data), size)
			require.Greater(t, len(a.Data), size*3/4, "fills the size")
			require.LessOrEqual(t, cap(a.Data), len(a.Data)+len(a.Data)/3+64, "allocated once, not grown by doubling")
			small := f.Generate(0)
			require.NotEmpty(t, small.Data)
			require.LessOrEqual(t, len(small.Data), 32<<10, "the smallest instance is small (past encoding/json's depth limit at most)")
		})
	}
}

// TestHostileShapes pins what the generators claim to build.
func TestHostileShapes(t *testing.T) {
	gen := func(name string, size int) []byte {
		f, ok := HostileFamily(name)
		require.True(t, ok, name)
		return f.Generate(size).Data
	}
	deep := gen("depth_collections", 30<<20)
	require.Greater(t, bytes.Count(deep, []byte(`"GeometryCollection"`)), 600_000, "the ~30 MB event of the issue")
	require.True(t, json.Valid(gen("depth_collections", 64<<10)), "valid JSON, only deep")
	require.True(t, bytes.HasSuffix(gen("trailing_nul_garbage", 0), []byte("\x00garbage")))
	ring := gen("ring_1e6", 0)
	require.Equal(t, 1_000_000, bytes.Count(ring, []byte("["))-2)
	require.True(t, json.Valid(ring))
	holes := gen("holes_1e5", 0)
	require.Equal(t, 100_001, bytes.Count(holes, []byte("[[")))
	require.True(t, json.Valid(gen("holes_1e5_one_outside", 0)))
	// The nesting families are JSON (within encoding/json's depth at this
	// size), only deep, except the one that never closes.
	for _, f := range Hostile() {
		if f.Group == "depth" {
			require.Equal(t, f.Name != "depth_unclosed", json.Valid(f.Generate(MinHostileSize).Data), f.Name)
		}
	}
}

// TestHostileEnvelopes: each forged envelope gets its stated verdict from
// Decode and Restore (with its blobs served), so the families test what
// they say they test.
func TestHostileEnvelopes(t *testing.T) {
	for _, f := range Hostile() {
		if f.Input != InputEnvelope {
			continue
		}
		t.Run(f.Name, func(t *testing.T) {
			s := f.Generate(1 << 20)
			store := offload.NewMemStore()
			for k, v := range s.Blobs {
				require.NoError(t, store.Put(context.Background(), k, bytes.NewReader(v), int64(len(v))))
			}
			off, err := offload.New(store, &offload.Options{BaseURI: HostileBaseURI})
			require.NoError(t, err)
			env, err := envelope.Decode(s.Data)
			if f.DecodeErr != nil {
				require.ErrorIs(t, err, f.DecodeErr)
				return
			}
			require.NoError(t, err)
			payload, err := env.Restore(context.Background(), off)
			if f.RestoreErr != nil {
				require.ErrorIs(t, err, f.RestoreErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, env.PayloadSize, int64(len(payload)))
		})
	}
	require.True(t, slices.ContainsFunc(Hostile(), func(f Family) bool { return f.RestoreErr != nil && f.Input == InputEnvelope }))
}

func TestHostileSeeds(t *testing.T) {
	events, envelopes := HostileSeeds(InputEvent), HostileSeeds(InputEnvelope)
	require.Greater(t, len(events), 60)
	require.Greater(t, len(envelopes), 20)
	for _, s := range append(events, envelopes...) {
		require.LessOrEqual(t, len(s), MaxSeedSize)
	}
}
