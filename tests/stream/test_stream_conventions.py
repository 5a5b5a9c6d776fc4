"""Conventions users bring from CUDA, torch and asyncio: ``with stream:``, host waits on signals,
``Stream.wait(timeout=)``, ``await stream`` (docs/threading.md, "Conventions").

Nothing here asserts a duration; every wait that could hang is bounded.
"""

import asyncio
import select
import signal
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import nnc
from nnc.stream.stream import Signal, Stream

TIMEOUT = 10


def gate():
    """(event, callback): the callback blocks its stream until the test sets the event."""
    go = threading.Event()

    def block():
        assert go.wait(TIMEOUT), "test never released the stream"

    return go, block


def fail():
    raise ValueError("boom in a callback")


# -- with stream: ---------------------------------------------------------------------------

def test_with_block_raising_keeps_its_exception_and_notes_the_stream_failure():
    s = Stream()
    log = []
    with pytest.raises(KeyError) as info:
        with s:
            s.add_callback(fail)
            s.add_callback(lambda: log.append("ran"))
            raise KeyError("from the block")
    assert log == ["ran"]                # the stream was drained before the exception left
    notes = getattr(info.value, "__notes__", [])
    assert len(notes) == 1 and "ValueError" in notes[0] and "boom" in notes[0]
    assert repr(s) in notes[0]
    assert s.wait() is True              # reported once, as wait() does: now forgotten


def test_with_block_raising_on_a_healthy_stream_drains_and_adds_nothing():
    s = Stream()
    go, block = gate()
    log = []
    s.add_callback(block)
    s.add_callback(lambda: log.append("ran"))
    threading.Timer(0.05, go.set).start()
    with pytest.raises(RuntimeError, match="block") as info:
        with s:
            raise RuntimeError("block")
    assert log == ["ran"] and s.query()
    assert not getattr(info.value, "__notes__", None)


def test_with_no_exception_and_a_failing_stream_raises_stream_error():
    s = Stream()
    with pytest.raises(nnc.StreamError, match="boom") as info:
        with s:
            s.add_callback(fail)
    assert isinstance(info.value.__cause__, ValueError)


def test_with_keyboard_interrupt_leaves_at_once_and_keeps_the_work():
    s = Stream()
    go, block = gate()
    log = []
    with pytest.raises(KeyboardInterrupt):
        with s:
            s.add_callback(block)
            s.add_callback(fail)
            s.add_callback(lambda: log.append("ran"))
            raise KeyboardInterrupt
    assert not s.query()                 # nothing was waited for: the gate is still closed
    go.set()
    with pytest.raises(nnc.StreamError, match="boom"):   # the failure was not lost
        s.wait(TIMEOUT)
    assert log == ["ran"]


def test_nested_withs_each_join_their_stream():
    outer, inner = Stream(), Stream()
    log = []
    with pytest.raises(ZeroDivisionError) as info:
        with outer:
            outer.add_callback(lambda: log.append("outer"))
            with inner:
                inner.add_callback(fail)
                inner.add_callback(lambda: log.append("inner"))
                raise ZeroDivisionError("from the inner block")
    assert sorted(log) == ["inner", "outer"]
    notes = info.value.__notes__
    assert len(notes) == 1 and repr(inner) in notes[0]
    with outer, inner:                   # both healthy again
        outer.add_callback(lambda: log.append("again"))
    assert log[-1] == "again"


def test_with_stream_error_from_inside_the_block_is_not_doubled():
    s = Stream()
    with pytest.raises(nnc.StreamError) as info:
        with s:
            s.add_callback(fail)
            s.wait()
    assert not getattr(info.value, "__notes__", None)


# -- Stream.wait(timeout=) ------------------------------------------------------------------

def test_stream_wait_timeout_returns_false_and_keeps_the_failures():
    s = Stream()
    go, block = gate()
    s.add_callback(fail)
    s.add_callback(block)
    assert s.wait(timeout=0.05) is False
    assert s.wait(timeout=0) is False and s.wait(timeout=-3) is False
    go.set()
    with pytest.raises(nnc.StreamError, match="boom"):
        s.wait(timeout=TIMEOUT)
    assert s.wait(timeout=TIMEOUT) is True


@pytest.mark.parametrize("bad", ["soon", float("nan"), [1]])
def test_wait_timeout_must_be_a_number(bad):
    with pytest.raises(nnc.StreamError, match="timeout"):
        Stream().wait(bad)
    with pytest.raises(nnc.StreamError, match="timeout"):
        Signal().wait(bad)


# -- Signal.wait / synchronize --------------------------------------------------------------

def test_signal_never_emitted_returns_at_once():
    sig = Signal()
    assert sig.wait() is True and sig.wait(0) is True
    sig.synchronize()


def test_signal_wait_blocks_until_the_emit_runs():
    s = Stream()
    go, block = gate()
    sig = Signal()
    s.add_callback(block)
    s.emit(sig)
    assert sig.wait(timeout=0.05) is False and not sig.query()
    threading.Timer(0.05, go.set).start()
    assert sig.wait(timeout=TIMEOUT) is True and sig.query()
    assert sig.wait() is True            # done stays done
    s.wait()


def test_signal_wait_waits_for_the_latest_emit_at_call_time():
    a, b = Stream(), Stream()
    go_a, block_a = gate()
    go_b, block_b = gate()
    sig = Signal()
    a.add_callback(block_a)
    a.emit(sig)
    b.add_callback(block_b)
    b.emit(sig)                          # the latest record: b's
    go_a.set()
    a.wait(TIMEOUT)
    assert sig.wait(timeout=0.05) is False
    go_b.set()
    assert sig.wait(timeout=TIMEOUT) is True
    b.wait()


