package idtoken_test

import (
	"bytes"
	"cmp"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"connector/idtoken"
	"connector/idtoken/idtokentest"
	"connector/internal/clock/clocktest"
)

var (
	keyOnce sync.Once
	keyPEM  []byte
	signer  func(t testing.TB, header, claims map[string]any) string
)

// setup generates one key pair for the package's tests.
func setup(t testing.TB) *idtoken.Verifier {
	t.Helper()
	keyOnce.Do(func() {
		k := idtokentest.Key(t)
		keyPEM = idtokentest.PublicPEM(t, k)
		signer = func(t testing.TB, header, claims map[string]any) string {
			return idtokentest.SignHeader(t, k, header, claims)
		}
	})
	path := filepath.Join(t.TempDir(), "authority.pem")
	if err := os.WriteFile(path, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	pub, err := idtoken.LoadPublicKeys(path)
	if err != nil {
		t.Fatal(err)
	}
	v, err := idtoken.New(idtoken.Config{Keys: pub, Issuer: "https://portal.example", Audience: "connector",
		Clock: clocktest.New(time.Unix(1_700_000_000, 0))})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

var rs256 = map[string]any{"alg": "RS256", "typ": "JWT"}

func claims(mod func(map[string]any)) map[string]any {
	c := map[string]any{"iss": "https://portal.example", "aud": []string{"other", "connector"}, "sub": "user-7",
		"tid": "acme", "exp": 1_700_000_300, "nbf": 1_699_999_990}
	if mod != nil {
		mod(c)
	}
	return c
}

func TestVerify(t *testing.T) {
	v := setup(t)
	got, err := v.Verify(signer(t, rs256, claims(nil)))
	if err != nil || got.Tenant != "acme" || got.Subject != "user-7" || got.Expires.Unix() != 1_700_000_300 {
		t.Fatalf("Verify = %+v, %v", got, err)
	}
	if _, err := v.Verify(signer(t, rs256, claims(func(c map[string]any) { c["aud"] = "connector" }))); err != nil {
		t.Fatalf("a string aud: %v", err)
	}
	if _, err := v.Verify(signer(t, rs256, claims(func(c map[string]any) { c["exp"] = 1_699_999_950 }))); err != nil {
		t.Fatalf("expired within the skew: %v", err)
	}

	hs := func() string { // HS256 "signed" with the public key's bytes: the classic confusion
		signing := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"HS256"}`)) + "." +
			base64.RawURLEncoding.EncodeToString([]byte(`{"tid":"acme","exp":1700000300}`))
		m := hmac.New(sha256.New, keyPEM)
		m.Write([]byte(signing))
		return signing + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
	}()
	good := signer(t, rs256, claims(nil))
	dot := strings.LastIndexByte(good, '.')
	refused := map[string]string{
		"empty":            "",
		"garbage":          "not.a.jwt",
		"two parts":        "a.b",
		"alg none":         base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none"}`)) + "." + base64.RawURLEncoding.EncodeToString([]byte(`{"tid":"acme","exp":1700000300}`)) + ".",
		"alg HS256":        hs,
		"crit":             signer(t, map[string]any{"alg": "RS256", "crit": []string{"x"}}, claims(nil)),
		"tampered payload": strings.Replace(good, good[strings.IndexByte(good, '.')+1:dot], base64.RawURLEncoding.EncodeToString([]byte(`{"tid":"evil","exp":1700000300}`)), 1),
		"bad signature":    good[:dot+1] + base64.RawURLEncoding.EncodeToString(make([]byte, 256)),
		"expired":          signer(t, rs256, claims(func(c map[string]any) { c["exp"] = 1_699_999_900 })),
		"no exp":           signer(t, rs256, claims(func(c map[string]any) { delete(c, "exp") })),
		"string exp":       signer(t, rs256, claims(func(c map[string]any) { c["exp"] = "1700000300" })),
		"not yet":          signer(t, rs256, claims(func(c map[string]any) { c["nbf"] = 1_700_000_100 })),
		"wrong issuer":     signer(t, rs256, claims(func(c map[string]any) { c["iss"] = "https://evil.example" })),
		"wrong audience":   signer(t, rs256, claims(func(c map[string]any) { c["aud"] = "someone-else" })),
		"no tenant":        signer(t, rs256, claims(func(c map[string]any) { delete(c, "tid") })),
		"numeric tenant":   signer(t, rs256, claims(func(c map[string]any) { c["tid"] = 7 })),
		"oversized":        strings.Repeat("a", idtoken.MaxTokenBytes+1),
	}
	for name, tok := range refused {
		_, err := v.Verify(tok)
		if !errors.Is(err, idtoken.ErrToken) {
			t.Errorf("%s: err %v, want ErrToken", name, err)
			continue
		}
		if len(tok) > 20 && strings.Contains(err.Error(), tok[:20]) {
			t.Errorf("%s: the error echoes the token", name)
		}
	}
}

