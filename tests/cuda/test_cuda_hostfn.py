"""The C host callback behind CUDA stream waits (nnc/cuda/_hostfn.pyx), without a GPU.

The driver would call the function from its own thread; here plain threads and a raw C
pthread (through ctypes) stand in for it. The key property: the callback completes while
another thread holds the GIL, so it can never deadlock against a thread inside the driver.
"""

import ctypes
import gc
import threading
import weakref

import pytest

from nnc.cuda import _hostfn

CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class Wake:
    def __init__(self):
        self.event = threading.Event()
        self.thread = None

    def __call__(self):
        self.thread = threading.current_thread().name
        self.event.set()


def test_callback_from_another_thread_wakes_once_on_the_watcher():
    fn = CALLBACK(_hostfn.fn_address())
    wakes = [Wake() for _ in range(5)]
    before = _hostfn.pending()
    datas = [_hostfn.arm(w) for w in wakes]
    assert _hostfn.pending() == before + 5
    for d in reversed(datas):                 # completion order differs from arm order
        threading.Thread(target=fn, args=(d,)).start()
    for w in wakes:
        assert w.event.wait(5)
        assert w.thread == "nnc-cuda-hostfn"  # one watcher thread, not the caller's
    for _ in range(100):
        if _hostfn.pending() == before:
            break
        threading.Event().wait(0.01)
    assert _hostfn.pending() == before


def test_callback_completes_while_the_gil_is_held():
    libc = ctypes.PyDLL(None)   # PyDLL: calls keep the GIL, so this thread never releases it
    tid = ctypes.c_ulong()
    w = Wake()
    data = _hostfn.arm(w)
    rc = libc.pthread_create(ctypes.byref(tid), None, ctypes.c_void_p(_hostfn.fn_address()),
                             ctypes.c_void_p(data))
    assert rc == 0
    ts = (ctypes.c_long * 2)()
    libc.clock_gettime(0, ts)                 # CLOCK_REALTIME, for pthread_timedjoin_np
    ts[0] += 5
    # A callback that needed the GIL would block forever here: we hold it throughout.
    rc = libc.pthread_timedjoin_np(tid, None, ts)
    assert rc == 0, "the host callback did not finish while the GIL was held"
    assert w.event.wait(5)


def test_disarm_releases_the_callable_and_arm_checks():
    w = Wake()
    ref = weakref.ref(w)
    before = _hostfn.pending()
    _hostfn.disarm(_hostfn.arm(w))
    assert _hostfn.pending() == before
    del w
    gc.collect()
    assert ref() is None
    with pytest.raises(TypeError, match="callable"):
        _hostfn.arm(42)


def test_a_failing_wake_does_not_stop_the_watcher():
    fn = CALLBACK(_hostfn.fn_address())

    def bad():
        raise RuntimeError("wake failed")

    ok = Wake()
    fn(_hostfn.arm(bad))
    fn(_hostfn.arm(ok))
    assert ok.event.wait(5)
