package serve

// This file holds who a request acts as. Without Config.ClientAuth every
// request acts through the server's own client, and a client is its remote
// address (limits.go). With it, every request names an etcd user with HTTP
// Basic credentials and acts through that user's client only (users.go):
// its sessions, shared leases, reads and bounds are that user's, and what
// one user (with one password) opened no other may use.

import (
	"context"
	"net/http"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// principal is who a request acts as.
type principal struct {
	user string           // the etcd user; "" without client-auth
	cred string           // credKey of its user and password; "" without client-auth
	cli  *clientv3.Client // the client every request of it goes through
	// keep takes one more use of cli, for what outlives the request (a
	// session, a shared lease); the returned func ends it. Without
	// client-auth both do nothing.
	keep func() (release func())
}

type principalKey struct{}

// authenticate returns who r acts as, and the end of the request's use of
// its client. With client-auth it fails with unauthenticated (401) when r
// carries no Basic credentials or etcd refuses them.
func (srv *Server) authenticate(r *http.Request) (*principal, func(), error) {
	if srv.users == nil {
		return &principal{cli: srv.cli, keep: func() func() { return func() {} }}, func() {}, nil
	}
	user, password, ok := r.BasicAuth()
	if !ok || user == "" || password == "" {
		// An empty password is none: clientv3 logs in only with both, so
		// its client would send no token, and etcd would take its requests
		// as the TLS identity serve dials with.
		return nil, nil, errorf(codeUnauthenticated, "this server takes requests as etcd users: send the user's name and password with HTTP Basic authentication")
	}
	cli, done, err := srv.users.use(r.Context(), user, password)
	if err != nil {
		return nil, nil, err
	}
	p := &principal{user: user, cred: credKey(user, password), cli: cli, keep: func() func() {
		_, release, _ := srv.users.use(context.Background(), user, password) // cached and in use: cannot fail
		if release == nil {
			return func() {}
		}
		return release
	}}
	return p, done, nil
}

// principalOf returns who r acts as (ServeHTTP put it in r's context).
func principalOf(r *http.Request) *principal {
	return r.Context().Value(principalKey{}).(*principal)
}

// withPrincipal returns r acting as p.
func withPrincipal(r *http.Request, p *principal) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), principalKey{}, p))
}
