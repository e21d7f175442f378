package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const defaultEndpoint = "127.0.0.1:2379"

// connFlags are the connection flags every subcommand shares, as etcdctl
// names them.
type connFlags struct {
	endpoints          string
	cacert, cert, key  string
	insecureSkipVerify bool
	user               string
	userFromEnv        bool // user came from $ETCDCTL_USER, where "user:password" is allowed
	passwordFile       string
	dialTimeout        time.Duration
	commandTimeout     time.Duration
	debug              bool
}

// envOf maps each flag that has one to its etcdctl environment variable.
var envOf = map[string]string{
	"endpoints":                "ETCDCTL_ENDPOINTS",
	"cacert":                   "ETCDCTL_CACERT",
	"cert":                     "ETCDCTL_CERT",
	"key":                      "ETCDCTL_KEY",
	"insecure-skip-tls-verify": "ETCDCTL_INSECURE_SKIP_TLS_VERIFY",
	"user":                     "ETCDCTL_USER",
	"dial-timeout":             "ETCDCTL_DIAL_TIMEOUT",
	"command-timeout":          "ETCDCTL_COMMAND_TIMEOUT",
}

func (c *connFlags) register(root *cobra.Command) {
	f := root.PersistentFlags()
	f.StringVar(&c.endpoints, "endpoints", defaultEndpoint, "comma-separated etcd endpoints ($ETCDCTL_ENDPOINTS)")
	f.StringVar(&c.cacert, "cacert", "", "verify the servers' certificates with this CA bundle ($ETCDCTL_CACERT)")
	f.StringVar(&c.cert, "cert", "", "client TLS certificate file ($ETCDCTL_CERT)")
	f.StringVar(&c.key, "key", "", "client TLS key file ($ETCDCTL_KEY)")
	f.BoolVar(&c.insecureSkipVerify, "insecure-skip-tls-verify", false, "do not verify the servers' certificates ($ETCDCTL_INSECURE_SKIP_TLS_VERIFY)")
	f.StringVar(&c.user, "user", "", "etcd user name, without the password ($ETCDCTL_USER)")
	f.StringVar(&c.passwordFile, "password-file", "", "read the password from this file (else $ETCDCTL_PASSWORD, else one line of stdin)")
	f.DurationVar(&c.dialTimeout, "dial-timeout", 5*time.Second, "give up reaching etcd after this long ($ETCDCTL_DIAL_TIMEOUT)")
	f.DurationVar(&c.commandTimeout, "command-timeout", 5*time.Second, "bound of each request of status, ls and break ($ETCDCTL_COMMAND_TIMEOUT)")
	f.BoolVar(&c.debug, "debug", false, "log the etcd client's and the library's debug messages to stderr")
}

// resolve fills the flags that were not given from the environment and
// checks them.
func (c *connFlags) resolve(cmd *cobra.Command) error {
	var err error
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		env, ok := envOf[f.Name]
		if !ok || f.Changed || err != nil {
			return
		}
		v, set := os.LookupEnv(env)
		if !set || v == "" {
			return
		}
		if serr := f.Value.Set(v); serr != nil {
			err = usagef(cmd, "invalid $%s %q: %v", env, v, serr)
			return
		}
		if f.Name == "user" {
			c.userFromEnv = true
		}
	})
	switch {
	case err != nil:
		return err
	case c.dialTimeout <= 0:
		return usagef(cmd, "--dial-timeout must be positive, not %v", c.dialTimeout)
	case c.commandTimeout <= 0:
		return usagef(cmd, "--command-timeout must be positive, not %v", c.commandTimeout)
	case !c.userFromEnv && strings.Contains(c.user, ":"):
		return usagef(cmd, "--user takes only the user name: give the password with --password-file, $ETCDCTL_PASSWORD or on stdin, never on the command line")
	case (c.cert == "") != (c.key == ""):
		return usagef(cmd, "--cert and --key go together")
	}
	if _, err := c.endpointList(); err != nil {
		return usagef(cmd, "%v", err)
	}
	return nil
}

