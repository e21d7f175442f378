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

// refuse closes c with a reset, as a host refuses a port nobody listens on
// (the client reads "connection reset", not an orderly end of stream, which
// a client takes for a server that closed the connection on purpose).
func refuse(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

func (p *proxy) accept(down net.Conn) {
	p.mu.Lock()
	if p.closed || p.target == "" {
		p.mu.Unlock()
		refuse(down)
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

// pass waits while the gate is cut; false when the proxy closes first.
func (p *proxy) pass() bool {
	if p.gate == nil {
		return true
	}
	return p.gate.wait(p.done)
}
