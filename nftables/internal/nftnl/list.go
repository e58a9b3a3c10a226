package nftnl

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/svcproxy/svcproxy/nftables/internal/nlattr"
)

// Names are the objects of one table, by kind, as knftables'
// Interface.ListAll gives them: "chain", "set" and "map", anonymous sets
// left out.
type Names map[string][]string

// dumpTimeout bounds how long a listing waits for the kernel.
const dumpTimeout = 30 * time.Second

// ListNames lists the chains, sets and maps of a table by netlink dumps,
// which read no rules and no elements, where `nft list table` reads every
// rule. A table that does not exist has no names.
func (c *Conn) ListNames(family Family, table string) (Names, error) {
	names := Names{}
	// The kernel may dump every table of the family: keep ours.
	ours := func(b []byte) bool { t, ok := cString(b); return ok && t == table }
	err := c.dump(msgGetChain, family, func(a *attrs) { a.str(attrChainTable, table) }, func(as map[uint16][]byte) {
		if name, ok := cString(as[attrChainName]); ok && ours(as[attrChainTable]) {
			names["chain"] = append(names["chain"], name)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("nftnl: listing the chains of %s: %w", table, err)
	}
	err = c.dump(msgGetSet, family, func(a *attrs) { a.str(attrSetTable, table) }, func(as map[uint16][]byte) {
		name, ok := cString(as[attrSetName])
		if !ok || !ours(as[attrSetTable]) {
			return
		}
		var flags uint32 // the kernel leaves out flags of 0
		if f := as[attrSetFlags]; len(f) == 4 {
			flags = binary.BigEndian.Uint32(f)
		}
		switch {
		case flags&SetAnonymous != 0:
		case flags&SetMap != 0:
			names["map"] = append(names["map"], name)
		default:
			names["set"] = append(names["set"], name)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("nftnl: listing the sets of %s: %w", table, err)
	}
	return names, nil
}

// HasTable reports whether the family has the table, by a netlink dump
// of the family's tables, which holds no chains, sets or rules.
func (c *Conn) HasTable(family Family, table string) (bool, error) {
	found := false
	err := c.dump(msgGetTable, family, func(*attrs) {}, func(as map[uint16][]byte) {
		if name, ok := cString(as[attrTableName]); ok && name == table {
			found = true
		}
	})
	if err != nil {
		return false, fmt.Errorf("nftnl: listing the tables: %w", err)
	}
	return found, nil
}

// RuleCount counts the rules of one chain by a netlink dump that the kernel
// filters to that chain: its cost does not grow with the rest of the table.
// It reads each rule's table and chain names only.
func (c *Conn) RuleCount(family Family, table, chain string) (int, error) {
	n := 0
	err := c.dumpCounting(msgGetRule, family, func(a *attrs) {
		a.str(attrRuleTable, table)
		a.str(attrRuleChain, chain)
	}, func() { n = 0 }, func(b []byte) error {
		var t, ch []byte
		walkAttrs(b, func(typ uint16, v []byte) {
			switch typ {
			case attrRuleTable:
				t = v
			case attrRuleChain:
				ch = v
			}
		})
		if tn, ok := cString(t); ok && tn == table {
			if cn, ok := cString(ch); ok && cn == chain {
				n++
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("nftnl: listing the rules of %s %s: %w", table, chain, err)
	}
	return n, nil
}

// Message types of the dumps.
const (
	msgGetTable = 1
	msgGetChain = 4
	msgGetRule  = 7
	msgGetSet   = 10
)

// errDumpInterrupted: the table changed during the dump.
var errDumpInterrupted = errors.New("dump interrupted")

// dump sends one dump request and calls each with the top-level attributes
// of every object it returns, retrying a few times when the table changes
// during the dump.
func (c *Conn) dump(typ uint16, family Family, filter func(*attrs), each func(map[uint16][]byte)) error {
	var err error
	for range 3 {
		var objects []map[uint16][]byte
		objects, err = c.dumpOnce(typ, family, filter)
		if errors.Is(err, errDumpInterrupted) {
			continue
		}
		for _, o := range objects {
			each(o)
		}
		return err
	}
	return err
}

func (c *Conn) dumpOnce(typ uint16, family Family, filter func(*attrs)) ([]map[uint16][]byte, error) {
	var objects []map[uint16][]byte
	err := c.dumpEach(typ, family, filter, func(b []byte) error {
		// b points into the read buffer, which the next read reuses.
		o, err := topLevel(bytes.Clone(b))
		if err != nil {
			return err
		}
		objects = append(objects, o)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return objects, nil
}

// dumpEach sends one dump request and calls each with the attributes of
// every object the kernel returns, which are valid only during the call;
// errDumpInterrupted when the table changed during the dump.
func (c *Conn) dumpEach(typ uint16, family Family, filter func(*attrs), each func([]byte) error) error {
	a := &attrs{buf: []byte{byte(family), 0, 0, 0}}
	filter(a)
	req := c.frame(nil, unix.NFNL_SUBSYS_NFTABLES<<8|typ, flagRequest|unix.NLM_F_DUMP, a.buf)
	seq := c.seq
	if err := unix.Sendto(c.fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return err
	}
	tv := unix.NsecToTimeval(dumpTimeout.Nanoseconds())
	if err := unix.SetsockoptTimeval(c.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return err
	}
	interrupted := false
	if c.rb == nil {
		c.rb = make([]byte, 1<<20)
	}
	rb := c.rb
	for {
		n, _, err := unix.Recvfrom(c.fd, rb, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		msgs, err := syscall.ParseNetlinkMessage(rb[:n])
		if err != nil {
			return err
		}
		for _, m := range msgs {
			if m.Header.Seq != seq {
				continue // an answer to something earlier
			}
			if m.Header.Flags&unix.NLM_F_DUMP_INTR != 0 {
				interrupted = true
			}
			switch m.Header.Type {
			case unix.NLMSG_DONE:
				if interrupted {
					return errDumpInterrupted
				}
				return nil
			case unix.NLMSG_ERROR:
				if len(m.Data) >= 4 {
					if code := int32(binary.NativeEndian.Uint32(m.Data)); code != 0 {
						return syscall.Errno(-code)
					}
				}
				continue
			}
			if len(m.Data) < 4 {
				continue
			}
			if err := each(m.Data[4:]); err != nil {
				return err
			}
		}
	}
}

// topLevel parses a message's attributes, without descending into nested
// ones.
func topLevel(b []byte) (map[uint16][]byte, error) {
	as := map[uint16][]byte{}
	for len(b) >= 4 {
		n := int(binary.NativeEndian.Uint16(b))
		if n < 4 || n > len(b) {
			return nil, fmt.Errorf("attribute of %d bytes in %d", n, len(b))
		}
		as[binary.NativeEndian.Uint16(b[2:])&^nlattr.Nested] = b[4:n]
		b = b[min(len(b), (n+3)&^3):]
	}
	return as, nil
}

// cString is a NUL-terminated attribute value.
func cString(b []byte) (string, bool) {
	if len(b) == 0 || b[len(b)-1] != 0 {
		return "", false
	}
	return string(b[:len(b)-1]), true
}
