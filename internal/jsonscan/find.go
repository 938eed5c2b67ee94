package jsonscan

import (
	"fmt"
	"math/bits"
	"strings"
	"unicode/utf8"
)

// MaxPaths is the most paths one [FindAll] call resolves.
const MaxPaths = 64

// Span is the byte span [Start, End) of a value in the scanned input.
// Start is -1 when the value was not found.
type Span struct {
	// Start is the offset of the value's first byte, or -1.
	Start int
	// End is the offset just past the value's last byte, or -1.
	End int
}

// Found reports whether the span locates a value.
func (s Span) Found() bool { return s.Start >= 0 }

var notFound = Span{Start: -1, End: -1}

// Path is a compiled JSON-pointer-like path (RFC 6901 syntax): "" is the
// whole document, "/geometry" a member of the top-level object,
// "/feature/geometry" a member of a member, "/features/0/geometry" goes
// through the first element of an array. "~1" stands for "/" and "~0" for
// "~" in a member name. A Path is immutable and safe for concurrent use.
type Path struct {
	src    string
	tokens []string
}

// String returns the path as it was compiled.
func (p Path) String() string { return p.src }

// Compile parses a path. It fails (wrapping [ErrBadPath]) on a non-empty
// path that does not start with "/" or on a "~" not followed by 0 or 1.
func Compile(path string) (Path, error) {
	toks, err := splitPath(path, nil)
	if err != nil {
		return Path{}, err
	}
	return Path{src: path, tokens: toks}, nil
}

// MustCompile is like [Compile] but panics on a malformed path. Use it only
// for paths that are constants of the program.
func MustCompile(path string) Path {
	p, err := Compile(path)
	if err != nil {
		panic(err)
	}
	return p
}

func splitPath(path string, dst []string) ([]string, error) {
	if path == "" {
		return dst, nil
	}
	if path[0] != '/' {
		return nil, fmt.Errorf("%w: %q does not start with /", ErrBadPath, path)
	}
	for rest := path[1:]; ; {
		tok, next, more := strings.Cut(rest, "/")
		if strings.IndexByte(tok, '~') >= 0 {
			var b strings.Builder
			for k := 0; k < len(tok); k++ {
				if tok[k] != '~' {
					b.WriteByte(tok[k])
					continue
				}
				if k+1 < len(tok) && (tok[k+1] == '0' || tok[k+1] == '1') {
					b.WriteByte("~/"[tok[k+1]-'0'])
					k++
					continue
				}
				return nil, fmt.Errorf("%w: bad ~ escape in %q", ErrBadPath, path)
			}
			tok = b.String()
		}
		dst = append(dst, tok)
		if !more {
			return dst, nil
		}
		rest = next
	}
}

// splitSimple splits a path of at most len(buf) steps without "~" into buf
// without allocating; ok is false for other paths.
func splitSimple(path string, buf *[8]string) (n int, ok bool) {
	if path == "" {
		return 0, true
	}
	if path[0] != '/' || strings.IndexByte(path, '~') >= 0 {
		return 0, false
	}
	for rest := path[1:]; n < len(buf); n++ {
		tok, next, more := strings.Cut(rest, "/")
		buf[n] = tok
		if !more {
			return n + 1, true
		}
		rest = next
	}
	return 0, false
}

// Find returns the span of the value at path in the JSON document data.
// It wraps [ErrNotFound] when no value is there (a member is missing, or a
// step goes through a scalar), [ErrSyntax] when data is malformed on the
// way, and [ErrBadPath] for a malformed path. The whole document is
// scanned, so trailing garbage is an error. Find allocates nothing for
// paths of up to eight steps without "~" escapes.
func Find(data []byte, path string) (start, end int, err error) {
	var buf [8]string
	var toks []string
	if n, ok := splitSimple(path, &buf); ok {
		toks = buf[:n]
	} else if toks, err = splitPath(path, nil); err != nil {
		return -1, -1, err
	}
	var out [1]Span
	q := query{one: toks, out: out[:], countPath: -1}
	if err := q.run(data); err != nil {
		return -1, -1, err
	}
	if !out[0].Found() {
		return -1, -1, fmt.Errorf("%w: %s", ErrNotFound, path)
	}
	return out[0].Start, out[0].End, nil
}

