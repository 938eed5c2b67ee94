package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Outcome is what a function answered to one invocation through the
// Lambda Runtime API.
type Outcome struct {
	// Body is the response (or error) document.
	Body []byte
	// Error is true for /error, or an init error.
	Error bool
}

// RuntimeAPI is a local implementation of the AWS Lambda Runtime API
// (2018-06-01): GET /runtime/invocation/next hands out the queued events
// one at a time (then waits until the test ends), POST
// /runtime/invocation/{id}/response and /error and /runtime/init/error
// record the function's answer.
type RuntimeAPI struct {
	// Addr is host:port, for AWS_LAMBDA_RUNTIME_API.
	Addr string

	events  chan invocation
	mu      sync.Mutex
	answers map[string]chan Outcome
	initErr chan Outcome
}

type invocation struct {
	id    string
	event []byte
}

// NewRuntimeAPI serves the Runtime API on a loopback port until the test
// ends.
func NewRuntimeAPI(t *testing.T) *RuntimeAPI {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	r := &RuntimeAPI{Addr: ln.Addr().String(), events: make(chan invocation, 16), answers: map[string]chan Outcome{}, initErr: make(chan Outcome, 1)}
	done := make(chan struct{})
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) { r.serve(w, req, done) }),
		ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		close(done)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	return r
}

const prefix = "/2018-06-01/runtime/"

func (r *RuntimeAPI) serve(w http.ResponseWriter, req *http.Request, done <-chan struct{}) {
	path := strings.TrimPrefix(req.URL.Path, prefix)
	switch {
	case req.Method == http.MethodGet && path == "invocation/next":
		select {
		case inv := <-r.events:
			w.Header().Set("Lambda-Runtime-Aws-Request-Id", inv.id)
			w.Header().Set("Lambda-Runtime-Deadline-Ms", strconv.FormatInt(time.Now().Add(60*time.Second).UnixMilli(), 10))
			w.Header().Set("Lambda-Runtime-Invoked-Function-Arn", "arn:aws:lambda:us-east-1:123456789012:function:vector-jobs-consumer")
			w.Header().Set("Lambda-Runtime-Trace-Id", "Root=1-00000000-000000000000000000000000")
			_, _ = w.Write(inv.event)
		case <-done:
		case <-req.Context().Done():
		}
	case req.Method == http.MethodPost && path == "init/error":
		body, _ := io.ReadAll(io.LimitReader(req.Body, 1<<20))
		select {
		case r.initErr <- Outcome{Body: body, Error: true}:
		default:
		}
		w.WriteHeader(http.StatusAccepted)
	case req.Method == http.MethodPost && strings.HasPrefix(path, "invocation/"):
		id, kind, _ := strings.Cut(strings.TrimPrefix(path, "invocation/"), "/")
		body, _ := io.ReadAll(io.LimitReader(req.Body, 6<<20))
		r.mu.Lock()
		ch := r.answers[id]
		r.mu.Unlock()
		if ch == nil || (kind != "response" && kind != "error") {
			http.Error(w, "unknown invocation", http.StatusBadRequest)
			return
		}
		ch <- Outcome{Body: body, Error: kind == "error"}
		w.WriteHeader(http.StatusAccepted)
	default:
		http.NotFound(w, req)
	}
}

// Invoke queues event and waits for the function's answer, or its init
// error, or ctx's end.
func (r *RuntimeAPI) Invoke(ctx context.Context, t *testing.T, id string, event []byte) Outcome {
	t.Helper()
	ch := make(chan Outcome, 1)
	r.mu.Lock()
	r.answers[id] = ch
	r.mu.Unlock()
	r.events <- invocation{id: id, event: event}
	select {
	case o := <-ch:
		return o
	case o := <-r.initErr:
		t.Fatalf("the function failed to start: %s", o.Body)
	case <-ctx.Done():
		t.Fatalf("no answer to invocation %s: %v", id, ctx.Err())
	}
	return Outcome{}
}
