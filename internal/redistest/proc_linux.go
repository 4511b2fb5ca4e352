package redistest

import "syscall"

// procAttr makes the kernel kill the server when the test process dies, so
// no redis-server outlives a crashed or killed test binary.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
