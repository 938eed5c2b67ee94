package kafka

import (
	"slices"
	"strconv"
	"strings"
)

// ackedPrefix starts the commit metadata that lists the offsets
// acknowledged past a partition's committed offset.
const ackedPrefix = "geodlq.acked.v1:"

// maxMetadata bounds the commit metadata: Kafka refuses a commit whose
// metadata exceeds offset.metadata.max.bytes (default 4096).
const maxMetadata = 3072

// span is an inclusive range of offsets.
type span struct{ from, to int64 }

// covered reports whether off is in one of spans.
func covered(spans []span, off int64) bool {
	for _, sp := range spans {
		if sp.from <= off && off <= sp.to {
			return true
		}
	}
	return false
}

// merge sorts spans and joins overlapping and adjacent ones.
func merge(spans []span) []span {
	if len(spans) < 2 {
		return spans
	}
	slices.SortFunc(spans, func(a, b span) int {
		switch {
		case a.from < b.from:
			return -1
		case a.from > b.from:
			return 1
		}
		return 0
	})
	out := spans[:1]
	for _, sp := range spans[1:] {
		last := &out[len(out)-1]
		if sp.from-1 <= last.to { // offsets are not negative: no overflow
			last.to = max(last.to, sp.to)
			continue
		}
		out = append(out, sp)
	}
	return out
}

// encodeSpans writes spans as "geodlq.acked.v1:3-4,7", leaving out the
// last spans when they do not fit maxMetadata (their records are then
// redelivered after a restart: at least once, never lost). No spans: "".
func encodeSpans(spans []span) string {
	if len(spans) == 0 {
		return ""
	}
	b := []byte(ackedPrefix)
	for i, sp := range spans {
		n := len(b)
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, sp.from, 10)
		if sp.to != sp.from {
			b = append(b, '-')
			b = strconv.AppendInt(b, sp.to, 10)
		}
		if len(b) > maxMetadata {
			b = b[:n]
			break
		}
	}
	return string(b)
}

// decodeSpans parses what encodeSpans wrote; anything else (kgo writes the
// member id) yields nothing.
func decodeSpans(meta string) []span {
	rest, ok := strings.CutPrefix(meta, ackedPrefix)
	if !ok || rest == "" {
		return nil
	}
	var out []span
	for f := range strings.SplitSeq(rest, ",") {
		a, b, isRange := strings.Cut(f, "-")
		from, err := strconv.ParseInt(a, 10, 64)
		if err != nil {
			return nil
		}
		to := from
		if isRange {
			if to, err = strconv.ParseInt(b, 10, 64); err != nil || to < from {
				return nil
			}
		}
		out = append(out, span{from, to})
	}
	return merge(out)
}
