package geojson

import (
	"encoding/json"
	"math"
	"math/big"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/paulmach/orb"
	"github.com/stretchr/testify/require"
)

// refNumber is readNumber's specification: the JSON number grammar
// (scanner.numberSpan), the length limit, then strconv.ParseFloat with
// its range error ignored.
func refNumber(d []byte, i, maxLen int) (float64, int, numStatus) {
	s := scanner{data: d, pos: i}
	b, ok := s.numberSpan()
	if !ok {
		return 0, i, numInvalid
	}
	if len(b) > maxLen {
		return 0, i + len(b), numTooLong
	}
	v, err := strconv.ParseFloat(string(b), 64)
	if err != nil && err.(*strconv.NumError).Err != strconv.ErrRange {
		panic(err)
	}
	return v, i + len(b), numOK
}

// requireSameNumber fails unless readNumber and refNumber agree on d[i:]:
// same status, and for a number the same end and the same bits.
func requireSameNumber(t testing.TB, d []byte, i, maxLen int) {
	t.Helper()
	v, end, st := readNumber(d, i, maxLen)
	rv, rend, rst := refNumber(d, i, maxLen)
	if st != rst {
		t.Fatalf("%q at %d: status %d, want %d", d, i, st, rst)
	}
	if st == numInvalid {
		return
	}
	if end != rend {
		t.Fatalf("%q at %d: end %d, want %d", d, i, end, rend)
	}
	if st == numOK && math.Float64bits(v) != math.Float64bits(rv) {
		t.Fatalf("%q: %v (%#016x), strconv says %v (%#016x)", d[i:end], v, math.Float64bits(v), rv, math.Float64bits(rv))
	}
}

// hardNumbers are inputs where a conversion can go wrong: halfway cases,
// the edges of the fast paths, of the normal range and of the table.
var hardNumbers = []string{
	"0", "-0", "0.0", "-0.0", "0e0", "-0e-0", "0.000", "0e999999", "1", "-1", "9", "10", "0.1", "0.2", "0.3",
	"1.5", "2.5", "123.456", "-123.45678901234567", "13.37", "52.51", "179.99999999999997", "-89.99999999999999",
	"9007199254740992", "9007199254740993", "9007199254740994", "9007199254740995",
	"18014398509481985", "18446744073709551615", "18446744073709551616", "9999999999999999999",
	"99999999999999999999", "1000000000000000000000000", "12345678901234567890123",
	"1e22", "1e23", "1e-22", "1e-23", "9007199254740993e22", "4503599627370497e-22",
	"2.2250738585072011e-308", "2.2250738585072012e-308", "2.2250738585072014e-308",
	"4.9406564584124654e-324", "5e-324", "2.4703282292062327e-324", "2.4703282292062328e-324", "1e-400",
	"1.7976931348623157e308", "1.7976931348623158e308", "1.7976931348623159e308", "1e309", "-1e309", "1e999999999999",
	"0.1e400", "0.00000000000000000000000000000000000000001e41", "1e-348", "1e-349", "1e347", "1e348",
	"7.0420557077594588669468784357561207962098443483187940792729600000e-59",
	"2.470328229206232720882538e-324", "1.00000000000000011102230246251565404236316680908203125",
	"1.00000000000000011102230246251565404236316680908203124", "1.00000000000000011102230246251565404236316680908203126",
	"0.500000000000000166533453693773481063544750213623046875", "3.518437208883201171875e13",
	"62.5364939768271845828", "8.10109172351e-10", "1.5e-323", "0.000000000000000000000000000000000000000000001",
	"123456789012345678e-3", "12345678.12345678", "0.12345678901234567", "12345678901234567e-17",
	"1E5", "1e+5", "1E-5", "-0.0000001", "100000000000000000000000e-10",
}

func TestReadNumberHardCases(t *testing.T) {
	for _, s := range hardNumbers {
		for _, d := range []string{s, s + ",", "[" + s + "]", s + " "} {
			i := strings.Index(d, s)
			requireSameNumber(t, []byte(d), i, DefaultMaxNumberLength)
		}
	}
}

