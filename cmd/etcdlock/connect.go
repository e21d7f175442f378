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
	if c.user != "" {
		cfg.Username, cfg.Password, err = c.credentials(a.stdin, a.stderr)
		if err != nil {
			return nil, exitf(exitUsage, "%v", err)
		}
	}
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

// dialCheck opens (and closes) a TCP connection to ep, so that a refused
// connection or an unknown host fails at once rather than after the dial
// timeout. Endpoints that are not TCP pass.
func dialCheck(ctx context.Context, ep string) error {
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
	if _, _, err := net.SplitHostPort(host); err != nil {
		return nil // let the client explain
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", host)
	if err != nil {
		var oe *net.OpError
		if errors.As(err, &oe) && oe.Err != nil {
			return oe.Err
		}
		return err
	}
	return conn.Close()
}

// probe asks every endpoint for its status at once and returns nil as soon
// as one answers, else the first endpoint's error once all failed or the
// timeout passed. Status needs no permission, so it also works for users
// whose role covers only their own lock names.
func probe(ctx context.Context, cli *clientv3.Client, eps []string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	type result struct {
		i   int
		err error
	}
	results := make(chan result, len(eps))
	for i, ep := range eps {
		go func() {
			err := dialCheck(ctx, ep)
			if err == nil {
				_, err = cli.Status(ctx, ep)
			}
			results <- result{i, err}
		}()
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

// tlsConfig returns the client TLS configuration, nil for plain text.
func (c *connFlags) tlsConfig(eps []string) (*tls.Config, error) {
	if c.cacert != "" || c.cert != "" || c.insecureSkipVerify {
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
