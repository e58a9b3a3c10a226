//go:build linux

package netns

// The syscall package's 386 table predates setns(2).
const sysSetns = 346
