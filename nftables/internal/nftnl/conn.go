package nftnl

import (
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// Conn is a NETLINK_NETFILTER socket in the network namespace of the
// thread that called Dial. It is not safe for concurrent use.
type Conn struct {
	fd  int
	seq uint32
	// rb is the buffer dumps are read into, made by the first.
	rb []byte
}

// Dial opens a netfilter netlink socket in the calling thread's network
// namespace. It needs CAP_NET_ADMIN only to send.
func Dial() (*Conn, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, fmt.Errorf("nftnl: netlink socket: %w", err)
	}
	// Errors carry the failed message's header only, not the whole
	// message.
	if err := unix.SetsockoptInt(fd, unix.SOL_NETLINK, unix.NETLINK_CAP_ACK, 1); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("nftnl: netlink socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("nftnl: netlink socket: %w", err)
	}
	return &Conn{fd: fd}, nil
}

// Close closes the socket.
func (c *Conn) Close() error { return unix.Close(c.fd) }

// Send applies b as one transaction: the kernel applies all of its
// operations or none. The error names the first operation the kernel
// refused.
func (c *Conn) Send(b *Batch) error {
	if len(b.msgs) == 0 {
		return nil
	}
	first := c.seq + 1
	buf := c.frame(nil, unix.NFNL_MSG_BATCH_BEGIN, flagRequest, []byte{0, 0, 0, unix.NFNL_SUBSYS_NFTABLES})
	for _, m := range b.msgs {
		buf = c.frame(buf, unix.NFNL_SUBSYS_NFTABLES<<8|m.typ, flagRequest|flagAck|m.flags, m.body)
	}
	buf = c.frame(buf, unix.NFNL_MSG_BATCH_END, flagRequest, []byte{0, 0, 0, unix.NFNL_SUBSYS_NFTABLES})
	// The kernel handles the batch within sendmsg and queues one
	// acknowledgement per message, each in a buffer of its own (under 1 KiB
	// of socket memory): make room for the batch and for them.
	room := len(buf) + 1024*len(b.msgs) + 1<<16
	for _, opt := range []int{unix.SO_SNDBUFFORCE, unix.SO_RCVBUFFORCE} {
		if err := unix.SetsockoptInt(c.fd, unix.SOL_SOCKET, opt, room); err != nil {
			return fmt.Errorf("nftnl: socket buffer of %d bytes: %w", room, err)
		}
	}
	if err := unix.Sendto(c.fd, buf, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("nftnl: sending %d operations: %w", len(b.msgs), err)
	}
	return c.acks(b, first)
}

// frame appends one netlink message with the next sequence number.
func (c *Conn) frame(buf []byte, typ, flags uint16, body []byte) []byte {
	c.seq++
	buf = binary.NativeEndian.AppendUint32(buf, uint32(unix.NLMSG_HDRLEN+len(body)))
	buf = binary.NativeEndian.AppendUint16(buf, typ)
	buf = binary.NativeEndian.AppendUint16(buf, flags)
	buf = binary.NativeEndian.AppendUint32(buf, c.seq)
	buf = binary.NativeEndian.AppendUint32(buf, 0)
	return append(buf, body...)
}

// acks reads the kernel's answers to the batch whose first message has
// sequence number first: one acknowledgement per message, or errors.
func (c *Conn) acks(b *Batch, first uint32) error {
	acked := 0
	var errs []error
	rb := make([]byte, 1<<16)
	for acked+len(errs) < len(b.msgs) {
		n, _, err := unix.Recvfrom(c.fd, rb, unix.MSG_DONTWAIT)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if errors.Is(err, unix.EAGAIN) {
			break
		}
		if err != nil {
			return fmt.Errorf("nftnl: reading acknowledgements: %w", err)
		}
		msgs, err := syscall.ParseNetlinkMessage(rb[:n])
		if err != nil {
			return fmt.Errorf("nftnl: reading acknowledgements: %w", err)
		}
		for _, m := range msgs {
			if m.Header.Type != unix.NLMSG_ERROR || len(m.Data) < 4 {
				continue
			}
			code := int32(binary.NativeEndian.Uint32(m.Data))
			if code == 0 {
				acked++
				continue
			}
			what := "the batch"
			if i := int(m.Header.Seq - first); i >= 0 && i < len(b.msgs) {
				what = b.msgs[i].what
			}
			errs = append(errs, fmt.Errorf("%s: %w", what, syscall.Errno(-code)))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("nftnl: the kernel refused the transaction: %w", errs[0])
	}
	if acked < len(b.msgs) {
		return fmt.Errorf("nftnl: the kernel acknowledged %d of %d operations", acked, len(b.msgs))
	}
	return nil
}
