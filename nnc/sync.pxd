# POSIX threads, semaphores and clocks: the one place nnc's Cython modules declare them.
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

cdef extern from "<pthread.h>" nogil:
    int pthread_cond_timedwait(pthread_cond_t*, pthread_mutex_t*, const timespec*)

cdef extern from "<semaphore.h>" nogil:
    ctypedef struct sem_t:
        pass
    int sem_init(sem_t*, int, unsigned int)
    int sem_destroy(sem_t*)
    int sem_wait(sem_t*)
    int sem_post(sem_t*)