// FindAll resolves every path in one pass over data and stores the span of
// each in out (which must be at least as long as paths; at most
// [MaxPaths] paths): a span whose Start is -1 when its path names no
// value. The error is non-nil only for malformed JSON (on the way to a
// value, or structurally anywhere) or too many paths.
func FindAll(data []byte, paths []Path, out []Span) error {
	if len(paths) > MaxPaths || len(out) < len(paths) {
		return fmt.Errorf("jsonscan: FindAll: %d paths, %d spans (at most %d paths)", len(paths), len(out), MaxPaths)
	}
	q := query{paths: paths, out: out[:len(paths)], countPath: -1}
	return q.run(data)
}

// FindAllCount is [FindAll] that also returns, for the value found at
// paths[countPath], the count [CountNumberArrays] would return — computed
// in the same single pass, so that locating a large geometry and counting
// its positions reads it once. The count is 0 when that path is not found.
func FindAllCount(data []byte, paths []Path, out []Span, countPath int) (int, error) {
	if len(paths) > MaxPaths || len(out) < len(paths) || countPath < 0 || countPath >= len(paths) {
		return 0, fmt.Errorf("jsonscan: FindAllCount: %d paths, %d spans, count path %d", len(paths), len(out), countPath)
	}
	q := query{paths: paths, out: out[:len(paths)], countPath: countPath}
	err := q.run(data)
	if err != nil || !q.out[countPath].Found() {
		return 0, err
	}
	return q.count, nil
}

// query resolves paths (or the single token list one) over a document.
type query struct {
	paths []Path
	one   []string
	out   []Span
	// countPath is the path whose value's positions are counted into
	// count, or -1 (the zero value of a query means path 0 with counting
	// off: see counting).
	countPath int
	counting  bool // inside the value of countPath
	count     int
}

func (q *query) tokens(p int) []string {
	if q.paths == nil {
		return q.one
	}
	return q.paths[p].tokens
}

func (q *query) run(data []byte) error {
	out := q.out
	var act uint64
	for p := range out {
		out[p] = notFound
		if len(q.tokens(p)) > 0 {
			act |= 1 << p
		}
	}
	start := skipWS(data, 0)
	if q.countPath >= 0 && len(q.tokens(q.countPath)) == 0 {
		q.counting = true
	}
	end, err := q.walk(data, start, 0, act)
	if err != nil {
		return err
	}
	for p := range out {
		if len(q.tokens(p)) == 0 {
			out[p] = Span{start, end}
		}
	}
	if j := skipWS(data, end); j != len(data) {
		return syntaxErr(j, "invalid character after top-level value")
	}
	return nil
}

// walk scans the value starting at data[i] and resolves, beneath it, the
// paths in act (each has more than d tokens; token d names a member or
// element of this value). It returns the end of the value.
func (q *query) walk(data []byte, i, d int, act uint64) (int, error) {
	if act == 0 || i >= len(data) {
		if q.counting && i < len(data) && (data[i] == '[' || data[i] == '{') {
			return skipContainer(data, i, &q.count)
		}
		return skipValue(data, i)
	}
	switch data[i] {
	case '{':
		return q.walkObject(data, i, d, act)
	case '[':
		if q.counting && startsNumber(data, i+1) {
			q.count++
		}
		return q.walkArray(data, i, d, act)
	}
	return skipValue(data, i)
}

