//go:build linux

package netns

// The syscall package's s390x table predates setns(2).
const sysSetns = 339
