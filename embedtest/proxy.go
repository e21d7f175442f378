package embedtest

import (
	"errors"
	"net"
	"sync"
	"time"
)

// gate is a valve shared by the proxies of one Link. While it is cut the
// proxies keep every connection open but move no bytes, as in a network
// partition. The zero value is not usable; see newGate.
type gate struct {
	mu   sync.Mutex
	cut  bool
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

func (g *gate) reopen() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cut {
		g.cut = false
		close(g.open)
	}
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
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		p.pipe(up, down)
	}()
	p.pipe(down, up)
}

// pipe copies src to dst until either fails, then closes both. While the
// gate is cut it neither forwards bytes nor passes on a close.
func (p *proxy) pipe(src, dst net.Conn) {
	defer p.untrack(src, dst)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.pass() {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
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

// Link is a set of TCP proxies, one per member, through which a client
// reaches the cluster (see Cluster.FlakyClient and Cluster.NewLink). Cut
// makes the link behave like a network partition between that client and
// every member; Restore ends the partition. A Link is safe for concurrent
// use.
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

// Restore resumes forwarding after Cut. Restore of a link that is not cut
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
