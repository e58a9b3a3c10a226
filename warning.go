package svcproxy

import "fmt"

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

// String formats the warning as "Kind namespace/name: reason".
func (w Warning) String() string {
	if w.Namespace == "" {
		return fmt.Sprintf("%s %s: %s", w.Kind, w.Name, w.Reason)
	}
	return fmt.Sprintf("%s %s/%s: %s", w.Kind, w.Namespace, w.Name, w.Reason)
}
