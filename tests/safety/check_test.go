package safety

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/anishathalye/porcupine"
	"github.com/etcdlock/etcdlock"
)

const testDir = "etcdlock/t%/m/"

// script builds small histories by hand: keys are created and deleted at
// given revisions, grants reported, increments done.
type script struct {
	h   History
	now int64
}

func newScript() *script { return &script{h: History{QueueDir: testDir}, now: 100} }

// keyNames maps a create revision to its key's name; by default every key
// has a name of its own, reuse makes a later key reuse an earlier name.
var keyNames = map[int64]string{}

func key(rev int64) string {
	if k, ok := keyNames[rev]; ok {
		return k
	}
	return testDir + "1-" + strconv.FormatInt(rev, 16)
}

func (s *script) create(rev, lease int64) {
	s.h.Queue = append(s.h.Queue, QueueEvent{Revision: rev, Key: key(rev), CreateRevision: rev, Lease: lease, Arrived: s.tick()})
}

// cancel records a canceled Lock of lease from now to end.
func (s *script) cancel(client int, lease, end int64) {
	s.h.Cancels = append(s.h.Cancels, Cancel{Client: client, Lease: lease, Start: s.tick(), End: end})
}

func (s *script) del(rev, created int64) {
	s.h.Queue = append(s.h.Queue, QueueEvent{Revision: rev, Delete: true, Key: key(created)})
}

func (s *script) tick() int64 { s.now += 10; return s.now }

// grant reports token as granted now, with a probe right after at rev.
func (s *script) grant(client int, token, probeRev int64) {
	at := s.tick()
	s.h.Grants = append(s.h.Grants, Grant{Client: client, Token: etcdlock.Token(token), Key: key(token), At: at})
	s.h.Probes = append(s.h.Probes, Probe{At: at + 1, Revision: probeRev})
}

// admit logs an admission at the resource now.
func (s *script) admit(write bool, token, prev, value int64, ok bool) {
	s.h.Admissions = append(s.h.Admissions, Admission{Seq: int64(len(s.h.Admissions) + 1), At: s.tick(),
		Write: write, Token: etcdlock.Token(token), Admitted: ok, Prev: prev, Value: value})
}

// incr does a whole increment from v with token, admitted as ok says.
func (s *script) incr(client int, token, v int64, out Outcome) {
	rc := s.tick()
	s.admit(false, token, v, v, true)
	rr := s.tick()
	wc := s.tick()
	if out != NotSent {
		s.admit(true, token, v, v+1, out == Acked)
	}
	wr := s.tick()
	s.h.Ops = append(s.h.Ops, Op{Client: client, Token: etcdlock.Token(token), ReadCall: rc, ReadReturn: rr,
		Value: v, WriteCall: wc, WriteReturn: wr, Outcome: out})
}

func (s *script) finish(final int64) *History {
	s.h.Final = final
	s.h.FinalAt = s.tick()
	return &s.h
}

// good is a correct run: three holders in turn, the second enqueued while
// the first held.
func good() *script {
	s := newScript()
	s.create(10, 1)
	s.grant(0, 10, 10)
	s.create(11, 2) // waits behind 10
	s.incr(0, 10, 0, Acked)
	s.incr(0, 10, 1, Acked)
	s.del(12, 10)
	s.grant(1, 11, 12)
	s.incr(1, 11, 2, Acked)
	s.del(13, 11)
	s.create(14, 1) // lease 1 again: its first key was granted
	s.grant(0, 14, 14)
	s.incr(0, 14, 3, Acked)
	s.del(15, 14)
	return s
}

func mustPass(t *testing.T, h *History) {
	t.Helper()
	if r := Check(h, Options{}); !r.OK() {
		t.Fatalf("a correct history failed: %s", r)
	}
}

func mustFail(t *testing.T, h *History, want ...Checker) *Report {
	t.Helper()
	r := Check(h, Options{})
	for _, c := range want {
		if !r.Failed(c) {
			t.Errorf("checker %s passed; report: %s", c, r)
		}
	}
	return r
}

func TestCheckGoodHistory(t *testing.T) {
	mustPass(t, good().finish(4))
}

