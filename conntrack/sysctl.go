package conntrack

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// DefaultSysctlRoot is where the kernel shows its sysctls.
const DefaultSysctlRoot = "/proc/sys"

// Change is one sysctl a SysctlWriter changed.
type Change struct {
	Name     string
	Old, New int
}

func (c Change) String() string { return fmt.Sprintf("%s: %d → %d", c.Name, c.Old, c.New) }

// SysctlWriter writes Settings under Root (DefaultSysctlRoot when empty).
// Network sysctls are those of the writing thread's network namespace; some
// (nf_conntrack_max, nf_conntrack_buckets) are global and can only be written
// from the initial one.
type SysctlWriter struct {
	Root string
}

// Apply reads each setting and writes it only when it differs (for an
// AtLeast setting: when the current value is smaller). It goes on past a
// setting that fails, and returns what it changed and every failure.
func (w SysctlWriter) Apply(settings []Setting) ([]Change, error) {
	root := w.Root
	if root == "" {
		root = DefaultSysctlRoot
	}
	var changes []Change
	var errs []error
	for _, s := range settings {
		c, changed, err := apply(root, s)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if changed {
			changes = append(changes, c)
		}
	}
	return changes, errors.Join(errs...)
}

func apply(root string, s Setting) (Change, bool, error) {
	if !filepath.IsLocal(s.Name) || strings.Contains(s.Name, "\\") {
		return Change{}, false, fmt.Errorf("conntrack: sysctl %q: not a relative path", s.Name)
	}
	path := filepath.Join(root, s.Name)
	cur, err := ReadSysctl(path)
	if err != nil {
		return Change{}, false, err
	}
	if cur == s.Value || (s.AtLeast && cur > s.Value) {
		return Change{}, false, nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return Change{}, false, fmt.Errorf("conntrack: sysctl %s=%d: %w", s.Name, s.Value, err)
	}
	_, err = f.WriteString(strconv.Itoa(s.Value) + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return Change{}, false, fmt.Errorf("conntrack: sysctl %s=%d: %w", s.Name, s.Value, err)
	}
	return Change{Name: s.Name, Old: cur, New: s.Value}, true, nil
}

// ReadSysctl reads a file holding one integer, as a sysctl does.
func ReadSysctl(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("conntrack: %w", err)
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("conntrack: %s: not an integer: %q", path, strings.TrimSpace(string(b)))
	}
	return v, nil
}
