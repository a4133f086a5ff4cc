/* fs_fault.h - a mapped file that changes under its readers must not kill
 * them: the guard of image mappings against SIGBUS.
 *
 * Why this file exists.  Sublist.open maps an image file read-only and every
 * walk reads it in place.  When the file is cut shorter while it is mapped
 * -- truncated, or rewritten in place (`cp new.img live.img` truncates the
 * file first, then writes it) -- the kernel answers a read of a page past
 * the file's new end with SIGBUS, whose default action kills the process:
 * every worker of a pre-fork server at once, with no message.  Here one
 * process-wide SIGBUS handler, installed on the first guard, turns such a
 * fault, and only such a fault, into zeros: it maps anonymous zero pages
 * over the whole mapping (MAP_FIXED: the same addresses, read-only), marks
 * the guard revoked and returns, so the faulting read runs again and reads
 * zeros.  Nothing jumps (no longjmp out of a walk holding locks or
 * allocations): the call goes on over zeros, which the offset checks of a
 * mapped image survive like any other damage (a zero link is "none", a
 * zero count is empty), and the Cython layer, which checks the mapping
 * after every call, raises in the calling thread.  Every other SIGBUS --
 * outside a guarded range, or sent by kill() -- goes to the handler that
 * was there before (faulthandler's, a sanitizer's), or kills the process
 * as the default action would.
 *
 * The handler takes no lock and allocates nothing, so guards are a fixed
 * table of atomic ranges, claimed and released without a lock:
 *
 *   guards[FS_FAULT_SLOTS]         one per mapped image
 *     state    FREE | CLAIMED (being written) | LIVE, and a count of
 *              claims (the handler reads it again after the range: a
 *              seqlock, so it never acts on a range being rewritten)
 *     base     the mapping's first byte (page-aligned: a whole mapping)
 *     len      its bytes
 *     revoked  1 once the handler has put zeros over it
 *   used                           slots ever claimed: the handler scans
 *                                  guards[0, used) only
 *
 * A guard must be released (fs_fault_unguard) before its mapping is
 * unmapped: a later mapping at the same addresses is someone else's.
 *
 * No Python.h, no threads: what the handler needs is POSIX signals and
 * mmap.  Windows has no SIGBUS (a mapped file cannot be truncated there):
 * the mechanism is compiled out and fs_fault_guard says FS_ENOSYS.  So is
 * it where SA_SIGINFO or MAP_ANONYMOUS are missing.
 *
 * A SIGBUS handler installed after the first guard (faulthandler.enable()
 * called later, say) runs before this one: it then sees the faults in
 * guarded mappings too, and does what it does with them (faulthandler
 * prints the traceback and lets the process die, as before). */
#ifndef FS_FAULT_H
#define FS_FAULT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Guards at once in one process (mapped images open at once). */
#define FS_FAULT_SLOTS 4096

/* Guard the mapping [base, base + len) (base: the address mmap returned;
 * len > 0).  Installs the SIGBUS handler on the first call.  A slot number
 * >= 0 on success; FS_ENOSYS where there is no such handler (Windows);
 * FS_ENOMEM when every slot is taken or the handler cannot be installed
 * (the caller then reads the file into memory instead). */
int fs_fault_guard(const void *base, size_t len);

/* Release a guard (slot from fs_fault_guard), before its mapping goes.
 * A negative slot is ignored. */
void fs_fault_unguard(int slot);

/* 1 when a fault inside the guarded mapping was turned into zeros (the
 * file was cut shorter under it), else 0. */
int fs_fault_revoked(int slot);

/* How many faults have been turned into zeros in this process. */
uint64_t fs_fault_revocations(void);

/* The 8 bytes at p -- a mapping's last 8, p = base + len - 8 -- as a
 * number: read at open and compared after each call, they tell that the
 * file was rewritten in place even when no read faulted (an image's last 8
 * bytes are its checksum: another image's differ), and zeros put over a
 * revoked mapping differ too.  A plain load, no alignment assumed; a read
 * of a mapping cut shorter faults into the handler like any other. */
static inline uint64_t fs_fault_tail(const void *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

#endif
