package console

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// event is one server-sent event.
type event struct {
	Name string
	Data any
}

// hub fans events out to the pages listening on /api/events. A slow page
// loses events rather than slowing the others (it reloads what it shows
// on the next event it gets).
type hub struct {
	mu     sync.Mutex
	subs   map[chan event]struct{}
	closed bool
}

// maxListeners bounds the pages listening at once.
const maxListeners = 64

func newHub() *hub { return &hub{subs: map[chan event]struct{}{}} }

func (h *hub) subscribe() (chan event, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed || len(h.subs) >= maxListeners {
		return nil, false
	}
	c := make(chan event, 16)
	h.subs[c] = struct{}{}
	return c, true
}

func (h *hub) unsubscribe(c chan event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.subs[c]; ok {
		delete(h.subs, c)
		close(c)
	}
}

func (h *hub) publish(e event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for c := range h.subs {
		select {
		case c <- e:
		default:
		}
	}
}

func (h *hub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for c := range h.subs {
		delete(h.subs, c)
		close(c)
	}
}

// heartbeat keeps idle event streams open through proxies.
const heartbeat = 15 * time.Second

// events is GET /api/events: server-sent events. "hello" carries the
// index status; "index" says the map index is built; "records" announces
// new dead letters; "changed" says records left (replayed or discarded,
// here or elsewhere); "job" reports a job's progress.
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	if _, ok := w.(http.Flusher); !ok {
		s.problem(w, r, http.StatusInternalServerError, "streaming unsupported", "the server cannot stream events")
		return
	}
	c, ok := s.hub.subscribe()
	if !ok {
		s.problem(w, r, http.StatusServiceUnavailable, "too many listeners", fmt.Sprintf("at most %d pages may listen at once", maxListeners))
		return
	}
	defer s.hub.unsubscribe(c)
	sw := s.stream(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	send := func(e event) bool {
		b, err := json.Marshal(e.Data)
		if err != nil {
			return true
		}
		_, err = fmt.Fprintf(sw, "event: %s\ndata: %s\n\n", e.Name, b)
		return err == nil
	}
	if !send(event{Name: "hello", Data: s.watch.status()}) {
		return
	}
	t := time.NewTicker(heartbeat)
	defer t.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-s.ctx.Done():
			return
		case e, ok := <-c:
			if !ok || !send(e) {
				return
			}
		case <-t.C:
			if _, err := fmt.Fprint(sw, ": keep-alive\n\n"); err != nil {
				return
			}
		}
	}
}