def test_many_host_threads_wait_on_one_signal():
    s = Stream()
    go, block = gate()
    sig = Signal()
    s.add_callback(block)
    s.emit(sig)
    got = []
    threads = [threading.Thread(target=lambda: got.append(sig.wait(TIMEOUT))) for _ in range(8)]
    for t in threads:
        t.start()
    go.set()
    for t in threads:
        t.join(TIMEOUT)
    assert got == [True] * 8
    s.wait()


def test_signal_wait_with_timeouts_racing_the_emit():
    """Waiters that time out unlink themselves while the emit may be walking the list."""
    s = Stream()
    for _ in range(200):
        sig = Signal()
        s.emit(sig)
        sig.wait(0.0001)
    s.wait(TIMEOUT)
    assert sig.wait(TIMEOUT)


def test_signal_wait_after_the_stream_failed_still_returns():
    s = Stream()
    sig = Signal()
    s.add_callback(fail)
    s.emit(sig)                          # failures do not stop later tasks, emits included
    assert sig.wait(TIMEOUT) is True
    with pytest.raises(nnc.StreamError, match="boom"):
        s.wait()                         # the failure is the stream's to report


def test_signal_wait_on_a_worker_is_refused():
    s, t = Stream(), Stream()
    sig = Signal()
    t.emit(sig)
    s.add_callback(lambda: sig.wait())
    with pytest.raises(nnc.StreamError, match="Signal.wait.* worker"):
        s.wait(TIMEOUT)
    t.wait()


def test_ctrl_c_interrupts_a_signal_wait_not_the_work():
    child = textwrap.dedent("""
        import signal, threading
        signal.signal(signal.SIGINT, signal.default_int_handler)
        import nnc
        go = threading.Event()
        s, sig = nnc.Stream(), nnc.Signal()
        s.add_callback(lambda: go.wait(30))
        s.emit(sig)
        try:
            print("ready", flush=True)
            sig.wait()
        except KeyboardInterrupt:
            print("interrupted", sig.query(), flush=True)
        go.set()
        print("done", sig.wait(30), flush=True)
    """)
    proc = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        ready, _, _ = select.select([proc.stdout], [], [], TIMEOUT)
        assert ready and proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=TIMEOUT)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert out.split("\n")[:2] == ["interrupted False", "done True"], out + err


# -- asyncio --------------------------------------------------------------------------------

def test_await_stream_completes_after_the_work():
    s = Stream()
    go, block = gate()
    log = []

    async def main():
        s.add_callback(block)
        s.add_callback(lambda: log.append("ran"))
        fut = s.as_future()
        await asyncio.sleep(0.01)
        assert not fut.done()
        go.set()
        await asyncio.wait_for(fut, TIMEOUT)
        await asyncio.wait_for(s, TIMEOUT)   # idle: completes at once
        return fut.result()

    assert asyncio.run(main()) is None and log == ["ran"]


def test_await_stream_raises_stream_error_with_cause():
    s = Stream()

    async def main():
        s.add_callback(fail)
        with pytest.raises(nnc.StreamError, match="boom") as info:
            await asyncio.wait_for(s.as_future(), TIMEOUT)
        assert isinstance(info.value.__cause__, ValueError)
        await asyncio.wait_for(s.as_future(), TIMEOUT)   # reported once

    asyncio.run(main())
    assert s.wait() is True


def test_await_a_graph_run():
    g = nnc.Graph()
    x = nnc.Tensor(np.ones(4, np.float32))
    y = nnc.Tensor.zeros((4,), dtype="float32")
    g.exec(nnc.Cmd("SCALAR_MUL", a=3.0), [x], [y])
    s = Stream()

    async def main():
        g.run(stream=s)
        await asyncio.wait_for(s, TIMEOUT)   # streams are in order: the run is done

    asyncio.run(main())
    assert y.numpy().tolist() == [3.0] * 4


def test_many_concurrent_awaits_use_no_extra_threads():
    streams = [Stream() for _ in range(200)]
    counts = [0] * len(streams)

    def bump(i):
        counts[i] += 1

    async def main():
        before = threading.active_count()
        for i, s in enumerate(streams):
            for _ in range(3):
                s.add_callback(lambda i=i: bump(i))
        await asyncio.wait_for(asyncio.gather(*(s.as_future() for s in streams)), TIMEOUT)
        await asyncio.wait_for(asyncio.gather(*streams), TIMEOUT)
        return before, threading.active_count()

    before, after = asyncio.run(main())
    assert after == before and counts == [3] * len(streams)


def test_cancelling_the_future_cancels_no_work_and_keeps_the_failure():
    s = Stream()
    go, block = gate()
    log = []

    async def main():
        s.add_callback(block)
        s.add_callback(fail)
        s.add_callback(lambda: log.append("ran"))
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(s.as_future(), 0.05)   # cancels the future
        go.set()
        await asyncio.sleep(0)

    asyncio.run(main())
    with pytest.raises(nnc.StreamError, match="boom"):
        s.wait(TIMEOUT)
    assert log == ["ran"]


def test_loop_closed_before_completion_does_not_hurt_the_worker():
    s = Stream()
    go, block = gate()
    loop = asyncio.new_event_loop()
    s.add_callback(block)
    s.add_callback(fail)
    fut = s.as_future(loop=loop)
    loop.close()
    go.set()
    with pytest.raises(nnc.StreamError, match="boom") as info:
        s.wait(TIMEOUT)                  # the failure went back to the stream, nothing else
    assert "RuntimeError" not in str(info.value) and not fut.done()
    s.add_callback(lambda: None)
    assert s.wait(TIMEOUT) is True


def test_as_future_without_a_loop_is_a_stream_error():
    with pytest.raises(nnc.StreamError, match="event loop"):
        Stream().as_future()
