package main

import (
	"net"
	"syscall"
	"testing"
)

// refusedAddr returns a loopback host:port where nothing listens and
// nothing can start to until the test ends: a socket bound there (without
// SO_REUSEADDR) and never listening holds the port, so a dial is refused.
// A port chosen free and closed could be taken by another process before
// the test dials it.
func refusedAddr(t *testing.T) string {
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