func TestKeys(t *testing.T) {
	if _, err := idtoken.New(idtoken.Config{}); err == nil {
		t.Error("New without a key: want an error")
	}
	if _, err := idtoken.ParsePublicKeys([]byte("nothing")); err == nil {
		t.Error("ParsePublicKeys without PEM: want an error")
	}
	if _, err := idtoken.ParsePublicKeys([]byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")); err == nil {
		t.Error("ParsePublicKeys of a private key block: want an error")
	}
	if _, err := idtoken.LoadPublicKeys(filepath.Join(t.TempDir(), "missing.pem")); err == nil {
		t.Error("LoadPublicKeys of a missing file: want an error")
	}
}

// FuzzVerify: whatever the bearer, Verify returns without panicking, and
// nothing but a token signed with the authority's key verifies.
func FuzzVerify(f *testing.F) {
	v := setup(f)
	good := signer(f, rs256, claims(nil))
	f.Add(good)
	f.Add("a.b.c")
	f.Add("eyJhbGciOiJub25lIn0.eyJ0aWQiOiJhIiwiZXhwIjoxfQ.")
	f.Add(good[:len(good)-3] + "AAA")
	f.Fuzz(func(t *testing.T, tok string) {
		c, err := v.Verify(tok)
		if err == nil && tok != good {
			t.Fatalf("verified a token not signed by the authority: %q -> %+v", tok, c)
		}
		if err != nil && !errors.Is(err, idtoken.ErrToken) {
			t.Fatalf("error %v is not ErrToken", err)
		}
		// good's aud names no agent, so VerifyInstance refuses every input.
		if c, gw, err := v.VerifyInstance(tok); !errors.Is(err, idtoken.ErrToken) {
			t.Fatalf("VerifyInstance(%q) = %+v, %q, %v; want ErrToken", tok, c, gw, err)
		}
	})
}

func TestVerifyInstance(t *testing.T) {
	v := setup(t)
	agent := func(aud any) string {
		return signer(t, rs256, claims(func(c map[string]any) { c["aud"] = aud }))
	}
	for _, aud := range []any{"agent:alice-gw", []string{"agent:alice-gw"}, []string{"portal", "agent:alice-gw", "agent:alice-gw"}} {
		got, gw, err := v.VerifyInstance(agent(aud))
		if err != nil || gw != "alice-gw" || got.Tenant != "acme" || got.Subject != "user-7" {
			t.Fatalf("aud %v: VerifyInstance = %+v, %q, %v", aud, got, gw, err)
		}
	}
	// The configured audience is the enrollment routes'; a management
	// token's is its agent, and an enrollment token names none.
	if _, err := v.Verify(agent("agent:alice-gw")); !errors.Is(err, idtoken.ErrToken) {
		t.Fatalf("Verify of an agent-only aud = %v, want refused", err)
	}
	for name, aud := range map[string]any{
		"no agent":      []string{"other", "connector"},
		"two agents":    []string{"agent:alice-gw", "agent:bob-gw"},
		"empty agent":   "agent:",
		"oversized":     "agent:" + strings.Repeat("x", idtoken.MaxTenantBytes+1),
		"not a string":  42,
		"missing (nil)": nil,
	} {
		if _, gw, err := v.VerifyInstance(agent(aud)); !errors.Is(err, idtoken.ErrToken) || gw != "" {
			t.Errorf("%s: VerifyInstance = %q, %v; want refused", name, gw, err)
		}
	}
	// Everything else is checked as Verify checks it.
	for name, mod := range map[string]func(map[string]any){
		"expired":   func(c map[string]any) { c["exp"] = 1_699_999_000 },
		"issuer":    func(c map[string]any) { c["iss"] = "https://evil.example" },
		"no tenant": func(c map[string]any) { delete(c, "tid") },
	} {
		tok := signer(t, rs256, claims(func(c map[string]any) { mod(c); c["aud"] = "agent:alice-gw" }))
		if _, _, err := v.VerifyInstance(tok); !errors.Is(err, idtoken.ErrToken) {
			t.Errorf("%s: VerifyInstance = %v, want refused", name, err)
		}
	}
	other := idtokentest.Sign(t, idtokentest.Key(t), claims(func(c map[string]any) { c["aud"] = "agent:alice-gw" }))
	if _, _, err := v.VerifyInstance(other); err == nil || !strings.Contains(err.Error(), "signature") {
		t.Fatalf("another key's token: %v", err)
	}
}

