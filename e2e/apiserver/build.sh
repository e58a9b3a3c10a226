#!/usr/bin/env bash
# Builds the kube-apiserver, kube-proxy and etcd that the API-server and
# differential suites run, from the Go module proxy through the wrapper modules
# in tools/ (kube-apiserver and kube-proxy from one module, in one go build,
# so that they share their compiled packages), into a cache directory
# outside the clone, and prints that directory on stdout (progress goes to
# stderr). The directory is named by a key over the wrapper modules, the build
# flags and the Go toolchain: a complete directory with that key is reused as
# it is, so a warm run pays seconds. The binaries are moved into place only
# once all are built, so an interrupted build leaves no half directory.
#
# Usage: export SVCPROXY_APISERVER_BIN_DIR=$(e2e/apiserver/build.sh)
set -euo pipefail
tools="$(cd "$(dirname "$0")" && pwd)/tools"

export CGO_ENABLED=0
build_flags=(-trimpath -buildvcs=false -ldflags=-s\ -w)

key=$(
	{
		cat "$tools/kubernetes/go.mod" "$tools/kubernetes/go.sum"
		cat "$tools/etcd/go.mod" "$tools/etcd/go.sum" "$tools/etcd/main.go"
		echo "${build_flags[*]} CGO_ENABLED=$CGO_ENABLED"
		go env GOVERSION GOOS GOARCH
	} | sha256sum | cut -c1-20
)
cache="${XDG_CACHE_HOME:-$HOME/.cache}/svcproxy/apiserver"
dir="$cache/$key"

if [ -x "$dir/kube-apiserver" ] && [ -x "$dir/kube-proxy" ] && [ -x "$dir/etcd" ]; then
	echo "apiserver build: reusing $dir" >&2
	echo "$dir"
	exit 0
fi

mkdir -p "$cache"
staging=$(mktemp -d "$cache/$key.partial.XXXXXX")
chmod 755 "$staging"
trap 'rm -rf "$staging"' EXIT

echo "apiserver build: building etcd into $dir" >&2
go build -C "$tools/etcd" "${build_flags[@]}" -o "$staging/etcd" .
echo "apiserver build: building kube-apiserver and kube-proxy into $dir (a cold build takes tens of minutes)" >&2
go build -C "$tools/kubernetes" "${build_flags[@]}" -o "$staging/" \
	k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-proxy

rm -rf "$dir"
mv "$staging" "$dir"
trap - EXIT
echo "$dir"
