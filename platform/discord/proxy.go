package discord

import (
	"bufio"
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
)

// This file opens a wss:// Gateway's socket through the proxy the
// environment names (HTTPS_PROXY, NO_PROXY), as gorilla's dialer did
// before the gateway took the TLS over (dialTLS): an http:// proxy by
// CONNECT, a socks5:// one by SOCKS5 (RFC 1928, with RFC 1929's username
// and password when the URL names a user).

// tunnel is a socket to addr (dialTCP), through the proxy g.proxy names
// for it, if any.
func (g *gateway) tunnel(ctx context.Context, network, addr string) (net.Conn, error) {
	proxy, err := g.proxy(&http.Request{URL: &url.URL{Scheme: "https", Host: addr}})
	if err != nil || proxy == nil {
		if err != nil {
			return nil, err
		}
		return g.dialTCP(ctx, network, addr)
	}
	var open func(net.Conn, *url.URL, string) error
	switch proxy.Scheme {
	case "http":
		open = connectTunnel
	case "socks5", "socks5h":
		open = socks5Tunnel
	default:
		return nil, fmt.Errorf("discord gateway: proxy scheme %q not supported (http, socks5)", proxy.Scheme)
	}
	port := cmp.Or(proxy.Port(), map[string]string{"http": "80"}[proxy.Scheme], "1080")
	c, err := g.dialTCP(ctx, network, net.JoinHostPort(proxy.Hostname(), port))
	if err != nil {
		return nil, err
	}
	if err := open(c, proxy, addr); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("discord gateway: proxy %s: %w", proxy.Redacted(), err)
	}
	return c, nil
}

// connectTunnel asks the HTTP proxy on c for a tunnel to addr.
func connectTunnel(c net.Conn, proxy *url.URL, addr string) error {
	req := &http.Request{Method: http.MethodConnect, URL: &url.URL{Opaque: addr}, Host: addr, Header: http.Header{}}
	if u := proxy.User; u != nil {
		pass, _ := u.Password()
		req.Header.Set("Proxy-Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(u.Username()+":"+pass)))
	}
	if err := req.Write(c); err != nil {
		return err
	}
	// A proxy sends nothing past its answer before the TLS handshake.
	resp, err := http.ReadResponse(bufio.NewReader(c), req)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("CONNECT answered %s", resp.Status)
	}
	return nil
}

// socks5Tunnel asks the SOCKS5 proxy on c for a tunnel to addr.
func socks5Tunnel(c net.Conn, proxy *url.URL, addr string) error {
	host, portText, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	port, err := strconv.ParseUint(portText, 10, 16)
	if err != nil || len(host) > 255 {
		return fmt.Errorf("address %q cannot be named to SOCKS5", addr)
	}
	method := byte(0) // no authentication
	if proxy.User != nil {
		method = 2 // username and password
	}
	var b [4]byte
	if _, err := c.Write([]byte{5, 1, method}); err != nil {
		return err
	}
	if _, err := io.ReadFull(c, b[:2]); err != nil {
		return err
	}
	if b[0] != 5 || b[1] != method {
		return errors.New("SOCKS5 authentication method refused")
	}
	if method == 2 {
		user := proxy.User.Username()
		pass, _ := proxy.User.Password()
		if len(user) > 255 || len(pass) > 255 {
			return errors.New("SOCKS5 username or password too long")
		}
		auth := append(append([]byte{1, byte(len(user))}, user...), byte(len(pass)))
		if _, err := c.Write(append(auth, pass...)); err != nil {
			return err
		}
		if _, err := io.ReadFull(c, b[:2]); err != nil {
			return err
		}
		if b[1] != 0 {
			return errors.New("SOCKS5 credentials refused")
		}
	}
	req := []byte{5, 1, 0}
	switch ip := net.ParseIP(host); {
	case ip.To4() != nil:
		req = append(append(req, 1), ip.To4()...)
	case ip != nil:
		req = append(append(req, 4), ip.To16()...)
	default:
		req = append(append(req, 3, byte(len(host))), host...)
	}
	if _, err := c.Write(append(req, byte(port>>8), byte(port))); err != nil {
		return err
	}
	if _, err := io.ReadFull(c, b[:4]); err != nil {
		return err
	}
	if b[0] != 5 || b[1] != 0 {
		return fmt.Errorf("SOCKS5 CONNECT refused (reply %d)", b[1])
	}
	skip := 2 // the bound port, after the bound address
	switch b[3] {
	case 1:
		skip += net.IPv4len
	case 4:
		skip += net.IPv6len
	case 3:
		if _, err := io.ReadFull(c, b[:1]); err != nil {
			return err
		}
		skip += int(b[0])
	default:
		return fmt.Errorf("SOCKS5 reply with address type %d", b[3])
	}
	_, err = io.ReadFull(c, make([]byte, skip))
	return err
}