// TestVerifyRefusesExpiryBeyondMaxLifetime (issue 22): a token whose exp
// lies further ahead than the maximum lifetime (24 h by default, the skew
// on top) is refused by Verify and VerifyInstance alike, however well
// signed: 100 years, the year 5138 (the largest exp a NumericDate here
// may spell), a day and a minute and a second. Exactly the maximum is
// accepted.
func TestVerifyRefusesExpiryBeyondMaxLifetime(t *testing.T) {
	v := setup(t)
	const now = 1_700_000_000
	withExp := func(exp int64, aud any) string {
		return signer(t, rs256, claims(func(c map[string]any) { c["exp"] = exp; c["aud"] = aud }))
	}
	const maxAhead = 24*3600 + 60 // the default maximum lifetime and skew
	for name, exp := range map[string]int64{
		"100 years":              now + 100*365*24*3600,
		"year 5138":              99_999_999_999,
		"24 h + skew + 1 s":      now + maxAhead + 1,
		"a year, under an agent": now + 365*24*3600,
	} {
		if _, err := v.Verify(withExp(exp, "connector")); !errors.Is(err, idtoken.ErrToken) || !strings.Contains(err.Error(), "maximum lifetime") {
			t.Errorf("%s: Verify = %v, want refused for its lifetime", name, err)
		}
		if _, _, err := v.VerifyInstance(withExp(exp, "agent:alice-gw")); !errors.Is(err, idtoken.ErrToken) {
			t.Errorf("%s: VerifyInstance = %v, want refused", name, err)
		}
	}
	if _, err := v.Verify(withExp(now+maxAhead, "connector")); err != nil {
		t.Fatalf("exp exactly at the maximum lifetime plus the skew: %v", err)
	}
}

