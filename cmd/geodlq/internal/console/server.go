package console

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/url"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/cmd/geodlq/internal/native"
	"github.com/geodlq/geodlq/cmd/geodlq/internal/replaying"
	"github.com/geodlq/geodlq/envelope"
	"github.com/geodlq/geodlq/offload"
	"github.com/geodlq/geodlq/spatial"
)

// Options configure a [Server].
type Options struct {
	// Store is the dead-letter store the console shows; required. Open it
	// read-only (broker.OpenOptions.ReadOnly) unless Token is set.
	Store *broker.Store
	// Targets are where a replay job may re-inject, chosen per job by
	// index; the first is the default. The store itself is always a
	// choice too ("store"), and the default when Targets is empty: it
	// takes only the records its own broker delivered, as geodlq replay
	// without --target does (see replaying.Route).
	Targets []Target
	// Label names the store on the page (a redacted URL); default the
	// store's adapter name.
	Label string
	// Blobs restores offloaded payloads and geometries (verified by hash);
	// nil shows offloaded records without them.
	Blobs *offload.Offloader
	// Token enables the actions (replay, discard): every mutating request
	// must carry it as "Authorization: Bearer <token>". Empty means
	// read-only: every mutating request is refused.
	Token string
	// TileURL is an XYZ tile URL template
	// (https://tiles.example/{z}/{x}/{y}.png) drawn under the offline
	// basemap; empty draws the offline basemap alone. Its origin is added
	// to the Content-Security-Policy's img-src.
	TileURL string
	// TileAttribution is shown with the tiles (plain text).
	TileAttribution string
	// ExpectedEPSG is the CRS the pipeline works in: repairs reproject to
	// it and replays check against it. Default 4326.
	ExpectedEPSG int
	// Poll is how often the console looks for new dead letters. Default 2s.
	Poll time.Duration
	// Logger receives the server's log records. Nil discards.
	Logger *slog.Logger
	// Now returns the current time. Nil means time.Now.
	Now func() time.Time
	// Timeouts bound what a slow client may hold; zero fields take
	// their defaults (see [Timeouts]).
	Timeouts Timeouts
	// SourcePointer is the JSON pointer (RFC 6901) into the event that
	// names its source ("/properties/provider"), as geodlq list and
	// stats --source-pointer: the Source column, the source filter and
	// the overview's source groups read it. Default
	// broker.DefaultSourcePointer (/source_uri).
	SourcePointer string
}

// Timeouts bound how long a client may take, so that clients that send
// slowly or never read cannot hold connections and memory.
type Timeouts struct {
	// ReadHeader bounds reading a request's headers. Default 10s.
	ReadHeader time.Duration
	// Read bounds reading a whole request, body included (bodies are at
	// most 1 MiB). Default 30s.
	Read time.Duration
	// Write bounds writing an answer of the API or the page. Default 30s.
	Write time.Duration
	// Stall bounds each write of a stream (a payload download, 64 KiB at
	// a time, and each server-sent event): a client that stops reading
	// is cut off after it, one that keeps reading may take as long as it
	// needs. Default 30s.
	Stall time.Duration
	// Idle bounds how long a kept-alive connection waits for its next
	// request. Default 2 minutes.
	Idle time.Duration
}

func (t Timeouts) withDefaults() Timeouts {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&t.ReadHeader, 10*time.Second)
	def(&t.Read, 30*time.Second)
	def(&t.Write, 30*time.Second)
	def(&t.Stall, 30*time.Second)
	def(&t.Idle, 2*time.Minute)
	return t
}

// HTTPServer returns an http.Server that serves the console with its
// Timeouts: headers and bodies must arrive within ReadHeader and Read,
// kept-alive connections idle at most Idle; answers are bounded per
// route (Write for the API, Stall per write of a download or an event
// stream, which has no overall bound), so http.Server's own
// WriteTimeout stays 0. ctx is every request's base context.
func (s *Server) HTTPServer(ctx context.Context) *http.Server {
	t := s.opts.Timeouts
	return &http.Server{Handler: s, ReadHeaderTimeout: t.ReadHeader, ReadTimeout: t.Read, IdleTimeout: t.Idle,
		MaxHeaderBytes: 64 << 10, BaseContext: func(net.Listener) context.Context { return ctx }}
}

