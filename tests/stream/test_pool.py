"""The worker pool (nnc/stream/worker.pyx): CPU streams are serial queues that a bounded pool of
threads runs; a stream waiting on a signal parks instead of holding a thread.

Every test that could hang runs its body in a child process with a timeout, or waits with one.
"""

import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import nnc
from nnc.stream.worker import pool_stats

CHILD_TIMEOUT = 120


def run_py(code, env=None):
    """Run ``code`` in a fresh interpreter (bounded), returning the CompletedProcess; an env
    value of None removes that variable."""
    full = dict(os.environ, **(env or {}))
    full = {k: v for k, v in full.items() if v is not None}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=CHILD_TIMEOUT, env=full)


def os_threads():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("Threads:"))


linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="reads /proc/self/status")


@linux_only
def test_a_thousand_wide_schedule_starts_no_thread():
    # The measure: 1,000 independent branches scheduled without a stream cap used to
    # start 1,003 threads. Now the streams are queues: the thread count stays put.
    g = nnc.Graph()
    src = g.exec(nnc.Cmd("NOOP"))
    xs = [nnc.Tensor(np.full(1, i, np.float32)) for i in range(1000)]
    ys = [nnc.Tensor(np.zeros(1, np.float32)) for _ in range(1000)]
    for x, y in zip(xs, ys):
        g.concat(src, g.exec(nnc.Cmd("SCALAR_MUL", a=2.0), [x], [y]))
    sched = nnc.static_schedule(g)
    assert sched.stream_count == 1000
    s = nnc.Stream()
    before = os_threads()
    g.run(stream=s)
    assert s.wait(timeout=60)
    assert os_threads() <= max(before, 1 + nnc.get_num_threads() + 2)
    assert [float(y.numpy()[0]) for y in ys] == [2.0 * i for i in range(1000)]


def test_a_pool_of_one_thread_runs_streams_that_wait_on_each_other():
    # Stream order and signals hold with a single pool thread: a waiting stream parks, so the
    # one thread runs the stream that emits. With a thread per blocked waiter this would need
    # as many threads as waiters.
    out = run_py("""
        import numpy as np, nnc
        nnc.set_num_threads(1)
        assert nnc.get_num_threads() == 1
        streams = [nnc.Stream() for _ in range(50)]
        sigs = [nnc.Signal() for _ in range(50)]
        order = []
        # Stream k waits on the signal of stream k + 1 (emitted later in host order is fine:
        # each wait is enqueued after the emit it waits for), a chain in reverse.
        for k in reversed(range(50)):
            if k + 1 < 50:
                streams[k].wait_signal(sigs[k + 1])
            streams[k].add_callback(lambda k=k: order.append(k))
            streams[k].emit(sigs[k])
        for s in streams:
            assert s.wait(timeout=60)
        print(order == list(reversed(range(50))))
    """)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True"


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="needs os.sched_getaffinity")
def test_the_pool_defaults_to_the_usable_cores():
    out = run_py("""
        import os, nnc
        s = nnc.Stream()
        print(nnc.get_num_threads() == len(os.sched_getaffinity(0)))
    """, env={"NNC_NUM_THREADS": None})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True"


