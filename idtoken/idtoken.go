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
// against one of the configured keys (Config.Keys: a header kid picks the
// key of that id, else those without one; a token without kid tries each),
// it carries exp and has not expired (nor is
// before its nbf) beyond DefaultSkew, its exp is no further ahead than
// Config.MaxLifetime (plus the skew), its iss and aud match the configured
// ones when they are set, and its tenant claim is a non-empty string. A
// management-plane token (the /manage/* routes, Hermes contract §7.2: the
// Portal's or the hermes CLI's) is checked the same way by VerifyInstance,
// except that its aud names the managed gateway as "agent:{gatewayId}".
// Every check but the signature runs first: anyone may send a token, and
// one refused for its header or claims costs no RSA verification.
package idtoken

import (
	"bytes"
	"cmp"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"connector/internal/clock"
)

// MaxTokenBytes bounds a token.
const MaxTokenBytes = 8 << 10

// MinKeyBits is the smallest RSA key accepted.
const MinKeyBits = 2048

// MaxKeys bounds the configured keys, and so the signatures one token
// without kid costs: the authority's current key and those being rotated
// in or out.
const MaxKeys = 4

// MaxTenantBytes bounds the tenant claim.
const MaxTenantBytes = 256

// DefaultTenantClaim is the claim naming the tenant when Config.TenantClaim
// is empty (the Hermes gateway's OIDC mode reads "tid").
const DefaultTenantClaim = "tid"

// DefaultSkew is the clock skew tolerated on exp and nbf.
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

// Key is one of the authority's public keys.
type Key struct {
	// ID is the kid of the tokens it signs; empty, it verifies tokens of
	// any kid that no other key claims, and those without one.
	ID string
	// Public is the key.
	Public *rsa.PublicKey
}

