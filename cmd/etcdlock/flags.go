package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.etcd.io/etcd/client/pkg/v3/transport"
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
	defaultEndpoints   bool // neither --endpoints nor $ETCDCTL_ENDPOINTS was given
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
	if err := c.fromEnv(cmd); err != nil {
		return err
	}
	c.defaultEndpoints = !cmd.Flags().Changed("endpoints") && os.Getenv(envOf["endpoints"]) == ""
	switch {
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

// fromEnv sets each flag that was not given and has a non-empty etcdctl
// variable from that variable.
func (c *connFlags) fromEnv(cmd *cobra.Command) error {
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
	return err
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
		if c.cacert != "" {
			pem, err := os.ReadFile(c.cacert)
			if err != nil {
				return nil, fmt.Errorf("--cacert: %w", err)
			}
			if !x509.NewCertPool().AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("--cacert %s holds no PEM certificate: want the CA bundle that signed the servers' certificates", c.cacert)
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
