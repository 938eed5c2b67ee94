package epsg

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestLookup(t *testing.T) {
	tests := []struct {
		code       int
		name       string
		kind       Kind
		geographic bool
		axes, unit string
	}{
		{4326, "WGS 84", Geographic2D, true, "ne", "degree (supplier to define representation)"},
		{4979, "WGS 84", Geographic3D, true, "ne", "degree (supplier to define representation)"},
		{4978, "WGS 84", Geocentric, false, "xx", "metre"},
		{3857, "WGS 84 / Pseudo-Mercator", Projected, false, "en", "metre"},
		{5773, "EGM96 height", Vertical, false, "u", "metre"},
		{9705, "WGS 84 + MSL height", Compound, true, "", ""},
		{2393, "KKJ / Finland Uniform Coordinate System", Projected, false, "ne", "metre"},
	}
	for _, tt := range tests {
		c, ok := Lookup(tt.code)
		require.True(t, ok, tt.code)
		require.Equal(t, tt.name, c.Name)
		require.Equal(t, tt.kind, c.Kind)
		require.Equal(t, tt.geographic, c.Geographic())
		require.Equal(t, tt.axes, c.Axes)
		require.Equal(t, tt.unit, c.Unit)
	}
	c, _ := Lookup(4326)
	require.Equal(t, Area{West: -180, South: -90, East: 180, North: 90}, c.Area)
	for _, code := range []int{0, -1, 6326, 999999} {
		_, ok := Lookup(code)
		require.False(t, ok, code)
	}
	o, ok := LookupOGC("CRS84")
	require.True(t, ok)
	require.Equal(t, "WGS 84 (CRS84)", o.Name)
	require.Equal(t, "en", o.Axes)
	_, ok = LookupOGC("crs84")
	require.False(t, ok)
	require.True(t, IsAuthority("esri"))
	require.False(t, IsAuthority("FOO"))
	require.Greater(t, len(Codes()), 7000)
}

func BenchmarkLookup(b *testing.B) {
	load()
	for b.Loop() {
		if _, ok := Lookup(3857); !ok {
			b.Fatal("3857 missing")
		}
	}
}
