//go:build linux && !amd64 && !386 && !s390x

package netns

import "syscall"

const sysSetns = syscall.SYS_SETNS
