package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"connector/relay/relaytest"
)

// TestServeTLS serves https:// and wss:// directly from a configured
// certificate: a gateway completes its handshake over wss.
func TestServeTLS(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, pool := selfSigned(t, dir)
	cfg, gen, err := loadOrDefault(sources{dataDir: t.TempDir()}, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Listen = "127.0.0.1:0"
	cfg.TLS = TLSConfig{CertFile: certFile, KeyFile: keyFile}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	addrCh := make(chan string, 1)
	done := make(chan error, 1)
	var banner syncBuffer
	go func() {
		done <- serve(ctx, randomOpsPort(cfg), gen, relaytest.TestLogger(t), &banner, func(a listenAddrs) { addrCh <- a.Addr })
	}()
	addr := listening(t, addrCh, done)
	if !strings.Contains(banner.String(), "https://"+addr) || !strings.Contains(banner.String(), "wss://"+addr+"/relay") {
		t.Fatalf("banner:\n%s", banner.String())
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	dctx, dcancel := context.WithTimeout(context.Background(), serveWait)
	defer dcancel()
	ws, _, err := websocket.Dial(dctx, "wss://"+addr+"/relay", &websocket.DialOptions{HTTPClient: client,
		HTTPHeader: http.Header{"Authorization": {"Bearer " + relaytest.Token(gen.GatewayID, gen.GatewaySecret, time.Now())}}})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	if err := ws.Write(dctx, websocket.MessageText, []byte(`{"type": "hello", "platform": "relay", "botId": ""}`+"\n")); err != nil {
		t.Fatal(err)
	}
	if _, msg, err := ws.Read(dctx); err != nil || !strings.Contains(string(msg), `"type":"descriptor"`) {
		t.Fatalf("descriptor over wss: %s %v", msg, err)
	}
	cancel()
	if _, _, err := ws.Read(dctx); websocket.CloseStatus(err) != websocket.StatusGoingAway {
		t.Fatalf("shutdown closed the gateway with %v, want 1001", err)
	}
	served(t, done)
}

// selfSigned writes a certificate for 127.0.0.1 and its key to dir.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "connector test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}
