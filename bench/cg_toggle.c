/* Callgrind's instrumentation switch, for bench/instructions.py: the child
 * runs its set-up (Python's start, loading the workload, inserting 100,000
 * filters, the warm-up) under valgrind with instrumentation off
 * (--instr-atstart=no), which is several times faster than instrumented,
 * and counts only between cg_start() and cg_stop(), called through ctypes.
 * Built on first use into build/callgrind/ (valgrind's own headers: the
 * Debian package valgrind ships them). */
#include <valgrind/callgrind.h>

void cg_start(void) { CALLGRIND_START_INSTRUMENTATION; }
void cg_stop(void) { CALLGRIND_STOP_INSTRUMENTATION; }
