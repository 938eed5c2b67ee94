package geojson

import (
	"encoding/binary"
	"math"
	"math/bits"
	"strconv"
)

// Reading coordinates at memory speed.
//
// readNumber checks a JSON number's grammar and computes its decimal
// mantissa (up to 19 significant digits, eight digits at a time where it
// can) and exponent in the same pass over its bytes, then converts them
// exactly:
//
//   - the Eisel-Lemire algorithm (Lemire, "Number Parsing at a Gigabyte
//     per Second", 2021), the one strconv uses, with the same 128-bit
//     powers of ten (pow10_table.go): exact whenever it answers, and it
//     declines the rare inputs it cannot decide;
//   - for those, Clinger's fast path when the mantissa fits in 53 bits
//     and the power of ten is exact in a float64 (|e| <= 22): one
//     multiplication or division of two exact values, hence correctly
//     rounded;
//   - strconv.ParseFloat for everything else: more than 19 significant
//     digits, results that overflow or underflow to subnormals, and what
//     Eisel-Lemire declines.
//
// Every path returns the float64 nearest to the decimal value (ties to
// even), bit for bit what strconv.ParseFloat returns: FuzzReadNumber and
// FuzzReadNumberParts check it against strconv on arbitrary input.

// maxMantissaDigits is how many significant digits fit in a uint64
// without overflow: 19 (10^19 - 1 < 2^64).
const maxMantissaDigits = 19

// exactPow10 holds the powers of ten a float64 represents exactly.
var exactPow10 = [...]float64{
	1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
	1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
}

// numStatus is the outcome of [readNumber].
type numStatus uint8

const (
	numOK      numStatus = iota
	numInvalid           // not a JSON number
	numTooLong           // longer than the limit; not converted
)

// readNumber reads the JSON number (RFC 8259 grammar, nothing else) that
// starts at d[i]. It returns its value and the offset just past it. A
// number longer than maxLen bytes is refused (numTooLong) before any
// conversion beyond the first 19 significant digits, so that its cost
// stays bounded; for numInvalid, end is where the grammar broke. A number
// whose magnitude overflows a float64 reads as ±Inf and one that
// underflows as the nearest subnormal or zero, as from strconv.ParseFloat
// with its range error ignored.
func readNumber(d []byte, i, maxLen int) (v float64, end int, st numStatus) {
	if v, end, ok := fastNumber(d, i); ok && end-i <= maxLen {
		return v, end, numOK
	}
	start := i
	neg := false
	if i < len(d) && d[i] == '-' {
		neg = true
		i++
	}
	var (
		man     uint64
		nd      int // significant digits in man
		exp10   int // man × 10^exp10 is the value read so far
		dropped int // digits beyond maxMantissaDigits
	)
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && d[i]-'1' < 9:
		i, man, nd, dropped = digitRun(d, i, 0, 0)
		exp10 = dropped
	default:
		return 0, i, numInvalid
	}
	trunc := dropped > 0
	if i < len(d) && d[i] == '.' {
		i++
		frac := i
		// Leading zeros of a number below one are not significant.
		if man == 0 {
			for i < len(d) && d[i] == '0' {
				i++
			}
		}
		i, man, nd, dropped = digitRun(d, i, man, nd)
		if i == frac {
			return 0, i, numInvalid // "1." has no fraction digits
		}
		exp10 -= i - frac - dropped
		trunc = trunc || dropped > 0
	}
	if i < len(d) && d[i]|0x20 == 'e' {
		i++
		eneg := false
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			eneg = d[i] == '-'
			i++
		}
		digits := i
		e := 0
		for ; i < len(d); i++ {
			c := d[i] - '0'
			if c > 9 {
				break
			}
			if e < 1<<20 { // far beyond any float64; keeps e from overflowing
				e = e*10 + int(c)
			}
		}
		if i == digits {
			return 0, i, numInvalid
		}
		if eneg {
			e = -e
		}
		exp10 += e
	}
	if i-start > maxLen {
		return 0, i, numTooLong
	}
	if !trunc {
		if v, ok := convert(man, exp10, neg); ok {
			return v, i, numOK
		}
	}
	v, err := strconv.ParseFloat(string(d[start:i]), 64)
	if err != nil {
		if ne, isNum := err.(*strconv.NumError); !isNum || ne.Err != strconv.ErrRange {
			return 0, i, numInvalid // cannot happen: the grammar was checked
		}
	}
	return v, i, numOK
}