func TestReadNumberGrammar(t *testing.T) {
	tests := []struct {
		in   string
		st   numStatus
		end  int
		want float64
	}{
		{"1", numOK, 1, 1},
		{"-2.5e3,", numOK, 6, -2500},
		{"01", numOK, 1, 0}, // a number ends after a leading zero; what follows is the caller's
		{"-", numInvalid, 0, 0},
		{"+1", numInvalid, 0, 0},
		{".5", numInvalid, 0, 0},
		{"1.", numInvalid, 0, 0},
		{"1.e5", numInvalid, 0, 0},
		{"1e", numInvalid, 0, 0},
		{"1e+", numInvalid, 0, 0},
		{"-a", numInvalid, 0, 0},
		{"NaN", numInvalid, 0, 0},
		{"1_000", numOK, 1, 1},
		{"0x10", numOK, 1, 0},
		{"1" + strings.Repeat("0", 600), numTooLong, 601, 0},
		{"0." + strings.Repeat("0", 600) + "1", numTooLong, 603, 0},
	}
	for _, tt := range tests {
		t.Run(tt.in[:min(len(tt.in), 12)], func(t *testing.T) {
			v, end, st := readNumber([]byte(tt.in), 0, DefaultMaxNumberLength)
			require.Equal(t, tt.st, st)
			if st != numInvalid {
				require.Equal(t, tt.end, end)
			}
			if st == numOK {
				require.Equal(t, tt.want, v)
			}
			requireSameNumber(t, []byte(tt.in), 0, DefaultMaxNumberLength)
		})
	}
}

// TestReadNumberRandom compares readNumber with strconv on a million
// numbers shaped like coordinates and a million of any shape.
func TestReadNumberRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 2026))
	var buf []byte
	n := 1_000_000
	if testing.Short() {
		n = 50_000
	}
	for range n {
		// Shortest forms of random doubles: what Python and JavaScript write.
		f := math.Float64frombits(r.Uint64())
		if math.IsNaN(f) || math.IsInf(f, 0) {
			continue
		}
		buf = strconv.AppendFloat(buf[:0], f, 'g', -1, 64)
		requireSameNumber(t, buf, 0, DefaultMaxNumberLength)
		// Coordinates: degrees with 1 to 17 fraction digits.
		c := (r.Float64()*2 - 1) * 180
		buf = strconv.AppendFloat(buf[:0], c, 'f', 1+r.IntN(17), 64)
		requireSameNumber(t, buf, 0, DefaultMaxNumberLength)
		buf = appendRandomNumber(buf[:0], r)
		requireSameNumber(t, buf, 0, DefaultMaxNumberLength)
	}
}

// appendRandomNumber appends a JSON number of random shape: 1 to 25
// integer digits (or a lone 0), up to 25 fraction digits, leading zeros,
// runs of nines and zeros, an exponent of any sign and size.
func appendRandomNumber(b []byte, r *rand.Rand) []byte {
	digit := func() byte {
		switch r.IntN(4) {
		case 0:
			return '9'
		case 1:
			return '0'
		}
		return byte('0' + r.IntN(10))
	}
	if r.IntN(2) == 0 {
		b = append(b, '-')
	}
	if r.IntN(3) == 0 {
		b = append(b, '0')
	} else {
		b = append(b, byte('1'+r.IntN(9)))
		for range r.IntN(25) {
			b = append(b, digit())
		}
	}
	if r.IntN(2) == 0 {
		b = append(b, '.')
		for range r.IntN(8) {
			b = append(b, '0')
		}
		for range 1 + r.IntN(25) {
			b = append(b, digit())
		}
	}
	if r.IntN(2) == 0 {
		b = append(b, "eE"[r.IntN(2)])
		if s := r.IntN(3); s < 2 {
			b = append(b, "+-"[s])
		}
		b = strconv.AppendInt(b, int64(r.IntN(400)), 10)
	}
	return b
}