// streaming reports whether a request is answered by a stream that sets
// its own write deadlines.
func streaming(r *http.Request) bool {
	return r.URL.Path == "/api/events" || strings.HasSuffix(r.URL.Path, "/payload") && r.URL.Query().Get("download") != ""
}

// stream prepares a streamed answer: the request's read deadline is
// lifted (the request is read; a deadline left would cancel the
// request's context mid-stream) and every write is bounded by Stall.
func (s *Server) stream(w http.ResponseWriter) *streamWriter {
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	return &streamWriter{w: w, rc: rc, stall: s.opts.Timeouts.Stall}
}

// streamWriter writes with a deadline per write, and flushes.
type streamWriter struct {
	w     http.ResponseWriter
	rc    *http.ResponseController
	stall time.Duration
}

func (sw *streamWriter) Write(p []byte) (int, error) {
	if err := sw.rc.SetWriteDeadline(time.Now().Add(sw.stall)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return 0, err
	}
	n, err := sw.w.Write(p)
	if err == nil {
		err = sw.rc.Flush()
		if errors.Is(err, http.ErrNotSupported) {
			err = nil
		}
	}
	return n, err
}

// Target is a store or broker replays re-inject into.
type Target struct {
	// Label names it on the page (a redacted URL).
	Label string
	// Publisher receives the re-injected events, in each envelope's
	// source topic (or the job's route).
	Publisher broker.Publisher
}

// Server is the console: an http.Handler serving the page and its JSON
// API. Create it with [New] and Close it when done.
type Server struct {
	opts    Options
	store   *broker.Store
	checker *native.Checker
	log     *slog.Logger
	mux     *http.ServeMux
	assets  fs.FS
	csp     string
	watch   *watcher
	// places keeps the places of records computed from their bodies.
	places *placeCache
	// bodies lets one request at a time read record bodies to place or
	// draw them (see holdBodies).
	bodies chan struct{}
	// overviews keeps the latest overviews.
	overviews overviewCache
	hub       *hub
	jobs      *jobs
	// shapeCache keeps the main map's simplified shapes.
	shapeCache *shapeCache
	ctx        context.Context
	cancel     context.CancelFunc
	wg         sync.WaitGroup
	closeMu    sync.Mutex
	closed     bool

	// totalCap is the ListOptions.TotalCap of /api/records' total
	// (listTotalCap; tests lower it).
	totalCap int
}

// MinTokenLen is the shortest token [New] accepts.
const MinTokenLen = 16