// endpointList splits --endpoints.
func (c *connFlags) endpointList() ([]string, error) {
	var eps []string
	for _, ep := range strings.Split(c.endpoints, ",") {
		if ep = strings.TrimSpace(ep); ep != "" {
			eps = append(eps, ep)
		}
	}
	if len(eps) == 0 {
		return nil, errors.New("--endpoints is empty")
	}
	return eps, nil
}

// logger returns the logger of the client and the library: debug messages
// on stderr with --debug, nothing otherwise.
func (a *app) logger() *zap.Logger {
	if !a.conn.debug {
		return zap.NewNop()
	}
	enc := zap.NewDevelopmentEncoderConfig()
	core := zapcore.NewCore(zapcore.NewConsoleEncoder(enc), zapcore.Lock(zapcore.AddSync(a.stderr)), zapcore.DebugLevel)
	return zap.New(core)
}

// connect builds a client and checks that the cluster answers within
// --dial-timeout. Its errors are exitErrors with code 1.
func (a *app) connect(ctx context.Context) (*clientv3.Client, error) {
	c := &a.conn
	eps, err := c.endpointList()
	if err != nil {
		return nil, exitf(exitUsage, "%v", err)
	}
	cfg := clientv3.Config{
		Endpoints:            eps,
		DialTimeout:          c.dialTimeout,
		DialKeepAliveTime:    2 * time.Second, // etcdctl's defaults
		DialKeepAliveTimeout: 6 * time.Second,
		Logger:               a.logger(),
	}
	cfg.TLS, err = c.tlsConfig(eps)
	if err != nil {
		return nil, exitf(exitUsage, "TLS: %v", err)
	}
	// Before the client: with a user, clientv3.New logs in and would turn
	// a TLS failure into a timeout.
	if err := preflight(ctx, eps, cfg.TLS, c.dialTimeout); err != nil {
		if cause := context.Cause(ctx); cause != nil {
			return nil, cause
		}
		return nil, c.connectError(eps, err)
	}
	if c.user != "" {
		cfg.Username, cfg.Password, err = c.credentials(a.stdin, a.stderr)
		if err != nil {
			return nil, exitf(exitUsage, "%v", err)
		}
	}
	scrubPasswordEnv()
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, c.connectError(eps, err)
	}
	if err := probe(ctx, cli, eps, c.dialTimeout); err != nil {
		_ = cli.Close()
		if cause := context.Cause(ctx); cause != nil {
			return nil, cause
		}
		return nil, c.connectError(eps, err)
	}
	return cli, nil
}

// connectError tells an etcd that cannot be reached from one that answered
// with an error (bad credentials, say).
func (c *connFlags) connectError(eps []string, err error) error {
	at := strings.Join(eps, ",")
	var answer rpctypes.EtcdError
	switch code := status.Code(err); {
	case errors.Is(err, context.DeadlineExceeded):
		return exitf(exitUsage, "cannot reach etcd at %s: no answer within %v (--dial-timeout)", at, c.dialTimeout)
	case !errors.As(err, &answer) && (code == codes.Unavailable || code == codes.Unknown):
		return exitf(exitUsage, "cannot reach etcd at %s: %s", at, errText(err))
	}
	msg := strings.TrimPrefix(errText(err), "etcdserver: ")
	if c.user == "" && strings.Contains(msg, "user name is empty") {
		msg += " (the cluster has authentication on: give --user)"
	}
	return exitf(exitUsage, "etcd at %s: %s", at, msg)
}

// http2Preface is what an HTTP/2 (gRPC) client sends first: the connection
// preface and an empty SETTINGS frame. An etcd member answers it with its
// own SETTINGS frame at once.
const http2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + "\x00\x00\x00\x04\x00\x00\x00\x00\x00"

// usesTLS tells whether the etcd client speaks TLS to ep: always for
// https:// and unixs://, never for http:// and unix://, and for an endpoint
// without a scheme when TLS is configured.
func usesTLS(ep string, tlsCfg *tls.Config) bool {
	switch {
	case strings.HasPrefix(ep, "https://"), strings.HasPrefix(ep, "unixs://"):
		return true
	case strings.Contains(ep, "://"):
		return false
	}
	return tlsCfg != nil
}