// FuzzReadNumber is the differential fuzz of the coordinate reader's
// number conversion against strconv.ParseFloat: on any bytes, at any
// offset, readNumber and the reference agree on whether a number is
// there, where it ends, and its value bit for bit.
func FuzzReadNumber(f *testing.F) {
	for _, s := range hardNumbers {
		f.Add([]byte(s), uint8(0))
	}
	for _, s := range []string{"[-123.45678901234567,48.123456789012345]", "1.", "-", "1e", "0.0000000000000000000001234567890123456789"} {
		f.Add([]byte(s), uint8(1))
	}
	// The grammar's edges, and digit strings at and past the length limit.
	for _, s := range []string{
		"-0", "01", "-01", "00.5", ".5", "-.5", "1.", "1.e5", "1e", "1e+", "1e-", "+1", "--1", "1ee5", "0x1p3",
		"NaN", "Infinity", "-Infinity", "1e308", "1e309", "1e-324", "1e-325", "4.9e-324", "2.2250738585072011e-308",
		"1234567890123456789", "12345678901234567890", "0.12345678901234567890123",
		strings.Repeat("9", DefaultMaxNumberLength), strings.Repeat("9", DefaultMaxNumberLength+1),
		"0." + strings.Repeat("0", DefaultMaxNumberLength-3) + "1", "1" + strings.Repeat("0", 400) + "e-400",
		"0." + strings.Repeat("0", 320) + "4940656458412465441765687928682213723651e+1",
	} {
		f.Add([]byte(s), uint8(0))
	}
	f.Fuzz(func(t *testing.T, data []byte, off uint8) {
		i := int(off) % (len(data) + 1)
		requireSameNumber(t, data, i, DefaultMaxNumberLength)
		requireSameNumber(t, data, i, 8) // the length limit at small sizes
	})
}

// TestCoordinateTokens checks that the bare tokens Python's json module
// writes (NaN, Infinity, -Infinity) read as before the fast number
// reader, wherever they sit among positions it reads, and that their
// look-alikes are refused.
func TestCoordinateTokens(t *testing.T) {
	inf, nan := math.Inf(1), math.NaN()
	tests := []struct {
		in   string
		want []orb.Point // nil: refused
	}{
		{`[[1.5,2.5],[NaN,2.5],[3.25,4.75]]`, []orb.Point{{1.5, 2.5}, {nan, 2.5}, {3.25, 4.75}}},
		{`[[1.5,2.5],[3.25,Infinity],[-Infinity,-4.75],[1.5,2.5]]`, []orb.Point{{1.5, 2.5}, {3.25, inf}, {-inf, -4.75}, {1.5, 2.5}}},
		{`[[-Infinity,NaN]]`, []orb.Point{{-inf, nan}}},
		{`[[1.5,2.5],[1.5,-NaN]]`, nil},
		{`[[1.5,2.5],[1.5,Inf]]`, nil},
		{`[[1.5,2.5],[1.5,+Infinity]]`, nil},
		{`[[1.5,2.5],[1.5,nan]]`, nil},
		{`[[1.5,2.5],[1.5,InfinityX]]`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			g, err := ParseGeometry([]byte(`{"type":"MultiPoint","coordinates":`+tt.in+`}`), Limits{})
			if tt.want == nil {
				require.Error(t, err)
				return
			}
			require.Nil(t, err)
			require.Len(t, g.Points, len(tt.want))
			for i, p := range tt.want {
				for k := range 2 {
					require.Equal(t, math.Float64bits(p[k]), math.Float64bits(g.Points[i][k]), "position %d ordinate %d", i, k)
				}
			}
		})
	}
}

// FuzzReadNumberParts builds valid numbers from parts, so that the fuzzer
// explores values (mantissas of every width, leading zeros, exponents
// near every edge) rather than the grammar.
func FuzzReadNumberParts(f *testing.F) {
	f.Add(false, uint64(123), uint64(45678901234567), uint8(0), uint8(14), int16(0), uint8(0))
	f.Add(true, uint64(9007199254740993), uint64(0), uint8(0), uint8(0), int16(0), uint8(0))
	f.Add(false, uint64(0), uint64(49406564584124654), uint8(3), uint8(17), int16(-324), uint8(1))
	f.Add(false, uint64(17976931348623157), uint64(0), uint8(0), uint8(0), int16(292), uint8(2))
	f.Add(false, uint64(1), uint64(0), uint8(0), uint8(0), int16(23), uint8(3))
	f.Fuzz(func(t *testing.T, neg bool, intPart, frac uint64, zeros, fracDigits uint8, exp int16, form uint8) {
		var b []byte
		if neg {
			b = append(b, '-')
		}
		b = strconv.AppendUint(b, intPart, 10)
		if fracDigits > 0 || zeros > 0 {
			b = append(b, '.')
			b = append(b, strings.Repeat("0", int(zeros%40))...)
			fs := strconv.FormatUint(frac, 10)
			if n := int(fracDigits % 21); n > 0 && len(fs) > n {
				fs = fs[:n]
			}
			b = append(b, fs...)
		}
		switch form % 4 {
		case 1:
			b = append(b, 'e')
			b = strconv.AppendInt(b, int64(exp), 10)
		case 2:
			b = append(b, 'E', '+')
			b = strconv.AppendInt(b, int64(exp&0x7fff), 10)
		case 3:
			b = append(b, 'e', '-')
			b = strconv.AppendInt(b, int64(exp&0x7fff), 10)
		}
		if _, ok := (&scanner{data: b}).numberSpan(); !ok {
			t.Fatalf("built an invalid number %q", b)
		}
		requireSameNumber(t, b, 0, DefaultMaxNumberLength)
	})
}

