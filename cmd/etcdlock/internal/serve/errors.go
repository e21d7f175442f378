package serve

// This file holds the server's errors: one JSON shape, a code per cause
// and the HTTP status that goes with it.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/etcdlock/etcdlock"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The error codes of the API, each with its HTTP status.
const (
	codeInvalidName      = "invalid_name"
	codeInvalidArgument  = "invalid_argument"
	codeKindMismatch     = "kind_mismatch"
	codeLocked           = "locked"
	codeTimeout          = "timeout"
	codeNotHeld          = "not_held"
	codeSessionExpired   = "session_expired"
	codeUnavailable      = "unavailable"
	codePermissionDenied = "permission_denied"
	codeNotFound         = "not_found"
	codeMethod           = "method_not_allowed"
	codeCrossSite        = "forbidden_origin"
	codeTooMany          = "too_many"
	codeUnauthenticated  = "unauthenticated"
)

var statusOf = map[string]int{
	codeInvalidName:      http.StatusBadRequest,
	codeInvalidArgument:  http.StatusBadRequest,
	codeKindMismatch:     http.StatusConflict,
	codeLocked:           http.StatusConflict,
	codeTimeout:          http.StatusRequestTimeout,
	codeNotHeld:          http.StatusConflict,
	codeSessionExpired:   http.StatusNotFound,
	codeUnavailable:      http.StatusServiceUnavailable,
	codePermissionDenied: http.StatusForbidden,
	codeNotFound:         http.StatusNotFound,
	codeMethod:           http.StatusMethodNotAllowed,
	codeCrossSite:        http.StatusForbidden,
	codeTooMany:          http.StatusTooManyRequests,
	codeUnauthenticated:  http.StatusUnauthorized,
}

// apiError is an error with its code, as the API answers it.
type apiError struct {
	code   string
	msg    string
	status int // 0: statusOf[code]
}

func (e *apiError) Error() string { return e.msg }

func errorf(code, format string, args ...any) *apiError {
	return &apiError{code: code, msg: fmt.Sprintf(format, args...)}
}

// errWaitOver is the cause of a wait that ran out ("wait").
var errWaitOver = errors.New("the wait ran out")

// classify maps an error of the library (or of the server) to its code.
func classify(err error) *apiError {
	var ae *apiError
	msg := strings.TrimPrefix(err.Error(), "etcdlock: ")
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.Is(err, errWaitOver):
		return errorf(codeTimeout, "%s", msg)
	case errors.Is(err, etcdlock.ErrInvalidName):
		return errorf(codeInvalidName, "%s", msg)
	case errors.Is(err, etcdlock.ErrInvalidArgument), errors.Is(err, etcdlock.ErrWouldDeadlock):
		return errorf(codeInvalidArgument, "%s", msg)
	case errors.Is(err, etcdlock.ErrKindMismatch):
		return errorf(codeKindMismatch, "%s", msg)
	case errors.Is(err, etcdlock.ErrLocked):
		return errorf(codeLocked, "%s", msg)
	case errors.Is(err, etcdlock.ErrNotHeld), errors.Is(err, etcdlock.ErrLockLost):
		return errorf(codeNotHeld, "%s", msg)
	case errors.Is(err, etcdlock.ErrSessionExpired), errors.Is(err, etcdlock.ErrSessionClosed):
		return errorf(codeSessionExpired, "%s", msg)
	case errors.Is(err, rpctypes.ErrPermissionDenied), status.Code(errors.Unwrap(err)) == codes.PermissionDenied,
		strings.Contains(msg, "permission denied"):
		return errorf(codePermissionDenied, "%s", msg)
	}
	return errorf(codeUnavailable, "%s", msg)
}

// writeError answers err as JSON with its code's status, and counts it.
func (srv *Server) writeError(w http.ResponseWriter, err error) {
	ae := classify(err)
	if srv.users != nil && ae.code == codeUnavailable && refusedLogin(err, ae.msg) {
		// The caller's client logged in once, but etcd no longer takes its
		// password (changed, or the user deleted): as a wrong one, 401.
		ae = errorf(codeUnauthenticated, "etcd refused the user name or password: %s", ae.msg)
	}
	srv.metrics.errors.WithLabelValues(ae.code).Inc()
	switch ae.code {
	case codeTooMany:
		w.Header().Set("Retry-After", retryAfter)
	case codeUnauthenticated:
		w.Header().Set("WWW-Authenticate", `Basic realm="etcdlock", charset="UTF-8"`)
	}
	status := ae.status
	if status == 0 {
		status = statusOf[ae.code]
	}
	writeJSON(w, status, map[string]string{"error": ae.msg, "code": ae.code})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// duration parses an optional duration field: zero when empty.
func duration(field, s string, min, max time.Duration) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, errorf(codeInvalidArgument, "%s: %v", field, err)
	}
	if d < min || d > max {
		return 0, errorf(codeInvalidArgument, "%s %v must be between %v and %v", field, d, min, max)
	}
	return d, nil
}

// waitCtx bounds ctx by a positive wait (the cause errWaitOver).
func waitCtx(ctx context.Context, wait time.Duration) (context.Context, context.CancelFunc) {
	if wait <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeoutCause(ctx, wait, errWaitOver)
}

// refusedLogin reports whether err (msg, its text) is etcd refusing a
// client's login: its token's refresh, with a password etcd no longer
// takes.
func refusedLogin(err error, msg string) bool {
	return errors.Is(err, rpctypes.ErrAuthFailed) || errors.Is(err, rpctypes.ErrGRPCAuthFailed) ||
		strings.Contains(msg, rpctypes.ErrAuthFailed.Error())
}
