"""Streams under hostile use: worker threads and their thread states, exit, Ctrl-C,
waits from the wrong thread, concurrent waiters, tracing, threads that cannot start.

Whatever could hang or crash runs in a subprocess with a timeout, so a regression fails the
test instead of hanging or killing the suite. No test asserts a duration.
"""

import os
import pathlib
import select
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import nnc
from nnc.stream.stream import Stream

TIMEOUT = 60
ROOT = pathlib.Path(__file__).resolve().parents[2]


def run_py(code, timeout=TIMEOUT):
    """Run ``code`` in a fresh interpreter; a hang fails the test (TimeoutExpired)."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT)


def start_py(code):
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT)


# -- worker threads keep one thread state ------------------------------------------------------

def test_python_tasks_on_a_pool_thread_share_its_thread_state():
    # A raw pthread made a fresh thread state for every Python task, so a threading.local set
    # by one callback was gone in the next; pool threads are Python-level threads that keep
    # theirs. Each callback notes whether an earlier callback marked its thread already.
    streams = [Stream() for _ in range(4)]
    local = threading.local()
    seen = []

    def note():
        me = threading.current_thread()
        seen.append(((me.name, me.ident), getattr(local, "mark", None)))
        local.mark = 1

    for _ in range(20):
        for s in streams:
            s.add_callback(note)
    for s in streams:
        s.wait()
    assert len(seen) == 80
    first = {}
    for thread, mark in seen:        # names are reused when the pool shrinks and grows
        assert thread[0].startswith("nnc-worker-")
        assert mark == (1 if thread in first else None), (thread, mark)
        first.setdefault(thread, True)


def test_workers_survive_tracemalloc_start_and_stop():
    out = run_py("""
        import gc, tracemalloc, nnc
        for rep in range(100):
            streams = [nnc.Stream() for _ in range(8)]
            for s in streams:
                s.add_callback(lambda: None)
            tracemalloc.start()
            del streams, s          # workers exit while tracemalloc hooks are installed
            gc.collect()
            tracemalloc.stop()
        print("ok")
    """)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr


def test_exit_after_a_run_on_many_streams():
    out = run_py("""
        import numpy as np, nnc
        g = nnc.Graph()
        for i in range(500):
            x = nnc.Tensor(np.ones(1, np.float32))
            g.exec(nnc.Cmd("SCALAR_MUL", a=2), [x], [x])
        assert nnc.static_schedule(g).stream_count == 500
        s = nnc.Stream()
        g.run(stream=s)             # exit without waiting: the exit hook drains and joins
    """)
    assert out.returncode == 0, out.stderr


# -- exit runs all queued work, then refuses more ---------------------------------------------

def test_work_on_a_dropped_stream_runs_before_exit():
    out = run_py("""
        import threading, nnc
        go = threading.Event()
        s = nnc.Stream()
        s.add_callback(lambda: go.wait(0.3))
        s.add_callback(lambda: print("ran", flush=True))
        del s                       # no object left: the exit hook must still wait for it
    """)
    assert out.returncode == 0 and out.stdout == "ran\n", out.stderr


def test_work_enqueued_after_the_exit_hook_is_refused():
    out = run_py("""
        import atexit
        def late():                 # registered before nnc: runs after nnc's exit hook
            try:
                s.add_callback(print)
            except nnc.StreamError as e:
                print("refused:", e)
            try:
                nnc.Stream()
            except nnc.StreamError as e:
                print("refused:", e)
        atexit.register(late)
        import nnc
        s = nnc.Stream()
    """)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("refused:") == 2 and "exiting" in out.stdout


# -- Ctrl-C ------------------------------------------------------------------------------------

# The child installs Python's own SIGINT handler: a shell that starts jobs in the background
# (nohup, `&` in a script) leaves SIGINT ignored, children inherit that, and Python then installs
# no handler, so the test would depend on how pytest was started.
ENDLESS_LOOP = """
    import signal
    signal.signal(signal.SIGINT, signal.default_int_handler)
    import numpy as np, nnc
    x = nnc.Tensor(np.ones(1, np.float32))
    body = nnc.Graph()
    noop = body.exec(nnc.Cmd("NOOP"))
    body.concat(noop, body.exec(nnc.Cmd("SCALAR_MUL", a=1), [x], [x]))
    body.set_while_expr(lambda count: True, [], [noop])     # never ends
    g = nnc.Graph()
    g.while_(body)
    s = nnc.Stream()
    g.run(stream=s)
