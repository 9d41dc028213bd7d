// Package testpki makes certificates for tests: a certificate authority of
// its own and the server and client certificates it signs, written as PEM
// files in a test's temporary directory.
package testpki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A CA is a test certificate authority.
type CA struct {
	t    testing.TB
	dir  string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// CertFile is the CA's certificate, PEM.
	CertFile string
	// Pool holds the CA's certificate.
	Pool *x509.CertPool
}

// NewCA makes a CA named name, its files in a temporary directory of t.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &CA{t: t, dir: t.TempDir(), cert: cert, key: key, Pool: x509.NewCertPool()}
	ca.Pool.AddCert(cert)
	ca.CertFile = filepath.Join(ca.dir, name+"-ca.pem")
	writePEM(t, ca.CertFile, "CERTIFICATE", der)
	return ca
}

// A Pair is a certificate and its key, in files and loaded.
type Pair struct {
	CertFile, KeyFile string
	TLS               tls.Certificate
}

// Server issues a server certificate for localhost and 127.0.0.1, and
// the extra DNS names given, its files named name.pem and name-key.pem.
func (ca *CA) Server(name string, dnsNames ...string) Pair {
	return ca.issue(name, x509.ExtKeyUsageServerAuth, append([]string{"localhost"}, dnsNames...), []net.IP{net.IPv4(127, 0, 0, 1)})
}

// ServerNamed issues a server certificate for the DNS names given only.
func (ca *CA) ServerNamed(name string, dnsNames ...string) Pair {
	return ca.issue(name, x509.ExtKeyUsageServerAuth, dnsNames, nil)
}

// Client issues a client certificate with the DNS names given.
func (ca *CA) Client(name string, dnsNames ...string) Pair {
	return ca.issue(name, x509.ExtKeyUsageClientAuth, dnsNames, nil)
}

func (ca *CA) issue(name string, usage x509.ExtKeyUsage, dnsNames []string, ips []net.IP) Pair {
	t := ca.t
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		DNSNames:     dnsNames,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	p := Pair{CertFile: filepath.Join(ca.dir, name+".pem"), KeyFile: filepath.Join(ca.dir, name+"-key.pem")}
	writePEM(t, p.CertFile, "CERTIFICATE", der)
	writePEM(t, p.KeyFile, "PRIVATE KEY", kder)
	if p.TLS, err = tls.LoadX509KeyPair(p.CertFile, p.KeyFile); err != nil {
		t.Fatal(err)
	}
	return p
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func serial(t testing.TB) *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
