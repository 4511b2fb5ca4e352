package redistest

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

// CA is a certificate authority made for one test, and a certificate it
// signed for 127.0.0.1 that the servers present (and use as clients of each
// other: replication, the cluster bus, Sentinel).
type CA struct {
	// CAFile is the authority's certificate, PEM.
	CAFile string
	// CertFile and KeyFile are the servers' certificate and key, PEM.
	CertFile, KeyFile string
	pool              *x509.CertPool
}

// NewCA makes a CA and a server certificate in a temporary directory of t.
func NewCA(t testing.TB) *CA {
	t.Helper()
	dir := t.TempDir()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "redistest CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	ca := &CA{
		CAFile:   filepath.Join(dir, "ca.crt"),
		CertFile: filepath.Join(dir, "server.crt"),
		KeyFile:  filepath.Join(dir, "server.key"),
		pool:     x509.NewCertPool(),
	}
	ca.pool.AddCert(caCert)
	for path, block := range map[string]*pem.Block{
		ca.CAFile:   {Type: "CERTIFICATE", Bytes: caDER},
		ca.CertFile: {Type: "CERTIFICATE", Bytes: der},
		ca.KeyFile:  {Type: "EC PRIVATE KEY", Bytes: keyDER},
	} {
		if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return ca
}

// ClientConfig is a TLS client configuration that trusts only the CA.
func (ca *CA) ClientConfig() *tls.Config {
	return &tls.Config{RootCAs: ca.pool, MinVersion: tls.VersionTLS12}
}

// serverArgs are redis-server's arguments to serve TLS only on port, with
// replication and the cluster bus over TLS too.
func (ca *CA) serverArgs(port string) []string {
	return []string{
		"--port", "0", "--tls-port", port,
		"--tls-cert-file", ca.CertFile, "--tls-key-file", ca.KeyFile, "--tls-ca-cert-file", ca.CAFile,
		"--tls-auth-clients", "no", "--tls-replication", "yes", "--tls-cluster", "yes",
	}
}
