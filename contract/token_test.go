package contract

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"strings"
	"testing"
	"time"
)

// The vectors of hermes-wire.md §2.2, computed by running the gateway's real
// make_upgrade_token with the clock frozen at 1767225300.
var tokenVectors = []struct {
	gatewayID, secret string
	exp               int64
	token             string
}{
	{"gw-example", "s3cr3t-example-secret", 1767225600,
		"Z3ctZXhhbXBsZToxNzY3MjI1NjAwOmRhNDg0NjllNmU1MmZlOWRiM2IzMjIzMzRlZTJjMThmZjBmMmFiYTlkYmYxOTJmOTIzZDE2ODg4NjkxZjZhMDU"},
	{"gw-example", "s3cr3t-example-secret", 0,
		"Z3ctZXhhbXBsZTowOjFlZDI5Y2E4ODA0ODU4M2M3MTEzNDg1YzZmYjk5OTUxZTQ2N2RjZmQ0NmNiZGM1NjJkZmQ2MTQ1MDc5NmZkNzU"},
	{"tenant:gw:1", "s3cr3t-example-secret", 1767225600,
		"dGVuYW50Omd3OjE6MTc2NzIyNTYwMDo0ZDQzNTdlNGFhOTZjNzFjNGQ2ODljZjc4M2IwNGY2NTc3YmMxODQ0Y2E4OTU1YmZiNGI0ZmIyM2E3MjBjYjk3"},
	{"gw-ü", "sécret", 1767225600,
		"Z3ctw7w6MTc2NzIyNTYwMDowMmJmZTkwYjhlODZmOTNhZTU4NGMzM2E3NTgxNTdmOGIyYWI4YzE1Y2Y2ZmZhNjE5N2RmZThmNjY2YzRiNmZk"},
}

var frozen = time.Unix(1767225300, 0)

// keysFor prepares secrets or fails t.
func keysFor(t testing.TB, secrets ...string) *TokenKeys {
	t.Helper()
	k, err := NewTokenKeys(secrets)
	if err != nil {
		t.Fatal(err)
	}
	return &k
}

func TestMintTokenMatchesGatewayVectors(t *testing.T) {
	for _, v := range tokenVectors {
		if got := MintToken(v.gatewayID, v.secret, v.exp); got != v.token {
			t.Errorf("MintToken(%q, exp %d)\n got %s\nwant %s", v.gatewayID, v.exp, got, v.token)
		}
	}
}

