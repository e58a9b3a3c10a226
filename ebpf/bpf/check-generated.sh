#!/usr/bin/env bash
# Regenerates the BPF objects of package ebpf (bpf2go, clang) and fails when
# they differ from the committed ones: the committed objects must be what
# the committed sources produce. Needs clang, llvm and libbpf-dev
# (apt-get install -y clang llvm libbpf-dev).
set -euo pipefail
cd "$(dirname "$0")/.."
go generate .
if ! git diff --exit-code -- sock_bpfel.go sock_bpfel.o destroy_bpfel.go destroy_bpfel.o tc_bpfel.go tc_bpfel.o; then
	echo "ebpf: the committed BPF objects differ from what bpf/*.c produce: run 'go generate ./ebpf' and commit" >&2
	exit 1
fi
