// Package netsource names the source a remote address counts against in
// the limits on outside input (connections, log lines): what one host
// usually holds, so that host cannot escape its share by changing address.
package netsource

import "net/netip"

// Of names the source of addr (host:port, as net.Addr.String and
// http.Request.RemoteAddr give it): an IPv4 address (IPv4-mapped IPv6
// included), the /64 prefix of an IPv6 address, or addr itself when it is
// not IP.
func Of(addr string) string {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return addr
	}
	ip := ap.Addr().Unmap()
	if ip.Is4() {
		return ip.String()
	}
	p, _ := ip.WithZone("").Prefix(64)
	return p.String()
}
