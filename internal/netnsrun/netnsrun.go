// Package netnsrun runs functions in another network namespace from a
// locked OS thread, for the executors' ExecutorConfig.NetNS: a command
// started, or a socket opened, by such a function belongs to that
// namespace, while the rest of the process stays where it is.
package netnsrun

import (
	"errors"
	"fmt"
	"runtime"
	"sync"

	"github.com/vishvananda/netns"
)

// Namespace is an open network namespace. Its methods are safe for
// concurrent use.
type Namespace struct {
	path string

	mu     sync.RWMutex
	handle netns.NsHandle
}

// Open opens the network namespace file at path, such as
// /run/netns/NAME or /proc/PID/ns/net. The Namespace keeps it open, so that
// it stays the same namespace whatever later happens to path, until Close.
func Open(path string) (*Namespace, error) {
	h, err := netns.GetFromPath(path)
	if err != nil {
		return nil, fmt.Errorf("opening network namespace %s: %w", path, err)
	}
	return &Namespace{path: path, handle: h}, nil
}

// Path is the path the Namespace was opened from.
func (n *Namespace) Path() string { return n.path }

// errClosed is returned by Do after Close.
var errClosed = errors.New("network namespace closed")

// Do runs fn on the calling goroutine's OS thread, locked to it and moved
// into the namespace, and moves the thread back before it returns. The
// processes fn starts (os/exec forks from the calling thread) and the
// sockets it opens belong to the namespace; goroutines fn starts do not.
// If the thread cannot be moved back, it stays locked and the Go runtime
// ends it with the goroutine, so that no other goroutine runs in the wrong
// namespace.
func (n *Namespace) Do(fn func() error) error {
	n.mu.RLock()
	defer n.mu.RUnlock()
	if !n.handle.IsOpen() {
		return errClosed
	}
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("reading the current network namespace: %w", err)
	}
	defer orig.Close()
	if err := netns.Set(n.handle); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("entering network namespace %s: %w", n.path, err)
	}
	fnErr := fn()
	if err := netns.Set(orig); err != nil {
		// The thread stays locked: the runtime ends it with this goroutine.
		return errors.Join(fnErr, fmt.Errorf("leaving network namespace %s: %w", n.path, err))
	}
	runtime.UnlockOSThread()
	return fnErr
}

// Close closes the namespace, after the calls of Do in progress return;
// later calls of Do fail. Closing twice is not an error.
func (n *Namespace) Close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.handle.IsOpen() {
		return nil
	}
	err := n.handle.Close()
	n.handle = netns.None()
	return err
}
