package embedtest

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// holdLinger is how long, after Restore, a connection whose client closed it
// during a Hold stays open towards the member: long enough for the member to
// take up the requests it was just handed (closing the connection cancels
// the requests the member has not yet passed on).
const holdLinger = 2 * time.Second

// gate is a valve shared by the proxies of one Link. While it is cut the
// proxies keep every connection open but move no bytes, as in a network
// partition. The zero value is not usable; see newGate.
type gate struct {
	mu   sync.Mutex
	cut  bool
	late bool          // cut by Hold: deliver what the client gives up on
	open chan struct{} // closed while the gate is open
}

func newGate() *gate {
	g := &gate{open: make(chan struct{})}
	close(g.open)
	return g
}

func (g *gate) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.cut {
		g.cut = true
		g.open = make(chan struct{})
	}
}

// closeLate is close for a Hold.
func (g *gate) closeLate() {
	g.close()
	g.mu.Lock()
	g.late = true
	g.mu.Unlock()
}

func (g *gate) reopen() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cut {
		g.cut, g.late = false, false
		close(g.open)
	}
}

// isLate reports whether the gate is cut by a Hold.
func (g *gate) isLate() bool {
	if g == nil {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.cut && g.late
}

func (g *gate) isCut() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.cut
}

// wait blocks while the gate is cut. It returns false when done is closed
// first.
func (g *gate) wait(done <-chan struct{}) bool {
	g.mu.Lock()
	open := g.open
	g.mu.Unlock()
	select {
	case <-open:
		return true
	case <-done:
		return false
	}
}

// proxy is a TCP forwarder on a fixed 127.0.0.1 port. It forwards every
// accepted connection to its current target; while the target is "" (the
// member is killed, or its peer side is isolated) it accepts connections and
// closes them at once. Changing the target closes every connection it
// forwards. With a gate it pauses forwarding while the gate is cut.
type proxy struct {
	ln   net.Listener
	gate *gate // nil: never paused

	mu     sync.Mutex
	target string // "" = refuse
	gen    uint64 // bumped on every target change and on close
	conns  map[net.Conn]struct{}
	closed bool

	done chan struct{} // closed by close
	wg   sync.WaitGroup
}

// newProxy listens on a fresh 127.0.0.1 port chosen by the OS and starts
// accepting. target may be "" (refuse until setTarget).
func newProxy(target string, g *gate) (*proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &proxy{
		ln:     ln,
		gate:   g,
		target: target,
		conns:  make(map[net.Conn]struct{}),
		done:   make(chan struct{}),
	}
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

// addr is the proxy's listening address, host:port.
func (p *proxy) addr() string { return p.ln.Addr().String() }

// url is the proxy's address as an http URL string.
func (p *proxy) url() string { return "http://" + p.addr() }

// setTarget closes every forwarded connection and forwards new connections
// to target from now on ("" = refuse them). When it returns, no connection
// accepted before the call moves another byte.
func (p *proxy) setTarget(target string) {
	p.mu.Lock()
	p.target = target
	p.gen++
	conns := p.conns
	p.conns = make(map[net.Conn]struct{})
	p.mu.Unlock()
	for c := range conns {
		_ = c.Close()
	}
}

// close stops accepting, closes every connection and waits for every
// goroutine of the proxy. It is idempotent.
func (p *proxy) close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		p.wg.Wait()
		return
	}
	p.closed = true
	p.target = ""
	p.gen++
	conns := p.conns
	p.conns = make(map[net.Conn]struct{})
	close(p.done)
	p.mu.Unlock()
	_ = p.ln.Close()
	for c := range conns {
		_ = c.Close()
	}
	p.wg.Wait()
}

func (p *proxy) serve() {
	defer p.wg.Done()
	var delay time.Duration
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Transient failure (for example out of file descriptors):
			// back off like net/http does, unless we are closing.
			if delay == 0 {
				delay = 5 * time.Millisecond
			} else if delay *= 2; delay > time.Second {
				delay = time.Second
			}
			t := time.NewTimer(delay)
			select {
			case <-p.done:
				t.Stop()
				return
			case <-t.C:
			}
			continue
		}
		delay = 0
		p.accept(c)
	}
}

func (p *proxy) accept(down net.Conn) {
	p.mu.Lock()
	if p.closed || p.target == "" {
		p.mu.Unlock()
		_ = down.Close()
		return
	}
	target, gen := p.target, p.gen
	p.conns[down] = struct{}{}
	p.wg.Add(1)
	p.mu.Unlock()
	go p.forward(down, target, gen)
}

