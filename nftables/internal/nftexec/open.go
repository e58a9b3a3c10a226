package nftexec

import (
	"fmt"
	"strconv"
	"strings"
	"syscall"

	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/knftables"
)

// MinKernel is the oldest kernel the nftables backend supports,
// kube-proxy's floor for its nftables mode ("major.minor").
const MinKernel = "5.13"

// Family is the knftables family of an IP family: "ip" or "ip6".
func Family(f v1.IPFamily) knftables.Family {
	if f == v1.IPv6Protocol {
		return knftables.IPv6Family
	}
	return knftables.IPv4Family
}

// ValidTableName accepts the nft identifiers that need no quoting.
func ValidTableName(s string) bool {
	if s == "" || len(s) > knftables.NameLengthMax-1 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		letter := (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'
		if i == 0 && !letter {
			return false
		}
		if !letter && (c < '0' || c > '9') && c != '-' && c != '.' && c != '/' {
			return false
		}
	}
	return true
}

// Open returns a knftables.Interface for one table after checking that the
// host can run the nftables backend: nft 1.0.1 or newer (older versions
// parse the whole ruleset, and can crash on other programs' tables), which
// knftables.New checks along with nft's permissions, and a kernel of at
// least MinKernel.
func Open(family knftables.Family, table string) (knftables.Interface, error) {
	nft, err := knftables.New(family, table)
	if err != nil {
		return nil, fmt.Errorf("nftables backend unavailable (it needs nft 1.0.1 or newer, run with CAP_NET_ADMIN): %w", err)
	}
	var u syscall.Utsname
	if err := syscall.Uname(&u); err != nil {
		return nil, fmt.Errorf("nftables backend: reading the kernel version: %w", err)
	}
	var release strings.Builder
	for _, c := range u.Release {
		if c == 0 {
			break
		}
		release.WriteByte(byte(c))
	}
	if err := checkKernel(release.String()); err != nil {
		return nil, err
	}
	return nft, nil
}

// checkKernel reports an error when release (uname -r) is older than
// MinKernel.
func checkKernel(release string) error {
	parse := func(s string) (int, int, bool) {
		fields := strings.FieldsFunc(s, func(r rune) bool { return r < '0' || r > '9' })
		if len(fields) < 2 {
			return 0, 0, false
		}
		major, err1 := strconv.Atoi(fields[0])
		minor, err2 := strconv.Atoi(fields[1])
		return major, minor, err1 == nil && err2 == nil
	}
	major, minor, ok := parse(release)
	wantMajor, wantMinor, _ := parse(MinKernel)
	if !ok {
		return fmt.Errorf("nftables backend: cannot parse kernel version %q", release)
	}
	if major < wantMajor || (major == wantMajor && minor < wantMinor) {
		return fmt.Errorf("nftables backend unavailable: kernel %s is older than %s", release, MinKernel)
	}
	return nil
}
