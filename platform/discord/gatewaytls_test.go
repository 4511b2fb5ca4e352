package discord

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/coder/websocket"
	gorilla "github.com/gorilla/websocket"

	"connector/platform/discord/discordtest"
)

// TestGatewayCloseFramesDroppedOverTLS: Discord's Gateway is wss://, where
// the socket carries TLS records, not WebSocket frames: the close frame
// discordgo writes on its own (1000, which ends the session at Discord)
// must be dropped above TLS, directly and through an HTTP proxy, and the
// one run's own close writes (ending) must still reach Discord.
func TestGatewayCloseFramesDroppedOverTLS(t *testing.T) {
	t.Parallel()
	codes := make(chan websocket.StatusCode, 1)
	discord := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		for {
			if _, _, err := c.Read(r.Context()); err != nil {
				codes <- websocket.CloseStatus(err)
				return
			}
		}
	}))
	t.Cleanup(discord.Close)
	var tunnels atomic.Int32
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodConnect || r.Host != strings.TrimPrefix(discord.URL, "https://") {
			http.Error(w, "not a CONNECT to the fake Discord", http.StatusBadRequest)
			return
		}
		up, err := net.Dial("tcp", r.Host)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		down, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			_ = up.Close()
			return
		}
		tunnels.Add(1)
		_, _ = io.WriteString(down, "HTTP/1.1 200 Connection established\r\n\r\n")
		go func() { _, _ = io.Copy(up, down); _ = up.Close() }()
		_, _ = io.Copy(down, up)
		_ = down.Close()
	}))
	t.Cleanup(proxy.Close)
	proxyURL, _ := url.Parse(proxy.URL)
	socks := fakeSOCKS5(t, &tunnels)

	e := newEnv(t, discordtest.Options{}, nil)
	d := e.p.gatewaySession().Dialer
	d.TLSClientConfig = discord.Client().Transport.(*http.Transport).TLSClientConfig
	gateway := "wss" + strings.TrimPrefix(discord.URL, "https") + "/?v=10&encoding=json"
	for _, c := range []struct {
		name   string
		proxy  *url.URL
		ending bool
		want   websocket.StatusCode
	}{
		{"discordgo's own close", nil, false, -1},
		{"run's close", nil, true, websocket.StatusNormalClosure},
		{"discordgo's own close, proxied", proxyURL, false, -1},
		{"run's close, proxied", proxyURL, true, websocket.StatusNormalClosure},
		{"discordgo's own close, over SOCKS5", socks, false, -1},
		{"run's close, over SOCKS5", socks, true, websocket.StatusNormalClosure},
	} {
		e.p.gw.proxy = func(*http.Request) (*url.URL, error) { return c.proxy, nil }
		e.p.gw.ending.Store(c.ending)
		before := tunnels.Load()
		conn, _, err := d.DialContext(waitCtx(t), gateway, nil)
		if err != nil {
			t.Fatalf("%s: dial: %v", c.name, err)
		}
		if err := conn.WriteMessage(gorilla.CloseMessage, gorilla.FormatCloseMessage(gorilla.CloseNormalClosure, "")); err != nil {
			t.Fatalf("%s: write the close: %v", c.name, err)
		}
		_ = conn.Close()
		select {
		case got := <-codes:
			if got != c.want {
				t.Fatalf("%s: the fake Discord read close code %d, want %d (-1: the socket dropped, no close frame)", c.name, got, c.want)
			}
		case <-waitCtx(t).Done():
			t.Fatalf("%s: the fake Discord never saw the connection end", c.name)
		}
		if tunnelled := tunnels.Load() - before; (c.proxy != nil) != (tunnelled == 1) {
			t.Fatalf("%s: %d CONNECT tunnels through the proxy", c.name, tunnelled)
		}
	}
}

// fakeSOCKS5 is a SOCKS5 proxy (no authentication, CONNECT to an IPv4
// address) on loopback, counting its tunnels in tunnels, until the test
// ends.
func fakeSOCKS5(t *testing.T, tunnels *atomic.Int32) *url.URL {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			down, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer down.Close()
				b := make([]byte, 10)
				if _, err := io.ReadFull(down, b[:3]); err != nil || b[0] != 5 || b[2] != 0 {
					return
				}
				if _, err := down.Write([]byte{5, 0}); err != nil {
					return
				}
				if _, err := io.ReadFull(down, b[:10]); err != nil || b[1] != 1 || b[3] != 1 {
					return
				}
				up, err := net.Dial("tcp", net.JoinHostPort(net.IP(b[4:8]).String(), strconv.Itoa(int(b[8])<<8|int(b[9]))))
				if err != nil {
					_, _ = down.Write([]byte{5, 5, 0, 1, 0, 0, 0, 0, 0, 0})
					return
				}
				defer up.Close()
				tunnels.Add(1)
				if _, err := down.Write([]byte{5, 0, 0, 1, 0, 0, 0, 0, 0, 0}); err != nil {
					return
				}
				go func() { _, _ = io.Copy(up, down); _ = up.Close() }()
				_, _ = io.Copy(down, up)
			}()
		}
	}()
	return &url.URL{Scheme: "socks5", Host: ln.Addr().String()}
}