func TestParseAndVerifyGatewayVectors(t *testing.T) {
	for _, v := range tokenVectors {
		tok, err := ParseToken(v.token)
		if err != nil {
			t.Fatalf("%s: %v", v.gatewayID, err)
		}
		if tok.GatewayID != v.gatewayID || tok.Exp != v.exp {
			t.Fatalf("parsed %q exp %d, want %q exp %d", tok.GatewayID, tok.Exp, v.gatewayID, v.exp)
		}
		err = verify(tok, keysFor(t, "wrong", v.secret), frozen, TokenWindow{Skew: 30 * time.Second})
		if v.exp == 0 {
			if !errors.Is(err, ErrTokenExpired) {
				t.Errorf("exp 0 must be refused as expired, got %v", err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: verify with the rotation list: %v", v.gatewayID, err)
		}
		if err := verify(tok, keysFor(t, "wrong"), frozen, TokenWindow{}); !errors.Is(err, ErrTokenBadSig) {
			t.Errorf("%s: wrong secret gave %v", v.gatewayID, err)
		}
	}
}

func TestVerifyExpiryAndSkew(t *testing.T) {
	tok, _ := ParseToken(tokenVectors[0].token) // exp 1767225600
	exp := time.Unix(1767225600, 0)
	for _, c := range []struct {
		now  time.Time
		skew time.Duration
		want error
	}{
		{exp, 0, nil},
		{exp.Add(time.Second), 0, ErrTokenExpired},
		{exp.Add(20 * time.Second), 30 * time.Second, nil},
		{exp.Add(31 * time.Second), 30 * time.Second, ErrTokenExpired},
	} {
		if err := verify(tok, keysFor(t, tokenVectors[0].secret), c.now, TokenWindow{Skew: c.skew}); !errors.Is(err, c.want) {
			t.Errorf("now exp%+v skew %v: got %v, want %v", c.now.Sub(exp), c.skew, err, c.want)
		}
	}
}

// TestVerifyRefusesExpiryBeyondMaxLifetime: a token minted never to expire
// (exp 9999999999 or 2^63-1) is refused, unlike before, when only the
// signature and a past exp were checked.
func TestVerifyRefusesExpiryBeyondMaxLifetime(t *testing.T) {
	const secret = "s3cr3t-example-secret"
	now := frozen.Unix()
	for _, c := range []struct {
		name string
		exp  int64
		w    TokenWindow
		want error
	}{
		{"gateway's 300 s", now + 300, TokenWindow{Skew: 30 * time.Second}, nil},
		{"at the default maximum plus skew", now + 3600 + 30, TokenWindow{Skew: 30 * time.Second}, nil},
		{"a second beyond", now + 3600 + 31, TokenWindow{Skew: 30 * time.Second}, ErrTokenLifetime},
		{"year 2286", 9999999999, TokenWindow{Skew: 30 * time.Second}, ErrTokenLifetime},
		{"max int64", 1<<63 - 1, TokenWindow{Skew: 30 * time.Second}, ErrTokenLifetime},
		{"configured maximum", now + 600, TokenWindow{MaxLifetime: 10 * time.Minute}, nil},
		{"beyond the configured maximum", now + 601, TokenWindow{MaxLifetime: 10 * time.Minute}, ErrTokenLifetime},
	} {
		tok, err := ParseToken(MintToken("gw-example", secret, c.exp))
		if err != nil {
			t.Fatal(err)
		}
		if err := verify(tok, keysFor(t, secret), frozen, c.w); !errors.Is(err, c.want) {
			t.Errorf("%s: exp now%+d: got %v, want %v", c.name, c.exp-now, err, c.want)
		}
		if c.want != nil && errors.Is(err, ErrTokenExpired) {
			t.Errorf("%s: a far exp must not read as expired (the gateway would just re-dial)", c.name)
		}
	}
}

// TestVerifyComputesTheSameMACsWhateverTheKeys counts the HMACs Match
// computes: the same for an unknown gateway (no keys), a wrong secret, one
// secret or a full rotation list, matched or not, so timing tells nothing.
func TestVerifyComputesTheSameMACsWhateverTheKeys(t *testing.T) {
	hashes := 0
	tokenHash = func() hash.Hash { hashes++; return sha256.New() }
	t.Cleanup(func() { tokenHash = sha256.New })

	full := make([]string, MaxSecretsPerGateway)
	for i := range full {
		full[i] = fmt.Sprintf("secret-%d", i)
	}
	exp := frozen.Unix() + 300
	tok := func(secret string, exp int64) Token {
		tk, err := ParseToken(MintToken("gw", secret, exp))
		if err != nil {
			t.Fatal(err)
		}
		return tk
	}
	want := -1
	for _, c := range []struct {
		name string
		tok  Token
		keys *TokenKeys
		err  error
	}{
		{"unknown gateway", tok("s", exp), nil, ErrTokenBadSig},
		{"zero keys", tok("s", exp), &TokenKeys{}, ErrTokenBadSig},
		{"wrong secret of one", tok("wrong", exp), keysFor(t, "s"), ErrTokenBadSig},
		{"right secret of one", tok("s", exp), keysFor(t, "s"), nil},
		{"wrong secret of a full list", tok("wrong", exp), keysFor(t, full...), ErrTokenBadSig},
		{"first secret of a full list", tok(full[0], exp), keysFor(t, full...), nil},
		{"last secret of a full list", tok(full[len(full)-1], exp), keysFor(t, full...), nil},
		{"expired", tok("s", exp-3600), keysFor(t, "s"), ErrTokenExpired},
		{"beyond the lifetime", tok("s", 9999999999), keysFor(t, "s"), ErrTokenLifetime},
	} {
		hashes = 0
		if err := verify(c.tok, c.keys, frozen, TokenWindow{}); !errors.Is(err, c.err) {
			t.Fatalf("%s: got %v, want %v", c.name, err, c.err)
		}
		if want < 0 {
			want = hashes
		}
		if hashes != want || hashes < MaxSecretsPerGateway {
			t.Errorf("%s: %d hashes computed, want %d (at least one HMAC per slot, %d)", c.name, hashes, want, MaxSecretsPerGateway)
		}
	}
}

func TestNewTokenKeys(t *testing.T) {
	long := strings.Repeat("long secret ", 20) // 240 bytes: HMAC hashes it first
	tok, _ := ParseToken(MintToken("gw", long, frozen.Unix()+300))
	if err := verify(tok, keysFor(t, "other", long), frozen, TokenWindow{}); err != nil {
		t.Errorf("a secret longer than the hash block: %v", err)
	}
	full := make([]string, MaxSecretsPerGateway+1)
	for i := range full {
		full[i] = fmt.Sprintf("secret-%d", i)
	}
	if _, err := NewTokenKeys(full); err == nil || strings.Contains(err.Error(), "secret-") {
		t.Errorf("%d secrets: err %v, want a refusal quoting no secret", len(full), err)
	}
	if _, err := NewTokenKeys([]string{"s", ""}); err == nil {
		t.Error("an empty secret, which anyone can sign with, was accepted")
	}
	k := keysFor(t, "hunter2-secret", "other")
	for _, s := range []string{fmt.Sprint(k), fmt.Sprintf("%+v %#v", *k, *k)} {
		if strings.Contains(s, "hunter2") || strings.Contains(s, "104 117") {
			t.Errorf("formatted keys show a secret: %s", s)
		}
	}
}

func TestParseTokenRejectsMalformed(t *testing.T) {
	good := tokenVectors[0].token
	for name, tok := range map[string]string{
		"empty":         "",
		"not base64":    "%%%",
		"no colons":     "Zm9v",
		"one colon":     "Zm9vOmJhcg", // foo:bar
		"empty payload": "OjE6YWJj",   // :1:abc
		"short sig":     strings.TrimSuffix(good, "MDU"),
		"huge":          strings.Repeat("A", MaxTokenBytes+1),
		"exp not int":   "Z3c6eDo" + strings.Repeat("A", 86), // gw:x:...
	} {
		if _, err := ParseToken(tok); err == nil {
			t.Errorf("%s: ParseToken(%q) succeeded", name, tok)
		}
	}
	if _, err := ParseToken(good + "=="); err != nil {
		t.Errorf("padding must be tolerated: %v", err)
	}
}

func TestBearerToken(t *testing.T) {
	for header, want := range map[string]string{
		"Bearer abc":   "abc",
		"bearer  abc ": "abc",
		"BEARER abc":   "abc",
	} {
		if got, err := BearerToken(header); err != nil || got != want {
			t.Errorf("BearerToken(%q) = %q, %v", header, got, err)
		}
	}
	for _, header := range []string{"", "Basic abc", "Bearer"} {
		if _, err := BearerToken(header); err == nil {
			t.Errorf("BearerToken(%q) accepted", header)
		}
	}
}

func FuzzParseToken(f *testing.F) {
	for _, v := range tokenVectors {
		f.Add(v.token)
	}
	f.Add("")
	f.Add("Zm9vOmJhcg")
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := ParseToken(s)
		if err != nil {
			return
		}
		// Whatever parses re-mints to a token that parses to the same fields
		// and verifies under the secret it was minted with, and only that one.
		again, err := ParseToken(MintToken(tok.GatewayID, "fuzz-secret", tok.Exp))
		if err != nil || again.GatewayID != tok.GatewayID || again.Exp != tok.Exp {
			t.Fatalf("re-minted %q: %+v %v", s, again, err)
		}
		keys := keysFor(t, "other", "fuzz-secret")
		if err := verify(again, nil, frozen, TokenWindow{}); !errors.Is(err, ErrTokenBadSig) {
			t.Fatalf("verified with no keys: %v", err)
		}
		if tok.Exp > 0 {
			at := time.Unix(tok.Exp, 0)
			if err := verify(again, keys, at, TokenWindow{}); err != nil {
				t.Fatalf("re-minted token does not verify: %v", err)
			}
			if err := verify(again, keysFor(t, "other"), at, TokenWindow{}); !errors.Is(err, ErrTokenBadSig) {
				t.Fatalf("verified under the wrong secret: %v", err)
			}
			// Seen from an hour and a second earlier, exp is too far ahead.
			if early := tok.Exp - 3601; early > 0 {
				if err := verify(again, keys, time.Unix(early, 0), TokenWindow{}); !errors.Is(err, ErrTokenLifetime) {
					t.Fatalf("exp %d seen from %d: %v, want ErrTokenLifetime", tok.Exp, early, err)
				}
			}
		} else if err := verify(again, keys, frozen, TokenWindow{}); !errors.Is(err, ErrTokenExpired) {
			t.Fatalf("exp 0 verified: %v", err)
		}
	})
}