// TestCheckReusedKeyNames: a session reuses its key name once the previous
// key of that name is gone; keys are told apart by their create revision.
func TestCheckReusedKeyNames(t *testing.T) {
	keyNames[14] = key(10) // lease 1 reuses its first key's name
	defer delete(keyNames, 14)
	mustPass(t, good().finish(4))
	// Reported granted while the previous holder of 11 lived, under a
	// reused name: still caught.
	s := newScript()
	s.create(10, 1)
	s.grant(0, 10, 10)
	s.incr(0, 10, 0, Acked)
	s.del(11, 10)
	keyNames[12] = key(10)
	defer delete(keyNames, 12)
	s.create(12, 1)
	s.create(13, 2)
	s.grant(1, 13, 13) // 12 still lives
	s.del(14, 12)
	s.del(15, 13)
	mustFail(t, s.finish(1), Grants)
}

func TestCheckLostUpdate(t *testing.T) {
	// Token 10 reads 0, is paused; 11 reads 0 and writes 1; 10 wakes up
	// and writes 1 too (an unfenced resource): two increments from 0.
	s := newScript()
	s.create(10, 1)
	s.grant(0, 10, 10)
	s.create(11, 2)
	rc := s.tick()
	s.admit(false, 10, 0, 0, true)
	rr := s.tick()
	s.del(12, 10) // lease of 10 expired
	s.grant(1, 11, 12)
	s.incr(1, 11, 0, Acked)
	wc := s.tick()
	s.admit(true, 10, 1, 1, true)
	s.h.Ops = append(s.h.Ops, Op{Client: 0, Token: 10, ReadCall: rc, ReadReturn: rr, Value: 0,
		WriteCall: wc, WriteReturn: s.tick(), Outcome: Acked})
	s.del(13, 11)
	h := s.finish(1)
	dir := t.TempDir()
	r := Check(h, Options{VisualizationPath: filepath.Join(dir, "viz.html")})
	if r.Linearizability != porcupine.Illegal {
		t.Fatalf("linearizability %s, want Illegal", r.Linearizability)
	}
	for _, c := range []Checker{Increments, Tokens} {
		if !r.Failed(c) {
			t.Errorf("checker %s passed: %s", c, r)
		}
	}
	if fi, err := os.Stat(r.Visualization); err != nil || fi.Size() == 0 {
		t.Fatalf("visualization %q: %v", r.Visualization, err)
	}
	if !strings.Contains(r.String(), "lost") {
		t.Fatalf("report does not say what was lost: %s", r)
	}
}

func TestCheckUnknownOutcome(t *testing.T) {
	for _, final := range []int64{4, 5} { // the unknown write may or may not have been applied
		s := good()
		s.create(16, 2)
		s.grant(1, 16, 16)
		s.incr(1, 16, 4, Unknown)
		s.del(17, 16)
		h := s.finish(final)
		h.Admissions = h.Admissions[:len(h.Admissions)-1]
		if final == 5 {
			h.Admissions = append(h.Admissions, Admission{Seq: 99, Write: true, Token: 16, Admitted: true, Prev: 4, Value: 5})
		}
		mustPass(t, h)
	}
	s := good()
	mustFail(t, s.finish(6), Linearizability, Increments)
}

func TestCheckRejectedWriteIsARead(t *testing.T) {
	s := good()
	s.create(16, 2)
	s.grant(1, 16, 16)
	s.incr(1, 16, 4, Rejected)
	s.del(17, 16)
	mustPass(t, s.finish(4))
	// The same read claiming a value the counter never had at that time.
	s = good()
	s.create(16, 2)
	s.grant(1, 16, 16)
	s.incr(1, 16, 3, Rejected)
	s.del(17, 16)
	mustFail(t, s.finish(4), Linearizability)
}

func TestCheckStaleAdmission(t *testing.T) {
	s := good()
	s.admit(true, 11, 4, 5, true) // token 11 after token 14
	mustFail(t, s.finish(4), Tokens)
}

func TestCheckAdmittedTokenNeverGranted(t *testing.T) {
	s := good()
	s.admit(false, 20, 4, 4, true)
	mustFail(t, s.finish(4), Tokens)
}

