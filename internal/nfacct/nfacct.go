// Package nfacct creates and reads the kernel's extended accounting objects
// (nfnetlink_acct: the named counters that iptables' `-m nfacct
// --nfacct-name NAME` counts packets into) over a netfilter netlink socket.
//
// The objects belong to a network namespace, the one of the thread that
// opened the Conn (see internal/netnsrun to open one elsewhere), and are
// shared by every IP family in it. Only Conn touches the kernel.
package nfacct

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/mdlayher/netlink"
)

// MaxNameLength is the longest name the kernel accepts (NFACCT_NAME_MAX
// less its terminating zero).
const MaxNameLength = 31

// Errors of Conn.
var (
	// ErrNotSupported: the kernel has no nfnetlink_acct.
	ErrNotSupported = errors.New("nfacct: the kernel has no nfnetlink_acct")
	// ErrNotFound: no object of that name.
	ErrNotFound = errors.New("nfacct: no such object")
)

// Counter is an accounting object's name and what it counted.
type Counter struct {
	Name           string
	Packets, Bytes uint64
}

// The netlink protocol (linux/netfilter/nfnetlink.h, nfnetlink_acct.h).
const (
	netlinkNetfilter = 12 // NETLINK_NETFILTER
	subsysAcct       = 7  // NFNL_SUBSYS_ACCT
	msgNew           = 0  // NFNL_MSG_ACCT_NEW
	msgGet           = 1  // NFNL_MSG_ACCT_GET
	attrName         = 1  // NFACCT_NAME
	attrPackets      = 2  // NFACCT_PKTS
	attrBytes        = 3  // NFACCT_BYTES
)

// timeout bounds every request.
const timeout = 5 * time.Second

// Conn is a netfilter netlink socket. Its methods are safe for concurrent
// use.
type Conn struct {
	c *netlink.Conn
}

// Dial opens a Conn in the calling thread's network namespace and checks
// that the kernel has nfnetlink_acct: ErrNotSupported when it has not.
func Dial() (*Conn, error) {
	c, err := netlink.Dial(netlinkNetfilter, nil)
	if err != nil {
		return nil, fmt.Errorf("nfacct: opening a netfilter netlink socket: %w", err)
	}
	conn := &Conn{c: c}
	// A kernel without the subsystem refuses the listing.
	if _, err := conn.List(); err != nil {
		c.Close()
		return nil, fmt.Errorf("%w: %w", ErrNotSupported, err)
	}
	return conn, nil
}

// Close closes the socket; the objects stay.
func (c *Conn) Close() error { return c.c.Close() }

// Get reads the object name: ErrNotFound when there is none.
func (c *Conn) Get(name string) (Counter, error) {
	if err := checkName(name); err != nil {
		return Counter{}, err
	}
	all, err := c.List()
	if err != nil {
		return Counter{}, fmt.Errorf("nfacct: reading %s: %w", name, err)
	}
	for _, ctr := range all {
		if ctr.Name == name {
			return ctr, nil
		}
	}
	return Counter{}, fmt.Errorf("nfacct: reading %s: %w", name, ErrNotFound)
}

// List reads every object of the namespace. It dumps them: the kernel
// answers a get of one object with a message marked as a part of several
// and no end, which a netlink client waits after.
func (c *Conn) List() ([]Counter, error) {
	msgs, err := c.execute(msgGet, netlink.Request|netlink.Dump, nil)
	if err != nil {
		return nil, fmt.Errorf("nfacct: listing: %w", err)
	}
	var all []Counter
	for _, m := range msgs {
		if ctr, ok := decode(m.Data); ok {
			all = append(all, ctr)
		}
	}
	return all, nil
}

// Ensure creates the object name unless it exists; an existing one keeps
// its counts.
func (c *Conn) Ensure(name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	if _, err := c.Get(name); !errors.Is(err, ErrNotFound) {
		return err
	}
	// Without NLM_F_EXCL or NLM_F_REPLACE the kernel refuses, with EBUSY,
	// an object made meanwhile, and keeps it as it is.
	attrs := []netlink.Attribute{{Type: attrName, Data: append([]byte(name), 0)}}
	_, err := c.execute(msgNew, netlink.Request|netlink.Create|netlink.Acknowledge, attrs)
	if err != nil && !errors.Is(err, syscall.EBUSY) {
		return fmt.Errorf("nfacct: creating %s: %w", name, err)
	}
	return nil
}

// checkName refuses a name the kernel cannot hold.
func checkName(name string) error {
	if name == "" || len(name) > MaxNameLength {
		return fmt.Errorf("nfacct: name %q: want 1 to %d bytes", name, MaxNameLength)
	}
	return nil
}

// execute sends one request with attrs and returns the replies.
func (c *Conn) execute(msg uint16, flags netlink.HeaderFlags, attrs []netlink.Attribute) ([]netlink.Message, error) {
	b, err := netlink.MarshalAttributes(attrs)
	if err != nil {
		return nil, err
	}
	// struct nfgenmsg: AF_UNSPEC, NFNETLINK_V0, resource 0.
	data := append([]byte{0, 0, 0, 0}, b...)
	if err := c.c.SetDeadline(time.Now().Add(timeout)); err != nil {
		return nil, err
	}
	return c.c.Execute(netlink.Message{
		Header: netlink.Header{Type: netlink.HeaderType(subsysAcct<<8 | msg), Flags: flags},
		Data:   data,
	})
}

// decode reads a reply: struct nfgenmsg, then the attributes.
func decode(b []byte) (Counter, bool) {
	if len(b) < 4 {
		return Counter{}, false
	}
	attrs, err := netlink.UnmarshalAttributes(b[4:])
	if err != nil {
		return Counter{}, false
	}
	var c Counter
	for _, a := range attrs {
		switch {
		case a.Type == attrName && len(a.Data) > 0:
			c.Name = strings.TrimRight(string(a.Data), "\x00")
		case a.Type == attrPackets && len(a.Data) == 8:
			c.Packets = binary.BigEndian.Uint64(a.Data)
		case a.Type == attrBytes && len(a.Data) == 8:
			c.Bytes = binary.BigEndian.Uint64(a.Data)
		}
	}
	return c, c.Name != ""
}
