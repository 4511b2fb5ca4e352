// Package netcause names the class of a network failure (connection
// refused, DNS lookup failed, timed out, ...) without quoting the failure
// itself. Error texts from net and net/http hold the request URL, the peer
// address and the resolver's address; the platforms put this description
// into results sent to gateways and into logs instead.
package netcause

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/url"
	"os"
	"syscall"
)

// IsNetwork reports whether err is a failure of the network path (a
// net/http url.Error or a net.OpError anywhere in its chain) rather than an
// answer from the remote API.
func IsNetwork(err error) bool {
	var ue *url.Error
	var oe *net.OpError
	return errors.As(err, &ue) || errors.As(err, &oe)
}

// Describe returns a short description of err's network cause that holds
// no URL, host, address or port, for any error (the fallback is "network
// error").
func Describe(err error) string {
	var (
		dns      *net.DNSError
		certErr  *tls.CertificateVerificationError
		authErr  x509.UnknownAuthorityError
		hostErr  x509.HostnameError
		invalid  x509.CertificateInvalidError
		recErr   tls.RecordHeaderError
		alertErr tls.AlertError
		timeout  interface{ Timeout() bool }
	)
	switch {
	case errors.As(err, &dns):
		if dns.IsTimeout {
			return "DNS lookup timed out"
		}
		if dns.IsNotFound {
			return "DNS lookup failed: no such host"
		}
		return "DNS lookup failed"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "network unreachable"
	case errors.Is(err, os.ErrDeadlineExceeded), errors.As(err, &timeout) && timeout.Timeout():
		return "timed out"
	case errors.As(err, &certErr), errors.As(err, &authErr), errors.As(err, &hostErr),
		errors.As(err, &invalid), errors.As(err, &recErr), errors.As(err, &alertErr):
		return "TLS handshake failed"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed):
		return "connection closed"
	}
	return "network error"
}
