package discord

import (
	"bufio"
	"cmp"
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"net/url"

	xproxy "golang.org/x/net/proxy"
)

// This file opens a wss:// Gateway's socket through the proxy the
// environment names (HTTPS_PROXY, NO_PROXY), as gorilla's dialer did
// before the gateway took the TLS over (dialTLS): an http:// proxy by
// CONNECT, a socks5:// one by golang.org/x/net/proxy's SOCKS5 client.

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
	var c net.Conn
	switch proxy.Scheme {
	case "http":
		c, err = g.connectTunnel(ctx, network, proxy, addr)
	case "socks5", "socks5h":
		var d xproxy.Dialer
		if d, err = xproxy.FromURL(proxy, tcpDialer{g}); err == nil {
			c, err = d.(xproxy.ContextDialer).DialContext(ctx, network, addr)
		}
	default:
		return nil, fmt.Errorf("discord gateway: proxy scheme %q not supported (http, socks5)", proxy.Scheme)
	}
	if err != nil {
		return nil, fmt.Errorf("discord gateway: proxy %s: %w", proxy.Redacted(), err)
	}
	return c, nil
}

// tcpDialer is dialTCP as the forward dialer of a SOCKS5 proxy.
type tcpDialer struct{ g *gateway }

// Dial implements xproxy.Dialer.
func (d tcpDialer) Dial(network, addr string) (net.Conn, error) {
	return d.g.dialTCP(context.Background(), network, addr)
}

// DialContext implements xproxy.ContextDialer.
func (d tcpDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	return d.g.dialTCP(ctx, network, addr)
}

// connectTunnel asks the HTTP proxy for a tunnel to addr (CONNECT).
func (g *gateway) connectTunnel(ctx context.Context, network string, proxy *url.URL, addr string) (net.Conn, error) {
	c, err := g.dialTCP(ctx, network, net.JoinHostPort(proxy.Hostname(), cmp.Or(proxy.Port(), "80")))
	if err != nil {
		return nil, err
	}
	if err := connect(c, proxy, addr); err != nil {
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

// connect asks the HTTP proxy on c for a tunnel to addr.
func connect(c net.Conn, proxy *url.URL, addr string) error {
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
