package main

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/iptables"
	"github.com/svcproxy/svcproxy/nftables"
)

// execRun runs a program in the current network namespace.
func execRun(ctx context.Context, name string, args ...string) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// iptablesLive evaluates the proxy's chains in the kernel's filter and nat
// tables, read with iptables-save (ip6tables-save for IPv6), and the rules
// of the built-in chains that jump to them; other programs' rules are left
// out. The second result names where the rules were read.
func iptablesLive(ctx context.Context, run runFunc, family v1.IPFamily) (evaluator, string, error) {
	save := "iptables-save"
	if family == v1.IPv6Protocol {
		save = "ip6tables-save"
	}
	names := iptables.DefaultNames()
	var text strings.Builder
	for _, table := range []string{"filter", "nat"} {
		out, err := run(ctx, save, "-t", table)
		if err != nil {
			return nil, save, fmt.Errorf("reading the %s table: %w", table, err)
		}
		own := ownRules(names, out)
		if table == "nat" && !strings.Contains(own, "\n:"+names.Services()+" ") {
			return nil, save, fmt.Errorf("%w: the nat table has no chain %s", errAbsent, names.Services())
		}
		text.WriteString(own)
	}
	ev, err := iptablesEvaluator([]byte(text.String()))
	return ev, save, err
}

// ownRules is the part of iptables-save output that names owns: the
// table lines, the declarations of the built-in chains (with their
// policies) and of the chains names owns, the rules of those chains,
// and the rules of the built-in chains that jump to one of them.
func ownRules(names iptables.Names, saved string) string {
	var b strings.Builder
	for _, line := range strings.Split(saved, "\n") {
		if keepSavedLine(names, line) {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

func keepSavedLine(names iptables.Names, line string) bool {
	fields := strings.Fields(line)
	switch {
	case len(fields) == 0:
		return false
	case strings.HasPrefix(line, "*"), line == "COMMIT":
		return true
	case strings.HasPrefix(line, ":"):
		chain := strings.TrimPrefix(fields[0], ":")
		return names.Owns(chain) || isBuiltin(chain)
	case fields[0] == "-A" && len(fields) > 1:
		return names.Owns(fields[1]) || isBuiltin(fields[1]) && names.Owns(jumpTarget(fields))
	}
	return false
}

func isBuiltin(chain string) bool {
	switch chain {
	case "PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING":
		return true
	}
	return false
}

// jumpTarget is the chain a rule's fields jump or go to, or "".
func jumpTarget(fields []string) string {
	for i := len(fields) - 2; i >= 0; i-- {
		if fields[i] == "-j" || fields[i] == "-g" {
			return fields[i+1]
		}
	}
	return ""
}

// nftablesLive evaluates the table the nftables proxy uses, read with
// `nft list table`.
func nftablesLive(ctx context.Context, run runFunc, family v1.IPFamily) (evaluator, string, error) {
	args := []string{"list", "table", string(nftables.Family(family)), nftables.DefaultTable}
	source := "nft " + strings.Join(args, " ")
	out, err := run(ctx, "nft", args...)
	if err != nil {
		if strings.Contains(err.Error(), "No such file or directory") {
			return nil, source, fmt.Errorf("%w: no table %s %s", errAbsent, nftables.Family(family), nftables.DefaultTable)
		}
		return nil, source, fmt.Errorf("reading the table: %w", err)
	}
	ev, err := nftablesEvaluator(out)
	return ev, source, err
}