"""


def interrupt(proc, marker):
    """Wait (bounded) for ``marker`` on proc's stdout, then send it SIGINT."""
    ready, _, _ = select.select([proc.stdout], [], [], TIMEOUT)
    assert ready, f"no {marker!r} from the child within {TIMEOUT} s"
    line = proc.stdout.readline()
    assert line.strip() == marker, (line, proc.stderr.read() if proc.poll() is not None else "")
    proc.send_signal(signal.SIGINT)


def test_ctrl_c_interrupts_wait_then_abandons_the_loop_at_exit():
    # "ready" is printed inside the try: a SIGINT right after it must land in the handler.
    proc = start_py(ENDLESS_LOOP + """
    try:
        print("ready", flush=True)
        s.wait()
    except KeyboardInterrupt:
        print("interrupted", flush=True)
    """)
    try:
        interrupt(proc, "ready")
        interrupt(proc, "interrupted")      # now the exit hook waits for the loop: Ctrl-C again
        _, err = proc.communicate(timeout=TIMEOUT)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert "abandoning unfinished work" in err


def test_uncaught_ctrl_c_exits_non_zero_without_waiting_for_the_loop():
    proc = start_py(ENDLESS_LOOP + "    print('ready', flush=True)\n    s.wait()\n")
    try:
        interrupt(proc, "ready")
        _, err = proc.communicate(timeout=TIMEOUT)
    finally:
        proc.kill()
    assert proc.returncode != 0 and "KeyboardInterrupt" in err, err
    assert "abandoning unfinished work" in err


def test_ctrl_c_swallowed_by_threading_shutdown_still_abandons_the_loop():
    # threading._shutdown runs before atexit and only prints a KeyboardInterrupt raised in it;
    # a shutdown callback registered after nnc's raises one there, deterministically.
    out = run_py(ENDLESS_LOOP + """
    import os, threading, time
    def ctrl_c():
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(1)
    threading._register_atexit(ctrl_c)
    """)
    assert out.returncode == 130, out.stderr
    assert "abandoning unfinished work" in out.stderr


# -- wait() where it would wait for itself -----------------------------------------------------

def test_wait_on_a_worker_thread_is_refused():
    out = run_py("""
        import nnc
        s, other = nnc.Stream(), nnc.Stream()
        s.add_callback(lambda: s.wait())
        s.add_callback(lambda: other.wait())
        nnc.cmd_exec(nnc.Cmd.custom(lambda i, o: s.wait()), [], [], stream=s)
        try:
            s.wait()
        except nnc.StreamError as e:
            print(type(e.__cause__).__name__, "|", e.__cause__, "|", e)
    """)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("StreamError | wait() on a stream worker thread"), out.stdout
    assert "and 2 more" in out.stdout


def test_wait_inside_a_while_expression_of_its_own_stream_is_refused():
    out = run_py("""
        import nnc
        s = nnc.Stream()
        body = nnc.Graph()
        noop = body.exec(nnc.Cmd("NOOP"))
        body.set_while_expr(lambda count: s.wait() or count < 2, [], [noop])
        g = nnc.Graph()
        g.while_(body)
        g.run(stream=s)
        try:
            s.wait()
        except nnc.StreamError as e:
            print(e, "|", e.__cause__)
        g.run(stream=s)             # the graph and the stream are still usable
        try:
            s.wait()
        except nnc.StreamError:
            print("again")
    """)
    assert out.returncode == 0, out.stderr
    assert "own coroutine scheduler" in out.stdout and "again" in out.stdout, out.stdout


# -- every waiter sees the failure -------------------------------------------------------------