// dialCheck connects to ep as the client would and checks that the server
// answers, so that what the etcd client would only report as a timeout
// fails at once with its cause: a refused connection, an unknown host, a
// TLS handshake the client rejects (a server certificate the CA did not
// sign) or the server rejects (no or a wrong client certificate), or a
// server that speaks TLS to a plain-text client. It sends the HTTP/2
// preface and waits for the server's first frame, within ctx: a server that
// does not answer gives context.DeadlineExceeded, as Status would. Endpoints
// that are not TCP pass.
func dialCheck(ctx context.Context, ep string, tlsCfg *tls.Config) error {
	host := ep
	if strings.Contains(ep, "://") {
		u, err := url.Parse(ep)
		if err != nil {
			return err
		}
		if u.Scheme != "http" && u.Scheme != "https" {
			return nil
		}
		host = u.Host
	}
	hostname, _, err := net.SplitHostPort(host)
	if err != nil {
		return nil // let the client explain
	}
	var d net.Dialer
	raw, err := d.DialContext(ctx, "tcp", host)
	if err != nil {
		var oe *net.OpError
		if errors.As(err, &oe) && oe.Err != nil {
			return oe.Err
		}
		return err
	}
	conn := raw
	defer func() { _ = conn.Close() }()
	if dl, ok := ctx.Deadline(); ok {
		_ = raw.SetDeadline(dl)
	}
	secure := usesTLS(ep, tlsCfg)
	if secure {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if tlsCfg != nil {
			cfg = tlsCfg.Clone()
		}
		if cfg.ServerName == "" {
			cfg.ServerName = hostname
		}
		cfg.NextProtos = []string{"h2"}
		tc := tls.Client(raw, cfg)
		conn = tc
		if err := tc.HandshakeContext(ctx); err != nil {
			if isTimeout(err) {
				return context.DeadlineExceeded
			}
			return fmt.Errorf("TLS handshake: %w", err)
		}
	}
	var frame [9]byte
	_, err = io.WriteString(conn, http2Preface)
	if err == nil {
		_, err = io.ReadFull(conn, frame[:])
	}
	switch {
	case err == nil:
		return nil
	case isTimeout(err):
		return context.DeadlineExceeded // what Status would get too
	case secure:
		// With TLS 1.3 the server checks the client's certificate after
		// the client's side of the handshake is done: its refusal comes
		// as an alert on the first read.
		return fmt.Errorf("TLS: %w", err)
	}
	return fmt.Errorf("the server closed the connection without answering in plain text (if it serves TLS, give an https:// endpoint and --cacert): %w", err)
}

// isTimeout reports a deadline that passed.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// preflight runs dialCheck on every endpoint at once and returns nil as
// soon as one passes, else the first endpoint's error once all failed.
func preflight(ctx context.Context, eps []string, tlsCfg *tls.Config, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return firstSuccess(eps, func(ep string) error { return dialCheck(ctx, ep, tlsCfg) })
}

// probe asks every endpoint for its status at once and returns nil as soon
// as one answers, else the first endpoint's error once all failed or the
// timeout passed. Status needs no permission (only a user, under auth), so
// it also works for users whose role covers only their own lock names.
func probe(ctx context.Context, cli *clientv3.Client, eps []string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return firstSuccess(eps, func(ep string) error {
		_, err := cli.Status(ctx, ep)
		return err
	})
}

// firstSuccess runs check on every endpoint at once and returns nil as soon
// as one passes, else the first endpoint's error once all failed.
func firstSuccess(eps []string, check func(ep string) error) error {
	type result struct {
		i   int
		err error
	}
	results := make(chan result, len(eps))
	for i, ep := range eps {
		go func() { results <- result{i, check(ep)} }()
	}
	errs := make([]error, len(eps))
	for range eps {
		r := <-results
		if r.err == nil {
			return nil
		}
		errs[r.i] = r.err
	}
	return errs[0]
}

// errText makes an etcd or gRPC error readable on one line.
func errText(err error) string {
	if err == nil {
		return ""
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "no answer in time (context deadline exceeded)"
	}
	if st, ok := status.FromError(err); ok {
		return st.Message()
	}
	return err.Error()
}

