package embedtest

// This file holds the security options' machinery: certificates and JWT
// keys generated at start (WithTLS, WithJWT), and enabling auth (WithAuth).

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
)

const (
	// certValidity is how long the generated certificates are valid.
	certValidity = 24 * time.Hour
	// certBackdate covers clock differences with the (in-process) servers.
	certBackdate = 5 * time.Minute
	// bcryptMinCost is golang.org/x/crypto/bcrypt.MinCost.
	bcryptMinCost = 4
	// rootUser is the user WithAuth creates.
	rootUser = "root"
)

// securityFiles are the generated files of WithTLS and WithJWT, and the
// client TLS configuration built from them.
type securityFiles struct {
	dir                   string
	caFile                string
	serverCert, serverKey string
	clientCert, clientKey string
	jwtPriv, jwtPub       string
	clientTLS             *tls.Config // nil without WithTLS
	serverTLS             transport.TLSInfo
	authToken             string // embed.Config.AuthToken; "" = etcd's default
	authTokenTTL          uint   // embed.Config.AuthTokenTTL; 0 = etcd's default
	// rootUser and rootPassword are what the Cluster's own clients log in
	// as; "" without WithAuth.
	rootUser, rootPassword string
}

// prepareSecurity generates what the security options need under c.dir,
// before the members start.
func (c *Cluster) prepareSecurity() error {
	cfg := c.cfg
	sec := &c.sec
	sec.dir = filepath.Join(c.dir, "tls")
	if cfg.auth {
		sec.rootUser, sec.rootPassword = rootUser, cfg.rootPassword
	}
	if cfg.tokenTTL > 0 {
		sec.authTokenTTL = uint(cfg.tokenTTL / time.Second)
	}
	if !cfg.tls && !cfg.jwt {
		return nil
	}
	if err := os.MkdirAll(sec.dir, 0o700); err != nil {
		return fmt.Errorf("embedtest: security files: %w", err)
	}
	if cfg.tls {
		if err := sec.generateTLS(time.Now()); err != nil {
			return fmt.Errorf("embedtest: WithTLS: %w", err)
		}
	}
	if cfg.jwt {
		if strings.ContainsAny(sec.dir, ",=") {
			return fmt.Errorf("%w: WithJWT: directory %q contains ',' or '=', which etcd's --auth-token syntax cannot carry", ErrInvalidOption, sec.dir)
		}
		if err := sec.generateJWT(); err != nil {
			return fmt.Errorf("embedtest: WithJWT: %w", err)
		}
		sec.authToken = fmt.Sprintf("jwt,pub-key=%s,priv-key=%s,sign-method=ES256", sec.jwtPub, sec.jwtPriv)
		if cfg.tokenTTL > 0 {
			sec.authToken += ",ttl=" + cfg.tokenTTL.String()
		}
	}
	return nil
}

// newKey returns a fresh ECDSA P-256 key.
func newKey() (*ecdsa.PrivateKey, error) {
	return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
}

func serialNumber() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

// writePEM writes one PEM block to name with mode perm.
func writePEM(name, typ string, der []byte, perm os.FileMode) error {
	return os.WriteFile(name, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), perm)
}

