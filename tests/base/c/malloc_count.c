/* An LD_PRELOAD shim for tests/base/test_alloc.py: counts every heap allocation (malloc, calloc,
 * realloc, aligned_alloc, posix_memalign) the process makes, and those of at least BIG bytes,
 * so a test can check that repeated graph runs allocate nothing. The counters are read through
 * ctypes (nnc_test_malloc_calls / nnc_test_malloc_big). dlsym itself may call calloc before
 * the real one is known; those few early calls are served from a static buffer. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>
#include <stdlib.h>

#define BIG 4096

static void *(*real_malloc)(size_t);
static void *(*real_calloc)(size_t, size_t);
static void *(*real_realloc)(void *, size_t);
static void *(*real_aligned_alloc)(size_t, size_t);
static int (*real_posix_memalign)(void **, size_t, size_t);
static void (*real_free)(void *);
static long long calls, big;
static __thread int resolving;
static char early[65536];
static size_t early_used;

static void count(size_t n)
{
    __atomic_add_fetch(&calls, 1, __ATOMIC_RELAXED);
    if (n >= BIG)
        __atomic_add_fetch(&big, 1, __ATOMIC_RELAXED);
}

void *malloc(size_t n)
{
    if (!real_malloc)
        real_malloc = (void *(*)(size_t))dlsym(RTLD_NEXT, "malloc");
    count(n);
    return real_malloc(n);
}

void *calloc(size_t a, size_t b)
{
    if (!real_calloc) {
        if (resolving) {                /* dlsym's own calloc: a zeroed static slice */
            void *p = early + early_used;
            early_used += (a * b + 15) & ~(size_t)15;
            return early_used <= sizeof early ? p : NULL;
        }
        resolving = 1;
        real_calloc = (void *(*)(size_t, size_t))dlsym(RTLD_NEXT, "calloc");
        resolving = 0;
    }
    count(a * b);
    return real_calloc(a, b);
}

void *realloc(void *p, size_t n)
{
    if (!real_realloc)
        real_realloc = (void *(*)(void *, size_t))dlsym(RTLD_NEXT, "realloc");
    count(n);
    return real_realloc(p, n);
}

void *aligned_alloc(size_t a, size_t n)
{
    if (!real_aligned_alloc)
        real_aligned_alloc = (void *(*)(size_t, size_t))dlsym(RTLD_NEXT, "aligned_alloc");
    count(n);
    return real_aligned_alloc(a, n);
}

int posix_memalign(void **p, size_t a, size_t n)
{
    if (!real_posix_memalign)
        real_posix_memalign = (int (*)(void **, size_t, size_t))dlsym(RTLD_NEXT,
                                                                      "posix_memalign");
    count(n);
    return real_posix_memalign(p, a, n);
}

void free(void *p)
{
    if ((char *)p >= early && (char *)p < early + sizeof early)
        return;
    if (!real_free)
        real_free = (void (*)(void *))dlsym(RTLD_NEXT, "free");
    real_free(p);
}

long long nnc_test_malloc_calls(void) { return calls; }
long long nnc_test_malloc_big(void) { return big; }
