package iptables

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Cleanup removes everything of ours from the kernel: the jumps from the
// built-in chains, then every chain Names owns in filter and nat (found with
// `iptables -S`), all flushed, then all deleted, by restores that each name
// at most deleteChunk chains (see deleteChains). Nothing else is touched.
// When it fails part way, what it removed stays removed and calling it
// again finishes the work. The next Sync is a full one.
func (e *Executor) Cleanup(ctx context.Context) error {
	if !e.made() {
		return errNotMade
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.fail()

	owned, err := e.ownedChains(ctx)
	if err != nil {
		return fmt.Errorf("cleanup: %w", err)
	}
	if err := e.removeJumps(ctx, owned); err != nil {
		return fmt.Errorf("cleanup: removing jumps: %w", err)
	}
	if err := e.deleteChains(ctx, owned["filter"], owned["nat"], e.deleteChunk); err != nil {
		return fmt.Errorf("cleanup: deleting chains: %w", err)
	}
	return nil
}

// ownedChains lists, by table ("filter", "nat"), the chains Names owns
// that `iptables -S` shows, sorted.
func (e *Executor) ownedChains(ctx context.Context) (map[string][]string, error) {
	owned := map[string][]string{}
	for _, table := range []string{"filter", "nat"} {
		listed := &chainLister{names: e.names}
		if err := e.runner.Run(ctx, Command{Name: e.iptablesTool, Args: []string{"-w", "-t", table, "-S"}, Stdout: listed}); err != nil {
			return nil, fmt.Errorf("listing %s: %w", table, err)
		}
		owned[table] = listed.chains()
	}
	return owned, nil
}

// removeJumps deletes every copy of the jumps from the built-in chains to
// the chains in owned (by table); a jump to a chain that is not there
// cannot exist and is not looked for.
func (e *Executor) removeJumps(ctx context.Context, owned map[string][]string) error {
	var errs []error
	for _, j := range jumps {
		if !slices.Contains(owned[j.table], j.to(e.names)) {
			continue // no chain, so no jump to it
		}
		// Remove every copy (bounded), as a crash between -C and -I
		// elsewhere could have left two.
		for range 8 {
			err := e.runner.Run(ctx, Command{Name: e.iptablesTool, Args: j.args(e.names, "-C")})
			if exitCode(err) == 1 {
				break
			}
			if err == nil {
				err = e.runner.Run(ctx, Command{Name: e.iptablesTool, Args: j.args(e.names, "-D")})
			}
			if err != nil {
				errs = append(errs, err)
				break
			}
		}
	}
	return errors.Join(errs...)
}

// chainLister reads `iptables -S` output as it is written and keeps the
// chains ("-N NAME" lines) that Names owns.
type chainLister struct {
	names   Names
	partial []byte
	seen    map[string]bool
}

// chains lists the chains seen, sorted.
func (l *chainLister) chains() []string {
	if len(l.partial) > 0 {
		l.line(string(l.partial))
		l.partial = nil
	}
	cs := make([]string, 0, len(l.seen))
	for c := range l.seen {
		cs = append(cs, c)
	}
	slices.Sort(cs)
	return cs
}

func (l *chainLister) Write(p []byte) (int, error) {
	n := len(p)
	if len(l.partial) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			l.partial = append(l.partial, p...)
			return n, nil
		}
		l.line(string(append(l.partial, p[:i]...)))
		l.partial = l.partial[:0]
		p = p[i+1:]
	}
	for {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			break
		}
		l.line(string(p[:i]))
		p = p[i+1:]
	}
	l.partial = append(l.partial, p...)
	return n, nil
}

func (l *chainLister) line(s string) {
	if name, ok := strings.CutPrefix(s, "-N "); ok && l.names.Owns(name) {
		if l.seen == nil {
			l.seen = map[string]bool{}
		}
		l.seen[name] = true
	}
}

// deleteChunk is the most chains one restore of deleteChains names.
// iptables-nft 1.8.9 restores with --noflush in time quadratic in the
// number of chain names its input mentions (see the package doc), so
// deleting K chains in chunks of C costs about K·C rather than K²; each
// restore also costs a process and a netlink transaction, which a chunk
// this size amortizes. TestKernelCleanupScale measures it (BENCHMARKS.md).
const deleteChunk = 2000

// deleteChains flushes, then deletes the filter and nat chains named, with
// restores that each name at most chunk chains: first every chain is
// flushed (":NAME" lines), so that no rule of one of them jumps to another
// any more, then every chain is deleted (-X). When a restore fails, the
// chains of the earlier ones stay flushed or deleted.
func (e *Executor) deleteChains(ctx context.Context, filter, nat []string, chunk int) error {
	for _, input := range renderDelete(filter, nat, chunk) {
		if err := e.runner.Run(ctx, e.restoreCmd(input, nil)); err != nil {
			return err
		}
	}
	return nil
}

// renderDelete is the restore inputs that flush and delete filter and nat
// chains, in order, each naming at most chunk chains of one table: those
// that flush every chain (":NAME - [0:0]"), then those that delete them
// (-X).
func renderDelete(filter, nat []string, chunk int) [][]byte {
	var flushes, deletes [][]byte
	for _, t := range []struct {
		name   string
		chains []string
	}{{"filter", filter}, {"nat", nat}} {
		for c := range slices.Chunk(t.chains, chunk) {
			flushes = append(flushes, restoreLines(t.name, ":", c, " - [0:0]"))
			deletes = append(deletes, restoreLines(t.name, "-X ", c, ""))
		}
	}
	return append(flushes, deletes...)
}

// restoreLines is restore input for table with one line per chain:
// prefix, the chain's name, suffix.
func restoreLines(table, prefix string, chains []string, suffix string) []byte {
	var b strings.Builder
	b.WriteString("*" + table + "\n")
	for _, c := range chains {
		b.WriteString(prefix + c + suffix + "\n")
	}
	b.WriteString("COMMIT\n")
	return []byte(b.String())
}