def test_every_wait_in_progress_raises_the_failure():
    s = Stream()
    go = threading.Event()
    s.add_callback(lambda: go.wait(TIMEOUT))
    s.add_callback(lambda: 1 / 0)
    results = {}

    def waiter(k):
        try:
            s.wait()
            results[k] = "ok"
        except nnc.StreamError as e:
            results[k] = type(e.__cause__).__name__

    threads = [threading.Thread(target=waiter, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + TIMEOUT
    while s._waiting() < 3 and time.monotonic() < deadline:   # all three blocked in wait()
        time.sleep(0.001)
    go.set()
    for t in threads:
        t.join(TIMEOUT)
    assert not any(t.is_alive() for t in threads)
    assert results == {0: "ZeroDivisionError", 1: "ZeroDivisionError", 2: "ZeroDivisionError"}
    s.wait()                        # reported: a wait that starts afterwards succeeds


# -- leaving nnc.trace while another thread uses a stream --------------------------------------

def test_leaving_trace_while_another_thread_uses_a_stream(tmp_path):
    out = run_py(f"""
        import threading, nnc
        s, other = nnc.Stream(), nnc.Stream()
        stop = threading.Event()
        def busy():                 # takes the stream locks with the GIL held, as it may
            while not stop.is_set():
                other.query()
                s.query()
        t = threading.Thread(target=busy)
        t.start()
        for _ in range(30):
            with nnc.trace({str(tmp_path / "t.json")!r}):
                s.add_callback(lambda: None)
        stop.set()
        t.join()
        other.wait()
        print("ok")
    """)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr


def test_wait_ends_while_another_thread_floods_the_stream():
    """wait() waits for what was enqueued when it began. The stream is busy when wait() starts,
    then a thread floods it faster than it runs: a wait that looked again at everything
    enqueued at each 100 ms wake-up never caught up, and never returned while the flood went on."""
    out = run_py("""
        import threading, time, nnc
        s = nnc.Stream()
        stop, go = threading.Event(), threading.Event()
        def slow():
            if not stop.is_set():
                time.sleep(0.0001)
        def flood():
            go.wait()
            while not stop.is_set():
                for _ in range(50):
                    s.add_callback(slow)
                time.sleep(0.001)
        def starter():              # still running when wait() begins; starts the flood
            go.set()
            time.sleep(0.15)
        t = threading.Thread(target=flood)
        t.start()
        s.add_callback(starter)
        print("waited", s.wait(timeout=10), flush=True)
        stop.set()
        t.join()
        s.wait()
        print("ok")
    """)
    assert out.returncode == 0 and "waited True" in out.stdout and "ok" in out.stdout, (
        out.stdout + out.stderr)


# -- a pool thread that cannot start -----------------------------------------------------------

@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_streams_need_no_thread_and_a_pool_that_cannot_grow_stays_usable():
    out = run_py("""
        import resource, numpy as np, nnc
        g = nnc.Graph()
        for i in range(4):
            x = nnc.Tensor(np.ones(1, np.float32))
            g.exec(nnc.Cmd("SCALAR_MUL", a=2), [x], [x])
        nnc.static_schedule(g)      # four streams, made on the first run
        s = nnc.Stream()            # starts the pool
        size = nnc.get_num_threads()
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        vm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmSize"))
        # No room for another thread's stack (8 MiB by default).
        resource.setrlimit(resource.RLIMIT_AS, (vm * 1024 + (3 << 20), hard))
        g.run(stream=s)             # four more streams: no thread needed
        extra = [nnc.Stream() for _ in range(100)]
        try:
            nnc.set_num_threads(size + 4)
        except nnc.StreamError as e:
            print("grow refused:", e)
        print("size", nnc.get_num_threads() == size)
        s.wait()
        nnc.Stream().wait()         # the failed growth left nothing half started
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
        g.run(stream=s)
        s.wait()
        print("ok")
    """)
    assert out.returncode == 0, out.stderr
    assert "grow refused: could not start nnc worker thread" in out.stdout, out.stdout
    assert "size True" in out.stdout and "ok" in out.stdout


def test_nnc_shutdown_drains_dropped_streams():
    # nnc_finalize -> nnc_shutdown when nnc did not start Python: every stream, even one whose
    # handle (here: object) is gone, finishes its queue before it returns.
    out = run_py("""
        import threading, nnc
        from nnc.stream.drain import drain_all
        done = []
        go = threading.Event()
        s = nnc.Stream()
        s.add_callback(lambda: go.wait(0.3))
        s.add_callback(lambda: done.append(1))
        del s
        drain_all()
        print(done)
    """)
    assert out.returncode == 0 and out.stdout == "[1]\n", out.stderr


if os.name != "posix":  # pragma: no cover
    pytestmark = pytest.mark.skip("POSIX signals and resource limits")