// TestMaxLifetimeIsConfigurable: a verifier configured for 1 h takes a
// 1 h token and refuses a 2 h one.
func TestMaxLifetimeIsConfigurable(t *testing.T) {
	setup(t)
	const now = 1_700_000_000
	withExp := func(exp int64) string {
		return signer(t, rs256, claims(func(c map[string]any) { c["exp"] = exp }))
	}
	pub, err := idtoken.ParsePublicKeys(keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	hour, err := idtoken.New(idtoken.Config{Keys: pub, MaxLifetime: time.Hour, Clock: clocktest.New(time.Unix(now, 0))})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hour.Verify(withExp(now + 3600)); err != nil {
		t.Fatalf("1 h token under a 1 h maximum: %v", err)
	}
	if _, err := hour.Verify(withExp(now + 7200)); !errors.Is(err, idtoken.ErrToken) {
		t.Fatalf("2 h token under a 1 h maximum: %v, want refused", err)
	}
}

// TestKeyRotation: the authority's keys are rotated without a flag day.
// A file of several PEM blocks, each named by a "kid" header, verifies a
// token whose kid names one with that key only, and a token without kid
// with whichever signed it; a kid no key has is refused. A key without a
// kid (the file of one key, as before) verifies tokens of any kid.
func TestKeyRotation(t *testing.T) {
	old, cur := idtokentest.Key(t), idtokentest.Key(t)
	named := func(k *rsa.PrivateKey, kid string) []byte {
		b, _ := pem.Decode(idtokentest.PublicPEM(t, k))
		b.Headers = map[string]string{"kid": kid}
		return pem.EncodeToMemory(b)
	}
	clk := clocktest.New(time.Unix(1_700_000_000, 0))
	verifier := func(file []byte) *idtoken.Verifier {
		t.Helper()
		keys, err := idtoken.ParsePublicKeys(file)
		if err != nil {
			t.Fatal(err)
		}
		v, err := idtoken.New(idtoken.Config{Keys: keys, Issuer: "https://portal.example", Audience: "connector", Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	sign := func(k *rsa.PrivateKey, kid any) string {
		h := map[string]any{"alg": "RS256", "typ": "JWT"}
		if kid != nil {
			h["kid"] = kid
		}
		return idtokentest.SignHeader(t, k, h, claims(nil))
	}
	both := verifier(append(named(old, "2026-05"), named(cur, "2026-11")...))
	for name, c := range map[string]struct {
		tok string
		ok  bool
	}{
		"the current key's kid":            {sign(cur, "2026-11"), true},
		"the old key's kid":                {sign(old, "2026-05"), true},
		"no kid, the current key":          {sign(cur, nil), true},
		"no kid, the old key":              {sign(old, nil), true},
		"the current kid, the old key":     {sign(old, "2026-11"), false},
		"an unknown kid":                   {sign(cur, "2027-01"), false},
		"a numeric kid":                    {sign(cur, 7), false},
		"no kid, another authority's key":  {sign(idtokentest.Key(t), nil), false},
		"alg none with the current key id": {base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","kid":"2026-11"}`)) + "." + base64.RawURLEncoding.EncodeToString([]byte(`{"tid":"acme","exp":1700000300}`)) + ".", false},
	} {
		if _, err := both.Verify(c.tok); (err == nil) != c.ok {
			t.Errorf("%s: Verify = %v, want accepted %v", name, err, c.ok)
		}
	}
	// One key without a kid, as before: the authority's kid is not asked.
	single := verifier(idtokentest.PublicPEM(t, cur))
	if _, err := single.Verify(sign(cur, "2026-11")); err != nil {
		t.Fatalf("a kid under a key without one: %v", err)
	}
	if _, err := single.Verify(sign(old, "2026-11")); !errors.Is(err, idtoken.ErrToken) {
		t.Fatalf("another key's token under a key without kid: %v, want refused", err)
	}
	// An empty kid names no key: each key without one is tried, not only
	// the first.
	unnamed := verifier(append(idtokentest.PublicPEM(t, old), idtokentest.PublicPEM(t, cur)...))
	if _, err := unnamed.Verify(sign(cur, "")); err != nil {
		t.Errorf("an empty kid, the second key without one: %v", err)
	}
	// A block that does not parse is refused, not skipped: the key an
	// operator added for a rotation is not silently missing.
	broken := named(cur, "2026-11")
	broken = broken[:bytes.LastIndex(broken, []byte("-----END"))]
	if keys, err := idtoken.ParsePublicKeys(append(named(old, "2026-05"), broken...)); err == nil {
		t.Errorf("ParsePublicKeys with its second block cut short: %d keys, want an error", len(keys))
	}
	// The set is bounded and its ids distinct.
	k, _ := idtoken.ParsePublicKeys(idtokentest.PublicPEM(t, cur))
	if _, err := idtoken.New(idtoken.Config{Keys: slices.Repeat(k, idtoken.MaxKeys+1)}); err == nil {
		t.Error("New with more than MaxKeys keys: want an error")
	}
	twice, _ := idtoken.ParsePublicKeys(append(named(old, "a"), named(cur, "a")...))
	if _, err := idtoken.New(idtoken.Config{Keys: twice}); err == nil {
		t.Error("New with two keys of one kid: want an error")
	}
}

// TestCertificateChainTrustsItsLeafOnly: a public_key_file holding the
// signing certificate with its chain (a "fullchain" PEM, leaf then CA,
// or CA then leaf) verifies the leaf's tokens, as when only the first
// block was read, and not tokens signed with the CA's key: a CA signs
// certificates, not identity tokens, and its holder must not mint them
// for any tenant (before, every block of the file became a key, and a
// chain whose CA is no RSA key was refused at start).
func TestCertificateChainTrustsItsLeafOnly(t *testing.T) {
	caKey, leafKey := idtokentest.Key(t), idtokentest.Key(t)
	now := time.Unix(1_700_000_000, 0)
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "Example CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "portal token signing"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &leafKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	leafPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leafDER})
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	// A chain whose root is no RSA key loads all the same (its leaf).
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ecDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &ecKey.PublicKey, ecKey)
	if err != nil {
		t.Fatal(err)
	}
	ecCert, _ := x509.ParseCertificate(ecDER)
	ecLeafDER, err := x509.CreateCertificate(rand.Reader, leaf, ecCert, &leafKey.PublicKey, ecKey)
	if err != nil {
		t.Fatal(err)
	}
	ecChain := append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ecLeafDER}), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ecDER})...)
	for name, file := range map[string][]byte{"leaf then CA": append(slices.Clone(leafPEM), caPEM...), "CA then leaf": append(slices.Clone(caPEM), leafPEM...), "an ECDSA CA": ecChain} {
		keys, err := idtoken.ParsePublicKeys(file)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		v, err := idtoken.New(idtoken.Config{Keys: keys, Issuer: "https://portal.example", Audience: "connector", Clock: clocktest.New(now)})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if _, err := v.Verify(idtokentest.Sign(t, leafKey, claims(nil))); err != nil {
			t.Errorf("%s: the leaf's token: %v", name, err)
		}
		if _, err := v.Verify(idtokentest.Sign(t, caKey, claims(nil))); !errors.Is(err, idtoken.ErrToken) {
			t.Errorf("%s: a token signed with the CA's key: %v, want refused", name, err)
		}
	}
}