// tlsConfig returns the client TLS configuration, nil for plain text. TLS
// flags with an http:// or unix:// endpoint are an error: the etcd client
// would talk to it in plain text (credentials included), ignoring them.
func (c *connFlags) tlsConfig(eps []string) (*tls.Config, error) {
	if c.cacert != "" || c.cert != "" || c.insecureSkipVerify {
		for _, ep := range eps {
			if scheme, rest, ok := strings.Cut(ep, "://"); ok && (scheme == "http" || scheme == "unix") {
				return nil, fmt.Errorf("endpoint %s is plain text, yet --cacert, --cert or --insecure-skip-tls-verify ask for TLS: write it %ss://%s", ep, scheme, rest)
			}
		}
		info := transport.TLSInfo{
			CertFile:           c.cert,
			KeyFile:            c.key,
			TrustedCAFile:      c.cacert,
			InsecureSkipVerify: c.insecureSkipVerify,
		}
		cfg, err := info.ClientConfig()
		if err != nil {
			return nil, err
		}
		return cfg, nil
	}
	for _, ep := range eps {
		if strings.HasPrefix(ep, "https://") || strings.HasPrefix(ep, "unixs://") {
			return &tls.Config{MinVersion: tls.VersionTLS12}, nil // the system's roots
		}
	}
	return nil, nil
}

// credentials returns the user name and the password: from
// $ETCDCTL_USER="user:password", else --password-file, else
// $ETCDCTL_PASSWORD, else one line of stdin.
func (c *connFlags) credentials(stdin *os.File, stderr io.Writer) (user, password string, err error) {
	if c.userFromEnv {
		if u, p, ok := strings.Cut(c.user, ":"); ok {
			return u, p, nil
		}
	}
	env, envSet := os.LookupEnv("ETCDCTL_PASSWORD")
	password, err = findPassword(c.passwordFile, env, envSet, func() (string, error) {
		return readPassword(stdin, stderr)
	})
	return c.user, password, err
}

// scrubPasswordEnv removes the password from the process's environment once
// it is read, so that the command run or elect starts does not inherit it:
// $ETCDCTL_PASSWORD goes, and $ETCDCTL_USER keeps only the user name.
// (/proc/PID/environ of etcdlock itself still shows the environment it was
// started with, to its own user and root.)
func scrubPasswordEnv() {
	_ = os.Unsetenv("ETCDCTL_PASSWORD")
	if u, ok := os.LookupEnv("ETCDCTL_USER"); ok {
		if name, _, found := strings.Cut(u, ":"); found {
			_ = os.Setenv("ETCDCTL_USER", name)
		}
	}
}

// findPassword picks the password source: the file, else the environment
// variable, else stdin (through readStdin).
func findPassword(file, env string, envSet bool, readStdin func() (string, error)) (string, error) {
	switch {
	case file == "-":
		return readStdin()
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("password file: %w", err)
		}
		return strings.TrimRight(string(b), "\r\n"), nil
	case envSet:
		return env, nil
	}
	return readStdin()
}

// readPassword reads one line from stdin: after a prompt and without echo on
// a terminal. It reads byte by byte, so that the rest of stdin stays for the
// command that run starts.
func readPassword(stdin *os.File, stderr io.Writer) (string, error) {
	if stdin == nil {
		return "", errors.New("no password: use --password-file or $ETCDCTL_PASSWORD")
	}
	if isTerminal(stdin) {
		fmt.Fprint(stderr, "Password: ")
		b, err := readNoEcho(stdin)
		fmt.Fprintln(stderr)
		if err != nil {
			return "", fmt.Errorf("read password: %w", err)
		}
		return strings.TrimRight(string(b), "\r\n"), nil
	}
	line, err := readLine(stdin)
	if err != nil {
		return "", fmt.Errorf("read password from stdin: %w", err)
	}
	return line, nil
}

// readLine reads up to a newline (not included) or EOF, one byte at a time.
func readLine(r io.Reader) (string, error) {
	var b []byte
	var one [1]byte
	for {
		n, err := r.Read(one[:])
		if n == 1 {
			if one[0] == '\n' {
				break
			}
			b = append(b, one[0])
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return "", err
		}
	}
	return strings.TrimRight(string(b), "\r"), nil
}
