"""CPU streams and signals (NNC: ccv_nnc_stream.c semantics; CUDA-event rules for signals).

No test here asserts a duration: concurrency is shown with barriers that only pass when two
streams really run at once, and asynchrony with events the test itself releases.
"""

import gc
import threading

import numpy as np
import pytest

import nnc
from nnc.stream.stream import Signal, Stream

TIMEOUT = 10


def blocker():
    """A callback that blocks its stream until the test sets the returned event."""
    go = threading.Event()

    def block():
        assert go.wait(TIMEOUT), "test never released the stream"

    return go, block


def test_enqueue_returns_before_the_work_runs():
    s = Stream("cpu")
    go, block = blocker()
    log = []
    s.add_callback(block)
    s.add_callback(lambda: log.append(1))
    assert log == [] and not s.query()
    go.set()
    s.wait()
    assert log == [1] and s.query()


def test_two_streams_run_at_the_same_time():
    barrier = threading.Barrier(2, timeout=TIMEOUT)
    threads = []

    def meet():
        threads.append(threading.get_ident())
        barrier.wait()  # raises BrokenBarrierError unless both streams are here together

    a, b = Stream(), Stream()
    a.add_callback(meet)
    b.add_callback(meet)
    a.wait()
    b.wait()
    assert len(set(threads)) == 2 and threading.get_ident() not in threads


def test_work_runs_in_order_on_one_stream():
    s = Stream()
    log = []
    for i in range(500):
        s.add_callback(lambda i=i: log.append(i))
    s.wait()
    assert log == list(range(500))


def test_signal_orders_two_streams():
    a, b = Stream(), Stream()
    sig = Signal()
    go, block = blocker()
    log = []
    a.add_callback(block)
    a.add_callback(lambda: log.append("a"))
    a.emit(sig)
    b.wait_signal(sig)
    b.add_callback(lambda: log.append("b"))
    assert not b.query()  # b is held by the signal, not by its own work
    go.set()
    b.wait()
    assert log == ["a", "b"]


def test_waiting_on_a_never_emitted_signal_is_a_noop():
    s = Stream()
    sig = Signal()
    assert not sig.emitted and sig.query()
    s.wait_signal(sig)
    s.add_callback(lambda: None)
    s.wait()


def test_reemitting_rearms_and_waits_bind_to_the_latest_emit():
    a, b = Stream(), Stream()
    sig = Signal()
    a.emit(sig)
    a.wait()
    assert sig.query()
    go, block = blocker()
    a.add_callback(block)
    a.emit(sig)  # re-armed: not reached until the blocker is released
    assert not sig.query()
    b.wait_signal(sig)
    log = []
    b.add_callback(lambda: log.append("b"))
    assert log == []
    go.set()
    b.wait()
    assert log == ["b"] and sig.query()


def test_wait_binds_at_enqueue_time_not_later_emits():
    a, b = Stream(), Stream()
    sig = Signal()
    a.emit(sig)
    a.wait()
    b.wait_signal(sig)  # the emit it binds to is already done
    go, block = blocker()
    a.add_callback(block)
    a.emit(sig)  # a later emit does not hold back the earlier wait
    b.add_callback(lambda: None)
    b.wait()
    go.set()
    a.wait()


def test_error_is_raised_by_wait_and_the_stream_keeps_working():
    s = Stream()

    def boom():
        raise ValueError("bad value")

    s.add_callback(boom)
    s.add_callback(boom)
    log = []
    s.add_callback(lambda: log.append("after"))
    with pytest.raises(nnc.StreamError, match=r"ValueError.*and 1 more") as info:
        s.wait()
    assert isinstance(info.value.__cause__, ValueError)
    assert log == ["after"]  # later work still ran
    s.wait()  # errors are reported once
    s.add_callback(lambda: log.append("again"))
    s.wait()
    assert log == ["after", "again"]


class Unprintable(Exception):
    """An exception whose repr and str raise."""

    def __repr__(self):
        raise RuntimeError("repr of Unprintable")

    __str__ = __repr__


class UnprintableCallback:
    """A callback whose repr raises; calling it raises ``exc``."""

    def __init__(self, exc):
        self.exc = exc

    def __call__(self):
        raise self.exc

    def __repr__(self):
        raise RuntimeError("repr of UnprintableCallback")


@pytest.mark.parametrize("exc", [Unprintable(), KeyboardInterrupt(), SystemExit(3)],
                         ids=["unprintable", "KeyboardInterrupt", "SystemExit"])