// New returns a console over opts.Store and starts counting its records
// (and, every Options.Poll, looking for new dead letters) in the
// background until Close.
func New(opts Options) (*Server, error) {
	if opts.Store == nil {
		return nil, errors.New("console: Options.Store is required")
	}
	if opts.Token != "" && len(opts.Token) < MinTokenLen {
		return nil, fmt.Errorf("console: the token must be at least %d characters", MinTokenLen)
	}
	if opts.Poll <= 0 {
		opts.Poll = 2 * time.Second
	}
	if opts.ExpectedEPSG == 0 {
		opts.ExpectedEPSG = spatial.DefaultExpectedEPSG
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	opts.Timeouts = opts.Timeouts.withDefaults()
	if opts.SourcePointer == "" {
		opts.SourcePointer = broker.DefaultSourcePointer
	}
	if err := broker.ValidSourcePointer(opts.SourcePointer); err != nil {
		return nil, fmt.Errorf("console: source pointer: %w", err)
	}
	if opts.Label == "" {
		opts.Label = opts.Store.Name()
	}
	csp, err := contentSecurityPolicy(opts.TileURL)
	if err != nil {
		return nil, err
	}
	checker, err := native.NewChecker(&spatial.Options{ExpectedEPSG: opts.ExpectedEPSG})
	if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	assets, err := fs.Sub(distFS, "ui/dist")
	if err != nil {
		return nil, fmt.Errorf("console: embedded assets: %w", err)
	}
	s := &Server{opts: opts, store: opts.Store, checker: checker, log: opts.Logger, assets: assets, csp: csp, hub: newHub(),
		shapeCache: newShapeCache(shapeCacheBytes), totalCap: listTotalCap}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.watch = newWatcher(s)
	s.places = newPlaceCache(placeCacheEntries)
	s.bodies = make(chan struct{}, 1)
	s.jobs = newJobs(s)
	s.routes()
	s.wg.Go(func() { s.watch.watch(s.ctx, opts.Poll) })
	return s, nil
}

// Close stops the background work, cancels running jobs (a replay stops
// between records: nothing is half acknowledged) and waits for them. It
// does not close the store.
func (s *Server) Close() error {
	s.closeMu.Lock()
	if s.closed {
		s.closeMu.Unlock()
		return nil
	}
	s.closed = true
	s.closeMu.Unlock()
	s.cancel()
	s.hub.close()
	s.wg.Wait()
	return s.checker.Close()
}

// Ready reports whether the console has counted the store's records
// (every request is answered before; the count shows on the page).
func (s *Server) Ready() bool { return s.watch.status().Ready }

// contentSecurityPolicy is strict: scripts, styles and data from the
// server itself only, no inline code, images from the server (and the
// tile server, when one is configured), no framing.
func contentSecurityPolicy(tileURL string) (string, error) {
	img := "'self' data:"
	if tileURL != "" {
		u, err := url.Parse(strings.NewReplacer("{z}", "0", "{x}", "0", "{y}", "0", "{s}", "a", "{r}", "").Replace(tileURL))
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return "", fmt.Errorf("console: tile URL %q: want http(s)://host/…/{z}/{x}/{y}.png", tileURL)
		}
		img += " " + u.Scheme + "://" + u.Host
	}
	return "default-src 'none'; script-src 'self'; style-src 'self'; img-src " + img +
		"; connect-src 'self'; font-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'", nil
}

func (s *Server) routes() {
	m := http.NewServeMux()
	m.HandleFunc("GET /{$}", s.page)
	m.HandleFunc("GET /assets/{file}", s.asset)
	m.HandleFunc("GET /api/config", s.config)
	m.HandleFunc("GET /api/openapi.json", s.openapi)
	m.HandleFunc("GET /api/overview", s.overview)
	m.HandleFunc("GET /api/records", s.records)
	m.HandleFunc("GET /api/records/{dest}/{id}", s.record)
	m.HandleFunc("GET /api/records/{dest}/{id}/geometry", s.geometry)
	m.HandleFunc("GET /api/records/{dest}/{id}/payload", s.payload)
	m.HandleFunc("GET /api/records/{dest}/{id}/repair", s.repairPreview)
	m.HandleFunc("GET /api/map", s.mapView)
	m.HandleFunc("GET /api/shapes", s.shapes)
	m.HandleFunc("GET /api/events", s.events)
	m.HandleFunc("GET /api/jobs", s.listJobs)
	m.HandleFunc("GET /api/jobs/{job}", s.getJob)
	m.HandleFunc("POST /api/jobs", s.mutating(s.startJob))
	m.HandleFunc("POST /api/jobs/{job}/cancel", s.mutating(s.cancelJob))
	m.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		s.problem(w, r, http.StatusNotFound, "no such endpoint", fmt.Sprintf("%s %s is not part of the API; see /api/openapi.json", r.Method, r.URL.Path))
	})
	s.mux = m
}

