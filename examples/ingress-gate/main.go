// Command ingress-gate is an HTTP front door for a spatial event queue: it
// validates each event with geodlq's ingress gate before enqueueing it, so
// malformed payloads are refused with an RFC 9457 problem body their
// producer can act on, and never reach the queue (or, later, the
// dead-letter store).
//
//	go run ./examples/ingress-gate                  # serve on 127.0.0.1:8080
//	go run ./examples/ingress-gate -selftest        # post sample events to itself, print the answers
//
//	curl -i -X POST localhost:8080/events -H 'Idempotency-Key: parcel-17' \
//	  -d '{"source_uri":"s3://b/p.geojson","processing_mode":"vector","geometry":{"type":"Point","coordinates":[12.5,41.9]}}'
//
// The queue here is geodlq's in-process broker (broker/memory); put any
// broker.Publisher in its place — Kafka, SQS, Pub/Sub — and set -max-bytes
// to its message limit. Copy it: everything it uses is public API, and it
// builds without cgo.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/geodlq/geodlq/broker"
	"github.com/geodlq/geodlq/broker/memory"
	"github.com/geodlq/geodlq/classify"
	"github.com/geodlq/geodlq/ingress"
)

// topic is the queue the gate feeds.
const topic = "spatial.events"

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "listen address")
	maxBytes := flag.Int64("max-bytes", 256<<10, "largest event accepted, in bytes: the queue's message limit (SQS: 256 KiB)")
	maxVertices := flag.Int("max-vertices", 100_000, "most positions a geometry may have")
	modes := flag.String("modes", "vector", "comma-separated processing_mode values accepted")
	selftest := flag.Bool("selftest", false, "serve on a free loopback port, post sample events to the gate, print the answers and exit")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))

	queue := memory.New(&memory.Options{StoreOptions: broker.StoreOptions{MaxMessageBytes: int(*maxBytes)}})
	opts := &ingress.Options{
		MaxBytes:        *maxBytes,
		MaxVertices:     *maxVertices,
		ProcessingModes: strings.Split(*modes, ","),
		Logger:          log,
	}
	h := newHandler(queue, opts, log)

	if *selftest {
		if err := selfTest(context.Background(), os.Stdout, h, queue); err != nil {
			fmt.Fprintln(os.Stderr, "selftest:", err)
			os.Exit(1)
		}
		return
	}
	srv := &http.Server{Addr: *addr, Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	log.Info("ingress gate listening", "addr", *addr, "topic", topic, "max_bytes", *maxBytes)
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Error("serve", "err", err)
		os.Exit(1)
	}
}

// newHandler routes POST /events through the gate to the queue.
func newHandler(queue broker.Publisher, opts *ingress.Options, log *slog.Logger) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("POST /events", ingress.Middleware(enqueue(queue, log), opts))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	return mux
}

// enqueue publishes a validated event, byte for byte, with the idempotency
// key assigned here, at ingestion: the producer's Idempotency-Key header,
// else the event's own idempotency_key member, else one derived from the
// body (so that a producer retrying the same event gets the same key),
// marked derived so that a dead-letter envelope says so.
func enqueue(queue broker.Publisher, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body) // the gate already read and checked it
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		msg := &broker.Message{Body: body, Headers: map[string]string{}}
		if k := r.Header.Get("Idempotency-Key"); k != "" {
			msg.Headers[broker.HeaderIdempotencyKey] = k
		}
		key, derived := broker.IdempotencyKeyOf(msg, nil)
		msg.Headers[broker.HeaderIdempotencyKey] = key
		if derived {
			msg.Headers[broker.HeaderIdempotencyKeyDerived] = "true"
		}
		if err := queue.Publish(r.Context(), topic, msg); err != nil {
			status, title := http.StatusServiceUnavailable, "Queue unavailable"
			if errors.Is(err, classify.ErrTooLarge) {
				status, title = http.StatusRequestEntityTooLarge, "Event too large for the queue"
			} else {
				w.Header().Set("Retry-After", "1") // not enqueued: the producer retries
			}
			log.Warn("enqueue failed", "err", err, "key", key)
			writeJSON(w, status, "application/problem+json", map[string]any{
				"type": "urn:geodlq:problem:enqueue-failed", "title": title, "status": status,
				"detail": err.Error(), "instance": r.URL.Path,
			})
			return
		}
		writeJSON(w, http.StatusAccepted, "application/json", map[string]any{"queued": true, "topic": topic, "idempotency_key": key, "idempotency_key_derived": derived})
	})
}

func writeJSON(w http.ResponseWriter, status int, contentType string, v any) {
	w.Header().Set("Content-Type", contentType)
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// sample is an event the self-test posts, with the status it expects.
type sample struct {
	name, body string
	want       int
}

func samples() []sample {
	big := `{"source_uri":"s3://geo-drop/huge.geojson","processing_mode":"vector","geometry":{"type":"MultiPoint","coordinates":[` +
		strings.Repeat("[12.5,41.9],", 30_000) + `[12.5,41.9]]}}`
	return []sample{
		{"valid parcel", `{"source_uri":"s3://geo-drop/parcels/17.geojson","crs":"EPSG:4326","processing_mode":"vector",` +
			`"geometry":{"type":"Polygon","coordinates":[[[12.49,41.89],[12.51,41.89],[12.51,41.91],[12.49,41.91],[12.49,41.89]]]}}`, http.StatusAccepted},
		{"the seed's bowtie (topology is the consumer's job)", `{"source_uri":"s3://my-bucket/test.geojson","crs":"EPSG:4326","processing_mode":"vector",` +
			`"geometry":{"type":"Polygon","coordinates":[[[0,0],[1,1],[0,1],[1,0],[0,0]]]}}`, http.StatusAccepted},
		{"malformed event", `{"source_uri":"my-bucket/test.geojson","crs":"EPSG:3857","processing_mode":"raster",` +
			`"geometry":{"type":"Polygon","coordinates":[[[10,10],[20,10],[20,20],[10,20]]]}}`, http.StatusBadRequest},
		{"oversized event", big, http.StatusRequestEntityTooLarge},
	}
}

// selfTest serves h on a free loopback port, posts the samples to it, and
// prints each answer and the queue's depth.
func selfTest(ctx context.Context, out io.Writer, h http.Handler, queue *broker.Store) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	url := "http://" + ln.Addr().String() + "/events"
	for i, s := range samples() {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(s.body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", fmt.Sprintf("selftest-%d", i+1))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		body, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "POST /events  %s (%d bytes)\n  -> %s  %s\n", s.name, len(s.body), resp.Status, resp.Header.Get("Content-Type"))
		var pretty bytes.Buffer
		if json.Indent(&pretty, body, "     ", "  ") == nil {
			fmt.Fprintf(out, "     %s\n", strings.TrimSpace(pretty.String()))
		}
		if resp.StatusCode != s.want {
			return fmt.Errorf("%s: got %s, want %d", s.name, resp.Status, s.want)
		}
	}
	n := memory.Len(queue, topic)
	fmt.Fprintf(out, "queue %s holds %d events\n", topic, n)
	if n != 2 {
		return fmt.Errorf("queue holds %d events, want 2", n)
	}
	return nil
}