// convert returns man × 10^exp10, negated when neg, correctly rounded, or
// false when neither fast path can decide it. Eisel-Lemire goes first: it
// decides nearly every input, and choosing Clinger's path first would be
// a branch on the mantissa's size that coordinates of 15 to 17 digits
// take either way at random.
func convert(man uint64, exp10 int, neg bool) (float64, bool) {
	if man == 0 {
		if neg {
			return math.Copysign(0, -1), true
		}
		return 0, true
	}
	if f, ok := eiselLemire(man, exp10, neg); ok {
		return f, true
	}
	// Clinger: both operands exact, one rounding.
	if man <= 1<<53 && exp10 >= -22 && exp10 <= 22 {
		f := float64(man)
		if exp10 < 0 {
			f /= exactPow10[-exp10]
		} else {
			f *= exactPow10[exp10]
		}
		if neg {
			f = -f
		}
		return f, true
	}
	return 0, false
}

// eiselLemire converts man × 10^exp10 (man != 0) to the nearest float64,
// or returns false when it cannot be sure of the rounding or the result
// is subnormal, infinite or out of the table's range. The steps follow
// https://nigeltao.github.io/blog/2020/eisel-lemire.html.
func eiselLemire(man uint64, exp10 int, neg bool) (float64, bool) {
	if exp10 < pow10Min || exp10 > pow10Max {
		return 0, false
	}
	pow := &pow10Tab[exp10-pow10Min]
	// Normalization.
	clz := bits.LeadingZeros64(man)
	man <<= uint(clz)
	const bias = 1023
	retExp2 := uint64(217706*exp10>>16+64+bias) - uint64(clz)
	// Multiplication.
	xHi, xLo := bits.Mul64(man, pow[0])
	// Wider approximation.
	if xHi&0x1FF == 0x1FF && xLo+man < man {
		yHi, yLo := bits.Mul64(man, pow[1])
		mergedHi, mergedLo := xHi, xLo+yHi
		if mergedLo < xLo {
			mergedHi++
		}
		if mergedHi&0x1FF == 0x1FF && mergedLo+1 == 0 && yLo+man < man {
			return 0, false
		}
		xHi, xLo = mergedHi, mergedLo
	}
	// Shifting to 54 bits.
	msb := xHi >> 63
	retMantissa := xHi >> (msb + 9)
	retExp2 -= 1 ^ msb
	// Half-way ambiguity.
	if xLo == 0 && xHi&0x1FF == 0 && retMantissa&3 == 1 {
		return 0, false
	}
	// From 54 to 53 bits.
	retMantissa += retMantissa & 1
	retMantissa >>= 1
	if retMantissa>>53 > 0 {
		retMantissa >>= 1
		retExp2++
	}
	// A zero (or wrapped-around) exponent is subnormal; 0x7FF and above
	// is infinite: both are left to strconv.
	if retExp2-1 >= 0x7FF-1 {
		return 0, false
	}
	b := retExp2<<52 | retMantissa&(1<<52-1)
	if neg {
		b |= 1 << 63
	}
	return math.Float64frombits(b), true
}

// fastNumberRoom is how many bytes fastNumber needs from the number's
// start: a sign, seven integer digits, a point, fifteen fraction digits
// and the byte after them, and room for its last eight-byte load.
const fastNumberRoom = 26