// ServeHTTP serves the console. Every answer carries the security
// headers; requests whose Host is not the console's own are refused (DNS
// rebinding).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", s.csp)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
	h.Set("Permissions-Policy", "geolocation=(), camera=(), microphone=()")
	if !streaming(r) {
		_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(s.opts.Timeouts.Write))
	}
	if !loopbackHost(r.Host) && !s.allowedHost(r) {
		s.problem(w, r, http.StatusMisdirectedRequest, "unexpected host",
			"the console answers to loopback names only (localhost, 127.0.0.1, [::1]) unless it is bound to another address")
		return
	}
	s.mux.ServeHTTP(w, r)
}

// allowedHost accepts any Host when the server listens on a non-loopback
// address (the operator chose to expose it), as the listener tells.
func (s *Server) allowedHost(r *http.Request) bool {
	addr, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok {
		return false
	}
	host, _, err := net.SplitHostPort(addr.String())
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && !ip.IsLoopback()
}

func loopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// maxBody bounds a mutating request's body.
const maxBody = 1 << 20

// mutating guards a handler that changes the store: actions must be
// enabled, the request must carry the token (a header no cross-site form
// or image can send, so this is also the CSRF defence), come from the
// console's own origin when the browser says where it comes from, and be
// JSON.
func (s *Server) mutating(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.opts.Token == "" {
			s.problem(w, r, http.StatusForbidden, "read-only console",
				"this console is read-only: start geodlq serve with --read-only=false and a token (--token-file or $GEODLQ_TOKEN) to replay or discard")
			return
		}
		tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(tok), []byte(s.opts.Token)) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="geodlq"`)
			s.problem(w, r, http.StatusUnauthorized, "token required",
				"actions need the console's token in an Authorization: Bearer header")
			return
		}
		if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
			s.problem(w, r, http.StatusForbidden, "cross-site request", "actions are accepted from the console's own page only")
			return
		}
		if o := r.Header.Get("Origin"); o != "" {
			u, err := url.Parse(o)
			if err != nil || u.Host != r.Host {
				s.problem(w, r, http.StatusForbidden, "cross-origin request", "actions are accepted from the console's own origin only")
				return
			}
		}
		if r.Body != nil && r.ContentLength != 0 {
			mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
			if mt != "application/json" {
				s.problem(w, r, http.StatusUnsupportedMediaType, "JSON required", "send the request body as application/json")
				return
			}
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxBody)
		next(w, r)
	}
}

// Problem is an RFC 9457 problem details body, the answer to every failed
// API request.
type Problem struct {
	// Type identifies the problem type (a URI; "about:blank" for the
	// plain HTTP meaning of the status).
	Type string `json:"type"`
	// Title is a short summary of the problem type.
	Title string `json:"title"`
	// Status is the HTTP status code.
	Status int `json:"status"`
	// Detail explains this occurrence.
	Detail string `json:"detail"`
	// Instance is the request path.
	Instance string `json:"instance,omitempty"`
}

// ContentTypeProblem is the media type of a [Problem].
const ContentTypeProblem = "application/problem+json"

func (s *Server) problem(w http.ResponseWriter, r *http.Request, status int, title, detail string) {
	w.Header().Set("Content-Type", ContentTypeProblem)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(Problem{Type: "about:blank", Title: title, Status: status, Detail: detail, Instance: r.URL.Path})
}

// fail answers err: a bad query 400, an unknown record 404, a read-only
// store 403, an unsupported operation 501, anything else 502 (the store
// failed) after logging it.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	var nf *notFoundError
	switch {
	case errors.Is(err, errBadQuery), errors.Is(err, broker.ErrInvalidArgument):
		s.problem(w, r, http.StatusBadRequest, "bad request", err.Error())
	case errors.As(err, &nf):
		s.problem(w, r, http.StatusNotFound, "not found", err.Error())
	case errors.Is(err, broker.ErrReadOnly):
		s.problem(w, r, http.StatusForbidden, "read-only store", err.Error())
	case errors.Is(err, errors.ErrUnsupported):
		s.problem(w, r, http.StatusNotImplemented, "not supported by this store", err.Error())
	case errors.Is(err, context.Canceled) && r.Context().Err() != nil:
		// The client went away.
	default:
		s.log.ErrorContext(r.Context(), "geodlq serve: request failed", slog.String("path", r.URL.Path), slog.Any("error", err))
		s.problem(w, r, http.StatusBadGateway, "store error", err.Error())
	}
}

type notFoundError struct{ what string }

func (e *notFoundError) Error() string { return e.what }

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	enc := json.NewEncoder(w)
	_ = enc.Encode(v)
}

// page serves index.html.
func (s *Server) page(w http.ResponseWriter, r *http.Request) {
	b, err := fs.ReadFile(s.assets, "index.html")
	if err != nil {
		s.problem(w, r, http.StatusInternalServerError, "assets missing", "the console's page is not embedded in this build: run make ui")
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	_, _ = w.Write(b)
}

// asset serves a built file.
func (s *Server) asset(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("file")
	if name != path.Base(name) || strings.HasPrefix(name, ".") || name == "index.html" {
		s.problem(w, r, http.StatusNotFound, "not found", "no such asset")
		return
	}
	f, err := s.assets.Open("assets/" + name)
	if err != nil {
		s.problem(w, r, http.StatusNotFound, "not found", "no such asset")
		return
	}
	defer f.Close()
	ct := mime.TypeByExtension(path.Ext(name))
	switch path.Ext(name) {
	case ".js":
		ct = "text/javascript; charset=utf-8"
	case ".json":
		ct = "application/json"
	case ".css":
		ct = "text/css; charset=utf-8"
	}
	if ct == "" {
		ct = "application/octet-stream"
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Cache-Control", "no-cache")
	_, _ = io.Copy(w, f)
}

// configAnswer is GET /api/config.
type configAnswer struct {
	Store           string `json:"store"`
	Adapter         string `json:"adapter"`
	ReadOnly        bool   `json:"read_only"`
	Blobs           bool   `json:"blobs"`
	TileURL         string `json:"tile_url,omitempty"`
	TileAttribution string `json:"tile_attribution,omitempty"`
	ExpectedEPSG    int    `json:"expected_epsg"`
	// SourcePointer is where the Source column and filter read the
	// event's source.
	SourcePointer string   `json:"source_pointer"`
	Classes       []string `json:"classes"`
	Stages        []string `json:"stages"`
	ReasonKinds   []string `json:"reason_kinds"`
	Repairs       []string `json:"repairs"`
	// Unchanged lists the classes a replay may re-inject unchanged.
	Unchanged    []string     `json:"unchanged"`
	Targets      []targetInfo `json:"targets"`
	Destinations []string     `json:"destinations"`
	Index        indexStatus  `json:"index"`
}

func (s *Server) config(w http.ResponseWriter, r *http.Request) {
	dests, err := s.store.Destinations(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, configAnswer{
		Store: s.opts.Label, Adapter: s.store.Name(), ReadOnly: s.opts.Token == "", Blobs: s.opts.Blobs != nil,
		TileURL: s.opts.TileURL, TileAttribution: s.opts.TileAttribution, ExpectedEPSG: s.opts.ExpectedEPSG,
		SourcePointer: s.opts.SourcePointer, Classes: classNames(), Stages: stageNames(), ReasonKinds: kindNames(), Repairs: replaying.RepairNames(),
		Unchanged: unchangedNames(), Targets: s.targetInfos(), Destinations: nonNil(dests), Index: s.watch.status(),
	})
}

func nonNil[T any](xs []T) []T {
	if xs == nil {
		return []T{}
	}
	return xs
}

// sourceOf is the event's source: its value at Options.SourcePointer.
func (s *Server) sourceOf(env *envelope.Envelope) string {
	return broker.SourceOf(env, s.opts.SourcePointer)
}
