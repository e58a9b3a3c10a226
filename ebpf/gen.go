package ebpf

// The programs of bpf/sock.c, bpf/destroy.c and bpf/tc.c, compiled by
// clang into sock_bpfel.o, destroy_bpfel.o and tc_bpfel.o and embedded by
// the matching _bpfel.go files; all are committed, so that building needs
// no clang. bpf/check-generated.sh regenerates them and fails when they
// differ from the committed ones.
//
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu" -target bpfel -go-package ebpf -output-stem sock sock bpf/sock.c
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu" -target bpfel -go-package ebpf -output-stem destroy destroy bpf/destroy.c
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu" -target bpfel -go-package ebpf -output-stem tc tc bpf/tc.c
