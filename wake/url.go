package wake

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"connector/internal/textsplit"
)

// MaxURLBytes bounds a wake URL.
const MaxURLBytes = 2048

// ErrInvalidURL is a wake URL ValidateURL refuses; the error's message says
// why, never echoing the URL (it may carry a token in its query).
var ErrInvalidURL = errors.New("wake: invalid wake URL")

// ValidateURL checks a gateway's wake URL: an absolute http or https URL
// with an ASCII host (an IDN in its punycode form), at most MaxURLBytes
// long, without userinfo (no credentials in a URL the connector stores and
// logs the host of) and without a fragment. It returns the URL as given.
func ValidateURL(raw string) (string, error) {
	bad := func(why string) (string, error) { return "", fmt.Errorf("%w: %s", ErrInvalidURL, why) }
	switch {
	case raw == "":
		return bad("empty")
	case len(raw) > MaxURLBytes:
		return bad("longer than " + strconv.Itoa(MaxURLBytes) + " bytes")
	case strings.ContainsFunc(raw, func(r rune) bool { return r <= ' ' || r == 0x7f }):
		return bad("contains a space or a control character")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return bad("not a URL")
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https", u.Opaque != "":
		return bad("want an http:// or https:// URL")
	case u.User != nil || strings.Contains(u.Host, "@"):
		return bad("userinfo (user:password@) is not allowed")
	case u.Hostname() == "":
		return bad("no host")
	case strings.ContainsFunc(u.Hostname(), func(r rune) bool { return r >= utf8.RuneSelf }):
		// HTTP clients map such a name (IDNA) to an ASCII one, so its many
		// spellings would each get their own per-host poke budget.
		return bad("a host name outside ASCII: give its punycode (xn--) form")
	case u.Fragment != "" || strings.Contains(raw, "#"):
		return bad("a fragment (#...) is not allowed")
	}
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return bad("port out of range")
		}
	}
	return raw, nil
}

// maxHostBytes bounds the host Host returns (a DNS name is at most 253
// bytes): it is logged before the URL is checked.
const maxHostBytes = 256

// Host is the host (and port) of a wake URL, for logs, at most
// maxHostBytes: the path and query may carry a token and are never
// logged.
func Host(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return textsplit.Truncate(u.Host, maxHostBytes)
}
