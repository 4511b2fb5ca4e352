package media

import (
	"context"
	"errors"
	"fmt"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"path"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// routePrefix is the path of re-host URLs, before the id.
const routePrefix = "/relay/media/"

// Errors of Resolve besides the store's.
var (
	// ErrBadURL: source_url is not an http(s) URL.
	ErrBadURL = errors.New("media: source_url is not an http or https URL")
	// ErrForbiddenAddress: source_url resolves to a loopback, private,
	// link-local or otherwise non-public address.
	ErrForbiddenAddress = errors.New("media: source_url resolves to a non-public address")
)

// FetchError is a public URL that did not yield the object (an HTTP status
// other than 200, or a network failure). Its text names neither the URL nor
// an address.
type FetchError struct {
	Status int // 0 for a network failure
	Err    error
}

func (e *FetchError) Error() string {
	if e.Status != 0 {
		return fmt.Sprintf("media: source_url answered HTTP %d", e.Status)
	}
	return "media: source_url could not be downloaded"
}

func (e *FetchError) Unwrap() error { return e.Err }

// ParseRef returns the media id a send_media source_url names when it is a
// re-host URL of this store, and ok=false for any other URL. With
// Config.PublicURL its origin must be the public URL's (origin) and its
// path the public URL's path + /relay/media/<id>; without, any host with the
// path /relay/media/<id> names a stored object. A re-host path
// with a malformed id is still a reference (to nothing).
func (s *Store) ParseRef(sourceURL string) (id string, ok bool) {
	u, err := url.Parse(sourceURL)
	if err != nil {
		return "", false
	}
	prefix := routePrefix
	if s.cfg.PublicURL != "" {
		base, err := url.Parse(s.cfg.PublicURL)
		if err != nil {
			return "", false
		}
		o, ok := origin(u)
		if bo, _ := origin(base); !ok || o != bo { // base's checked by Config.Validate
			return "", false
		}
		prefix = strings.TrimSuffix(base.Path, "/") + routePrefix
	}
	if !strings.HasPrefix(u.Path, prefix) {
		return "", false
	}
	return strings.TrimPrefix(u.Path, prefix), true
}

// urlOrigin is what a URL dials: its scheme, its host name (lower case, an
// IP address in its canonical form) and its port.
type urlOrigin struct {
	scheme, host string
	port         uint64
}

// origin returns u's origin, the port the scheme's default when u has
// none or an empty one (RFC 3986 §6.2.3), and ok=false for a port that
// is 0 or above 65535.
func origin(u *url.URL) (o urlOrigin, ok bool) {
	o = urlOrigin{scheme: strings.ToLower(u.Scheme), host: strings.ToLower(u.Hostname())}
	if a, err := netip.ParseAddr(o.host); err == nil {
		o.host = a.String()
	}
	if p := u.Port(); p != "" {
		n, err := strconv.ParseUint(p, 10, 16)
		return urlOrigin{o.scheme, o.host, n}, err == nil && n != 0
	}
	switch o.scheme {
	case "http":
		o.port = 80
	case "https":
		o.port = 443
	}
	return o, true
}

// Resolve opens what a send_media source_url names for tenant: a re-host
// URL of this store opens tenant's object (ErrNotFound for an unknown,
// expired or another tenant's id), and any other http(s) URL is downloaded
// (at most MaxBytes, streamed to a temporary object removed on Close).
func (s *Store) Resolve(ctx context.Context, tenant, sourceURL string) (*Object, error) {
	if id, ok := s.ParseRef(sourceURL); ok {
		return s.Open(tenant, id)
	}
	u, err := url.Parse(sourceURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, ErrBadURL
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, ErrBadURL
	}
	req.Header.Set("User-Agent", "connector-media/1")
	resp, err := s.fetcher.Do(req)
	if err != nil {
		if errors.Is(err, ErrForbiddenAddress) {
			return nil, ErrForbiddenAddress
		}
		return nil, &FetchError{Err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, &FetchError{Status: resp.StatusCode}
	}
	if resp.ContentLength > s.cfg.MaxBytes {
		return nil, ErrTooLarge
	}
	mimeType, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	info, err := s.Put(tenant, resp.Body, mimeType, path.Base(u.Path))
	if err != nil {
		var fe *FetchError
		if !errors.Is(err, ErrTooLarge) && !errors.Is(err, ErrQuota) && !errors.As(err, &fe) {
			return nil, &FetchError{Err: err}
		}
		return nil, err
	}
	obj, err := s.Open(tenant, info.ID)
	if err != nil {
		s.remove(info.ID)
		return nil, err
	}
	obj.cleanup = func() { s.remove(info.ID) }
	return obj, nil
}

// newFetcher builds the client Resolve downloads with. Unless
// allowPrivate, every connection (redirects included) is checked after DNS
// resolution: only public unicast addresses are dialed.
func newFetcher(allowPrivate bool) *http.Client {
	dialer := &net.Dialer{Timeout: 10 * time.Second}
	if !allowPrivate {
		dialer.Control = func(_, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil || !publicAddr(ap.Addr()) {
				return ErrForbiddenAddress
			}
			return nil
		}
	}
	tr := &http.Transport{
		DialContext:           dialer.DialContext,
		ForceAttemptHTTP2:     true,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: 15 * time.Second,
		MaxIdleConns:          16,
		IdleConnTimeout:       30 * time.Second,
	}
	return &http.Client{
		Transport: tr,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) > 5 { // via holds the first request: five redirects are followed
				return errors.New("too many redirects")
			}
			if req.URL.Scheme != "http" && req.URL.Scheme != "https" {
				return ErrBadURL
			}
			return nil
		},
	}
}