// TestMatchNamesTheSecretAndHoldsFollowsTheList: Match returns the key of
// the secret that signed the token, which a list holding that secret
// Holds and a list without it does not; HeldBy tells a list that dropped
// a secret.
func TestMatchNamesTheSecretAndHoldsFollowsTheList(t *testing.T) {
	now := time.Now()
	both, err := NewTokenKeys([]string{"new", "old"})
	if err != nil {
		t.Fatal(err)
	}
	newOnly, _ := NewTokenKeys([]string{"new"})
	tok, err := ParseToken(MintToken("gw", "old", now.Unix()+60))
	if err != nil {
		t.Fatal(err)
	}
	key, err := tok.Match(&both, now, TokenWindow{})
	if err != nil || string(key) != "old" {
		t.Fatalf("Match = %q, %v; want the key of %q", key, err, "old")
	}
	if !both.Holds(key) || newOnly.Holds(key) {
		t.Fatalf("Holds: %v with the secret, %v without; want true, false", both.Holds(key), newOnly.Holds(key))
	}
	if both.HeldBy(&newOnly) || !newOnly.HeldBy(&both) {
		t.Fatalf("HeldBy: a list dropping a secret %v, one keeping all %v; want false, true", both.HeldBy(&newOnly), newOnly.HeldBy(&both))
	}
	if key, err := tok.Match(&newOnly, now, TokenWindow{}); err == nil || key != nil {
		t.Fatalf("Match against a list without the secret = %q, %v; want an error", key, err)
	}
}

// verify is Match without the key.
func verify(t Token, keys *TokenKeys, now time.Time, w TokenWindow) error {
	_, err := t.Match(keys, now, w)
	return err
}
