package contract

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
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

// MaxSecretsPerGateway bounds a gateway's rotation list (TokenKeys).
const MaxSecretsPerGateway = 8

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

// TokenKeys is one gateway's rotation list, ready for Match. The zero
// value holds no key: no token verifies against it, and checking one takes
// as long as against a full list.
type TokenKeys struct {
	// keys holds the HMAC key of each secret, padded with nil keys. A secret
	// longer than the SHA-256 block is replaced by its digest, as HMAC
	// itself would do on every call, so every key costs the same to use.
	keys [MaxSecretsPerGateway][]byte
	// live is 1 for a slot holding a secret, 0 for padding.
	live [MaxSecretsPerGateway]int
}

// NewTokenKeys prepares a gateway's secrets (several while one is rotated).
// It refuses more than MaxSecretsPerGateway secrets and an empty one; its
// errors never quote a secret.
func NewTokenKeys(secrets []string) (TokenKeys, error) {
	var k TokenKeys
	if len(secrets) > MaxSecretsPerGateway {
		return k, fmt.Errorf("%d secrets, at most %d", len(secrets), MaxSecretsPerGateway)
	}
	for i, s := range secrets {
		if s == "" {
			return TokenKeys{}, fmt.Errorf("secret %d is empty", i+1)
		}
		key := []byte(s)
		if len(key) > sha256.BlockSize {
			sum := sha256.Sum256(key)
			key = sum[:]
		}
		k.keys[i], k.live[i] = key, 1
	}
	return k, nil
}

// String keeps secrets out of logs and errors that format a TokenKeys.
func (k TokenKeys) String() string {
	n := 0
	for _, l := range k.live {
		n += l
	}
	return fmt.Sprintf("TokenKeys(%d secrets)", n)
}

// GoString is String, for %#v.
func (k TokenKeys) GoString() string { return k.String() }

// tokenHash is the hash under every token HMAC; tests count its uses.
var tokenHash = sha256.New

// TokenWindow bounds the exp a token may carry.
type TokenWindow struct {
	// Skew is tolerated past the expiry and past MaxLifetime.
	Skew time.Duration
	// MaxLifetime is how far ahead of now exp may lie. Zero means
	// DefaultMaxTokenLifetime.
	MaxLifetime time.Duration
}

// Match checks the signature against every slot of keys (nil means none)
// and then exp against now. It computes MaxSecretsPerGateway HMACs and
// compares each in constant time, with no early exit, whatever keys holds,
// so its time tells neither whether the gateway id exists nor how many
// secrets it rotates through, nor which one matched.
//
// A token whose signature matches is refused with ErrTokenExpired when exp
// is past (by more than w.Skew) or 0 ("never" in the gateway's auth module,
// which it never sends on an upgrade), and with ErrTokenLifetime when exp
// lies more than w.MaxLifetime plus w.Skew ahead: the gateway mints 300 s
// tokens, so only a token minted to outlive a leak, or a gateway clock far
// ahead, gets there.
//
// It returns the key the token was signed with (nil with an error), so
// that TokenKeys.Holds can tell later whether a new rotation list still
// has it. Which slot matched leaves its time unchanged.
func (t Token) Match(keys *TokenKeys, now time.Time, w TokenWindow) ([]byte, error) {
	if keys == nil {
		keys = &TokenKeys{}
	}
	match, which := 0, 0
	signed := []byte(t.signed)
	var sum [sha256.Size]byte
	for i, key := range keys.keys {
		mac := hmac.New(tokenHash, key)
		mac.Write(signed)
		eq := subtle.ConstantTimeCompare(mac.Sum(sum[:0]), t.sig[:]) & keys.live[i]
		match |= eq
		which = subtle.ConstantTimeSelect(eq, i, which)
	}
	if match != 1 {
		return nil, ErrTokenBadSig
	}
	if t.Exp == 0 || now.Add(-w.Skew).Unix() > t.Exp {
		return nil, ErrTokenExpired
	}
	if w.MaxLifetime <= 0 {
		w.MaxLifetime = DefaultMaxTokenLifetime
	}
	// Both are positive (now is past 1970), so the difference cannot wrap.
	if t.Exp-now.Unix() > int64((w.MaxLifetime+w.Skew)/time.Second) {
		return nil, ErrTokenLifetime
	}
	return keys.keys[which], nil
}

// HeldBy reports whether o holds every secret of k.
func (k *TokenKeys) HeldBy(o *TokenKeys) bool {
	for i, key := range k.keys {
		if k.live[i] == 1 && !o.Holds(key) {
			return false
		}
	}
	return true
}

// Holds reports whether key, one Match returned, is among k's secrets.
func (k *TokenKeys) Holds(key []byte) bool {
	held := 0
	for i, own := range k.keys {
		held |= k.live[i] & subtle.ConstantTimeCompare(own, key)
	}
	return held == 1
}
