package envelope

import (
	"runtime"
	"strings"

	"github.com/geodlq/geodlq/internal/jsonscan"
	"github.com/geodlq/geodlq/offload"
)

// speculation hashes (and so prepares to offload) the geometry of a large
// payload on another goroutine while Build's scan finds where the
// geometry ends: the scan and the hash each take about as long as the
// other, and only the scan knows the end. The start is located by a walk
// of its own, verified against the scan's span before the result is used.
type speculation struct {
	ready chan struct{} // closed once start and put are set
	start int           // where the walk found the geometry; -1: not found
	put   *offload.SpanPut
}

// speculate starts a speculation for payload, or returns nil when it
// cannot pay: one core, no offloader, a small payload, or a geometry path
// the walk does not follow.
func (b *Builder) speculate(payload []byte) *speculation {
	if b.off == nil || b.geomMembers == nil || len(payload) < parallelHashMin || runtime.GOMAXPROCS(0) < 2 {
		return nil
	}
	sp := &speculation{ready: make(chan struct{}), start: -1}
	go func() {
		start := locateMember(payload, b.geomMembers)
		if start >= 0 {
			if put, err := b.off.NewSpanPut(payload, start, offload.ExtGeoJSON); err == nil {
				sp.start, sp.put = start, put
			}
		}
		close(sp.ready)
		if sp.put != nil {
			sp.put.Run()
		}
	}()
	return sp
}

// take returns the SpanPut when the speculation located the geometry at
// start, and nil (having stopped it) otherwise.
func (sp *speculation) take(start int64) *offload.SpanPut {
	if sp == nil {
		return nil
	}
	<-sp.ready
	if sp.put == nil || int64(sp.start) != start {
		sp.cancel()
		return nil
	}
	return sp.put
}

// cancel stops the speculation and returns once nothing reads the
// payload for it any more; it does nothing once it was taken and
// finished.
func (sp *speculation) cancel() {
	if sp == nil {
		return
	}
	<-sp.ready
	if sp.put != nil {
		sp.put.Cancel()
	}
}

// memberTokens returns the member names of a JSON pointer that names
// object members only ("/geometry", "/feature/geometry"), or nil.
func memberTokens(pointer string) []string {
	if !strings.HasPrefix(pointer, "/") {
		return nil
	}
	toks := strings.Split(pointer[1:], "/")
	for i, t := range toks {
		if t == "" || t[0] >= '0' && t[0] <= '9' || t == "-" {
			return nil // possibly an array index: not followed
		}
		toks[i] = strings.ReplaceAll(strings.ReplaceAll(t, "~1", "/"), "~0", "~")
	}
	return toks
}

// locateMember returns the offset of the value at the member path in
// data, found by walking objects from the start and skipping the members
// before it, or -1 (not an object, not found, anything unexpected). The
// first member of a name is taken; the scan takes the last, so a payload
// with duplicate names fails the verification and the speculation is
// dropped.
func locateMember(data []byte, members []string) int {
	i := skipSpace(data, 0)
	for _, name := range members {
		if i >= len(data) || data[i] != '{' {
			return -1
		}
		i = skipSpace(data, i+1)
		for {
			if i >= len(data) || data[i] != '"' {
				return -1
			}
			ks, ke, err := jsonscan.Skip(data, i)
			if err != nil {
				return -1
			}
			match := keyIs(data[ks:ke], name)
			i = skipSpace(data, ke)
			if i >= len(data) || data[i] != ':' {
				return -1
			}
			i = skipSpace(data, i+1)
			if match {
				break
			}
			_, ve, err := jsonscan.Skip(data, i)
			if err != nil {
				return -1
			}
			i = skipSpace(data, ve)
			if i >= len(data) || data[i] != ',' {
				return -1
			}
			i = skipSpace(data, i+1)
		}
	}
	if i >= len(data) {
		return -1
	}
	return i
}

// keyIs reports whether the JSON string token tok decodes to name.
func keyIs(tok []byte, name string) bool {
	raw := tok[1 : len(tok)-1]
	if !strings.ContainsRune(string(raw), '\\') {
		return string(raw) == name
	}
	s, err := jsonscan.Unquote(tok)
	return err == nil && s == name
}