// issue signs a certificate for key from template with the CA (self-signed
// when ca is nil).
func issue(template *x509.Certificate, key *ecdsa.PrivateKey, ca *x509.Certificate, caKey *ecdsa.PrivateKey) (*x509.Certificate, []byte, error) {
	sn, err := serialNumber()
	if err != nil {
		return nil, nil, err
	}
	template.SerialNumber = sn
	if ca == nil {
		ca, caKey = template, key
	}
	der, err := x509.CreateCertificate(rand.Reader, template, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	return cert, der, err
}

// keyPair is a certificate and its private key.
type keyPair struct {
	key  *ecdsa.PrivateKey
	cert *x509.Certificate
	der  []byte
}

// newPair makes a key and a certificate for it from template, signed by ca
// (nil: self-signed).
func newPair(template *x509.Certificate, ca *keyPair) (*keyPair, error) {
	key, err := newKey()
	if err != nil {
		return nil, err
	}
	var parent *x509.Certificate
	var parentKey *ecdsa.PrivateKey
	if ca != nil {
		parent, parentKey = ca.cert, ca.key
	}
	cert, der, err := issue(template, key, parent, parentKey)
	if err != nil {
		return nil, err
	}
	return &keyPair{key: key, cert: cert, der: der}, nil
}

// generateTLS writes a CA, a server certificate and a client certificate
// (with their keys) to sec.dir and builds the client TLS configuration.
func (sec *securityFiles) generateTLS(now time.Time) error {
	notBefore, notAfter := now.Add(-certBackdate), now.Add(certValidity)
	ca, err := newPair(&x509.Certificate{
		Subject:               pkix.Name{CommonName: "embedtest CA", Organization: []string{"embedtest"}},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}, nil)
	if err != nil {
		return fmt.Errorf("CA: %w", err)
	}
	server, err := newPair(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "embedtest server", Organization: []string{"embedtest"}},
		NotBefore:   notBefore,
		NotAfter:    notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}, ca)
	if err != nil {
		return fmt.Errorf("server certificate: %w", err)
	}
	client, err := newPair(&x509.Certificate{
		// No common name: etcd would take it as a user name (see WithTLS).
		Subject:     pkix.Name{Organization: []string{"embedtest"}, OrganizationalUnit: []string{"client"}},
		NotBefore:   notBefore,
		NotAfter:    notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, ca)
	if err != nil {
		return fmt.Errorf("client certificate: %w", err)
	}
	if err := sec.writeTLS(ca, server, client); err != nil {
		return err
	}
	sec.serverTLS = transport.TLSInfo{
		CertFile:       sec.serverCert,
		KeyFile:        sec.serverKey,
		TrustedCAFile:  sec.caFile,
		ClientCertAuth: true,
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	sec.clientTLS = &tls.Config{
		MinVersion: tls.VersionTLS12,
		RootCAs:    pool,
		Certificates: []tls.Certificate{{
			Certificate: [][]byte{client.der},
			PrivateKey:  client.key,
		}},
	}
	return nil
}

// writeTLS writes the certificates and keys to sec.dir.
func (sec *securityFiles) writeTLS(ca, server, client *keyPair) error {
	sec.caFile = filepath.Join(sec.dir, "ca.crt")
	sec.serverCert = filepath.Join(sec.dir, "server.crt")
	sec.serverKey = filepath.Join(sec.dir, "server.key")
	sec.clientCert = filepath.Join(sec.dir, "client.crt")
	sec.clientKey = filepath.Join(sec.dir, "client.key")
	serverKeyDER, err := x509.MarshalECPrivateKey(server.key)
	if err != nil {
		return err
	}
	clientKeyDER, err := x509.MarshalECPrivateKey(client.key)
	if err != nil {
		return err
	}
	for _, f := range []struct {
		name, typ string
		der       []byte
		perm      os.FileMode
	}{
		{sec.caFile, "CERTIFICATE", ca.der, 0o644},
		{sec.serverCert, "CERTIFICATE", server.der, 0o644},
		{sec.serverKey, "EC PRIVATE KEY", serverKeyDER, 0o600},
		{sec.clientCert, "CERTIFICATE", client.der, 0o644},
		{sec.clientKey, "EC PRIVATE KEY", clientKeyDER, 0o600},
	} {
		if err := writePEM(f.name, f.typ, f.der, f.perm); err != nil {
			return err
		}
	}
	return nil
}

// generateJWT writes the JWT signing key pair to sec.dir.
func (sec *securityFiles) generateJWT() error {
	key, err := newKey()
	if err != nil {
		return err
	}
	priv, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	sec.jwtPriv = filepath.Join(sec.dir, "jwt.key")
	sec.jwtPub = filepath.Join(sec.dir, "jwt.pub")
	if err := writePEM(sec.jwtPriv, "EC PRIVATE KEY", priv, 0o600); err != nil {
		return err
	}
	return writePEM(sec.jwtPub, "PUBLIC KEY", pub, 0o644)
}

// enableAuth creates the root role and user and enables auth (WithAuth).
// Each step is retried until ctx ends: the cluster has just elected its
// first leader, and these requests are not retried by the client.
func (c *Cluster) enableAuth(ctx context.Context) error {
	cli, err := clientv3.New(c.clientConfigAs(c.Endpoints(), "", ""))
	if err != nil {
		return fmt.Errorf("embedtest: WithAuth: %w", err)
	}
	defer cli.Close()
	steps := []struct {
		what string
		do   func(ctx context.Context) error
	}{
		{"add role root", func(ctx context.Context) error {
			_, err := cli.RoleAdd(ctx, rootUser)
			if errors.Is(err, rpctypes.ErrRoleAlreadyExist) {
				err = nil
			}
			return err
		}},
		{"add user root", func(ctx context.Context) error {
			_, err := cli.UserAdd(ctx, rootUser, c.sec.rootPassword)
			if errors.Is(err, rpctypes.ErrUserAlreadyExist) {
				err = nil
			}
			return err
		}},
		{"grant role root to user root", func(ctx context.Context) error {
			_, err := cli.UserGrantRole(ctx, rootUser, rootUser)
			return err
		}},
		{"enable auth", func(ctx context.Context) error {
			_, err := cli.AuthEnable(ctx)
			return err
		}},
	}
	for _, s := range steps {
		for {
			actx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := s.do(actx)
			cancel()
			if err == nil {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("embedtest: WithAuth: %s: %w (%w)", s.what, err, ctx.Err())
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}

// TLSFiles returns the PEM files of WithTLS: the CA that signed the members'
// and the client's certificates, the client certificate and its key (as
// etcdctl's --cacert, --cert and --key). They are "" without WithTLS. The
// files live under Dir()/tls until Close.
func (c *Cluster) TLSFiles() (caFile, certFile, keyFile string) {
	return c.sec.caFile, c.sec.clientCert, c.sec.clientKey
}

// ClientTLS returns a new copy of the TLS configuration of the Cluster's
// clients under WithTLS (it trusts the generated CA and presents the
// generated client certificate), or nil without WithTLS.
func (c *Cluster) ClientTLS() *tls.Config {
	if c.sec.clientTLS == nil {
		return nil
	}
	return c.sec.clientTLS.Clone()
}

// ClientAs returns a new client to all members that logs in as user with
// password (over TLS under WithTLS), configured as by ClientConfig
// otherwise. An empty user gives a client that sends no credentials. Like
// clientv3.New, it fails when the login is refused (an error wrapping
// rpctypes.ErrAuthFailed for a wrong password). The caller closes it.
func (c *Cluster) ClientAs(user, password string) (*clientv3.Client, error) {
	if c.isClosed() {
		return nil, ErrClosed
	}
	cli, err := clientv3.New(c.clientConfigAs(c.Endpoints(), user, password))
	if err != nil {
		return nil, fmt.Errorf("embedtest: client as %q: %w", user, err)
	}
	return cli, nil
}

// clientConfigAs is clientConfig with the cluster's TLS configuration and the
// given credentials.
func (c *Cluster) clientConfigAs(endpoints []string, user, password string) clientv3.Config {
	cfg := clientConfig(endpoints)
	cfg.TLS = c.ClientTLS()
	if user != "" {
		cfg.Username, cfg.Password = user, password
	}
	return cfg
}

// ownClientConfig is the configuration of the Cluster's own clients: as root
// under WithAuth.
func (c *Cluster) ownClientConfig(endpoints []string) clientv3.Config {
	return c.clientConfigAs(endpoints, c.sec.rootUser, c.sec.rootPassword)
}

// scheme is the scheme of the client URLs: https under WithTLS.
func (c *Cluster) scheme() string {
	if c.cfg.tls {
		return "https"
	}
	return "http"
}
