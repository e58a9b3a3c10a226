package nftexec

import "testing"

func TestCheckKernel(t *testing.T) {
	for release, ok := range map[string]bool{
		"5.13.0":            true,
		"5.15.0-91-generic": true,
		"6.18.44-fc-v657":   true,
		"10.0":              true,
		"5.12.19":           false,
		"4.18.0-513.el8":    false,
		"":                  false,
		"garbage":           false,
	} {
		err := checkKernel(release)
		if (err == nil) != ok {
			t.Errorf("kernel %q: %v, want ok=%v", release, err, ok)
		}
	}
}
