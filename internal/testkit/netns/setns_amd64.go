//go:build linux

package netns

// The syscall package's amd64 table predates setns(2).
const sysSetns = 308
