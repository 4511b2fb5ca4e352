// Package idtoken verifies the caller-identity tokens of the Hermes
// enrollment routes (POST /relay/enroll, POST /relay/provision) and
// management plane (/manage/*): JSON Web
// Tokens signed RS256 by an external authority (the managed platform, or an
// operator's own OIDC identity provider), whose tenant claim names the
// tenant the caller acts for. The connector only verifies: it holds the
// authority's RSA public key, never a signing key.
//
// A token is accepted when it is at most MaxTokenBytes, its header names
// alg RS256 (any other algorithm, "none" and HS256 included, is refused)
// and no crit extensions, its PKCS #1 v1.5 SHA-256 signature verifies
// against the configured key, it carries exp and has not expired (nor is
// before its nbf) beyond Config.Skew, its exp is no further ahead than
// Config.MaxLifetime (plus the skew), its iss and aud match the configured
// ones when they are set, and its tenant claim is a non-empty string. A
// management-plane token (the /manage/* routes, Hermes contract §7.2: the
// Portal's or the hermes CLI's) is checked the same way by VerifyInstance,
// except that its aud names the managed gateway as "agent:{gatewayId}".
package idtoken

import (
	"bytes"
	"cmp"
	"crypto"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"connector/internal/clock"
)

// MaxTokenBytes bounds a token.
const MaxTokenBytes = 8 << 10

// MinKeyBits is the smallest RSA key accepted.
const MinKeyBits = 2048

// MaxTenantBytes bounds the tenant claim.
const MaxTenantBytes = 256

// DefaultTenantClaim is the claim naming the tenant when Config.TenantClaim
// is empty (the Hermes gateway's OIDC mode reads "tid").
const DefaultTenantClaim = "tid"

// DefaultSkew is the clock skew tolerated when Config.Skew is zero.
const DefaultSkew = time.Minute

// DefaultMaxLifetime is how far ahead of the clock a token's exp may lie
// when Config.MaxLifetime is zero. Identity tokens are short-lived access
// tokens (OIDC providers and the Nous Portal issue them for minutes to
// hours and refresh them); one that claims to last longer was minted to
// outlive its revocation, and is refused whatever its signature.
const DefaultMaxLifetime = 24 * time.Hour

// ErrToken is a token Verify refuses; the error says why without echoing
// the token.
var ErrToken = errors.New("idtoken: token refused")

// Config configures a Verifier.
type Config struct {
	// Key is the authority's public key; required.
	Key *rsa.PublicKey
	// Issuer, when set, must equal the token's iss.
	Issuer string
	// Audience, when set, must be the token's aud or one of them.
	Audience string
	// TenantClaim names the claim carrying the tenant id; empty is
	// DefaultTenantClaim.
	TenantClaim string
	// Skew is how far exp and nbf may be off; zero is DefaultSkew.
	Skew time.Duration
	// MaxLifetime is how far ahead of the clock exp may lie (the skew
	// comes on top); zero is DefaultMaxLifetime.
	MaxLifetime time.Duration
	// Clock is the clock; nil is clock.System.
	Clock clock.Clock
}

// Verifier verifies tokens. It is safe for concurrent use.
type Verifier struct{ cfg Config }

// Claims are what a verified token says.
type Claims struct {
	// Tenant is the tenant claim's value.
	Tenant string
	// Subject is the sub claim (who, for the log); may be empty.
	Subject string
	// Expires is the exp claim.
	Expires time.Time
}

// New returns a Verifier; it refuses a missing or short key.
func New(cfg Config) (*Verifier, error) {
	if cfg.Key == nil {
		return nil, errors.New("idtoken: a public key is required")
	}
	if cfg.Key.N.BitLen() < MinKeyBits {
		return nil, fmt.Errorf("idtoken: the RSA key has %d bits; want at least %d", cfg.Key.N.BitLen(), MinKeyBits)
	}
	cfg.TenantClaim = cmp.Or(cfg.TenantClaim, DefaultTenantClaim)
	cfg.Skew = cmp.Or(max(cfg.Skew, 0), DefaultSkew)
	cfg.MaxLifetime = cmp.Or(max(cfg.MaxLifetime, 0), DefaultMaxLifetime)
	if cfg.Clock == nil {
		cfg.Clock = clock.System
	}
	return &Verifier{cfg: cfg}, nil
}

// LoadPublicKey reads an RSA public key from a PEM file: a PUBLIC KEY
// (PKIX), an RSA PUBLIC KEY (PKCS #1) or a CERTIFICATE block.
func LoadPublicKey(path string) (*rsa.PublicKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParsePublicKey(data)
}

// ParsePublicKey is LoadPublicKey on the file's contents.
func ParsePublicKey(data []byte) (*rsa.PublicKey, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, errors.New("idtoken: no PEM block in the public key file")
	}
	var pub any
	var err error
	switch block.Type {
	case "PUBLIC KEY":
		pub, err = x509.ParsePKIXPublicKey(block.Bytes)
	case "RSA PUBLIC KEY":
		pub, err = x509.ParsePKCS1PublicKey(block.Bytes)
	case "CERTIFICATE":
		var cert *x509.Certificate
		if cert, err = x509.ParseCertificate(block.Bytes); err == nil {
			pub = cert.PublicKey
		}
	default:
		return nil, fmt.Errorf("idtoken: PEM block %q: want PUBLIC KEY, RSA PUBLIC KEY or CERTIFICATE", block.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("idtoken: public key: %w", err)
	}
	key, ok := pub.(*rsa.PublicKey)
	if !ok {
		return nil, errors.New("idtoken: the public key is not an RSA key (RS256 needs one)")
	}
	return key, nil
}

