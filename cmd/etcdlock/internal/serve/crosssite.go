package serve

// This file holds what keeps a web page from using the server: a page a
// browser shows can send a "simple" POST (text/plain, no preflight) to any
// address, and a page whose name re-resolves to 127.0.0.1 (DNS rebinding)
// can read the answers. A request that a page could have made is refused
// before any route runs.

import (
	"fmt"
	"mime"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
)

// crossSite returns why r must be refused, or nil:
//   - an Origin header not in Config.AllowOrigins (403 forbidden_origin);
//   - over TCP, a Host that does not name the server (403 forbidden_origin): the
//     address the client connected to, "localhost" on a loopback address,
//     the machine's host name on any other, or a name in
//     Config.AllowHosts; with the listener's port;
//   - a body whose Content-Type is not application/json (415
//     invalid_argument).
//
// A unix socket's requests skip the Host check: no page reaches one.
func (srv *Server) crossSite(r *http.Request) *apiError {
	if o := r.Header.Get("Origin"); o != "" && !slices.Contains(srv.cfg.AllowOrigins, o) {
		return errorf(codeCrossSite, "requests from origin %q are refused (allow it with --allow-origin)", o)
	}
	if local, ok := r.Context().Value(http.LocalAddrContextKey).(*net.TCPAddr); ok && !srv.names(local, r.Host) {
		return errorf(codeCrossSite, "host %q does not name this server (allow it with --allow-host)", r.Host)
	}
	if r.ContentLength != 0 {
		mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
		if err != nil || mt != "application/json" {
			return &apiError{code: codeInvalidArgument, status: http.StatusUnsupportedMediaType,
				msg: fmt.Sprintf("a request body must be application/json, not %q", r.Header.Get("Content-Type"))}
		}
	}
	return nil
}

// names reports whether host (a Host header) names the server on local,
// the address a client connected to.
func (srv *Server) names(local *net.TCPAddr, host string) bool {
	name, port, err := net.SplitHostPort(host)
	if err != nil {
		name, port = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"), "80"
	}
	if port != strconv.Itoa(local.Port) {
		return false
	}
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	if ip := net.ParseIP(name); ip != nil {
		return ip.Equal(local.IP)
	}
	switch {
	case slices.ContainsFunc(srv.cfg.AllowHosts, func(h string) bool { return strings.EqualFold(h, name) }):
		return true
	case local.IP.IsLoopback():
		return name == "localhost"
	}
	self, err := os.Hostname()
	return err == nil && strings.EqualFold(self, name)
}
