// How many cores gRPC sizes itself for: one, whatever the node has.
//
// gRPC (Debian's libgrpc 1.51) asks gpr_cpu_num_cores() how many cores the
// machine has and sizes itself by it: its timer list keeps two shards a
// core, each waking the timer thread up to once a second while the
// exporter idles, and its EventEngine a thread a core (two at least). The
// exporter's gRPC work is one daemon's streams and a few calls on a Unix
// socket, the same on a 2-core VM as on a 192-core GPU node: on a 16-core
// node that sizing was 16 of the idle exporter's 46 threads and 32 timer
// shards (docs/benchmarks.md, issue 51, sixth pass). The library has no
// setting for it, so the executable defines this public function
// (grpc/support/cpu.h) itself, and the dynamic linker binds every caller in
// the process to it, gRPC's own included (ELF symbol interposition: a
// definition in the executable comes before the libraries'). libgpr's
// gpr_cpu_current_cpu() asks it too (through its PLT, checked with objdump
// for 1.51), so every per-core array is indexed within its one slot.
#include <grpc/support/cpu.h>

unsigned gpr_cpu_num_cores(void) { return 1; }