// fastNumber reads the common coordinate, [-]D[DDDDDD][.F…] with up to
// seven integer digits (the first not a zero), up to fifteen fraction
// digits, 19 significant digits in all and no exponent, in three
// eight-byte loads, without a loop. It declines (ok false) everything
// else, and a number closer than fastNumberRoom bytes to the end of d:
// readNumber's general path takes those.
func fastNumber(d []byte, i int) (float64, int, bool) {
	if i < 0 || len(d)-i < fastNumberRoom {
		return 0, 0, false
	}
	b := d[i : i+fastNumberRoom : i+fastNumberRoom]
	j := 0
	neg := b[0] == '-'
	if neg {
		j = 1
	}
	if b[j] == '0' {
		return 0, 0, false // 0, 0.x, or not JSON: the general path
	}
	w := binary.LittleEndian.Uint64(b[j:])
	k := leadingDigits(w)
	if k == 0 || k == 8 {
		return 0, 0, false
	}
	man := uint64(parseEight(alignDigits(w, k)))
	nd := k
	j += k
	frac := 0
	if b[j] == '.' {
		j++
		w = binary.LittleEndian.Uint64(b[j:])
		k = leadingDigits(w)
		if k == 0 {
			return 0, 0, false // "1." is not JSON
		}
		if k == 8 {
			man = man*100000000 + uint64(parseEight(w))
			j += 8
			w = binary.LittleEndian.Uint64(b[j:])
			k = leadingDigits(w)
			if k == 8 {
				return 0, 0, false
			}
			frac = 8
		}
		if k > 0 {
			man = man*pow10u64[k] + uint64(parseEight(alignDigits(w, k)))
		}
		j += k
		frac += k
		nd += frac
	}
	if b[j]|0x20 == 'e' || nd > maxMantissaDigits {
		return 0, 0, false
	}
	v, ok := eiselLemire(man, -frac, neg)
	return v, i + j, ok
}

// leadingDigits returns how many of the eight bytes of w (little-endian)
// are ASCII digits before the first that is not.
func leadingDigits(w uint64) int {
	// The high bit of every byte that is not a digit: above '9' (adding
	// 0x46 reaches 0x80), below '0' (subtracting borrows), or not ASCII.
	// Carries and borrows only run upwards, from a byte that is not a
	// digit, so the lowest flag is exact.
	m := (w | (w + 0x4646464646464646) | (w - 0x3030303030303030)) & 0x8080808080808080
	return bits.TrailingZeros64(m) >> 3 // 8 when m is 0
}

// alignDigits returns w with its first k bytes (1 <= k <= 7, digits)
// moved to the top and '0's below: eight digits of the same value.
func alignDigits(w uint64, k int) uint64 {
	return w<<(64-8*k) | 0x3030303030303030>>(8*k)
}

// pow10u64 holds the powers of ten up to 10^8.
var pow10u64 = [...]uint64{1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000}

// digitRun reads the run of ASCII digits at d[i:] into the mantissa man
// of nd significant digits, eight bytes at a time: a run's length is
// found with a few word operations and up to eight digits are converted
// at once. Digits beyond maxMantissaDigits are counted in dropped, not
// added. It returns the offset just past the run. The first digit of a
// run must be significant when man is 0 (not a leading zero).
func digitRun(d []byte, i int, man uint64, nd int) (int, uint64, int, int) {
	for i+8 <= len(d) {
		w := binary.LittleEndian.Uint64(d[i:])
		// The high bit of every byte that is not a digit: above '9'
		// (adding 0x46 reaches 0x80), below '0' (subtracting borrows),
		// or not ASCII. Carries and borrows only run upwards, from a
		// byte that is not a digit, so the lowest flag is exact.
		m := (w | (w + 0x4646464646464646) | (w - 0x3030303030303030)) & 0x8080808080808080
		k := 8
		if m != 0 {
			k = bits.TrailingZeros64(m) >> 3
		}
		if k == 0 {
			return i, man, nd, 0
		}
		if nd+k > maxMantissaDigits {
			break // finish the run one digit at a time
		}
		if k < 8 {
			// The k digits at the top, '0's below: the same value.
			w = w<<(64-8*k) | 0x3030303030303030>>(8*k)
		}
		man = man*pow10u64[k] + uint64(parseEight(w))
		nd += k
		i += k
		if k < 8 {
			return i, man, nd, 0
		}
	}
	dropped := 0
	for ; i < len(d); i++ {
		c := d[i] - '0'
		if c > 9 {
			break
		}
		if nd < maxMantissaDigits {
			man = man*10 + uint64(c)
			nd++
		} else {
			dropped++
		}
	}
	return i, man, nd, dropped
}

// parseEight returns the value of the eight ASCII digits in w, the first
// digit in the lowest byte.
func parseEight(w uint64) uint32 {
	const mask = 0x000000FF000000FF
	const mul1 = 0x000F424000000064 // 100 + (1000000 << 32)
	const mul2 = 0x0000271000000001 // 1 + (10000 << 32)
	w -= 0x3030303030303030
	w = w*10 + w>>8
	w = ((w&mask)*mul1 + (w>>16&mask)*mul2) >> 32
	return uint32(w)
}
