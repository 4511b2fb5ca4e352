package contract

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"time"
)

// TokenTTL is the lifetime the gateway gives every upgrade token it mints.
const TokenTTL = 300 * time.Second

// MaxTokenBytes bounds the bearer token we are willing to decode.
const MaxTokenBytes = 1024

// DefaultMaxTokenLifetime is how far ahead of now (plus the clock skew) a
// token's exp may lie unless configured otherwise: twelve times the
// gateway's TokenTTL, so a gateway clock running ahead by up to 55 minutes
// still gets in, while a token minted to last (exp 9999999999, say) is
// refused.
const DefaultMaxTokenLifetime = time.Hour

// Token errors. None of them carries the token or a secret.
var (
	ErrTokenMissing   = errors.New("no bearer token")
	ErrTokenMalformed = errors.New("malformed token")
	ErrTokenBadSig    = errors.New("token signature does not match")
	ErrTokenExpired   = errors.New("token expired")
	// ErrTokenLifetime reports an exp further ahead than the maximum
	// lifetime allows. It is not "expired": re-dialing with a fresh token
	// of the same kind would not help.
	ErrTokenLifetime = errors.New("token expiry is further ahead than the maximum lifetime")
)

// MintToken returns the upgrade token the gateway's make_upgrade_token()
// builds: base64url (unpadded) of "<gatewayID>:<exp>:<hex HMAC-SHA256>", the
// HMAC keyed by secret over "<gatewayID>:<exp>".
func MintToken(gatewayID, secret string, exp int64) string {
	signed := gatewayID + ":" + strconv.FormatInt(exp, 10)
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(signed))
	raw := signed + ":" + hex.EncodeToString(mac.Sum(nil))
	return base64.RawURLEncoding.EncodeToString([]byte(raw))
}

// Token is a decoded, not yet verified, upgrade token.
type Token struct {
	GatewayID string
	// Exp is the expiry in Unix seconds; 0 means "no expiry" in the gateway's
	// auth module (it never sends 0 on an upgrade).
	Exp int64
	// signed is "<gatewayID>:<exp as received>", the HMAC input.
	signed string
	sig    [sha256.Size]byte
}

// ParseToken decodes a token without verifying it. It splits from the right,
// so a gateway id may contain ':'.
func ParseToken(token string) (Token, error) {
	var t Token
	if token == "" {
		return t, ErrTokenMissing
	}
	if len(token) > MaxTokenBytes {
		return t, ErrTokenMalformed
	}
	token = strings.TrimRight(token, "=")
	raw, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil {
		return t, ErrTokenMalformed
	}
	s := string(raw)
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return t, ErrTokenMalformed
	}
	sigHex := s[i+1:]
	j := strings.LastIndexByte(s[:i], ':')
	if j <= 0 {
		return t, ErrTokenMalformed
	}
	expStr := s[j+1 : i]
	if expStr == "" || len(expStr) > 19 || strings.TrimLeft(expStr, "0123456789") != "" {
		return t, ErrTokenMalformed
	}
	exp, err := strconv.ParseInt(expStr, 10, 64)
	if err != nil {
		return t, ErrTokenMalformed
	}
	if len(sigHex) != hex.EncodedLen(sha256.Size) {
		return t, ErrTokenMalformed
	}
	if _, err := hex.Decode(t.sig[:], []byte(sigHex)); err != nil {
		return t, ErrTokenMalformed
	}
	t.GatewayID = s[:j]
	t.Exp = exp
	t.signed = s[:i]
	return t, nil
}

// BearerToken extracts the token from an Authorization header value.
func BearerToken(header string) (string, error) {
	const prefix = "bearer "
	if len(header) < len(prefix) || !strings.EqualFold(header[:len(prefix)], prefix) {
		return "", ErrTokenMissing
	}
	return strings.TrimSpace(header[len(prefix):]), nil
}

// TokenWindow bounds the exp a token may carry.
type TokenWindow struct {
	// Skew is tolerated past the expiry and past MaxLifetime.
	Skew time.Duration
	// MaxLifetime is how far ahead of now exp may lie. Zero means
	// DefaultMaxTokenLifetime.
	MaxLifetime time.Duration
}

// Verify checks the signature against each of secrets (several while a
// secret is being rotated) in constant time, then exp against now.
//
// A token whose signature matches is refused with ErrTokenExpired when exp
// is past (by more than w.Skew) or 0 ("never" in the gateway's auth module,
// which it never sends on an upgrade), and with ErrTokenLifetime when exp
// lies more than w.MaxLifetime plus w.Skew ahead: the gateway mints 300 s
// tokens, so only a token minted to outlive a leak, or a gateway clock far
// ahead, gets there.
func (t Token) Verify(secrets []string, now time.Time, w TokenWindow) error {
	match := 0
	for _, s := range secrets {
		mac := hmac.New(sha256.New, []byte(s))
		mac.Write([]byte(t.signed))
		match |= subtle.ConstantTimeCompare(mac.Sum(nil), t.sig[:])
	}
	if match != 1 {
		return ErrTokenBadSig
	}
	if t.Exp == 0 || now.Add(-w.Skew).Unix() > t.Exp {
		return ErrTokenExpired
	}
	if w.MaxLifetime <= 0 {
		w.MaxLifetime = DefaultMaxTokenLifetime
	}
	// Both are positive (now is past 1970), so the difference cannot wrap.
	if t.Exp-now.Unix() > int64((w.MaxLifetime+w.Skew)/time.Second) {
		return ErrTokenLifetime
	}
	return nil
}
