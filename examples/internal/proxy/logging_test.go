package proxy

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
)

// TestLoggingFlags: kube-proxy's logging flags, as a DaemonSet passes them
// (-v/--v, --logging-format, --log-flush-frequency), and its --config
// file's logging section, which the flags override as in kube-proxy; what
// kube-proxy refuses, and what the proxies cannot honour (--vmodule), is a
// clear error naming it.
func TestLoggingFlags(t *testing.T) {
	const file = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n"
	for _, tc := range []struct {
		name    string
		config  string // the --config file's text, "" for none
		flags   []string
		format  string
		wantErr string
	}{
		{name: "defaults", format: "text"},
		{name: "a DaemonSet's", flags: []string{"--v=2", "--logging-format=text", "--log-flush-frequency=10s"}, format: "text"},
		{name: "-v and --v", flags: []string{"-v", "4", "--v", "5"}, format: "text"},
		{name: "json", flags: []string{"--logging-format", "json"}, format: "json"},
		{name: "an unknown format", flags: []string{"--logging-format", "xml"}, wantErr: `logging.format: Invalid value: "xml": Unsupported log format`},
		{name: "a flush frequency of zero", flags: []string{"--log-flush-frequency", "0s"}, wantErr: "logging.flushFrequency: Invalid value"},
		{name: "vmodule", flags: []string{"--vmodule", "proxier=4"}, wantErr: "logging.vmodule (--vmodule): not supported"},
		{name: "vmodule with json", flags: []string{"--logging-format", "json", "--vmodule", "proxier=4"}, wantErr: "logging.vmodule (--vmodule): only supported for the text log format"},
		{name: "alpha split stream", flags: []string{"--log-text-split-stream"}, wantErr: "Feature LoggingAlphaOptions is disabled"},
		{name: "a negative -v", flags: []string{"-v=-1"}, wantErr: `invalid value "-1" for flag -v`},
		{name: "the file's format", config: file + "logging: {format: json, verbosity: 3}\n", format: "json"},
		{name: "flags over the file", config: file + "logging: {format: json}\n", flags: []string{"--logging-format=text", "--v=2"}, format: "text"},
		{name: "the file's vmodule", config: file + "logging: {vmodule: [{filePattern: proxier, verbosity: 4}]}\n", wantErr: "logging.vmodule (--vmodule): not supported"},
		{name: "the file's unknown format", config: file + "logging: {format: xml}\n", wantErr: "Unsupported log format"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"--manifests", t.TempDir()}, tc.flags...)
			if tc.config != "" {
				args = append([]string{"--config", writeConfig(t, tc.config)}, args...)
			}
			o, err := ParseOptions("iptables-proxy", args, io.Discard)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v; want one with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if o.LogFormat != tc.format {
				t.Errorf("log format %q, want %q", o.LogFormat, tc.format)
			}
		})
	}
}

// TestJSONLogs: with --logging-format json every line the proxy writes on
// standard error is a JSON object.
func TestJSONLogs(t *testing.T) {
	dir := writeManifests(t, map[string]string{"svc.yaml": goodService})
	var out, errs bytes.Buffer
	code := Run(fakeMode(map[v1.IPFamily]*fakeBackend{}), []string{"--manifests", dir, "--node-name", "n1", "--ip-family", "ipv4", "--once", "--logging-format", "json"}, &out, &errs)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs.String())
	}
	lines := strings.Split(strings.TrimSpace(errs.String()), "\n")
	if len(lines) == 0 || lines[0] == "" {
		t.Fatal("nothing logged")
	}
	for _, line := range lines {
		var v map[string]any
		if err := json.Unmarshal([]byte(line), &v); err != nil || v["msg"] == nil {
			t.Errorf("not a JSON log line: %q (%v)", line, err)
		}
	}
}