// TestPow10Table recomputes every power of ten with math/big.
func TestPow10Table(t *testing.T) {
	ten := big.NewInt(10)
	mask := new(big.Int).SetUint64(math.MaxUint64)
	for e := pow10Min; e <= pow10Max; e++ {
		var top *big.Int
		if e >= 0 {
			v := new(big.Int).Exp(ten, big.NewInt(int64(e)), nil)
			if l := v.BitLen(); l >= 128 {
				top = v.Rsh(v, uint(l-128))
			} else {
				top = v.Lsh(v, uint(128-l))
			}
		} else {
			den := new(big.Int).Exp(ten, big.NewInt(int64(-e)), nil)
			// 2^k / 10^-e with k chosen so that the quotient has 128 bits.
			num := new(big.Int).Lsh(big.NewInt(1), uint(127+den.BitLen()))
			top = new(big.Int).Quo(num, den)
			if top.BitLen() < 128 {
				top = new(big.Int).Quo(num.Lsh(num, 1), den)
			}
		}
		require.Equal(t, 128, top.BitLen(), "1e%d", e)
		hi := new(big.Int).Rsh(top, 64).Uint64()
		lo := new(big.Int).And(top, mask).Uint64()
		require.Equal(t, [2]uint64{hi, lo}, pow10Tab[e-pow10Min], "1e%d", e)
	}
}

// TestDigitRun reads runs of every length up to 40, at every alignment
// and followed by every kind of byte, with and without digits already in
// the mantissa.
func TestDigitRun(t *testing.T) {
	followers := []byte{',', ']', '.', 'e', '/', ':', ' ', 0, 0x80, 0xff, '0' - 1, '9' + 1}
	for n := 1; n <= 40; n++ {
		for pad := range 8 {
			for _, fol := range followers {
				for _, prior := range []int{0, 3, 11, 18} {
					run := make([]byte, n)
					for k := range run {
						run[k] = byte('1' + (k*7+n)%9)
					}
					d := append(append(make([]byte, pad), run...), fol, 'x', 'x', 'x', 'x', 'x', 'x', 'x')
					man, nd := uint64(0), 0
					for k := range prior {
						man = man*10 + uint64(k%9+1)
						nd++
					}
					end, gotMan, gotNd, dropped := digitRun(d, pad, man, nd)
					require.Equal(t, pad+n, end, "n=%d pad=%d follower=%q", n, pad, fol)
					take := min(n, maxMantissaDigits-prior)
					want := man
					for _, c := range run[:take] {
						want = want*10 + uint64(c-'0')
					}
					require.Equal(t, want, gotMan, "n=%d pad=%d prior=%d", n, pad, prior)
					require.Equal(t, prior+take, gotNd)
					require.Equal(t, n-take, dropped)
					// The same run at the very end of the input.
					end, gotMan, _, _ = digitRun(d[:pad+n], pad, man, nd)
					require.Equal(t, pad+n, end)
					require.Equal(t, want, gotMan)
				}
			}
		}
	}
	for _, s := range []string{"00000000", "12345678", "99999999", "01234567"} {
		w := uint64(0)
		for k := 7; k >= 0; k-- {
			w = w<<8 | uint64(s[k])
		}
		n, err := strconv.ParseUint(s, 10, 32)
		require.NoError(t, err)
		require.Equal(t, uint32(n), parseEight(w), s)
	}
}

