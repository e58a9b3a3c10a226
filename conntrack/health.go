package conntrack

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Fill ratios at which Assess warns and raises a critical level.
const (
	WarningFill  = 0.70
	CriticalFill = 0.90
)

// CPUStats are the counters of one CPU's line of /proc/net/stat/nf_conntrack.
// The kernel keeps them as 32-bit counters that wrap.
type CPUStats struct {
	// InsertFailed counts packets dropped because their new entry clashed
	// with one inserted meanwhile and the clash could not be resolved: the
	// race behind "DNS takes 5 seconds" (two UDP queries sent at once from
	// one socket, one of them lost).
	InsertFailed uint32
	// Drop counts packets dropped because no entry could be made: the table
	// was full and nothing could be evicted.
	Drop uint32
	// EarlyDrop counts entries evicted to make room because the table was
	// full.
	EarlyDrop uint32
}

// Sample is one reading of the conntrack table's state in a network
// namespace.
type Sample struct {
	// Count is nf_conntrack_count: entries in the namespace's table.
	Count int
	// Max is nf_conntrack_max: the limit (global on Linux 6.18; 0 means
	// none).
	Max int
	// CPUs are the per-CPU counters, in CPU order.
	CPUs []CPUStats
}

// Totals sums the counters of all CPUs.
func (s *Sample) Totals() (insertFailed, drop, earlyDrop uint64) {
	if s == nil {
		return 0, 0, 0
	}
	for _, c := range s.CPUs {
		insertFailed += uint64(c.InsertFailed)
		drop += uint64(c.Drop)
		earlyDrop += uint64(c.EarlyDrop)
	}
	return
}

// ParseStat parses the contents of /proc/net/stat/nf_conntrack: a header
// naming the columns, then one line of hexadecimal counters per CPU. Columns
// are found by name, so their order and the presence of others do not
// matter; insert_failed, drop and early_drop must be there.
func ParseStat(data []byte) ([]CPUStats, error) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	if !sc.Scan() {
		return nil, errors.New("conntrack: stat: empty")
	}
	header := strings.Fields(sc.Text())
	col := map[string]int{}
	for i, name := range header {
		col[name] = i
	}
	var idx [3]int
	for i, name := range []string{"insert_failed", "drop", "early_drop"} {
		c, ok := col[name]
		if !ok {
			return nil, fmt.Errorf("conntrack: stat: no %q column in header %q", name, sc.Text())
		}
		idx[i] = c
	}
	var cpus []CPUStats
	for line := 2; sc.Scan(); line++ {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if len(f) != len(header) {
			return nil, fmt.Errorf("conntrack: stat line %d: %d columns, header has %d", line, len(f), len(header))
		}
		var v [3]uint32
		for i, c := range idx {
			n, err := strconv.ParseUint(f[c], 16, 32)
			if err != nil {
				return nil, fmt.Errorf("conntrack: stat line %d, %s: %w", line, header[c], err)
			}
			v[i] = uint32(n)
		}
		cpus = append(cpus, CPUStats{InsertFailed: v[0], Drop: v[1], EarlyDrop: v[2]})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("conntrack: stat: %w", err)
	}
	if len(cpus) == 0 {
		return nil, errors.New("conntrack: stat: no CPU lines")
	}
	return cpus, nil
}

