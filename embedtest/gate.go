package embedtest

import "sync"

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