// track registers c as forwarded by generation gen; it closes c and reports
// false when the proxy moved on (target change or close) in the meantime.
func (p *proxy) track(c net.Conn, gen uint64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gen != gen {
		_ = c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *proxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	for _, c := range cs {
		delete(p.conns, c)
	}
	p.mu.Unlock()
	for _, c := range cs {
		_ = c.Close()
	}
}

func (p *proxy) forward(down net.Conn, target string, gen uint64) {
	defer p.wg.Done()
	d := net.Dialer{Timeout: 5 * time.Second}
	up, err := d.Dial("tcp", target)
	if err != nil {
		p.untrack(down)
		return
	}
	if !p.track(up, gen) {
		p.untrack(down)
		return
	}
	var held atomic.Bool // some of the client's bytes were held by a Hold
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		p.pipeDown(up, down, &held)
	}()
	p.pipeUp(down, up, &held)
}

// chunk is what one read of the client's side returned.
type chunk struct {
	data []byte
	err  error
	late bool // read while the gate was cut by a Hold
}

// chunkQueue is an unbounded queue of chunks between the reader of the
// client's side and the writer to the member's.
type chunkQueue struct {
	mu    sync.Mutex
	items []chunk
	more  chan struct{} // signaled on push
}

func (q *chunkQueue) push(c chunk) {
	q.mu.Lock()
	q.items = append(q.items, c)
	q.mu.Unlock()
	select {
	case q.more <- struct{}{}:
	default:
	}
}

// pop returns the oldest chunk; false when done is closed first.
func (q *chunkQueue) pop(done <-chan struct{}) (chunk, bool) {
	for {
		q.mu.Lock()
		if len(q.items) > 0 {
			c := q.items[0]
			q.items = q.items[1:]
			q.mu.Unlock()
			return c, true
		}
		q.mu.Unlock()
		select {
		case <-q.more:
		case <-done:
			return chunk{}, false
		}
	}
}

// pipeUp copies the client's side (down) to the member's (up) until either
// fails, then closes both. The client's bytes are read as they come, also
// while the gate is cut, and written once it is open; so is its close.
// Requests read during a Hold are written without the client's HTTP/2
// stream resets and GOAWAY (see h2filter), and when the client closed the
// connection during or after a Hold, the member's side stays open
// holdLinger after the held bytes went out.
func (p *proxy) pipeUp(down, up net.Conn, held *atomic.Bool) {
	defer p.untrack(down, up)
	q := &chunkQueue{more: make(chan struct{}, 1)}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			buf := make([]byte, 32<<10)
			n, err := down.Read(buf)
			q.push(chunk{data: buf[:n], err: err, late: p.gate.isLate()})
			if err != nil {
				return
			}
		}
	}()
	var f h2filter
	for {
		c, ok := q.pop(p.done)
		if !ok {
			return
		}
		if c.late {
			held.Store(true)
		}
		if !p.pass() {
			return
		}
		if out := f.filter(c.data, c.late); len(out) > 0 {
			if _, err := up.Write(out); err != nil {
				return
			}
		}
		if c.err != nil {
			if held.Load() {
				t := time.NewTimer(holdLinger)
				select {
				case <-t.C:
				case <-p.done:
				}
				t.Stop()
			}
			return
		}
	}
}

// pipeDown copies the member's side (up) to the client's (down) until either
// fails, then closes both. While the gate is cut it neither forwards bytes
// nor passes on a close. When the client's side is gone after a Hold, it
// discards what the member sends until pipeUp closes the member's side.
func (p *proxy) pipeDown(up, down net.Conn, held *atomic.Bool) {
	defer p.untrack(up, down)
	buf := make([]byte, 32<<10)
	discard := false
	for {
		n, err := up.Read(buf)
		if n > 0 && !discard {
			if !p.pass() {
				return
			}
			if _, werr := down.Write(buf[:n]); werr != nil {
				if !held.Load() {
					return
				}
				discard = true
			}
		}
		if err != nil {
			p.pass()
			return
		}
	}
}

// h2Preface is the client connection preface of HTTP/2 (RFC 9113, 3.4).
const h2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// HTTP/2 frame types the filter reads.
const (
	h2Headers   = 0x1
	h2RSTStream = 0x3
	h2GoAway    = 0x7
)

// h2filter follows the frames of a plain-text HTTP/2 client connection (gRPC
// without TLS) so that the requests a client sent during a Hold reach the
// member as requests, not as requests already canceled: it drops the
// RST_STREAM frames of every stream whose HEADERS were held, and every
// GOAWAY once some stream was held, whenever they come. (A client that gives
// up during a Hold may write its reset after Restore: the caller's context
// ends before the client's writer sends the frame.) Held bytes of other
// streams' resets are dropped too. A connection that does not start with the
// HTTP/2 preface (TLS) passes unchanged.
type h2filter struct {
	off  int  // bytes of the preface seen
	raw  bool // not plain-text HTTP/2: pass everything
	hdr  [9]byte
	nhdr int  // bytes of the current frame header seen
	left int  // bytes of the current frame's payload still to come
	drop bool // the current frame is dropped

	held map[uint32]bool // streams whose HEADERS were held
}