def test_nnc_num_threads_sizes_the_pool():
    out = run_py("""
        import nnc
        print(nnc.get_num_threads())
        nnc.Stream().wait()
        print(nnc.get_num_threads())
    """, env={"NNC_NUM_THREADS": "3"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["3", "3"]


@pytest.mark.parametrize("var, value, message", [
    ("NNC_NUM_THREADS", "zero", "expected a positive integer up to"),
    ("NNC_SPIN_US", "-5", "expected microseconds from 0 to 10000"),
])
def test_bad_pool_settings_in_the_environment_are_refused(var, value, message):
    out = run_py("""
        import nnc
        try:
            nnc.Stream()
        except nnc.NNCError as e:
            print("refused:", e)
    """, env={var: value})
    assert out.returncode == 0, out.stderr
    assert f"refused: {var}={value!r}: {message}" in out.stdout


@linux_only
def test_an_idle_pool_spins_once_then_sleeps():
    """A thread that ran work looks for more for at most NNC_SPIN_US, once, then sleeps: an
    idle process burns no CPU (here 10 ms of spin allowed, then half a second idle)."""
    out = run_py("""
        import os, time, nnc
        nnc.set_num_threads(2)
        s = nnc.Stream()
        for _ in range(200):
            s.add_callback(lambda: None)
        s.wait()
        time.sleep(0.05)
        t0 = os.times()
        time.sleep(0.5)
        t1 = os.times()
        print((t1.user + t1.system) - (t0.user + t0.system))
    """, env={"NNC_SPIN_US": "10000"})
    assert out.returncode == 0, out.stderr
    assert float(out.stdout) < 0.05


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2", True, None, 10**6])
def test_set_num_threads_refuses_what_is_not_a_positive_int(bad):
    with pytest.raises(nnc.NNCError, match="positive int"):
        nnc.set_num_threads(bad)


def test_set_num_threads_grows_and_shrinks_while_streams_run():
    size = nnc.get_num_threads()
    s = nnc.Stream()
    hits = []
    try:
        nnc.set_num_threads(size + 2)
        for _ in range(100):
            s.add_callback(lambda: hits.append(threading.current_thread().name))
        nnc.set_num_threads(1)
        for _ in range(100):
            s.add_callback(lambda: hits.append(threading.current_thread().name))
        assert s.wait(timeout=30)
    finally:
        nnc.set_num_threads(size)
    assert len(hits) == 200
    assert all(name.startswith("nnc-worker-") for name in hits)
    # Surplus threads leave once idle; the pool settles at its size again.
    deadline = threading.Event()
    for _ in range(100):
        if pool_stats()[0] == size:
            break
        deadline.wait(0.05)
    assert pool_stats()[0] == size


def test_a_long_queue_does_not_starve_other_streams():
    # One pool thread: without round-robin the short stream would wait for all 5,000 tasks of
    # the long one. After SLICE (256) tasks a stream goes to the back of the ready list when
    # another stream is ready.
    out = run_py("""
        import threading, nnc
        nnc.set_num_threads(1)
        long, short = nnc.Stream(), nnc.Stream()
        gate = threading.Event()
        done = []
        long.add_callback(lambda: gate.wait(30))    # the one thread is inside long's queue
        for _ in range(5000):
            long.add_callback(lambda: done.append("long"))
        short.add_callback(lambda: done.append("short"))
        gate.set()
        assert long.wait(timeout=60) and short.wait(timeout=60)
        print(done.index("short"))
    """)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) < 1000, out.stdout


def test_a_parked_stream_keeps_its_order_and_its_failures():
    s, t = nnc.Stream(), nnc.Stream()
    sig = nnc.Signal()
    gate = threading.Event()
    seen = []
    t.add_callback(lambda: gate.wait(30))
    t.emit(sig)
    s.add_callback(lambda: seen.append(1))
    s.wait_signal(sig)                  # s parks here until t passes its gate

    def fail():
        seen.append(2)
        raise ValueError("after the wait")

    s.add_callback(fail)
    s.add_callback(lambda: seen.append(3))
    assert not s.wait(timeout=0.2)      # parked, not done
    assert seen == [1]
    gate.set()
    with pytest.raises(nnc.StreamError, match="after the wait"):
        s.wait(timeout=30)
    assert seen == [1, 2, 3]
    s.add_callback(lambda: seen.append(4))
    assert s.wait(timeout=30)           # still usable
    assert seen == [1, 2, 3, 4]


def test_dropped_streams_with_queued_work_still_run_it():
    sig = nnc.Signal()
    gate = nnc.Stream()
    ran = []
    blocker = threading.Event()
    gate.add_callback(lambda: blocker.wait(30))
    gate.emit(sig)
    for k in range(20):
        s = nnc.Stream()
        s.wait_signal(sig)
        s.add_callback(lambda k=k: ran.append(k))
        del s                           # parked, and nobody holds the Python object
    blocker.set()
    assert gate.wait(timeout=30)
    for _ in range(200):
        if len(ran) == 20:
            break
        threading.Event().wait(0.05)
    assert sorted(ran) == list(range(20))


def test_exit_runs_work_of_parked_and_dropped_streams():
    # The handler registered before ``import nnc`` runs after nnc's exit hook (atexit runs in
    # reverse order), so it sees what the hook let run.
    out = run_py("""
        import atexit, threading
        ran = []
        atexit.register(lambda: print("ran", sorted(ran), flush=True))
        import nnc
        sig = nnc.Signal()
        gate = nnc.Stream()
        gate.add_callback(lambda: threading.Event().wait(0.3))
        gate.emit(sig)
        for k in range(10):
            s = nnc.Stream()
            s.wait_signal(sig)
            s.add_callback(lambda k=k: ran.append(k))
        print("exiting", ran, flush=True)
    """)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["exiting []", f"ran {list(range(10))}"], out.stdout


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_gets_a_fresh_pool_and_refuses_the_parents_streams():
    out = run_py("""
        import os, numpy as np, nnc
        parent = nnc.Stream()
        parent.add_callback(lambda: None)
        parent.wait()
        pid = os.fork()
        if pid == 0:
            try:
                parent.add_callback(lambda: None)
            except nnc.StreamError as e:
                print("refused:", "before this process was forked" in str(e), flush=True)
            s = nnc.Stream()
            x = np.ones(4, np.float32)
            y = np.zeros(4, np.float32)
            nnc.cmd_exec(nnc.Cmd("SCALAR_MUL", a=3.0), [x], [y], stream=s)
            print("child ran:", s.wait(timeout=30) and float(y[0]) == 3.0, flush=True)
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        print("child status:", status, flush=True)
        parent.add_callback(lambda: None)
        print("parent still works:", parent.wait(timeout=30))
    """)
    assert out.returncode == 0, out.stderr
    assert "refused: True" in out.stdout, out.stdout
    assert "child ran: True" in out.stdout and "child status: 0" in out.stdout
    assert "parent still works: True" in out.stdout
