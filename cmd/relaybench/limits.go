package main

import (
	"fmt"
	"syscall"
)

// fileMargin is the open files a process needs besides its connections.
const fileMargin = 1024

// raiseFileLimit lifts the open-file limit for conns sockets (every
// gateway is one, in both processes) plus a margin: both limits to that
// when the hard one is lower and the process may raise it (root), else the
// soft limit to the hard one. It reports an error when the limit stays
// below what conns need.
func raiseFileLimit(conns int) error {
	need := uint64(conns) + fileMargin
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return err
	}
	if lim.Max < need && syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: need, Max: need}) == nil {
		return nil
	}
	if lim.Cur < lim.Max {
		lim.Cur = lim.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	}
	if cur := fileLimit(); cur < need {
		return fmt.Errorf("open-file limit %d is below the %d that %d connections need: raise the hard limit (e.g. as root: ulimit -Hn %d)", cur, need, conns, need)
	}
	return nil
}

// fileLimit is the current soft open-file limit (0 if unknown).
func fileLimit() uint64 {
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) != nil {
		return 0
	}
	return lim.Cur
}

// hardFileLimit is the hard open-file limit (0 if unknown).
func hardFileLimit() uint64 {
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) != nil {
		return 0
	}
	return lim.Max
}