// ReadSample reads a Sample from a proc filesystem mounted at procRoot
// ("/proc" when empty): sys/net/netfilter/nf_conntrack_count and
// nf_conntrack_max, and the per-CPU counters from
// thread-self/net/stat/nf_conntrack when it exists (the calling thread's
// network namespace, as for the sysctls), else net/stat/nf_conntrack.
func ReadSample(procRoot string) (Sample, error) {
	if procRoot == "" {
		procRoot = "/proc"
	}
	var s Sample
	var err error
	if s.Count, err = ReadSysctl(filepath.Join(procRoot, "sys", SysctlCount)); err != nil {
		return Sample{}, err
	}
	if s.Max, err = ReadSysctl(filepath.Join(procRoot, "sys", SysctlMax)); err != nil {
		return Sample{}, err
	}
	stat := filepath.Join(procRoot, "thread-self/net/stat/nf_conntrack")
	data, err := os.ReadFile(stat)
	if errors.Is(err, os.ErrNotExist) {
		data, err = os.ReadFile(filepath.Join(procRoot, "net/stat/nf_conntrack"))
	}
	if err != nil {
		return Sample{}, fmt.Errorf("conntrack: %w", err)
	}
	if s.CPUs, err = ParseStat(data); err != nil {
		return Sample{}, err
	}
	return s, nil
}

// Level is how worried to be.
type Level int

const (
	LevelOK Level = iota
	LevelWarning
	LevelCritical
)

func (l Level) String() string {
	switch l {
	case LevelOK:
		return "ok"
	case LevelWarning:
		return "warning"
	case LevelCritical:
		return "critical"
	}
	return fmt.Sprintf("Level(%d)", int(l))
}

// Health is the assessment of a Sample against the one before it.
type Health struct {
	Count, Max int
	// Fill is Count/Max, 0 when Max is 0 (no limit).
	Fill float64
	// InsertFailed, Drop and EarlyDrop are how much the counters grew since
	// the previous Sample (0 without one), summed over CPUs, with 32-bit
	// wrap-around handled.
	InsertFailed, Drop, EarlyDrop uint64
	// Level is the worst level any reason gives.
	Level Level
	// Reasons say why Level is not LevelOK, worst first.
	Reasons []string
}

// Assess computes the Health of cur, with counter growth since prev (nil for
// a first reading). The table is at LevelWarning from WarningFill and at
// LevelCritical from CriticalFill; any growth of insert_failed or drop
// (packets lost) is LevelCritical; growth of early_drop (entries evicted
// because the table was full) is LevelWarning. Assess is pure.
func Assess(prev *Sample, cur Sample) Health {
	h := Health{Count: cur.Count, Max: cur.Max}
	if cur.Max > 0 {
		h.Fill = float64(cur.Count) / float64(cur.Max)
	}
	if prev != nil {
		for i, c := range cur.CPUs {
			var p CPUStats
			if i < len(prev.CPUs) {
				p = prev.CPUs[i]
			}
			// uint32 subtraction wraps, as the kernel's counters do.
			h.InsertFailed += uint64(c.InsertFailed - p.InsertFailed)
			h.Drop += uint64(c.Drop - p.Drop)
			h.EarlyDrop += uint64(c.EarlyDrop - p.EarlyDrop)
		}
	}
	var critical, warning []string
	pct := fmt.Sprintf("conntrack table %.1f%% full (%d of %d entries)", 100*h.Fill, h.Count, h.Max)
	switch {
	case h.Max > 0 && h.Fill >= CriticalFill:
		critical = append(critical, pct)
	case h.Max > 0 && h.Fill >= WarningFill:
		warning = append(warning, pct)
	}
	if h.InsertFailed > 0 {
		critical = append(critical, fmt.Sprintf("insert_failed grew by %d: packets lost to conntrack insert races (the UDP \"DNS takes 5 seconds\" race)", h.InsertFailed))
	}
	if h.Drop > 0 {
		critical = append(critical, fmt.Sprintf("drop grew by %d: packets dropped because no conntrack entry could be made (table full)", h.Drop))
	}
	if h.EarlyDrop > 0 {
		warning = append(warning, fmt.Sprintf("early_drop grew by %d: entries evicted because the table was full", h.EarlyDrop))
	}
	switch {
	case len(critical) > 0:
		h.Level = LevelCritical
	case len(warning) > 0:
		h.Level = LevelWarning
	}
	h.Reasons = append(critical, warning...)
	return h
}
