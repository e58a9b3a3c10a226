package svcproxy_test

import (
	"os/exec"
	"syscall"
)

// inOwnNamespaces makes cmd start in network and mount namespaces of its
// own, and reports that it can.
func inOwnNamespaces(cmd *exec.Cmd) bool {
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET | syscall.CLONE_NEWNS}
	return true
}