@pytest.mark.parametrize("unprintable_fn", [False, True], ids=["fn", "unprintable_fn"])
def test_a_failure_whose_repr_raises_is_still_raised_by_wait(exc, unprintable_fn):
    """Before, wait() raised the repr's RuntimeError instead of the failure, and a callback
    whose repr raised lost its failure altogether (wait() returned True)."""
    s = Stream()
    if unprintable_fn:
        fn = UnprintableCallback(exc)
    else:
        def fn():
            raise exc
    s.add_callback(fn)
    with pytest.raises(nnc.StreamError) as info:
        s.wait(timeout=TIMEOUT)
    assert info.value.__cause__ is exc
    if unprintable_fn or isinstance(exc, Unprintable):
        assert "its repr raised RuntimeError" in str(info.value)
    assert s.wait(timeout=TIMEOUT) is True


def test_a_failing_stream_still_emits_its_signals():
    a, b = Stream(), Stream()
    sig = Signal()
    a.add_callback(lambda: 1 / 0)
    a.emit(sig)
    b.wait_signal(sig)
    done = []
    b.add_callback(lambda: done.append(True))
    b.wait()
    assert done == [True]
    with pytest.raises(nnc.StreamError) as info:
        a.wait()
    assert isinstance(info.value.__cause__, ZeroDivisionError)


def test_cmd_exec_on_a_stream_is_asynchronous():
    s = Stream()
    go, block = blocker()
    x = nnc.Tensor(np.full(1000, 2, np.float32))
    s.add_callback(block)
    nnc.cmd_exec(nnc.Cmd("SCALAR_MUL", a=3), [x], [x], stream=s)  # C backend
    nnc.cmd_exec(nnc.Cmd("SCALAR_MUL", a=5, backend="CPU_REF"), [x], [x], stream=s)
    nnc.cmd_exec(nnc.Cmd.custom(lambda i, o: o[0].__setitem__(0, -1)), [], [x], stream=s)
    assert (x.numpy() == 2).all()
    go.set()
    s.wait()
    assert x.numpy()[0] == -1 and (x.numpy()[1:] == 30).all()


def test_cmd_exec_keeps_its_tensors_alive():
    s = Stream()
    go, block = blocker()
    s.add_callback(block)
    out = nnc.Tensor.zeros(64)
    nnc.cmd_exec(nnc.Cmd("SCALAR_MUL", a=2), [np.ones(64, np.float32)], [out], stream=s)
    gc.collect()  # the temporary input must survive until the command ran
    go.set()
    s.wait()
    assert (out.numpy() == 2).all()


def test_cmd_exec_errors_on_a_stream():
    s = Stream()
    x = nnc.Tensor.zeros(3)
    with pytest.raises(nnc.CommandError, match="shape"):  # checked before enqueueing
        nnc.cmd_exec(nnc.Cmd("EWSUM"), [x], [nnc.Tensor.zeros(4)], stream=s)
    with pytest.raises(nnc.CommandError, match="nnc.Stream"):
        nnc.cmd_exec(nnc.Cmd("EWSUM"), [x], [x], stream="cpu")

    def fail(inputs, outputs):
        raise RuntimeError("inside")

    nnc.cmd_exec(nnc.Cmd.custom(fail), [], [], stream=s)
    with pytest.raises(nnc.StreamError, match="CUSTOM") as info:
        s.wait()
    assert isinstance(info.value.__cause__, RuntimeError)


def test_bad_stream_and_signal_kinds():
    with pytest.raises(nnc.CUDAError):  # no such GPU: without a driver, or beyond the count
        Stream("gpu:99")
    with pytest.raises(nnc.NNCError, match="unknown stream kind"):
        Stream("tpu")
    with pytest.raises(nnc.NNCError, match="unknown stream kind"):
        Signal("cuda")
    s = Stream()
    with pytest.raises(TypeError):
        s.emit("not a signal")
    with pytest.raises(TypeError):
        s.wait_signal(None)
    with pytest.raises(nnc.NNCError, match="callable"):
        s.add_callback(3)


def test_work_outlives_a_dropped_stream():
    done = threading.Event()
    go, block = blocker()
    s = Stream()
    s.add_callback(block)
    s.add_callback(done.set)
    del s
    gc.collect()
    go.set()
    assert done.wait(TIMEOUT)


def test_many_streams_chained_by_signals():
    streams = [Stream() for _ in range(4)]
    signals = [Signal() for _ in range(4)]
    log = []
    for step in range(200):
        k = step % 4
        if step:
            streams[k].wait_signal(signals[(step - 1) % 4])
        streams[k].add_callback(lambda step=step: log.append(step))
        streams[k].emit(signals[k])
    for s in streams:
        s.wait()
    assert log == list(range(200))


def test_context_manager_waits():
    log = []
    with Stream() as s:
        s.add_callback(lambda: log.append(1))
    assert log == [1]