func TestCheckGuardedWrites(t *testing.T) {
	s := good()
	h := s.finish(4)
	h.AdmissionsAtRevisions = true
	// Writes at revisions where their key was (11 at 12.., 14 at 14..) or
	// was not (10 at revision 12, after its deletion) the lowest live key.
	h.Admissions = []Admission{
		{Seq: 11, Write: true, Token: 10, Admitted: true, Prev: 0, Value: 1},
		{Seq: 13, Write: true, Token: 11, Admitted: true, Prev: 1, Value: 2},
	}
	if msgs := CheckTokens(h); len(msgs) != 0 {
		t.Fatalf("correct guarded writes: %v", msgs)
	}
	h.Admissions = append(h.Admissions, Admission{Seq: 14, Write: true, Token: 10, Admitted: true, Prev: 2, Value: 3})
	if msgs := CheckTokens(h); len(msgs) != 2 { // stale, and its key gone
		t.Fatalf("stale guarded write: %v", msgs)
	}
}

func TestRegisterModes(t *testing.T) {
	do := func(t *testing.T, srv *httptest.Server, method string, tok int64, body string) int {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set(etcdlock.TokenHeader, strconv.FormatInt(tok, 10))
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, tc := range []struct {
		mode             Mode
		staleRead, stale int // status of a read, then a write, with token 5 after a read with 7
	}{
		{Fenced, http.StatusConflict, http.StatusConflict},
		{FenceWritesOnly, http.StatusOK, http.StatusNoContent},
		{Unfenced, http.StatusOK, http.StatusNoContent},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			r := NewRegister(tc.mode, nil)
			srv := httptest.NewServer(r)
			defer srv.Close()
			if got := do(t, srv, http.MethodGet, 7, ""); got != http.StatusOK {
				t.Fatalf("read with 7: %d", got)
			}
			if got := do(t, srv, http.MethodGet, 5, ""); got != tc.staleRead {
				t.Fatalf("read with 5 after 7: %d, want %d", got, tc.staleRead)
			}
			if got := do(t, srv, http.MethodPut, 5, "1"); got != tc.stale {
				t.Fatalf("write with 5 after a read with 7: %d, want %d", got, tc.stale)
			}
			if got := do(t, srv, http.MethodPut, 0, "1"); got != http.StatusBadRequest {
				t.Fatalf("token 0: %d", got)
			}
			log := r.Admissions()
			if len(log) != 3 || log[0].Seq != 1 || log[2].Seq != 3 || !log[2].Write {
				t.Fatalf("log %+v", log)
			}
		})
	}
}

// TestCheckShared: readers holding at once may be admitted in any order; a
// write admitted after a shared read with a newer token is flagged (by
// Shared, not by Tokens), and so is a shared read older than an admitted
// write.
func TestCheckShared(t *testing.T) {
	shared := func(h *History, token int64) {
		h.Admissions = append(h.Admissions, Admission{Seq: int64(len(h.Admissions) + 1), Token: etcdlock.Token(token),
			Shared: true, Admitted: true})
	}
	write := func(h *History, token int64) {
		h.Admissions = append(h.Admissions, Admission{Seq: int64(len(h.Admissions) + 1), Token: etcdlock.Token(token),
			Write: true, Admitted: true})
	}
	var ok History
	write(&ok, 2)
	shared(&ok, 5)
	shared(&ok, 4) // readers 4 and 5 hold at once
	write(&ok, 7)
	if msgs := CheckShared(&ok); len(msgs) > 0 {
		t.Errorf("CheckShared flagged a good history: %v", msgs)
	}
	var stale History
	write(&stale, 2)
	shared(&stale, 5)
	write(&stale, 2) // the writer of 2 after the reader of 5
	msgs := CheckShared(&stale)
	if len(msgs) != 1 || !strings.Contains(msgs[0], "stale write admitted: token 2") {
		t.Errorf("CheckShared(stale writer) = %v, want one stale write", msgs)
	}
	var staleRead History
	write(&staleRead, 6)
	shared(&staleRead, 5)
	if msgs := CheckShared(&staleRead); len(msgs) != 1 || !strings.Contains(msgs[0], "stale shared read") {
		t.Errorf("CheckShared(stale reader) = %v, want one stale shared read", msgs)
	}
}
