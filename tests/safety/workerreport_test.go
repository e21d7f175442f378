//go:build linux

package safety

// This file holds what a worker tells the harness beyond its operations: the
// loss of each of its sessions, from the sessions' Observer (which also sees
// the replacement sessions that Election.Run opens and closes on its own),
// the library's log on its stderr, and, when the harness asks (STATUS), where
// its main goroutine is blocked.

import (
	"bytes"
	"os"
	"regexp"
	"runtime"
	"strings"

	"github.com/etcdlock/etcdlock"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// reporter is the Observer of every session of a worker.
type reporter struct {
	etcdlock.NopObserver
	w *worker
}

// SessionEnded says SESSION_LOST for a session that was lost, not closed.
func (r reporter) SessionEnded(ev etcdlock.SessionEvent) {
	if ev.Reason != etcdlock.ReasonClosed {
		r.w.say("SESSION_LOST %x %s", int64(ev.Lease), ev.Reason)
	}
}

// workerLogger logs the library's Info lines and above (lost sessions,
// Run's replacement sessions and failed campaigns) to the worker's stderr,
// which the harness shows in a stall report.
func workerLogger() *zap.Logger {
	enc := zap.NewDevelopmentEncoderConfig()
	enc.EncodeTime = zapcore.TimeEncoderOfLayout("15:04:05.000")
	core := zapcore.NewCore(zapcore.NewConsoleEncoder(enc), zapcore.Lock(os.Stderr), zapcore.InfoLevel)
	return zap.New(core)
}

// sayStatus answers the harness's STATUS: "STATUS <t> <state> <frames>", the
// state of the worker's main goroutine (runWorker's) and its frames in the
// library and etcd's client, innermost first.
func (w *worker) sayStatus() {
	w.say("STATUS %d %s", monoNow(), mainStack())
}

var (
	goroutineHeader = regexp.MustCompile(`^goroutine 1 \[([^\]]*)\]`)
	frameArgs       = regexp.MustCompile(`\(.*\)$`)
)

// mainStack summarizes goroutine 1's stack on one line: its wait state,
// then its frames in etcdlock and clientv3 (the rest is the worker's own
// loop and the runtime), joined by " < ".
func mainStack() string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		lines := strings.Split(string(g), "\n")
		m := goroutineHeader.FindStringSubmatch(lines[0])
		if m == nil {
			continue
		}
		frames := []string{"[" + strings.ReplaceAll(m[1], " ", "") + "]"}
		for i := 1; i < len(lines); i += 2 {
			f := frameArgs.ReplaceAllString(lines[i], "")
			if strings.Contains(f, "etcdlock/etcdlock.") || strings.Contains(f, "client/v3.") {
				frames = append(frames, f[strings.LastIndexByte(f, '/')+1:])
			}
		}
		return strings.Join(frames, " < ")
	}
	return "[unknown]"
}
