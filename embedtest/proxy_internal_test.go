package embedtest

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
)

// echoServer echoes every connection until closed; it records the
// server-side connections so a test can close them.
type echoServer struct {
	ln    net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns []net.Conn
}

func newEchoServer(t *testing.T) *echoServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &echoServer{ln: ln}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				_, _ = io.Copy(c, c)
				_ = c.Close()
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		s.closeConns()
		s.wg.Wait()
	})
	return s
}

func (s *echoServer) closeConns() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		_ = c.Close()
	}
	s.conns = nil
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func send(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
}

// expect reads exactly want from c, waiting up to 10 s.
func expect(t *testing.T, c net.Conn, want string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, len(want))
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatalf("read %q: %v", want, err)
	}
	if string(buf) != want {
		t.Fatalf("read %q, want %q", buf, want)
	}
}

// expectSilence checks that nothing (neither bytes nor a close) arrives on c
// for a while.
func expectSilence(t *testing.T, c net.Conn) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	buf := make([]byte, 1)
	n, err := c.Read(buf)
	var ne net.Error
	if n != 0 || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read %d bytes, %v: want silence", n, err)
	}
}

// expectClosed checks that c is closed by the other end within 10 s.
func expectClosed(t *testing.T, c net.Conn) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 1)
	n, err := c.Read(buf)
	var ne net.Error
	if n != 0 || err == nil || (errors.As(err, &ne) && ne.Timeout()) {
		t.Fatalf("read %d bytes, %v: want the connection closed", n, err)
	}
}

func TestProxyGate(t *testing.T) {
	srv := newEchoServer(t)
	g := newGate()
	p, err := newProxy(srv.ln.Addr().String(), g)
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()

	c1 := dial(t, p.addr())
	send(t, c1, "a")
	expect(t, c1, "a")

	g.close()
	send(t, c1, "b")
	expectSilence(t, c1)
	c2 := dial(t, p.addr()) // accepted while cut, but nothing flows
	send(t, c2, "c")
	expectSilence(t, c2)

	g.reopen()
	expect(t, c1, "b")
	expect(t, c2, "c")

	// A close is held back while cut, like any other traffic.
	g.close()
	srv.closeConns()
	expectSilence(t, c1)
	g.reopen()
	expectClosed(t, c1)
	expectClosed(t, c2)

	// Closing the proxy closes its connections, even while cut.
	c3 := dial(t, p.addr())
	send(t, c3, "d")
	expect(t, c3, "d")
	g.close()
	p.close()
	expectClosed(t, c3)
}

func TestProxyTarget(t *testing.T) {
	srv := newEchoServer(t)
	p, err := newProxy("", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()

	// No target: connections are refused.
	expectRefused(t, p.addr())

	p.setTarget(srv.ln.Addr().String())
	c := dial(t, p.addr())
	send(t, c, "x")
	expect(t, c, "x")

	// Changing the target (here: to none, as Kill does) closes connections.
	p.setTarget("")
	expectClosed(t, c)
	expectRefused(t, p.addr())

	p.close()
	p.close() // idempotent
	if c, err := net.DialTimeout("tcp", p.addr(), time.Second); err == nil {
		_ = c.Close()
		t.Fatal("a closed proxy still accepts connections")
	}
}

// expectRefused checks that a connection to addr is refused: accepted and
// reset at once (the reset may even beat the dial's return).
func expectRefused(t *testing.T, addr string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		if !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("dial %s: %v, want a reset", addr, err)
		}
		return
	}
	defer c.Close()
	expectClosed(t, c)
}

func TestCallCounter(t *testing.T) {
	cc := newCallCounter()
	cc.arrived.add("/a")
	cc.arrived.add("/a")
	cc.arrived.add("/b")
	if got := cc.arrived.get("/a"); got != 2 {
		t.Errorf(`get("/a") = %d, want 2`, got)
	}
	if got := cc.arrived.get(""); got != 3 {
		t.Errorf(`get("") = %d, want 3`, got)
	}
	if got := cc.arrived.get("/c"); got != 0 {
		t.Errorf(`get("/c") = %d, want 0`, got)
	}
}