// AgentAudiencePrefix prefixes the audience of a management-plane token:
// aud "agent:{gatewayId}" names the gateway (the Hermes contract's
// instance) the caller manages (Hermes contract §3, §7.2).
const AgentAudiencePrefix = "agent:"

// Verify checks token (the bearer, without "Bearer ") and returns its
// claims.
func (v *Verifier) Verify(token string) (Claims, error) {
	return v.verify(token, func(aud []string) error {
		if v.cfg.Audience != "" && !slices.Contains(aud, v.cfg.Audience) {
			return errors.New("aud does not match")
		}
		return nil
	})
}

// VerifyInstance checks a management-plane token as Verify does, except
// for the audience: instead of Config.Audience, its aud must name exactly
// one gateway as "agent:{gatewayId}" (a string or one entry of a list). It
// returns the claims and that gateway id.
func (v *Verifier) VerifyInstance(token string) (Claims, string, error) {
	var gateway string
	claims, err := v.verify(token, func(aud []string) error {
		for _, a := range aud {
			id, ok := strings.CutPrefix(a, AgentAudiencePrefix)
			switch {
			case !ok:
			case id == "" || len(id) > MaxTenantBytes:
				return errors.New("aud names an empty or oversized agent")
			case gateway != "" && gateway != id:
				return errors.New("aud names more than one agent")
			default:
				gateway = id
			}
		}
		if gateway == "" {
			return errors.New("aud names no agent:{gatewayId}")
		}
		return nil
	})
	if err != nil {
		return Claims{}, "", err
	}
	return claims, gateway, nil
}

// verify checks token; audience judges its aud values.
func (v *Verifier) verify(token string, audience func(aud []string) error) (Claims, error) {
	bad := func(why string) (Claims, error) { return Claims{}, fmt.Errorf("%w: %s", ErrToken, why) }
	if token == "" {
		return bad("empty")
	}
	if len(token) > MaxTokenBytes {
		return bad("longer than the size limit")
	}
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return bad("not a JWT (want three dot-separated parts)")
	}
	headerJSON, err := b64.DecodeString(parts[0])
	if err != nil {
		return bad("header is not base64url")
	}
	var header struct {
		Alg  string          `json:"alg"`
		Crit json.RawMessage `json:"crit"`
	}
	if err := json.Unmarshal(headerJSON, &header); err != nil {
		return bad("header is not a JSON object")
	}
	if header.Alg != "RS256" {
		return bad("alg is not RS256")
	}
	if header.Crit != nil {
		return bad("crit extensions are not supported")
	}
	sig, err := b64.DecodeString(parts[2])
	if err != nil {
		return bad("signature is not base64url")
	}
	digest := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if err := rsa.VerifyPKCS1v15(v.cfg.Key, crypto.SHA256, digest[:], sig); err != nil {
		return bad("signature does not verify")
	}
	payload, err := b64.DecodeString(parts[1])
	if err != nil {
		return bad("payload is not base64url")
	}
	var claims map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.UseNumber()
	if err := dec.Decode(&claims); err != nil || claims == nil {
		return bad("payload is not a JSON object")
	}
	now := v.cfg.Clock.Now()
	exp, ok := numericDate(claims["exp"])
	if !ok {
		return bad("no numeric exp claim")
	}
	if !now.Before(exp.Add(v.cfg.Skew)) {
		return bad("expired")
	}
	if exp.After(now.Add(v.cfg.MaxLifetime + v.cfg.Skew)) {
		return bad("exp is further ahead than the maximum lifetime")
	}
	if raw, present := claims["nbf"]; present {
		nbf, ok := numericDate(raw)
		if !ok {
			return bad("nbf is not a number")
		}
		if now.Add(v.cfg.Skew).Before(nbf) {
			return bad("not valid yet (nbf)")
		}
	}
	if v.cfg.Issuer != "" && stringClaim(claims["iss"]) != v.cfg.Issuer {
		return bad("iss does not match")
	}
	if err := audience(audiences(claims["aud"])); err != nil {
		return bad(err.Error())
	}
	tenant := stringClaim(claims[v.cfg.TenantClaim])
	if tenant == "" || len(tenant) > MaxTenantBytes {
		return bad("no tenant claim " + v.cfg.TenantClaim)
	}
	return Claims{Tenant: tenant, Subject: stringClaim(claims["sub"]), Expires: exp}, nil
}

// b64 is the JWT's base64url without padding, refusing non-canonical
// encodings, so one signed token has one spelling.
var b64 = base64.RawURLEncoding.Strict()

// numericDate decodes a JWT NumericDate (seconds since the epoch).
func numericDate(raw json.RawMessage) (time.Time, bool) {
	var n json.Number
	if len(raw) == 0 || raw[0] == '"' || json.Unmarshal(raw, &n) != nil {
		return time.Time{}, false
	}
	f, err := n.Float64()
	if err != nil || math.IsNaN(f) || f < 0 || f > 1e11 {
		return time.Time{}, false
	}
	sec, frac := math.Modf(f)
	return time.Unix(int64(sec), int64(frac*1e9)), true
}

// stringClaim is raw as a string, "" when it is not one.
func stringClaim(raw json.RawMessage) string {
	var s string
	if raw == nil || json.Unmarshal(raw, &s) != nil {
		return ""
	}
	return s
}

// audiences is aud (a string or an array of strings) as a list; nil when
// it is neither.
func audiences(raw json.RawMessage) []string {
	if s := stringClaim(raw); s != "" {
		return []string{s}
	}
	var list []string
	if raw == nil || json.Unmarshal(raw, &list) != nil {
		return nil
	}
	return list
}
