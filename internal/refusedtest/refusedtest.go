// Package refusedtest gives tests a loopback address where every connection is
// refused at once, for as long as the test runs.
package refusedtest

import (
	"net"
	"syscall"
	"testing"
)

// Addr returns a loopback host:port where nothing listens and nothing can
// start to until t ends: a socket bound there (without SO_REUSEADDR) and
// never listening holds the port, so a dial is refused. A port chosen free
// and closed could be taken, before the test dials it, by another process
// or by a listener of the test itself (a fake server it starts next).
func Addr(t testing.TB) string {
	t.Helper()
	syscall.ForkLock.RLock() // no child started meanwhile inherits it
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err == nil {
		syscall.CloseOnExec(fd)
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return (&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: sa.(*syscall.SockaddrInet4).Port}).String()
}

// URL is Addr as an http:// URL.
func URL(t testing.TB) string {
	t.Helper()
	return "http://" + Addr(t)
}