// TestCallCounterAnswered: a unary call counts as arrived when its handler
// starts and as answered only once the handler returned.
func TestCallCounterAnswered(t *testing.T) {
	cc := newCallCounter()
	info := &grpc.UnaryServerInfo{FullMethod: "/etcdserverpb.KV/Txn"}
	started, release, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		_, err := cc.unary(context.Background(), nil, info, func(context.Context, any) (any, error) {
			close(started)
			<-release
			return nil, errors.New("refused")
		})
		done <- err
	}()
	<-started
	if a, n := cc.arrived.get(info.FullMethod), cc.answered.get(info.FullMethod); a != 1 || n != 0 {
		t.Errorf("while the handler runs: arrived %d, answered %d; want 1, 0", a, n)
	}
	close(release)
	if err := <-done; err == nil {
		t.Error("the handler's error was lost")
	}
	if n := cc.answered.get(info.FullMethod); n != 1 {
		t.Errorf("after the handler returned: answered %d, want 1", n)
	}
}

// TestH2Filter: of held bytes, the filter drops RST_STREAM and GOAWAY frames
// whole, also split across reads, and keeps the rest; bytes not held and
// connections that are not plain-text HTTP/2 pass unchanged.
func TestH2Filter(t *testing.T) {
	frame := func(typ byte, payload string) string {
		n := len(payload)
		return string([]byte{byte(n >> 16), byte(n >> 8), byte(n), typ, 0, 0, 0, 0, 1}) + payload
	}
	headers, data := frame(0x1, "hdrs"), frame(0x0, "payload")
	rst, goaway := frame(h2RSTStream, "\x00\x00\x00\x08"), frame(h2GoAway, "12345678")
	stream := h2Preface + headers + rst + data + goaway + data
	for _, tc := range []struct {
		name string
		late bool
		in   string
		want string
	}{
		{"held", true, stream, h2Preface + headers + data + data},
		{"not held", false, stream, stream},
		{"tls", true, "\x16\x03\x01" + rst, "\x16\x03\x01" + rst},
	} {
		for split := 1; split <= len(tc.in); split++ {
			var f h2filter
			var got []byte
			for i := 0; i < len(tc.in); i += split {
				got = append(got, f.filter([]byte(tc.in[i:min(i+split, len(tc.in))]), tc.late)...)
			}
			if string(got) != tc.want {
				t.Fatalf("%s, reads of %d: got %q, want %q", tc.name, split, got, tc.want)
			}
		}
	}
}

// TestH2FilterLateReset: a client that gave up during a Hold may write its
// reset after Restore; the reset of a stream whose HEADERS were held is
// dropped whenever it comes, and so is a GOAWAY, while the resets of other
// streams pass.
func TestH2FilterLateReset(t *testing.T) {
	frame := func(typ byte, stream byte, payload string) string {
		n := len(payload)
		return string([]byte{byte(n >> 16), byte(n >> 8), byte(n), typ, 0, 0, 0, 0, stream}) + payload
	}
	early := frame(h2Headers, 1, "hdrs") + frame(h2RSTStream, 1, "\x00\x00\x00\x08")
	held := frame(h2Headers, 3, "hdrs") + frame(0x0, 3, "payload")
	after := frame(h2RSTStream, 3, "\x00\x00\x00\x08") + frame(h2RSTStream, 5, "\x00\x00\x00\x08") +
		frame(h2GoAway, 0, "12345678")
	var f h2filter
	got := f.filter([]byte(h2Preface+early), false)
	got = append(got, f.filter([]byte(held), true)...)
	got = append(got, f.filter([]byte(after), false)...)
	want := h2Preface + early + held + frame(h2RSTStream, 5, "\x00\x00\x00\x08")
	if string(got) != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}