// Prefixes of IPv6 addresses that carry an IPv4 address a gateway or relay
// on the path turns into an IPv4 packet: NAT64 (RFC 6052, RFC 8215) with it
// in the last 32 bits, 6to4 (RFC 3056) with it in bits 16 to 47; and the
// deprecated ranges an address of which is never public.
var (
	nat64Prefixes = []netip.Prefix{netip.MustParsePrefix("64:ff9b::/96"), netip.MustParsePrefix("64:ff9b:1::/48")}
	sixToFour     = netip.MustParsePrefix("2002::/16")
	// v4Compatible (RFC 4291 §2.5.5.1, deprecated) carries it in the last
	// 32 bits too; siteLocal (RFC 3879, deprecated) is private.
	v4Compatible = netip.MustParsePrefix("::/96")
	siteLocal    = netip.MustParsePrefix("fec0::/10")
)

// publicAddr reports whether a is a public unicast address. An IPv6
// address carrying an IPv4 one (NAT64, 6to4) is judged by that IPv4
// address.
func publicAddr(a netip.Addr) bool {
	a = a.Unmap().WithZone("") // a zoned address matches no prefix
	if a.Is6() {
		b := a.As16()
		switch {
		case siteLocal.Contains(a):
			return false
		case nat64Prefixes[0].Contains(a), nat64Prefixes[1].Contains(a), v4Compatible.Contains(a):
			a = netip.AddrFrom4([4]byte(b[12:16]))
		case sixToFour.Contains(a):
			a = netip.AddrFrom4([4]byte(b[2:6]))
		}
	}
	switch {
	case !a.IsValid(), a.IsLoopback(), a.IsPrivate(), a.IsLinkLocalUnicast(), a.IsLinkLocalMulticast(),
		a.IsMulticast(), a.IsUnspecified(), a.IsInterfaceLocalMulticast():
		return false
	}
	if a.Is4() {
		b := a.As4()
		switch {
		case b[0] == 0, b[0] == 100 && b[1]&0xc0 == 64, // 0/8, 100.64/10 (CGNAT)
			b[0] == 192 && b[1] == 0 && b[2] == 0, // 192.0.0/24
			b[0] == 198 && b[1]&0xfe == 18,        // 198.18/15
			b[0] >= 240:                           // reserved, broadcast
			return false
		}
	}
	return true
}
