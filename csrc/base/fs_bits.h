/* fs_bits.h - the few compiler built-ins the core uses (lowest set bit,
 * population count, prefetch, branch hints), under names every compiler
 * we build with understands.  gcc and clang (mingw-w64 and clang-cl
 * included) get their __builtin_*, which compile to single instructions;
 * MSVC has none of them and gets its intrinsics instead.
 *
 * FS_BITS_PORTABLE forces the MSVC side on any compiler with the MSVC
 * intrinsic headers, so that `make cross-windows` compiles it with
 * mingw-w64 (no MSVC here). */
#ifndef FS_BITS_H
#define FS_BITS_H

#include <stdint.h>

#if (defined(_MSC_VER) && !defined(__clang__)) || defined(FS_BITS_PORTABLE)
#include <intrin.h>

/* Index of the lowest set bit of x; x must not be 0. */
static inline unsigned fs_ctz64(uint64_t x)
{
    unsigned long i;
#if defined(_M_IX86) || defined(__i386__)
    /* 32-bit x86 has no 64-bit bit scan */
    if (_BitScanForward(&i, (unsigned long)(uint32_t)x))
        return (unsigned)i;
    _BitScanForward(&i, (unsigned long)(uint32_t)(x >> 32));
    return (unsigned)i + 32;
#else
    _BitScanForward64(&i, x);
    return (unsigned)i;
#endif
}

/* Set bits in x.  Bit arithmetic rather than __popcnt64: that one is an
 * x86-64 instruction only, and its one use here (adding a shape) is cold. */
static inline unsigned fs_popcount64(uint64_t x)
{
    x = x - ((x >> 1) & 0x5555555555555555ull);
    x = (x & 0x3333333333333333ull) + ((x >> 2) & 0x3333333333333333ull);
    x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0full;
    return (unsigned)((x * 0x0101010101010101ull) >> 56);
}

/* Start loading the cache line at p (a hint: never faults). */
#if defined(_M_X64) || defined(_M_IX86) || defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define FS_PREFETCH(p) _mm_prefetch((const char *)(p), _MM_HINT_T0)
#elif defined(_M_ARM64)
#define FS_PREFETCH(p) __prefetch((const void *)(p))
#else
#define FS_PREFETCH(p) ((void)(p))
#endif

/* MSVC takes no branch-probability hints. */
#define FS_LIKELY(x) (x)
#define FS_UNLIKELY(x) (x)
#if defined(_MSC_VER)
#define FS_ALWAYS_INLINE static __forceinline
#else
#define FS_ALWAYS_INLINE static inline __attribute__((always_inline))
#endif

#else

static inline unsigned fs_ctz64(uint64_t x) { return (unsigned)__builtin_ctzll(x); }
static inline unsigned fs_popcount64(uint64_t x) { return (unsigned)__builtin_popcountll(x); }
#define FS_PREFETCH(p) __builtin_prefetch(p)
#define FS_LIKELY(x) __builtin_expect(!!(x), 1)
#define FS_UNLIKELY(x) __builtin_expect(!!(x), 0)
/* For the few helpers that must be copied into each caller: specialised
 * per dialect, or on the per-byte path. */
#define FS_ALWAYS_INLINE static inline __attribute__((always_inline))

#endif

#endif
