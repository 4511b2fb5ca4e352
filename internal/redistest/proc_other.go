//go:build !linux

package redistest

import "syscall"

// procAttr has nothing to add outside Linux.
func procAttr() *syscall.SysProcAttr { return nil }