func (q *query) walkObject(data []byte, i, d int, act uint64) (int, error) {
	n := len(data)
	i = skipWS(data, i+1)
	if i < n && data[i] == '}' {
		return i + 1, nil
	}
	for {
		if i >= n || data[i] != '"' {
			return i, syntaxErr(i, "expected a string member name")
		}
		kend, esc, err := skipString(data, i)
		if err != nil {
			return kend, err
		}
		key := data[i+1 : kend-1]
		i = skipWS(data, kend)
		if i >= n || data[i] != ':' {
			return i, syntaxErr(i, "expected ':' after member name")
		}
		i = skipWS(data, i+1)
		var match, deeper uint64
		for a := act; a != 0; a &= a - 1 {
			p := bits.TrailingZeros64(a)
			toks := q.tokens(p)
			if keyEquals(key, esc, toks[d]) {
				match |= 1 << p
				q.out[p] = notFound // the last occurrence wins
				if len(toks) > d+1 {
					deeper |= 1 << p
				}
			}
		}
		if i, err = q.walkMember(data, i, d, match, deeper); err != nil {
			return i, err
		}
		i = skipWS(data, i)
		if i < n && data[i] == ',' {
			i = skipWS(data, i+1)
			continue
		}
		if i < n && data[i] == '}' {
			return i + 1, nil
		}
		return i, syntaxErr(i, "expected ',' or '}' after object member")
	}
}

func (q *query) walkArray(data []byte, i, d int, act uint64) (int, error) {
	n := len(data)
	i = skipWS(data, i+1)
	if i < n && data[i] == ']' {
		return i + 1, nil
	}
	for idx := 0; ; idx++ {
		var match, deeper uint64
		for a := act; a != 0; a &= a - 1 {
			p := bits.TrailingZeros64(a)
			toks := q.tokens(p)
			if indexEquals(toks[d], idx) {
				match |= 1 << p
				if len(toks) > d+1 {
					deeper |= 1 << p
				}
			}
		}
		var err error
		if i, err = q.walkMember(data, i, d, match, deeper); err != nil {
			return i, err
		}
		i = skipWS(data, i)
		if i < n && data[i] == ',' {
			i = skipWS(data, i+1)
			continue
		}
		if i < n && data[i] == ']' {
			return i + 1, nil
		}
		return i, syntaxErr(i, "expected ',' or ']' after array element")
	}
}

// walkMember walks the value at data[i] of a member or element at depth d
// that the paths in match name (those in deeper go further down), and
// records the span for the paths that end here.
func (q *query) walkMember(data []byte, i, d int, match, deeper uint64) (int, error) {
	vstart := i
	startCount := q.countPath >= 0 && !q.counting && match&(1<<q.countPath) != 0 && match&^deeper&(1<<q.countPath) != 0
	if startCount {
		q.counting, q.count = true, 0 // the last occurrence wins
	}
	end, err := q.walk(data, i, d+1, deeper)
	if startCount {
		q.counting = false
	}
	if err != nil {
		return end, err
	}
	for m := match &^ deeper; m != 0; m &= m - 1 {
		q.out[bits.TrailingZeros64(m)] = Span{vstart, end}
	}
	return end, nil
}

// indexEquals reports whether tok is the canonical decimal form of idx.
func indexEquals(tok string, idx int) bool {
	if tok == "" || len(tok) > 18 || (tok[0] == '0' && len(tok) > 1) {
		return false
	}
	v := 0
	for k := 0; k < len(tok); k++ {
		c := tok[k]
		if c < '0' || c > '9' {
			return false
		}
		v = v*10 + int(c-'0')
	}
	return v == idx
}

// keyEquals compares a raw member name (without quotes) with a decoded
// token.
func keyEquals(raw []byte, escaped bool, tok string) bool {
	if !escaped {
		if string(raw) == tok {
			return true
		}
		if asciiOnly(raw) || utf8.Valid(raw) {
			return false
		}
		// Invalid UTF-8 decodes to U+FFFD, as in encoding/json.
	}
	var buf [128]byte
	dec, err := appendUnquoteBody(buf[:0], raw)
	return err == nil && string(dec) == tok
}

func asciiOnly(b []byte) bool {
	for _, c := range b {
		if c >= utf8.RuneSelf {
			return false
		}
	}
	return true
}
