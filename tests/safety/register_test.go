package safety

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/etcdlock/etcdlock"
)

// Mode says how a Register checks the fencing tokens of reads and writes.
type Mode int

const (
	// Fenced admits a read or a write only if its token is at least the
	// highest token admitted so far (etcdlock.Fence.Admit), so the first read
	// of a new holder shuts out every older holder.
	Fenced Mode = iota
	// FenceWritesOnly is deliberately broken: writes go through the Fence,
	// but reads are not checked and do not raise the highest token, so an
	// older holder can still write between the next holder's read and its
	// write.
	FenceWritesOnly
	// Unfenced is deliberately broken: nothing is checked.
	Unfenced
)

// String returns the mode's name as used in test names.
func (m Mode) String() string {
	switch m {
	case Fenced:
		return "fenced"
	case FenceWritesOnly:
		return "fence-writes-only"
	case Unfenced:
		return "unfenced"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Admission is one request a resource answered, in the order it answered
// them: a read or a write, with its token and whether it was admitted.
type Admission struct {
	// Seq orders the admissions. For a Register it counts requests from 1;
	// for state kept in etcd it is the revision that applied the write.
	Seq int64
	// At is when the resource decided, on the clock the History uses; 0 if
	// not known.
	At       int64
	Write    bool           // a write; else a read
	Shared   bool           // a read under a shared grant (SharedHeader), admitted by Fence.AdmitShared
	Token    etcdlock.Token // the token the request carried
	Admitted bool           // whether the resource let it through
	// Prev is the value before the request.
	Prev int64
	// Value is what a read returned or what a write wrote.
	Value int64
}

// SharedHeader, set to "1" on a GET, marks a read under a shared grant (an
// RWMutex reader): a Fenced register admits it with Fence.AdmitShared
// instead of Fence.Admit.
const SharedHeader = "Fencing-Shared"

// Register is the resource of the register workloads: one integer served
// over HTTP, whose reads and writes carry a fencing token in the
// etcdlock.TokenHeader header. GET returns the value (200) and PUT sets it
// to the decimal body (204); a request whose token is refused gets 409
// Conflict and changes nothing, a missing or malformed token 400. Every
// request is logged as an Admission. A Register is safe for concurrent use.
type Register struct {
	mode  Mode
	clock func() int64

	mu    sync.Mutex
	fence etcdlock.Fence
	value int64
	log   []Admission
}

// NewRegister returns a register holding 0 that checks tokens as mode says.
// clock stamps each Admission (nil: time.Now().UnixNano()).
func NewRegister(mode Mode, clock func() int64) *Register {
	if clock == nil {
		clock = func() int64 { return time.Now().UnixNano() }
	}
	return &Register{mode: mode, clock: clock}
}

// Mode returns how the register checks tokens.
func (r *Register) Mode() Mode { return r.mode }

// Value returns the current value.
func (r *Register) Value() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.value
}

// Admissions returns a copy of the log of every request answered so far.
func (r *Register) Admissions() []Admission {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Admission(nil), r.log...)
}

// ServeHTTP implements the register's HTTP protocol (see Register).
func (r *Register) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	tok, err := etcdlock.ParseToken(req.Header.Get(etcdlock.TokenHeader))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	switch req.Method {
	case http.MethodGet:
		v, ok := r.read(tok, req.Header.Get(SharedHeader) == "1")
		if !ok {
			http.Error(w, "stale token", http.StatusConflict)
			return
		}
		_, _ = io.WriteString(w, strconv.FormatInt(v, 10))
	case http.MethodPut:
		body, err := io.ReadAll(io.LimitReader(req.Body, 64))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		v, err := strconv.ParseInt(strings.TrimSpace(string(body)), 10, 64)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if !r.write(tok, v) {
			http.Error(w, "stale token", http.StatusConflict)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	default:
		http.Error(w, "GET or PUT", http.StatusMethodNotAllowed)
	}
}

func (r *Register) read(tok etcdlock.Token, shared bool) (int64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ok := true
	switch {
	case r.mode == Fenced && shared:
		ok = r.fence.AdmitShared(tok) == nil
	case r.mode == Fenced:
		ok = r.fence.Admit(tok) == nil
	}
	r.record(Admission{Token: tok, Shared: shared, Admitted: ok, Prev: r.value, Value: r.value})
	return r.value, ok
}

func (r *Register) write(tok etcdlock.Token, v int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	ok := true
	if r.mode != Unfenced {
		ok = r.fence.Admit(tok) == nil
	}
	r.record(Admission{Write: true, Token: tok, Admitted: ok, Prev: r.value, Value: v})
	if ok {
		r.value = v
	}
	return ok
}

// record appends a to the log; the caller holds r.mu.
func (r *Register) record(a Admission) {
	a.Seq = int64(len(r.log) + 1)
	a.At = r.clock()
	r.log = append(r.log, a)
}
