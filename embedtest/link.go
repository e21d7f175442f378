package embedtest

import (
	"fmt"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"
)

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

// NewLink returns a new Link: one TCP proxy per member in front of the
// member's client endpoint. Build a client on Link.Endpoints to control its
// network with Link.Cut and Link.Restore. The link lives until Link.Close or
// Cluster.Close.
func (c *Cluster) NewLink() (*Link, error) {
	l := &Link{c: c, gate: newGate()}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	for _, m := range c.members {
		p, err := newProxy(m.clientProxy.addr(), l.gate)
		if err != nil {
			for _, q := range l.proxies {
				q.close()
			}
			return nil, fmt.Errorf("embedtest: link: %w", err)
		}
		l.proxies = append(l.proxies, p)
	}
	c.links[l] = struct{}{}
	return l, nil
}

func (c *Cluster) forgetLink(l *Link) {
	c.mu.Lock()
	delete(c.links, l)
	c.mu.Unlock()
}

// FlakyClient returns a new client (configured as by ClientConfig) whose
// every connection to the cluster goes through a new Link, and that Link.
// The link's proxies forward TCP, so TLS (WithTLS) passes through them end
// to end.
// The caller closes the client; closing it also closes the link, and so does
// Cluster.Close.
func (c *Cluster) FlakyClient() (*clientv3.Client, *Link, error) {
	l, err := c.NewLink()
	if err != nil {
		return nil, nil, err
	}
	cli, err := clientv3.New(c.ownClientConfig(l.Endpoints()))
	if err != nil {
		_ = l.Close()
		return nil, nil, fmt.Errorf("embedtest: flaky client: %w", err)
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		_ = cli.Close()
		_ = l.Close()
		return nil, nil, ErrClosed
	}
	c.wg.Add(1)
	c.mu.Unlock()
	go func() {
		defer c.wg.Done()
		select {
		case <-cli.Ctx().Done():
		case <-c.done:
		}
		_ = l.Close()
	}()
	return cli, l, nil
}
