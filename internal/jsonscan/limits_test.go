package jsonscan_test

import (
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/geodlq/geodlq/internal/jsonscan"
)

// TestTrailingBytes: Find and FindAll accept only RFC 8259 white space
// after the document; every other byte value, NUL included, is a syntax
// error at its offset. Skip reads one value and leaves the rest to its
// caller.
func TestTrailingBytes(t *testing.T) {
	doc := `{"geometry":{"type":"Point","coordinates":[1,2]},"id":7}`
	paths := []jsonscan.Path{jsonscan.MustCompile("/geometry"), jsonscan.MustCompile("/id")}
	for b := 0; b < 256; b++ {
		in := []byte(doc + string([]byte{byte(b)}) + "garbage")
		ws := b == ' ' || b == '\t' || b == '\r' || b == '\n'
		out := make([]jsonscan.Span, len(paths))
		err := jsonscan.FindAll(in, paths, out)
		require.Error(t, err, "byte 0x%02x", b)
		var se *jsonscan.SyntaxError
		require.ErrorAs(t, err, &se)
		if ws {
			require.Equal(t, len(doc)+1, se.Offset)
		} else {
			require.Equal(t, len(doc), se.Offset, "byte 0x%02x", b)
		}
		_, _, err = jsonscan.Find(in, "/id")
		require.ErrorIs(t, err, jsonscan.ErrSyntax, "byte 0x%02x", b)

		alone := []byte(doc + string([]byte{byte(b)}))
		_, _, err = jsonscan.Find(alone, "/id")
		if ws {
			require.NoError(t, err)
		} else {
			require.ErrorIs(t, err, jsonscan.ErrSyntax, "byte 0x%02x", b)
		}
		s, e, err := jsonscan.Skip(alone, 0)
		require.NoError(t, err)
		require.Equal(t, 0, s)
		require.Equal(t, len(doc), e, "Skip ends at the value's end, whatever follows")
	}
}

// TestTooDeep: nesting past MaxDepth is refused, in every position, with
// an error that is both ErrSyntax and ErrTooDeep, in constant memory and
// with the stack capped at 1 MiB.
func TestTooDeep(t *testing.T) {
	defer debug.SetMaxStack(debug.SetMaxStack(1 << 20))
	n := 3_000_000
	open := strings.Repeat("[", n)
	for name, doc := range map[string]string{
		"top level":       open + strings.Repeat("]", n),
		"member":          `{"geometry":` + open + strings.Repeat("]", n) + `}`,
		"objects":         `{"a":1,"p":` + strings.Repeat(`{"a":`, n/5) + "1" + strings.Repeat("}", n/5) + `}`,
		"before the path": `{"p":` + open + `,"geometry":1}`,
		"on the path":     `{"geometry":{"coordinates":` + open + `}}`,
		"unclosed":        `{"geometry":` + open,
	} {
		t.Run(name, func(t *testing.T) {
			data := []byte(doc)
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, _, err := jsonscan.Find(data, "/geometry/type")
			runtime.ReadMemStats(&after)
			require.ErrorIs(t, err, jsonscan.ErrSyntax)
			require.ErrorIs(t, err, jsonscan.ErrTooDeep)
			require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(64<<10))
			_ = jsonscan.CountNumberArrays(data)
		})
	}
	// Exactly MaxDepth is fine, and other syntax errors are not ErrTooDeep.
	_, _, err := jsonscan.Skip([]byte(strings.Repeat("[", jsonscan.MaxDepth)+strings.Repeat("]", jsonscan.MaxDepth)), 0)
	require.NoError(t, err)
	_, _, err = jsonscan.Skip([]byte("[1,2"), 0)
	require.ErrorIs(t, err, jsonscan.ErrSyntax)
	require.NotErrorIs(t, err, jsonscan.ErrTooDeep)
}