// Config configures a Verifier.
type Config struct {
	// Keys are the authority's public keys, 1 to MaxKeys, their ids
	// distinct; required.
	Keys []Key
	// Issuer, when set, must equal the token's iss.
	Issuer string
	// Audience, when set, must be the token's aud or one of them.
	Audience string
	// TenantClaim names the claim carrying the tenant id; empty is
	// DefaultTenantClaim.
	TenantClaim string
	// MaxLifetime is how far ahead of the clock exp may lie (DefaultSkew
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

// New returns a Verifier; it refuses no key, more than MaxKeys, a short
// key and two keys of one id.
func New(cfg Config) (*Verifier, error) {
	if len(cfg.Keys) == 0 || len(cfg.Keys) > MaxKeys {
		return nil, fmt.Errorf("idtoken: %d public keys; want 1 to %d", len(cfg.Keys), MaxKeys)
	}
	for i, k := range cfg.Keys {
		if k.Public == nil || k.Public.N.BitLen() < MinKeyBits {
			return nil, fmt.Errorf("idtoken: key %d is no RSA key of at least %d bits", i+1, MinKeyBits)
		}
		if k.ID != "" && slices.ContainsFunc(cfg.Keys[:i], func(o Key) bool { return o.ID == k.ID }) {
			return nil, fmt.Errorf("idtoken: two keys of kid %q", k.ID)
		}
	}
	cfg.TenantClaim = cmp.Or(cfg.TenantClaim, DefaultTenantClaim)
	cfg.MaxLifetime = cmp.Or(max(cfg.MaxLifetime, 0), DefaultMaxLifetime)
	cfg.Clock = cmp.Or(cfg.Clock, clock.System)
	return &Verifier{cfg: cfg}, nil
}

// LoadPublicKeys reads RSA public keys from a PEM file: one or more
// PUBLIC KEY (PKIX), RSA PUBLIC KEY (PKCS #1) or CERTIFICATE blocks, each
// with an optional "kid: <id>" header naming its Key.ID. A certificate
// that issued another key's certificate of the file (a chain's CA, in a
// "fullchain" file; not its own key's, renewed), or whose key usage
// excludes digitalSignature (a CA's: certificate and CRL signing, RFC 5280
// §4.2.1.3), is no key: a CA signs certificates, and its holder must not
// mint identity tokens.
func LoadPublicKeys(path string) ([]Key, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParsePublicKeys(data)
}

// ParsePublicKeys is LoadPublicKeys on the file's contents.
func ParsePublicKeys(data []byte) ([]Key, error) {
	var blocks []*pem.Block
	var certs []*x509.Certificate                     // blocks[i]'s certificate, nil for a key
	unread := bytes.Count(data, []byte("-----BEGIN")) // pem.Decode skips a block it cannot read
	for block, rest := pem.Decode(data); block != nil; block, rest = pem.Decode(rest) {
		unread--
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil || block.Type != "CERTIFICATE" {
			c = nil
		}
		blocks, certs = append(blocks, block), append(certs, c)
	}
	var keys []Key
	for i, block := range blocks {
		if c := certs[i]; c != nil && (c.KeyUsage != 0 && c.KeyUsage&x509.KeyUsageDigitalSignature == 0 || slices.ContainsFunc(certs, func(o *x509.Certificate) bool {
			return o != nil && !bytes.Equal(o.RawSubjectPublicKeyInfo, c.RawSubjectPublicKeyInfo) && c.CheckSignature(o.SignatureAlgorithm, o.RawTBSCertificate, o.Signature) == nil
		})) {
			continue // a CA's: its key usage excludes signing, or it issued another key's certificate in the file
		}
		key, err := jwt.ParseRSAPublicKeyFromPEM(pem.EncodeToMemory(&pem.Block{Type: block.Type, Bytes: block.Bytes}))
		if err != nil {
			return nil, fmt.Errorf("idtoken: public key %d (want a PEM PUBLIC KEY, RSA PUBLIC KEY or CERTIFICATE of an RSA key): %w", len(keys)+1, err)
		}
		keys = append(keys, Key{ID: block.Headers["kid"], Public: key})
	}
	if unread != 0 {
		return nil, fmt.Errorf("idtoken: %d PEM blocks do not parse: mend or remove them", unread)
	}
	if len(keys) == 0 {
		return nil, errors.New("idtoken: no PEM block of a public key (a CA's certificate is none)")
	}
	return keys, nil
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

// keys returns the keys that may have signed t: the one its kid names,
// else those without an id (all of them for a token without kid; an
// empty kid names none).
func (v *Verifier) keys(t *jwt.Token) ([]*rsa.PublicKey, error) {
	kid, named := t.Header["kid"]
	id, ok := kid.(string)
	if named && !ok {
		return nil, errors.New("kid is not a string")
	}
	var keys []*rsa.PublicKey
	for _, k := range v.cfg.Keys {
		if id != "" && k.ID == id {
			return []*rsa.PublicKey{k.Public}, nil
		}
		if !named || k.ID == "" {
			keys = append(keys, k.Public)
		}
	}
	if len(keys) == 0 {
		return nil, errors.New("no key of this kid")
	}
	return keys, nil
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
	opts := []jwt.ParserOption{
		jwt.WithStrictDecoding(), // one signed token has one spelling
		jwt.WithExpirationRequired(),
		jwt.WithLeeway(DefaultSkew),
		jwt.WithTimeFunc(v.cfg.Clock.Now),
	}
	if v.cfg.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(v.cfg.Issuer))
	}
	// Everything but the signature is checked first: anyone may send a
	// token, and one refused anyway costs no RSA verification.
	claims := jwt.MapClaims{}
	parsed, parts, err := jwt.NewParser(opts...).ParseUnverified(token, claims)
	if err != nil {
		return bad(err.Error()) // jwt's errors never echo the token
	}
	if alg := parsed.Method.Alg(); alg != "RS256" {
		return bad("alg " + alg + " is not RS256")
	}
	if _, crit := parsed.Header["crit"]; crit {
		return bad("crit extensions are not supported")
	}
	if err := jwt.NewValidator(opts...).Validate(claims); err != nil {
		return bad(err.Error())
	}
	exp, _ := claims.GetExpirationTime()
	if exp.After(v.cfg.Clock.Now().Add(v.cfg.MaxLifetime + DefaultSkew)) {
		return bad("exp is further ahead than the maximum lifetime")
	}
	aud, _ := claims.GetAudience() // an aud of another shape names no one
	if err := audience(aud); err != nil {
		return bad(err.Error())
	}
	tenant, _ := claims[v.cfg.TenantClaim].(string)
	if tenant == "" || len(tenant) > MaxTenantBytes {
		return bad("no tenant claim " + v.cfg.TenantClaim)
	}
	keys, err := v.keys(parsed)
	if err != nil {
		return bad(err.Error())
	}
	signed := parts[0] + "." + parts[1]
	if !slices.ContainsFunc(keys, func(k *rsa.PublicKey) bool { return parsed.Method.Verify(signed, parsed.Signature, k) == nil }) {
		return bad("signature is invalid")
	}
	subject, _ := claims["sub"].(string)
	return Claims{Tenant: tenant, Subject: subject, Expires: exp.Time}, nil
}
