# POSIX threads, semaphores, clocks and yielding: the one place nnc's Cython modules declare them.
# Declarations only (no module is built from this file).

cdef extern from "<pthread.h>" nogil:
    ctypedef struct pthread_mutex_t:
        pass
    ctypedef struct pthread_cond_t:
        pass
    ctypedef struct pthread_attr_t:
        pass
    ctypedef unsigned long pthread_t
    int pthread_mutex_init(pthread_mutex_t*, const void*)
    int pthread_mutex_destroy(pthread_mutex_t*)
    int pthread_mutex_lock(pthread_mutex_t*)
    int pthread_mutex_unlock(pthread_mutex_t*)
    int pthread_cond_init(pthread_cond_t*, const void*)
    int pthread_cond_destroy(pthread_cond_t*)
    int pthread_cond_wait(pthread_cond_t*, pthread_mutex_t*)
    int pthread_cond_signal(pthread_cond_t*)
    int pthread_cond_broadcast(pthread_cond_t*)
    int pthread_attr_init(pthread_attr_t*)
    int pthread_attr_setdetachstate(pthread_attr_t*, int)
    int pthread_attr_destroy(pthread_attr_t*)
    int pthread_create(pthread_t*, const pthread_attr_t*, void* (*)(void*) noexcept nogil, void*)
    int pthread_join(pthread_t, void**)
    int PTHREAD_CREATE_DETACHED

cdef extern from "<time.h>" nogil:
    cdef struct timespec:
        long tv_sec
        long tv_nsec
    int clock_gettime(int, timespec*)
    int CLOCK_MONOTONIC
    int CLOCK_REALTIME

cdef inline double mono_now() noexcept nogil:
    """CLOCK_MONOTONIC seconds (time.perf_counter's clock): deadlines of host waits and spins."""
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return ts.tv_sec + ts.tv_nsec * 1e-9


cdef extern from "<pthread.h>" nogil:
    int pthread_cond_timedwait(pthread_cond_t*, pthread_mutex_t*, const timespec*)

cdef extern from "<sched.h>" nogil:
    int sched_yield()

cdef extern from "<semaphore.h>" nogil:
    ctypedef struct sem_t:
        pass
    int sem_init(sem_t*, int, unsigned int)
    int sem_destroy(sem_t*)
    int sem_wait(sem_t*)
    int sem_post(sem_t*)

# A mutex that spins briefly before it sleeps (glibc's adaptive type) where the platform has
# one, else a default mutex. For locks held for a few instructions and taken by the host and
# pool threads alike: a plain mutex sends a contended locker to a futex sleep and the holder to
# a futex wake-up, microseconds for a lock held nanoseconds.
cdef extern from *:
    """
    #ifndef _GNU_SOURCE
    #define _GNU_SOURCE
    #endif
    #include <pthread.h>
    static int nnc_mutex_init_spinning(pthread_mutex_t* m) {
    #ifdef PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP
        pthread_mutexattr_t a;
        int rc;
        if (pthread_mutexattr_init(&a) != 0)
            return pthread_mutex_init(m, NULL);
        pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ADAPTIVE_NP);
        rc = pthread_mutex_init(m, &a);
        pthread_mutexattr_destroy(&a);
        return rc;
    #else
        return pthread_mutex_init(m, NULL);
    #endif
    }
    """
    int mutex_init_spinning "nnc_mutex_init_spinning"(pthread_mutex_t*) nogil
