package svcproxy

import (
	"fmt"
	"strconv"
)

// Warning names one Kubernetes object, or one part of it, that could not be
// used, and says why. Packages that turn objects into proxy state skip what
// they cannot use and return Warnings instead of failing the whole sync.
type Warning struct {
	// Kind is the object's kind: "Service", "EndpointSlice" or "Node".
	Kind string
	// Namespace and Name identify the object; Namespace is empty for
	// cluster-scoped objects.
	Namespace, Name string
	// Reason says what was wrong and what was skipped.
	Reason string
}

// String formats the warning as "Kind namespace/name: reason". A namespace
// or name that is not made only of letters, digits, '.', '-' and '_' is
// quoted, so that a hostile object cannot forge log lines.
func (w Warning) String() string {
	if w.Namespace == "" {
		return fmt.Sprintf("%s %s: %s", w.Kind, safe(w.Name), w.Reason)
	}
	return fmt.Sprintf("%s %s/%s: %s", w.Kind, safe(w.Namespace), safe(w.Name), w.Reason)
}

func safe(s string) string {
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_') {
			return strconv.Quote(s)
		}
	}
	if s == "" {
		return `""`
	}
	return s
}

// Reporter collects the Warnings about one object, for code that converts
// Kubernetes objects: the conversions of servicemap, endpoints and ruleset
// use one, and so can a user's own.
type Reporter struct {
	// Kind, Namespace and Name identify the object every Warning names.
	Kind, Namespace, Name string
	// Warnings are those recorded so far, in order.
	Warnings []Warning
}

// Warnf records a Warning whose reason is formatted from format and args.
func (r *Reporter) Warnf(format string, args ...any) {
	if r == nil {
		return
	}
	r.Warnings = append(r.Warnings, Warning{Kind: r.Kind, Namespace: r.Namespace, Name: r.Name, Reason: fmt.Sprintf(format, args...)})
}

// Skipf records a Warning that skips the whole object, and returns its
// reason.
func (r *Reporter) Skipf(format string, args ...any) string {
	if r == nil {
		return fmt.Sprintf(format, args...)
	}
	r.Warnf(format, args...)
	return r.Warnings[len(r.Warnings)-1].Reason
}
