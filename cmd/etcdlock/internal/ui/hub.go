package ui

// This file holds the event streams: every open page's server-sent-events
// connection, fed from the one view by publishLoop.

import (
	"context"
	"encoding/json"
	"sync"
	"time"
)

const (
	// publishEvery is how often changes go out to the streams: often enough
	// for a change to show within a second, seldom enough that 15,000
	// grants a second are a few messages.
	publishEvery = 200 * time.Millisecond
	// maxBatch bounds the timeline events of one message; a stream that
	// falls further behind is told how many it missed.
	maxBatch = 200
	// streamBuffer is how many messages a slow stream may have waiting
	// before it loses some (and is told to read everything again).
	streamBuffer = 32
)

// message is one server-sent event.
type message struct {
	event string // "change", "timeline" or "resync"
	data  []byte
}

// hub fans the messages out to every stream. It is safe for concurrent
// use.
type hub struct {
	mu     sync.Mutex
	subs   map[*stream]struct{}
	closed bool
}

// stream is one page's subscription.
type stream struct {
	ch   chan message
	lost bool          // a message was dropped: the page must read everything again (guarded by hub.mu)
	done chan struct{} // closed when the hub closes
}

func newHub() *hub { return &hub{subs: map[*stream]struct{}{}} }

// subscribe returns a new stream, or nil once the hub is closed.
func (h *hub) subscribe() *stream {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil
	}
	st := &stream{ch: make(chan message, streamBuffer), done: make(chan struct{})}
	h.subs[st] = struct{}{}
	return st
}

func (h *hub) unsubscribe(st *stream) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.subs, st)
}

// publish sends m to every stream without waiting: a stream whose buffer
// is full loses it and gets a "resync" as soon as there is room.
func (h *hub) publish(m message) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for st := range h.subs {
		if st.lost {
			select {
			case st.ch <- message{event: "resync", data: []byte("{}")}:
				st.lost = false
			default:
				continue
			}
		}
		select {
		case st.ch <- m:
		default:
			st.lost = true
		}
	}
}

// count returns how many streams are open.
func (h *hub) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs)
}

// close ends every stream, now and to come.
func (h *hub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	h.closed = true
	for st := range h.subs {
		close(st.done)
	}
}

// changeJSON is a "change" message: the view moved to Revision.
type changeJSON struct {
	Revision int64  `json:"revision"`
	Names    int    `json:"names"`
	Error    string `json:"error,omitempty"`
}

// timelineJSON is a "timeline" message: the events numbered from First on
// (Skipped more were left out: read /api/timeline for them).
type timelineJSON struct {
	Events  []event `json:"events"`
	Skipped int     `json:"skipped,omitempty"`
}

// publishLoop names pending deletions and sends what changed to the
// streams, every publishEvery, until ctx ends.
func (s *Server) publishLoop(ctx context.Context) {
	t := time.NewTicker(publishEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.classifyPending(ctx)
		s.publish()
	}
}

// publish sends one "change" if the view changed, and one "timeline" with
// the events added since the last one.
func (s *Server) publish() {
	s.mu.Lock()
	s.ch.advance(time.Now(), s.nwait())
	var msgs []message
	if s.dirty {
		s.dirty = false
		c := changeJSON{Revision: s.rev(), Names: s.nnames()}
		if err := s.readErr(); err != nil {
			c.Error = errorText(err, s.keyPrefix)
		}
		msgs = append(msgs, jsonMessage("change", c))
	}
	if evs := s.tl.unsent(); len(evs) > 0 {
		tl := timelineJSON{Events: evs}
		if len(evs) > maxBatch {
			tl.Skipped, tl.Events = len(evs)-maxBatch, evs[len(evs)-maxBatch:]
		}
		msgs = append(msgs, jsonMessage("timeline", tl))
	}
	s.mu.Unlock()
	for _, m := range msgs {
		s.hub.publish(m)
	}
}

func jsonMessage(event string, v any) message {
	b, err := json.Marshal(v)
	if err != nil { // cannot happen for these types
		b = []byte("{}")
	}
	return message{event: event, data: b}
}