// FuzzCoordinatesMatchEncodingJSON is the differential fuzz of the whole
// coordinate reader: for every document that both ParseGeometry and
// encoding/json accept, the positions read are exactly (bit for bit, in
// document order) the first two numbers of each position encoding/json
// decodes, converted by strconv.
func FuzzCoordinatesMatchEncodingJSON(f *testing.F) {
	seeds := []string{
		`{"type":"Polygon","coordinates":[[[0,0],[1,1],[1,0],[0,1],[0,0]]]}`,
		`{"type":"MultiPolygon","coordinates":[[[[-123.45678901234567,48.123456789012345],[1e-7,-0.0],[3.5E2,4],[-123.45678901234567,48.123456789012345]]]]}`,
		`{"type":"Point","coordinates":[1.7976931348623157e308,5e-324,7]}`,
		`{"type":"LineString","coordinates":[[ 1 , 2 ],[3,4,5,6]]}`,
		`{"type":"GeometryCollection","geometries":[{"type":"Point","coordinates":[1,2]},{"type":"MultiPoint","coordinates":[[9007199254740993,1e23]]}]}`,
		`{"coordinates":[[0.1,0.2],[0.3,0.4]],"type":"MultiPoint"}`,
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		g, err := ParseGeometry(data, Limits{})
		if err != nil {
			return
		}
		var doc any
		dec := json.NewDecoder(strings.NewReader(string(data)))
		dec.UseNumber()
		if dec.Decode(&doc) != nil {
			return // NaN, Infinity: not JSON
		}
		var want []orb.Point
		collectPositions(t, doc, &want)
		require.Len(t, g.Points, len(want))
		for i := range want {
			for k := range 2 {
				if math.Float64bits(g.Points[i][k]) != math.Float64bits(want[i][k]) {
					t.Fatalf("position %d ordinate %d: %v, want %v", i, k, g.Points[i][k], want[i][k])
				}
			}
		}
	})
}

// collectPositions appends, in document order, the positions of a
// geometry decoded by encoding/json: arrays whose first element is a
// number. The last duplicate member wins in encoding/json, and
// ParseGeometry refuses duplicates, so both read the same members.
func collectPositions(t *testing.T, v any, out *[]orb.Point) {
	switch v := v.(type) {
	case map[string]any:
		switch v["type"] {
		case "GeometryCollection":
			for _, m := range v["geometries"].([]any) {
				collectPositions(t, m, out)
			}
		default:
			collectCoords(t, v["coordinates"], out)
		}
	}
}

func collectCoords(t *testing.T, v any, out *[]orb.Point) {
	a, ok := v.([]any)
	if !ok {
		return
	}
	if len(a) > 0 {
		if _, isNum := a[0].(json.Number); isNum {
			var p orb.Point
			for k := range 2 {
				f, err := strconv.ParseFloat(string(a[k].(json.Number)), 64)
				if err != nil && err.(*strconv.NumError).Err != strconv.ErrRange {
					t.Fatal(err)
				}
				p[k] = f
			}
			*out = append(*out, p)
			return
		}
	}
	for _, e := range a {
		collectCoords(t, e, out)
	}
}

// BenchmarkReadNumber compares readNumber with what it replaces
// (numberSpan and strconv.ParseFloat) on coordinates as producers write
// them.
func BenchmarkReadNumber(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, shape := range []struct {
		name   string
		format func(float64) string
	}{
		{"shortest", func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }},
		{"7-decimals", func(v float64) string { return strconv.FormatFloat(v, 'f', 7, 64) }},
		{"integer", func(v float64) string { return strconv.Itoa(int(v)) }},
	} {
		var data []byte
		var offs []int
		for range 4096 {
			offs = append(offs, len(data))
			data = append(data, shape.format((r.Float64()*2-1)*180)...)
			data = append(data, ',')
		}
		b.Run(shape.name+"/readNumber", func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				for _, o := range offs {
					if _, _, st := readNumber(data, o, DefaultMaxNumberLength); st != numOK {
						b.Fatal(st)
					}
				}
			}
		})
		b.Run(shape.name+"/strconv", func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				for _, o := range offs {
					s := scanner{data: data, pos: o}
					n, _ := s.numberSpan()
					if _, err := strconv.ParseFloat(string(n), 64); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