// A key's certificate renewed (self-signed again) with the old one left in
// the file: each verifies the other's signature, but neither is a CA of
// another key, so the key stays trusted.
func TestRenewedSelfSignedCertificateKeepsItsKey(t *testing.T) {
	key := idtokentest.Key(t)
	now := time.Unix(1_700_000_000, 0)
	var file []byte
	for serial := range int64(2) {
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial + 1), Subject: pkix.Name{CommonName: "portal token signing"},
			NotBefore: now.Add(time.Duration(serial-1) * time.Hour), NotAfter: now.Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
		if err != nil {
			t.Fatal(err)
		}
		file = append(file, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
	}
	keys, err := idtoken.ParsePublicKeys(file)
	if err != nil {
		t.Fatalf("two certificates of one key: %v", err)
	}
	v, err := idtoken.New(idtoken.Config{Keys: keys, Issuer: "https://portal.example", Audience: "connector", Clock: clocktest.New(now)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(idtokentest.Sign(t, key, claims(nil))); err != nil {
		t.Errorf("the key's token: %v", err)
	}
}

// countingRS256 is RS256 counting its signature checks.
type countingRS256 struct {
	jwt.SigningMethod
	checks *atomic.Int64
}

func (c countingRS256) Verify(signingString string, sig []byte, key any) error {
	c.checks.Add(1)
	return c.SigningMethod.Verify(signingString, sig, key)
}

// countSignatureChecks registers RS256 as a countingRS256 until the test
// ends.
func countSignatureChecks(t *testing.T) *atomic.Int64 {
	checks := new(atomic.Int64)
	jwt.RegisterSigningMethod("RS256", func() jwt.SigningMethod { return countingRS256{jwt.SigningMethodRS256, checks} })
	t.Cleanup(func() { jwt.RegisterSigningMethod("RS256", func() jwt.SigningMethod { return jwt.SigningMethodRS256 }) })
	return checks
}

// TestRefusedClaimsCostNoSignatureCheck: a token without kid is tried
// against each of up to MaxKeys keys, and anyone can send one to the
// enrollment and management routes, before any rate limit; one whose
// claims are refused anyway (expired, another issuer or audience, no
// tenant, …) is refused before any signature is checked (before, each
// cost MaxKeys RSA verifications), and one whose claims pass costs at most
// MaxKeys.
func TestRefusedClaimsCostNoSignatureCheck(t *testing.T) {
	keys := make([]*rsa.PrivateKey, idtoken.MaxKeys)
	var file []byte
	for i := range keys {
		keys[i] = idtokentest.Key(t)
		file = append(file, idtokentest.PublicPEM(t, keys[i])...)
	}
	pub, err := idtoken.ParsePublicKeys(file)
	if err != nil {
		t.Fatal(err)
	}
	v, err := idtoken.New(idtoken.Config{Keys: pub, Issuer: "https://portal.example", Audience: "connector",
		Clock: clocktest.New(time.Unix(1_700_000_000, 0))})
	if err != nil {
		t.Fatal(err)
	}
	stranger := idtokentest.Key(t) // no configured key verifies its signatures
	sign := func(header map[string]any, mod func(map[string]any)) string {
		return idtokentest.SignHeader(t, stranger, header, claims(mod))
	}
	checks := countSignatureChecks(t)
	for name, tok := range map[string]string{
		"expired":          sign(rs256, func(c map[string]any) { c["exp"] = 1_699_999_900 }),
		"no exp":           sign(rs256, func(c map[string]any) { delete(c, "exp") }),
		"beyond lifetime":  sign(rs256, func(c map[string]any) { c["exp"] = 1_700_000_000 + 48*3600 }),
		"not yet":          sign(rs256, func(c map[string]any) { c["nbf"] = 1_700_000_100 }),
		"wrong issuer":     sign(rs256, func(c map[string]any) { c["iss"] = "https://evil.example" }),
		"wrong audience":   sign(rs256, func(c map[string]any) { c["aud"] = "someone-else" }),
		"no tenant":        sign(rs256, func(c map[string]any) { delete(c, "tid") }),
		"crit":             sign(map[string]any{"alg": "RS256", "crit": []string{"x"}}, nil),
		"malformed claims": "eyJhbGciOiJSUzI1NiJ9.bm90IGpzb24." + base64.RawURLEncoding.EncodeToString(make([]byte, 256)),
	} {
		if _, err := v.Verify(tok); !errors.Is(err, idtoken.ErrToken) {
			t.Errorf("%s: %v, want ErrToken", name, err)
		}
		if n := checks.Swap(0); n != 0 {
			t.Errorf("%s: %d signature checks, want none", name, n)
		}
	}
	if _, err := v.Verify(sign(rs256, nil)); !errors.Is(err, idtoken.ErrToken) {
		t.Errorf("another authority's token: %v, want ErrToken", err)
	}
	if n := checks.Swap(0); n != idtoken.MaxKeys {
		t.Errorf("another authority's token whose claims pass: %d signature checks, want %d (one per key)", n, idtoken.MaxKeys)
	}
	if _, err := v.Verify(idtokentest.Sign(t, keys[len(keys)-1], claims(nil))); err != nil {
		t.Errorf("the last key's token: %v", err)
	}
}

// TestRootWithoutItsIntermediateIsNoKey: a file holding the signing
// certificate and its root, the intermediate between them left out, does
// not take the root as a key: its key usage (certificate and CRL signing)
// does not let it sign anything else (RFC 5280 §4.2.1.3), and its holder
// must not mint identity tokens (before, a root that signed no
// certificate of the file stayed a key).
func TestRootWithoutItsIntermediateIsNoKey(t *testing.T) {
	rootKey, midKey, leafKey := idtokentest.Key(t), idtokentest.Key(t), idtokentest.Key(t)
	now := time.Unix(1_700_000_000, 0)
	issue := func(serial int64, name string, usage x509.KeyUsage, pub *rsa.PublicKey, parent *x509.Certificate, signer *rsa.PrivateKey) *x509.Certificate {
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), KeyUsage: usage,
			IsCA: usage&x509.KeyUsageCertSign != 0, BasicConstraintsValid: true}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, cmp.Or(parent, tmpl), pub, signer)
		if err != nil {
			t.Fatal(err)
		}
		c, _ := x509.ParseCertificate(der)
		return c
	}
	ca := x509.KeyUsageCertSign | x509.KeyUsageCRLSign
	root := issue(1, "Example Root", ca, &rootKey.PublicKey, nil, rootKey)
	mid := issue(2, "Example Intermediate", ca, &midKey.PublicKey, root, rootKey)
	leaf := issue(3, "portal token signing", x509.KeyUsageDigitalSignature, &leafKey.PublicKey, mid, midKey)
	block := func(c *x509.Certificate) []byte {
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
	}
	for name, file := range map[string][]byte{"leaf then root": append(block(leaf), block(root)...), "root then leaf": append(block(root), block(leaf)...)} {
		keys, err := idtoken.ParsePublicKeys(file)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		v, err := idtoken.New(idtoken.Config{Keys: keys, Issuer: "https://portal.example", Audience: "connector", Clock: clocktest.New(now)})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if _, err := v.Verify(idtokentest.Sign(t, leafKey, claims(nil))); err != nil {
			t.Errorf("%s: the leaf's token: %v", name, err)
		}
		if _, err := v.Verify(idtokentest.Sign(t, rootKey, claims(nil))); !errors.Is(err, idtoken.ErrToken) {
			t.Errorf("%s: a token signed with the root's key: %v, want refused", name, err)
		}
	}
}
