package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDemoManifests(t *testing.T) {
	var out, errs bytes.Buffer
	if err := run(context.Background(), &out, &errs, options{path: "manifests", nodeName: "node-a"}); err != nil {
		t.Fatal(err)
	}
	if errs.Len() != 0 {
		t.Errorf("demo manifests gave warnings:\n%s", errs.String())
	}
	for _, want := range []string{
		// The terminating endpoint 198.18.1.13 is not used while two are ready.
		"demo/web:http/tcp  cluster IP 198.19.0.10:80\n  cluster IP traffic: spread over 198.18.1.11:8080, 198.18.2.12:8080 (1/2 each)\n",
		"demo/dns:dns/udp  cluster IP 198.19.0.53:53\n  cluster IP traffic: spread over this node's 198.18.1.21:53\n",
		"external traffic:   spread over this node's 198.18.1.31:8080",
		"demo/empty:http/tcp  cluster IP 198.19.0.40:80\n  cluster IP traffic: rejected (no endpoints anywhere)\n",
		"health check node port 30256 answers 503 (no local endpoints)",
		"affinity ClientIP(600s)",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q; got:\n%s", want, out.String())
		}
	}
}

func TestBadManifestsFile(t *testing.T) {
	dir := t.TempDir()
	bad := "apiVersion: v1\nkind: Service\nmetadata: {namespace: demo, name: web}\nspec:\n  ports: [{port: eighty}]\n"
	if err := os.WriteFile(filepath.Join(dir, "services.yaml"), []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errs bytes.Buffer
	err := run(context.Background(), &out, &errs, options{path: dir, nodeName: "node-a"})
	if err == nil {
		t.Fatal("no error for a Service whose port is not a number")
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, "bad manifests: services.yaml: document 1: Service demo/web: ") || strings.Contains(msg, "\n") {
		t.Errorf("error %q does not name file and object on one line", msg)
	}
	if out.Len() != 0 {
		t.Errorf("printed a selection from a broken input:\n%s", out.String())
	}
}
