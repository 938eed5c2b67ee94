package console

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/paulmach/orb"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/internal/geojson"
)

// downloadChunk is the size of each write of a payload download.
const downloadChunk = 64 << 10

// List paging.
const (
	defaultPage = 100
	maxPage     = 500
	// scanBudget bounds the records one list request reads when the text
	// or source-prefix filter (applied here, not in the store) skips
	// many: the answer is then partial, with a cursor to go on.
	scanBudget = 5000
)

// cursor is the list's own cursor: the store's cursor of the page being
// read, how many of its records were already returned, and the page size
// it was read with (so the same page is read again).
type cursor struct {
	After string `json:"a,omitempty"`
	Skip  int    `json:"s,omitempty"`
	Page  int    `json:"n"`
}

func (c cursor) encode() string {
	b, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeCursor(s string) (cursor, error) {
	var c cursor
	if s == "" {
		return c, nil
	}
	if len(s) > 4096 {
		return c, badQuery("cursor is too long")
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || json.Unmarshal(b, &c) != nil || c.Skip < 0 || c.Page < 1 || c.Page > broker.MaxListLimit || c.Skip >= c.Page {
		return cursor{}, badQuery("cursor %q is not one this console issued", clip(s, 40))
	}
	return c, nil
}

// row is one record of the list.
type row struct {
	Destination    string    `json:"destination"`
	ID             string    `json:"id"`
	Envelope       bool      `json:"envelope"`
	EventID        string    `json:"event_id,omitempty"`
	Class          string    `json:"class,omitempty"`
	Stage          string    `json:"stage,omitempty"`
	ReasonKind     string    `json:"reason_kind,omitempty"`
	Reason         string    `json:"reason,omitempty"`
	EPSG           int       `json:"epsg"`
	GeometryType   string    `json:"geometry_type,omitempty"`
	VertexCount    int       `json:"vertex_count,omitempty"`
	SourceURI      string    `json:"source_uri,omitempty"`
	Status         string    `json:"status,omitempty"`
	Attempts       int       `json:"attempts,omitempty"`
	DeadLetteredAt time.Time `json:"dead_lettered_at,omitzero"`
	PublishedAt    time.Time `json:"published_at,omitzero"`
}

func (s *Server) rowOf(e broker.Entry, env *envelope.Envelope) row {
	r := row{Destination: e.Record.Destination, ID: e.Record.ID, Status: string(e.Status), PublishedAt: e.PublishedAt}
	if env == nil {
		return r
	}
	r.Envelope = true
	r.EventID, r.Class, r.Stage = env.EventID, string(env.FailureClass), string(env.FailedStage)
	r.EPSG, r.GeometryType, r.VertexCount = broker.EPSGOf(env), env.GeometryType, env.VertexCount
	r.SourceURI, r.Attempts, r.DeadLetteredAt = clip(s.sourceOf(env), 512), env.Attempts, env.DeadLetteredAt
	if ge := env.GeometryError; ge != nil {
		r.ReasonKind, r.Reason = ge.Kind, clip(ge.Reason, 512)
	} else {
		r.Reason = clip(env.ErrorMessage, 512)
	}
	return r
}

// rowOfSummary is rowOf from a summary (ListOptions.Summaries, its
// Source read at the selection's source pointer): no body is read.
func rowOfSummary(e broker.Entry) row {
	sm := e.Summary
	r := row{Destination: e.Record.Destination, ID: e.Record.ID, Status: string(e.Status), PublishedAt: e.PublishedAt}
	if !sm.Envelope {
		return r
	}
	r.Envelope = true
	r.EventID, r.Class, r.Stage = sm.EventID, string(sm.Class), string(sm.Stage)
	r.EPSG, r.GeometryType, r.VertexCount = sm.EPSG, sm.GeometryType, sm.VertexCount
	r.SourceURI, r.Attempts, r.DeadLetteredAt = clip(sm.Source, 512), sm.Attempts, sm.DeadLetteredAt
	r.ReasonKind, r.Reason = string(sm.ReasonKind), clip(sm.Reason, 512)
	return r
}

func envelopeOf(r *broker.Record) *envelope.Envelope {
	if r.Envelope != nil {
		return r.Envelope
	}
	env, err := envelope.Decode(r.Message.Body)
	if err != nil {
		return nil
	}
	return env
}

type listAnswer struct {
	Records []row  `json:"records"`
	Next    string `json:"next,omitempty"`
	Scanned int    `json:"scanned"`
	// Partial is true when the scan budget ran out before the page was
	// full (text or source-prefix filters skip records): follow Next.
	Partial bool `json:"partial,omitempty"`
	// Total is how many records match across all pages; on the first
	// page of a listing only (a cursor's pages do not count again).
	Total *int `json:"total,omitempty"`
	// TotalIsLowerBound: at least Total records match; the store stopped
	// counting at listTotalCap (a filter it cannot count cheaply).
	TotalIsLowerBound bool `json:"total_is_lower_bound,omitempty"`
}

// listTotalCap is the ListOptions.TotalCap of /api/records: counting
// every match of a common word in a million records takes seconds.
const listTotalCap = 1000

// listOrder is a list's order (the sort parameter): by dead-lettered
// time (newest, oldest) or, across all pages in the store, by vertex
// count, geometry size or attempts; a leading "-" is largest first.
type listOrder struct {
	key  broker.SortKey // "" for the time orders
	desc bool
}

// listOrders maps the sort parameter's values to orders.
var listOrders = map[string]listOrder{
	"": {desc: true}, "newest": {desc: true}, "oldest": {},
	"vertices": {broker.SortVertexCount, false}, "-vertices": {broker.SortVertexCount, true},
	"size": {broker.SortGeometryBytes, false}, "-size": {broker.SortGeometryBytes, true},
	"attempts": {broker.SortAttempts, false}, "-attempts": {broker.SortAttempts, true},
}

// sortNames lists the sort parameter's values, for error messages.
const sortNames = "newest, oldest, vertices, -vertices, size, -size, attempts or -attempts"

func (s *Server) selection(r *http.Request) (selection, error) {
	q, err := queryFromURL(r.URL.Query())
	if err != nil {
		return selection{}, err
	}
	return q.parse(s.opts.Now(), s.opts.SourcePointer)
}

func (s *Server) records(w http.ResponseWriter, r *http.Request) {
	sel, err := s.selection(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	v := r.URL.Query()
	limit := defaultPage
	if l := v.Get("limit"); l != "" {
		if limit, err = strconv.Atoi(l); err != nil || limit < 1 || limit > maxPage {
			s.fail(w, r, badQuery("limit %q: want 1 to %d", l, maxPage))
			return
		}
	}
	order, ok := listOrders[v.Get("sort")]
	if !ok {
		s.fail(w, r, badQuery("sort %q: want %s", clip(v.Get("sort"), 40), sortNames))
		return
	}
	first := v.Get("cursor") == ""
	// The store orders and filters (text and source prefix included) and
	// counts.
	var ans listAnswer
	var cur cursor
	if cur, err = decodeCursor(v.Get("cursor")); err == nil {
		sel.filter = sel.storeFilter()
		sel.text, sel.q.SourcePrefix = "", ""
		ans, err = s.list(r.Context(), sel, order, limit, cur, first)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, ans)
}

// list reads one page of rows in order; total asks the store for the
// number of matching records too (when no filter is applied here: then
// the store's count would be too high, and is left out).
func (s *Server) list(ctx context.Context, sel selection, order listOrder, limit int, cur cursor, total bool) (listAnswer, error) {
	page := cur.Page
	if page == 0 {
		page = limit
		if sel.clientSide() {
			page = maxPage
		}
	}
	// With no filter applied here, the page is read as summaries: its
	// cost is the same whatever the size of its records (the largest
	// first, sorted by vertices, are the geometries of megabytes).
	summaries := !sel.clientSide()
	lo := broker.ListOptions{Destination: sel.q.Destination, Filter: sel.filter, IncludeReplayed: sel.q.Replayed,
		Sort: order.key, Descending: order.desc, After: cur.After, Limit: page, Total: total && !sel.clientSide(),
		TotalCap: s.totalCap, Summaries: summaries}
	ans := listAnswer{Records: []row{}}
	skip := cur.Skip
	for {
		p, err := s.store.List(ctx, lo)
		if err != nil {
			return ans, err
		}
		if lo.Total {
			n := p.Total
			ans.Total, ans.TotalIsLowerBound, lo.Total = &n, p.TotalIsLowerBound, false
		}
		for i := skip; i < len(p.Entries); i++ {
			e := p.Entries[i]
			ans.Scanned++
			if summaries {
				if e.Record == nil || e.Summary == nil || e.Summary.ReplayOf != "" || (!e.Summary.Envelope && sel.envelopeOnly()) {
					continue
				}
				ans.Records = append(ans.Records, rowOfSummary(e))
			} else {
				if e.Record == nil || reinjected(e.Record) {
					continue
				}
				env := envelopeOf(e.Record)
				if (env == nil && sel.envelopeOnly()) || !sel.match(e.Record.ID, env) {
					continue
				}
				ans.Records = append(ans.Records, s.rowOf(e, env))
			}
			if len(ans.Records) == limit {
				switch {
				case i+1 < len(p.Entries):
					ans.Next = cursor{After: lo.After, Skip: i + 1, Page: page}.encode()
				case p.Next != "":
					ans.Next = cursor{After: p.Next, Page: page}.encode()
				}
				return ans, nil
			}
		}
		if p.Next == "" || p.Next == lo.After {
			return ans, nil
		}
		lo.After, skip = p.Next, 0
		if ans.Scanned >= scanBudget {
			ans.Next, ans.Partial = cursor{After: p.Next, Page: page}.encode(), true
			return ans, nil
		}
	}
}

// maxIDLen bounds a record id in a request.
const maxIDLen = 256

// getRecord reads one record by destination and id (replayed ones too).
func (s *Server) getRecord(ctx context.Context, dest, id string) (broker.Entry, error) {
	if err := broker.ValidDestination(dest); err != nil {
		return broker.Entry{}, badQuery("destination: %v", err)
	}
	if id == "" || len(id) > maxIDLen || !utf8.ValidString(id) {
		return broker.Entry{}, badQuery("record id must be 1 to %d bytes of UTF-8", maxIDLen)
	}
	p, err := s.store.List(ctx, broker.ListOptions{Destination: dest, Filter: broker.Filter{IDs: []string{id}}, IncludeReplayed: true, Limit: 1})
	if err != nil {
		return broker.Entry{}, err
	}
	for _, e := range p.Entries {
		if e.Record != nil && e.Record.ID == id && e.Record.Destination == dest {
			return e, nil
		}
	}
	return broker.Entry{}, &notFoundError{fmt.Sprintf("no record %q in destination %q (replayed and purged, discarded, or never there)", id, dest)}
}

// recordAnswer is GET /api/records/{dest}/{id}: the envelope's fields.
type recordAnswer struct {
	row
	IdempotencyKey        string                  `json:"idempotency_key,omitempty"`
	IdempotencyKeyDerived bool                    `json:"idempotency_key_derived,omitempty"`
	ErrorMessage          string                  `json:"error_message,omitempty"`
	GeometryError         *envelope.GeometryError `json:"geometry_error,omitempty"`
	// Where says where the fault is, in words, as geodlq show prints it:
	// "(0.5 0.5) ring 0 segment 0-1" (geojson.Where); "" for none.
	Where             string            `json:"where,omitempty"`
	SourceCRS         string            `json:"source_crs,omitempty"`
	SourceEPSG        int               `json:"source_epsg,omitempty"`
	Geometry          geometryRef       `json:"geometry"`
	PayloadSHA256     string            `json:"payload_sha256,omitempty"`
	PayloadSize       int64             `json:"payload_size"`
	PayloadOffloadURI string            `json:"raw_payload_offload_uri,omitempty"`
	PayloadEncoding   string            `json:"raw_payload_encoding,omitempty"`
	FirstSeenAt       time.Time         `json:"first_seen_at,omitzero"`
	Route             string            `json:"route,omitempty"`
	TraceID           string            `json:"trace_id,omitempty"`
	Source            *envelope.Source  `json:"source,omitempty"`
	Headers           map[string]string `json:"headers,omitempty"`
	Deliveries        int               `json:"deliveries,omitempty"`
	ReplayedAt        time.Time         `json:"replayed_at,omitzero"`
	// NotEnvelope says why the record's body is not a dlq.v1 envelope.
	NotEnvelope string `json:"not_envelope,omitempty"`
	// Repairs lists the repairs that apply to the record's class.
	Repairs []string `json:"repairs"`
	// Explanation says what went wrong and what would fix it, in words.
	Explanation string `json:"explanation,omitempty"`
}

type geometryRef struct {
	Inline     bool   `json:"inline"`
	OffloadURI string `json:"offload_uri,omitempty"`
	ByteSize   int64  `json:"byte_size"`
	SHA256     string `json:"content_sha256,omitempty"`
	Missing    bool   `json:"missing,omitempty"`
}

func (s *Server) record(w http.ResponseWriter, r *http.Request) {
	e, err := s.getRecord(r.Context(), r.PathValue("dest"), r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	env := envelopeOf(e.Record)
	ans := recordAnswer{row: s.rowOf(e, env), Headers: e.Record.Message.Headers, Deliveries: e.Record.Deliveries, ReplayedAt: e.ReplayedAt, Repairs: []string{}}
	if env == nil {
		_, derr := envelope.Decode(e.Record.Message.Body)
		ans.NotEnvelope = clip(fmt.Sprint(derr), 1000)
		writeJSON(w, ans)
		return
	}
	ans.Reason = ""
	if env.GeometryError != nil {
		ans.Reason = env.GeometryError.Reason
	}
	ans.SourceURI = s.sourceOf(env)
	ans.IdempotencyKey, ans.IdempotencyKeyDerived, ans.ErrorMessage = env.IdempotencyKey, env.IdempotencyKeyDerived, env.ErrorMessage
	ans.GeometryError, ans.SourceCRS, ans.SourceEPSG = env.GeometryError, env.SourceCRS, env.SourceEPSG
	if ge := env.GeometryError; ge != nil {
		ans.Where = geojson.Where(ge.Location, ge.Fault)
	}
	ans.Geometry = geometryRef{Inline: env.Geometry.OffloadURI == "", OffloadURI: env.Geometry.OffloadURI, ByteSize: env.Geometry.ByteSize,
		SHA256: env.Geometry.ContentSHA256, Missing: env.Geometry.Missing}
	ans.PayloadSHA256, ans.PayloadSize, ans.PayloadOffloadURI, ans.PayloadEncoding = env.PayloadSHA256, env.PayloadSize, env.RawPayloadOffloadURI, env.RawPayloadEncoding
	ans.FirstSeenAt, ans.Route, ans.TraceID, ans.Source = env.FirstSeenAt, string(env.Route), env.TraceID, env.Source
	ans.Repairs = repairsFor(env)
	ans.Explanation = explain(env, s.opts.ExpectedEPSG)
	writeJSON(w, ans)
}

// maxViewBytes bounds the payload text the page shows inline; the
// download has it all.
const maxViewBytes = 256 << 10

// payloadAnswer is GET …/payload: the restored payload, verified.
type payloadAnswer struct {
	// Verified is true: a payload that fails its hash is an error.
	Verified bool   `json:"verified"`
	SHA256   string `json:"sha256"`
	Size     int    `json:"size"`
	// Text is the payload as text (invalid UTF-8 replaced), at most
	// 256 KiB; Truncated says whether there is more.
	Text      string `json:"text"`
	Truncated bool   `json:"truncated,omitempty"`
	// Properties are the payload's top-level members other than the
	// geometry, as raw JSON text, when it is a JSON object.
	Properties []property `json:"properties,omitempty"`
}

type property struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// restore returns a record's envelope and its restored, hash-verified
// payload.
func (s *Server) restore(ctx context.Context, dest, id string) (broker.Entry, *envelope.Envelope, []byte, error) {
	e, env, err := s.envelope(ctx, dest, id)
	if err != nil {
		return e, env, nil, err
	}
	var f envelope.Fetcher
	if s.opts.Blobs != nil {
		f = s.opts.Blobs
	}
	b, err := env.Restore(ctx, f)
	if err != nil {
		return e, env, nil, restoreFailed(err)
	}
	return e, env, b, nil
}

// envelope reads a record and its envelope, refusing one whose payload
// cannot be restored for want of the blob store.
func (s *Server) envelope(ctx context.Context, dest, id string) (broker.Entry, *envelope.Envelope, error) {
	e, err := s.getRecord(ctx, dest, id)
	if err != nil {
		return e, nil, err
	}
	env := envelopeOf(e.Record)
	if env == nil {
		return e, nil, &unprocessableError{"the record is not a dlq.v1 envelope; its body is shown as it is"}
	}
	if s.opts.Blobs == nil && (env.RawPayloadOffloadURI != "" || env.Geometry.OffloadURI != "") {
		return e, env, &unprocessableError{"the payload is offloaded: start geodlq serve with --blobs to restore it"}
	}
	return e, env, nil
}

// restoreFailed is the answer to a payload that cannot be restored.
func restoreFailed(err error) error {
	return &unprocessableError{withBlobsHint("restoring the payload failed (not shown, since it cannot be verified): "+err.Error(), err)}
}

// unprocessableError is a record the console cannot do what was asked
// with: 422.
type unprocessableError struct{ msg string }

func (e *unprocessableError) Error() string { return e.msg }

func (s *Server) failRecord(w http.ResponseWriter, r *http.Request, err error) {
	if ue, ok := err.(*unprocessableError); ok {
		s.problem(w, r, http.StatusUnprocessableEntity, "cannot restore", ue.msg)
		return
	}
	s.fail(w, r, err)
}

func (s *Server) payload(w http.ResponseWriter, r *http.Request) {
	dest, id := r.PathValue("dest"), r.PathValue("id")
	if r.URL.Query().Get("download") != "" {
		s.download(w, r, dest, id)
		return
	}
	_, env, b, err := s.restore(r.Context(), dest, id)
	if err != nil {
		s.failRecord(w, r, err)
		return
	}
	ans := payloadAnswer{Verified: true, SHA256: env.PayloadSHA256, Size: len(b)}
	view := b
	if len(view) > maxViewBytes {
		view, ans.Truncated = view[:maxViewBytes], true
	}
	ans.Text = string([]rune(string(view))) // invalid UTF-8 becomes U+FFFD
	ans.Properties = properties(b)
	writeJSON(w, ans)
}

// download streams a record's payload, restored and verified on the way
// (envelope.Envelope.OpenPayload), so that it never holds the payload
// whole: two chunks at a time. The answer declares the payload's size
// and hash. Each chunk is written only once the next has been read, so
// the last bytes go out only after the whole payload has verified; a
// payload that fails on the way (a blob altered, cut short or extended in
// the store, a store error) is refused with a 422 when nothing has been
// written yet, and otherwise the response is aborted before its end
// (http.ErrAbortHandler: the connection is cut, the client sees a
// download shorter than its Content-Length or a reset stream, never a
// complete one) and logged. Each write is bounded by Timeouts.Stall.
func (s *Server) download(w http.ResponseWriter, r *http.Request, dest, id string) {
	ctx := r.Context()
	_, env, err := s.envelope(ctx, dest, id)
	if err != nil {
		s.failRecord(w, r, err)
		return
	}
	var o envelope.Opener
	if s.opts.Blobs != nil {
		o = s.opts.Blobs
	}
	rc, err := env.OpenPayload(ctx, o)
	if err != nil {
		s.failRecord(w, r, restoreFailed(err))
		return
	}
	defer rc.Close()
	sw := s.stream(w)
	cur, next := make([]byte, downloadChunk), make([]byte, downloadChunk)
	written := false
	n, err := readFull(rc, cur)
	for err == nil { // cur is full and more may follow: read on first
		m, err2 := readFull(rc, next)
		if err2 != nil && err2 != io.EOF {
			err = err2 // cur is withheld
			break
		}
		if !written {
			s.downloadHeaders(w, env)
			written = true
		}
		if _, werr := sw.Write(cur[:n]); werr != nil {
			return // the client is gone or stalled: cut off
		}
		cur, next, n, err = next, cur, m, err2
	}
	if err == io.EOF { // verified: the last bytes may go
		if !written {
			s.downloadHeaders(w, env)
		}
		_, _ = sw.Write(cur[:n])
		return
	}
	attrs := []any{slog.String("destination", dest), slog.String("id", id), slog.String("event_id", env.EventID), slog.Any("error", err)}
	gone := errors.Is(err, context.Canceled) && ctx.Err() != nil // the client went away
	switch {
	case !written && gone:
		return
	case !written:
		s.log.WarnContext(ctx, "geodlq serve: payload download refused", attrs...)
		s.failRecord(w, r, restoreFailed(err))
		return
	case gone:
		s.log.DebugContext(ctx, "geodlq serve: payload download canceled", attrs...)
	default:
		s.log.ErrorContext(ctx, "geodlq serve: payload download aborted before its end: the payload failed verification or could not be read", attrs...)
	}
	// Cut the connection (HTTP/2: reset the stream) rather than end the
	// response: the client must not take the bytes sent for a payload.
	panic(http.ErrAbortHandler)
}

// downloadHeaders are the headers of a payload download.
func (s *Server) downloadHeaders(w http.ResponseWriter, env *envelope.Envelope) {
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Disposition", `attachment; filename="payload-`+safeName(env.EventID)+`.json"`)
	h.Set("X-Payload-SHA256", env.PayloadSHA256)
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", strconv.FormatInt(env.PayloadSize, 10))
}

// readFull reads from r until buf is full (nil error) or r ends (io.EOF, or
// r's error), and returns how many bytes it read.
func readFull(r io.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := r.Read(buf[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// properties lists a JSON object's members but the geometry, each value
// clipped, at most 200.
func properties(b []byte) []property {
	var m map[string]json.RawMessage
	if len(b) > 16<<20 || json.Unmarshal(b, &m) != nil {
		return nil
	}
	var out []property
	for k, v := range m {
		if k == "geometry" {
			continue
		}
		out = append(out, property{Name: clip(k, 200), Value: clip(string(v), 2000)})
	}
	slices.SortFunc(out, func(a, b property) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	if len(out) > 200 {
		out = out[:200]
	}
	return out
}

// safeName keeps [A-Za-z0-9._-] of s, for a file name.
func safeName(s string) string {
	out := make([]byte, 0, min(len(s), 64))
	for i := 0; i < len(s) && len(out) < 64; i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-' {
			out = append(out, c)
		}
	}
	if len(out) == 0 {
		return "event"
	}
	return string(out)
}

// overviewAnswer is GET /api/overview.
type overviewAnswer struct {
	Total         int              `json:"total"`
	Open          int              `json:"open"`
	Leased        int              `json:"leased"`
	Replayed      int              `json:"replayed"`
	ByDestination []keyCount       `json:"by_destination"`
	ByClass       []keyCount       `json:"by_class"`
	ByStage       []keyCount       `json:"by_stage"`
	ByEPSG        []keyCount       `json:"by_epsg"`
	ByReasonKind  []keyCount       `json:"by_reason_kind"`
	TopPrefixes   []keyCount       `json:"top_source_prefixes"`
	Bucket        string           `json:"bucket"`
	Timeline      []timelineBucket `json:"timeline"`
	Index         indexStatus      `json:"index"`
	// Source says what counted: "store" (Store.Stats; the console keeps
	// no index of its own).
	Source string `json:"source"`
}

type timelineBucket struct {
	Start   time.Time      `json:"start"`
	ByClass map[string]int `json:"by_class"`
}

// bucketFor picks the time bucket that cuts span into at most 48 bars.
func bucketFor(span time.Duration) time.Duration {
	for _, b := range []time.Duration{time.Minute, 5 * time.Minute, 15 * time.Minute, time.Hour, 3 * time.Hour,
		6 * time.Hour, 12 * time.Hour, 24 * time.Hour, 7 * 24 * time.Hour} {
		if span/b < 48 {
			return b
		}
	}
	return 30 * 24 * time.Hour
}

func (s *Server) overview(w http.ResponseWriter, r *http.Request) {
	sel, err := s.selection(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	key := r.URL.RawQuery
	if ans, ok := s.overviews.get(key, s.watch.count()); ok {
		ans.Index = s.watch.status()
		writeJSON(w, ans)
		return
	}
	open := s.watch.count()
	type counter = map[string]int
	by := map[string]counter{"dest": {}, "class": {}, "stage": {}, "epsg": {}, "kind": {}}
	tl := map[time.Time]counter{}
	ans := overviewAnswer{Index: s.watch.status()}
	add := func(dest, class, stage string, epsg int, kind string, n int) {
		if n == 0 {
			return
		}
		by["dest"][dest] += n
		by["class"][orNone(class)] += n
		by["stage"][orNone(stage)] += n
		by["epsg"][strconv.Itoa(epsg)] += n
		by["kind"][orNone(kind)] += n
	}
	addTime := func(at time.Time, class string, n int) {
		if n == 0 || at.IsZero() {
			return
		}
		at = at.UTC()
		if tl[at] == nil {
			tl[at] = counter{}
		}
		tl[at][orNone(class)] += n
	}
	ans.Source = "store"
	f := sel.storeFilter()
	lo, hi, err := s.timeSpan(r.Context(), sel)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	bucket := bucketFor(hi.Sub(lo))
	ans.Bucket = bucket.String()
	// The counts by field and by source come from the store's kept
	// counts where it keeps them; the timeline groups by time too.
	counts, err := s.store.Stats(r.Context(), broker.StatsOptions{Destination: sel.q.Destination, Filter: f, BySource: true, SourceDepth: 1})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	prefixes := map[string]int{}
	for _, c := range counts {
		ans.Open += c.Pending + c.Leased
		ans.Leased += c.Leased
		ans.Replayed += c.Replayed
		n := c.Pending + c.Leased
		if sel.q.Replayed {
			n += c.Replayed
		}
		add(c.Destination, string(c.Class), string(c.Stage), c.EPSG, string(c.ReasonKind), n)
		if n > 0 {
			prefixes[sourcePrefix(c.Source)] += n
		}
	}
	ans.Total = ans.Open + ans.Replayed
	ans.TopPrefixes = topN(prefixes, 10)
	counts, err = s.store.Stats(r.Context(), broker.StatsOptions{Destination: sel.q.Destination, Filter: f, Bucket: bucket})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	for _, c := range counts {
		n := c.Pending + c.Leased
		if sel.q.Replayed {
			n += c.Replayed
		}
		addTime(c.Bucket, string(c.Class), n)
	}
	ans.ByDestination, ans.ByClass, ans.ByStage = topN(by["dest"], 0), topN(by["class"], 0), topN(by["stage"], 0)
	ans.ByEPSG, ans.ByReasonKind = topN(by["epsg"], 0), topN(by["kind"], 0)
	ans.Timeline = []timelineBucket{}
	for at, c := range tl {
		ans.Timeline = append(ans.Timeline, timelineBucket{Start: at, ByClass: c})
	}
	slices.SortFunc(ans.Timeline, func(a, b timelineBucket) int { return a.Start.Compare(b.Start) })
	s.overviews.put(key, open, ans)
	writeJSON(w, ans)
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// mapView is GET /api/map: the markers of the records matching the
// filters inside view (minlon,minlat,maxlon,maxlat) at zoom.
func (s *Server) mapView(w http.ResponseWriter, r *http.Request) {
	sel, err := s.selection(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	v := r.URL.Query()
	view := orb.Bound{Min: orb.Point{-180, -90}, Max: orb.Point{180, 90}}
	if vs := v.Get("view"); vs != "" {
		if view, err = parseBBox(vs); err != nil {
			s.fail(w, r, badQuery("view: %v", err))
			return
		}
	}
	zoom := 2
	if z := v.Get("zoom"); z != "" {
		if zoom, err = strconv.Atoi(z); err != nil || zoom < 0 || zoom > 30 {
			s.fail(w, r, badQuery("zoom %q: want 0 to 30", z))
			return
		}
	}
	recs, capped, err := s.sample(r.Context(), sel)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ans := clusters(recs, view, zoom)
	ans.Capped, ans.Limit, ans.Index = capped, maxMapRecords, s.watch.status()
	writeJSON(w, ans)
}

// timeSpan returns the earliest and latest dead_lettered_at of the
// records matching sel, read from the store in that order (records that
// are not envelopes have none: they are passed over).
func (s *Server) timeSpan(ctx context.Context, sel selection) (lo, hi time.Time, err error) {
	for _, desc := range []bool{false, true} {
		o := broker.ListOptions{Destination: sel.q.Destination, Filter: sel.storeFilter(), IncludeReplayed: sel.q.Replayed,
			Sort: broker.SortDeadLetteredAt, Descending: desc, Limit: 100, Summaries: true}
		var at time.Time
		for range 10 {
			p, err := s.store.List(ctx, o)
			if err != nil {
				return lo, hi, err
			}
			for _, e := range p.Entries {
				if e.Summary != nil && e.Summary.Envelope && !e.Summary.DeadLetteredAt.IsZero() {
					at = e.Summary.DeadLetteredAt
					break
				}
			}
			if !at.IsZero() || p.Next == "" || p.Next == o.After {
				break
			}
			o.After = p.Next
		}
		if desc {
			hi = at
		} else {
			lo = at
		}
	}
	return lo, hi, nil
}

// overviewCache keeps the latest overviews for overviewTTL while the
// store's open count is unchanged: an overview is counted by the store
// (its time line by reading the matching records), and the page asks for
// the same one on every refresh.
type overviewCache struct {
	mu sync.Mutex
	m  map[string]cachedOverview
}

type cachedOverview struct {
	at   time.Time
	open int
	ans  overviewAnswer
}

// Overview cache bounds.
const (
	overviewTTL     = 30 * time.Second
	overviewEntries = 32
)

func (c *overviewCache) get(key string, open int) (overviewAnswer, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[key]
	if !ok || e.open != open || time.Since(e.at) > overviewTTL {
		return overviewAnswer{}, false
	}
	return e.ans, true
}

// clear drops every overview (records changed).
func (c *overviewCache) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.m)
}

func (c *overviewCache) put(key string, open int, ans overviewAnswer) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]cachedOverview{}
	}
	if len(c.m) >= overviewEntries {
		for k, e := range c.m {
			if time.Since(e.at) > overviewTTL || len(c.m) >= overviewEntries {
				delete(c.m, k)
			}
		}
	}
	c.m[key] = cachedOverview{at: time.Now(), open: open, ans: ans}
}