// filter returns what of b to forward; late says b was held by a Hold.
func (f *h2filter) filter(b []byte, late bool) []byte {
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); {
		switch {
		case f.raw:
			return append(out, b[i:]...)
		case f.off < len(h2Preface):
			if b[i] != h2Preface[f.off] {
				f.raw = true
				continue
			}
			out = append(out, b[i])
			f.off++
			i++
		case f.left > 0:
			k := min(f.left, len(b)-i)
			if !f.drop {
				out = append(out, b[i:i+k]...)
			}
			f.left -= k
			i += k
		default:
			f.hdr[f.nhdr] = b[i]
			f.nhdr++
			i++
			if f.nhdr < len(f.hdr) {
				continue
			}
			f.nhdr = 0
			f.left = int(f.hdr[0])<<16 | int(f.hdr[1])<<8 | int(f.hdr[2])
			f.drop = f.frameDropped(late)
			if !f.drop {
				out = append(out, f.hdr[:]...)
			}
		}
	}
	return out
}

// frameDropped decides on the frame whose header is f.hdr.
func (f *h2filter) frameDropped(late bool) bool {
	stream := (uint32(f.hdr[5])<<24 | uint32(f.hdr[6])<<16 | uint32(f.hdr[7])<<8 | uint32(f.hdr[8])) &^ (1 << 31)
	switch f.hdr[3] {
	case h2Headers:
		if late {
			if f.held == nil {
				f.held = make(map[uint32]bool)
			}
			f.held[stream] = true
		}
	case h2RSTStream:
		return late || f.held[stream]
	case h2GoAway:
		return late || len(f.held) > 0
	}
	return false
}

// pass waits while the gate is cut; false when the proxy closes first.
func (p *proxy) pass() bool {
	if p.gate == nil {
		return true
	}
	return p.gate.wait(p.done)
}

// Link is a set of TCP proxies, one per member, through which a client
// reaches the cluster (see Cluster.FlakyClient and Cluster.NewLink). Cut
// makes the link behave like a network partition between that client and
// every member; Restore ends the partition. Hold is a Cut after which the
// held requests are served although the client gave up on them (a
// delay-then-deliver fault). A Link is safe for concurrent use.
type Link struct {
	c       *Cluster
	gate    *gate
	proxies []*proxy
	once    sync.Once
}

// Endpoints returns the link's endpoints, one per member in the order of
// Cluster.Members, as "http://127.0.0.1:port" ("https://..." under WithTLS:
// the link forwards TCP and the TLS session is between the client and the
// member). A client built on them (with
// AutoSyncInterval 0, or it would learn the members' direct endpoints)
// reaches the cluster only through the link.
func (l *Link) Endpoints() []string {
	eps := make([]string, len(l.proxies))
	for i, p := range l.proxies {
		eps[i] = l.c.scheme() + "://" + p.addr()
	}
	return eps
}

// Cut silently drops the link's traffic, as in a network partition: open
// connections stay open but no byte moves in either direction (nor does a
// close), and new connections are accepted but nothing flows on them. Bytes
// already being written when Cut is called may still arrive. Nothing is lost:
// what was held back flows on Restore, as TCP retransmission would deliver
// it, unless an end gave up on the connection meanwhile (a client notices a
// cut within its keepalive time and timeout). Cut of a cut link does nothing.
func (l *Link) Cut() { l.gate.close() }

// Hold is Cut for a delay-then-deliver fault: the link holds the client's
// bytes as Cut does, and on Restore delivers them to the member even if the
// client gave up on its requests meanwhile: the resets of the HTTP/2
// streams the client began during the hold are dropped, also when the client
// writes them after Restore, and so are its GOAWAY frames from then on
// (under WithTLS, which the link cannot read, they pass), and a connection
// the client closed (or that died with its process) stays open towards the
// member for 2 s after the held bytes, then closes. So a request of unknown
// outcome to the client is served late, after the client moved on, as when
// a slow network or an overloaded member delivers it late. What the member
// answers the closed connection is discarded. Hold of a cut link makes the
// current cut a hold; Restore ends it.
func (l *Link) Hold() { l.gate.closeLate() }

// Restore resumes forwarding after Cut or Hold. Restore of a link that is not cut
// does nothing.
func (l *Link) Restore() { l.gate.reopen() }

// IsCut reports whether the link is cut.
func (l *Link) IsCut() bool { return l.gate.isCut() }

// Close closes the link's proxies and every connection through them. It is
// called by Cluster.Close, and for a FlakyClient link also when its client
// is closed. It is idempotent and always returns nil.
func (l *Link) Close() error {
	l.once.Do(func() {
		for _, p := range l.proxies {
			p.close()
		}
		l.c.forgetLink(l)
	})
	return nil
}
