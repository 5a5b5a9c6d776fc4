"""Intra-op parallelism (nnc/base/parallel.pyx): a command's parts on the caller and idle pool
threads. NNC's CPU_OPT backends split loops with parallel_for over their own threads; nnc's
parts share the stream pool's threads (docs/threading.md, "Intra-op parallelism")."""

import os
import sys
import threading
import time

import numpy as np
import pytest

import nnc
from nnc.base.parallel import parallel_probe

# Every test here that could hang joins with a deadline (the suite's timeout is the backstop).
DEADLINE = 60


@pytest.fixture(autouse=True)
def _reset():
    yield
    nnc.set_intra_op_threads(None)


def test_parts_run_on_idle_pool_threads_and_the_caller():
    assert nnc.get_num_threads() >= 2      # tests/conftest.py
    rc, ran_by = parallel_probe(16, 0.005)
    assert rc == 0 and all(ran_by)
    # The caller takes parts too, and at least one helper joined (each part sleeps 5 ms, so a
    # sleeping pool thread has time to wake and claim some).
    assert len(set(ran_by)) >= 2


@pytest.mark.parametrize("spin", [0.0, 1e-6, 0.05])
def test_the_caller_waits_for_helpers_whether_it_spins_or_sleeps(spin):
    """A caller whose parts are done spins for the helpers' last parts, then sleeps: a helper's
    part longer than the spin (2 ms against 1 us) takes the sleeping way, a spin longer than
    every part (50 ms) the spinning way, 0 sleeps at once. Either way every part has run when
    the call returns, and a failure in a helper's part is still the call's status."""
    from nnc.base.parallel import _set_wait_spin

    old = _set_wait_spin(spin)
    try:
        for _ in range(20):
            rc, ran_by = parallel_probe(2, 0.002)
            assert rc == 0 and all(ran_by)
            rc, ran_by = parallel_probe(3, 0.0005, fail_part=2)
            assert rc != 0 and ran_by[2] != 0
    finally:
        _set_wait_spin(old)


def test_a_job_left_to_a_spinner_that_never_joins_wakes_a_helper_late():
    """A job posted while a pool thread spins wakes nobody; if no helper joined by the end of
    the caller's first part (the spinner shares the caller's core, or stopped spinning), the
    caller wakes one then. Posted as if a spinner had taken the wake-up when none may spin: a
    helper still runs some of the 5 ms parts, every part runs, a failure is still reported.
    Each call follows a 10 ms pause, past the pool threads' spin after work (50 us)."""
    for _ in range(5):
        time.sleep(0.01)
        rc, ran_by = parallel_probe(16, 0.005, late_wake=True)
        assert rc == 0 and all(ran_by)
        assert len(set(ran_by)) >= 2
    rc, ran_by = parallel_probe(8, 0.002, fail_part=5, late_wake=True)
    assert rc == -1 and ran_by[5] != 0


@pytest.mark.parametrize("setter", ["_set_late_wake", "_set_move_apart"])
def test_late_wake_ups_and_moving_apart_can_be_turned_off(setter):
    from nnc.base import parallel

    turn = getattr(parallel, setter)
    assert turn(False) is True
    try:
        rc, ran_by = parallel_probe(16, 0.002)
        assert rc == 0 and all(ran_by) and len(set(ran_by)) >= 2
    finally:
        assert turn(True) is False


@pytest.mark.skipif(not sys.platform.startswith("linux") or len(os.sched_getaffinity(0)) < 2,
                    reason="moving a thread between CPUs needs Linux and two allowed CPUs")
def test_a_helper_on_its_callers_cpu_moves_off_it_and_keeps_its_mask():
    """What a helper joining a job on the caller's CPU does (nnc/base/parallel.pyx): it runs on
    another CPU at once, and its affinity mask is the one it had. In a thread of its own, with
    the process's mask untouched, and with a mask narrowed to two CPUs."""
    from nnc.base.parallel import _move_off_now

    out, errors = [], []

    def move(narrow):
        try:
            tid = threading.get_native_id()
            if narrow:
                os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:2])
            mask = os.sched_getaffinity(0)
            for _ in range(5):
                before, after = _move_off_now()
                out.append((before, after, os.sched_getaffinity(tid) == mask, after in mask))
        except BaseException as e:
            errors.append(repr(e))

    for narrow in (False, True):
        t = threading.Thread(target=move, args=(narrow,))
        t.start()
        t.join(DEADLINE)
        assert not t.is_alive()
    assert not errors and len(out) == 10, errors
    for before, after, same_mask, allowed in out:
        assert before >= 0 and after != before and same_mask and allowed, out


def test_the_caller_takes_parts_from_the_first_and_helpers_from_the_last():
    """nnc_parallel_for: the caller runs parts 0, 1, 2, ... and helpers the last ones first,
    so the caller's parts are a prefix and the helpers' the rest (parts are rows in order: the
    caller keeps the top of the image from one command to the next, a helper the bottom);
    nnc_parallel_for_in_turn: everyone from the lowest, so a helper joining while the caller
    runs part 0 takes part 1."""
    me = threading.get_ident()
    helped = interleaved = 0
    for _ in range(10):
        rc, ran_by = parallel_probe(16, 0.002)
        assert rc == 0 and all(ran_by)
        mine = [i for i, t in enumerate(ran_by) if t == me]
        assert mine == list(range(len(mine)))
        helped += len(mine) < 16
        rc, ran_by = parallel_probe(16, 0.002, in_turn=True)
        assert rc == 0 and all(ran_by)
        mine = [i for i, t in enumerate(ran_by) if t == me]
        assert mine and mine[0] == 0
        interleaved += mine != list(range(len(mine)))
    assert helped and interleaved


def test_helpers_from_the_last_part_can_be_turned_off():
    from nnc.base.parallel import _set_two_ended

    me = threading.get_ident()
    old = _set_two_ended(False)
    try:
        seen = False
        for _ in range(10):
            rc, ran_by = parallel_probe(16, 0.002)
            assert rc == 0 and all(ran_by)
            mine = [i for i, t in enumerate(ran_by) if t == me]
            seen = seen or mine != list(range(len(mine)))
        assert seen
    finally:
        assert _set_two_ended(old) is False


def test_one_intra_op_thread_runs_every_part_on_the_caller():
    nnc.set_intra_op_threads(1)
    assert nnc.get_intra_op_threads() == 1
    rc, ran_by = parallel_probe(12, 0.001)
    assert rc == 0 and len(set(ran_by)) == 1


def test_zero_and_one_part():
    assert parallel_probe(0) == (0, [])
    rc, ran_by = parallel_probe(1)
    assert rc == 0 and len(ran_by) == 1 and ran_by[0] != 0


def test_a_failing_part_is_reported_and_the_parts_not_started_are_skipped():
    nnc.set_intra_op_threads(1)             # deterministic: parts in order on the caller
    rc, ran_by = parallel_probe(10, 0.0, fail_part=3)
    assert rc == -1
    assert all(ran_by[:4]) and not any(ran_by[4:])
    nnc.set_intra_op_threads(None)
    rc, ran_by = parallel_probe(10, 0.001, fail_part=0)
    assert rc == -1 and ran_by[0] != 0


@pytest.mark.parametrize("bad", [0, -1, 1025, 2.0, True, "2"])
def test_set_intra_op_threads_refuses_nonsense(bad):
    with pytest.raises(nnc.NNCError, match="set_intra_op_threads"):
        nnc.set_intra_op_threads(bad)
    assert nnc.get_intra_op_threads() is None


def test_callers_from_many_threads_and_streams_at_once_all_finish():
    """Jobs of several callers (host threads and stream tasks) share the pool: every part of
    every job runs exactly once, nothing deadlocks, even with a pool of one thread."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 40, 40, 8)).astype(np.float32)
    w = rng.standard_normal((16, 3, 3, 8)).astype(np.float32)
    want = np.zeros((1, 40, 40, 16), np.float32)
    nnc.cmd_exec(nnc.Cmd("CONVOLUTION", padding=1, backend="CPU_REF"), [x, w], [want])
    size = nnc.get_num_threads()
    for pool in (1, 3):
        nnc.set_num_threads(pool)
        try:
            errors = []
            outs = [np.zeros_like(want) for _ in range(6)]

            def host(k, outs=outs, errors=errors):
                try:
                    for _ in range(5):
                        rc, ran_by = parallel_probe(20, 0.0002)
                        assert rc == 0 and all(ran_by)
                    nnc.cmd_exec(nnc.Cmd("CONVOLUTION", padding=1), [x, w], [outs[k]])
                except Exception as e:  # reported below
                    errors.append(e)

            streams = [nnc.Stream() for _ in range(3)]
            for k, s in enumerate(streams):
                nnc.cmd_exec(nnc.Cmd("CONVOLUTION", padding=1), [x, w], [outs[3 + k]], stream=s)
            threads = [threading.Thread(target=host, args=(k,)) for k in range(3)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(DEADLINE)
                assert not t.is_alive(), "a caller of nnc_parallel_for hung"
            for s in streams:
                s.wait(timeout=DEADLINE)
            assert not errors, errors
            for out in outs:
                np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)
        finally:
            nnc.set_num_threads(size)


@pytest.mark.skipif(sys.platform != "linux", reason="fork")
def test_a_forked_child_splits_commands_on_its_own_pool():
    r, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:                                      # the child: report, then leave at once
        try:
            rc, ran_by = parallel_probe(8, 0.002)
            ok = rc == 0 and all(ran_by)
        except BaseException:
            ok = False
        os.write(wfd, b"1" if ok else b"0")
        os._exit(0)
    os.close(wfd)
    _, status = os.waitpid(pid, 0)
    assert os.read(r, 1) == b"1" and status == 0
    os.close(r)


def test_one_intra_op_thread_before_the_pool_ever_started():
    """Regression: with intra-op threads at 1 a synchronous run does not start the pool, whose
    size is then still 0; the split must still see one thread (it once saw 0 and divided by
    it: SIGFPE). In a fresh process, so the pool really has not started."""
    import subprocess

    code = ("import numpy as np, nnc\n"
            "nnc.set_intra_op_threads(1)\n"
            "x = np.ones((1, 40, 40, 16), np.float32); w = np.ones((8, 1, 1, 16), np.float32)\n"
            "y = np.zeros((1, 40, 40, 8), np.float32)\n"
            "nnc.cmd_exec(nnc.Cmd('CONVOLUTION'), [x, w], [y])\n"
            "assert (y == 16).all()\n"
            "from nnc.base.parallel import parallel_probe\n"
            "rc, ran = parallel_probe(4)\n"
            "assert rc == 0 and len(set(ran)) == 1\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=DEADLINE)
    assert done.returncode == 0, done.stderr


def test_same_bits_at_any_intra_op_setting():
    """A command is cut into parts by its size and the pool's size alone, so the intra-op
    setting and a schedule's idle threads never change its result: Inception-V3 (75x75: its
    7x7 convolutions split by channels, the larger ones by rows) on a pool of 16, sequential at
    intra-op 1, 2, 5 and 16 and scheduled on 4 streams at intra-op 1 and at the default, gives
    one set of bits. (Cut by the threads a command may use, intra-op 16 changed the last bits.)"""
    from nnc.models.inception import build_inception_v3_model

    size = nnc.get_num_threads()
    m = build_inception_v3_model(size=75, seed=0)
    g = m.graph
    g.simplify()
    outs = {}
    try:
        nnc.set_num_threads(16)
        for n in (1, 2, 5, 16):
            nnc.set_intra_op_threads(n)
            g.run()
            outs[f"seq{n}"] = m.logits.numpy().copy()
        nnc.static_schedule(g, max_streams=4)
        s = nnc.Stream()
        for n in (1, None, None):
            nnc.set_intra_op_threads(n)
            g.run(stream=s)
            s.wait(timeout=DEADLINE)
            outs[f"sched{len(outs)}"] = m.logits.numpy().copy()
    finally:
        nnc.set_intra_op_threads(None)
        nnc.set_num_threads(size)
    for name, out in outs.items():
        assert np.array_equal(out, outs["seq1"]), name


@pytest.mark.parametrize("case", ["conv3x3_7x7", "conv1x1_7x7", "conv3x3_35x35", "gemm"])
def test_a_split_command_gives_the_bits_of_one_thread(case):
    """Each kind of cut (channels, pointwise, rows, GEMM blocks) on a pool of 16."""
    rng = np.random.default_rng(1)
    if case == "gemm":
        ins = [rng.standard_normal((300, 256)).astype(np.float32),
               rng.standard_normal((256, 200)).astype(np.float32)]
        cmd, shape = nnc.Cmd("GEMM"), (300, 200)
    else:
        hw, k, c, o = {"conv3x3_7x7": (7, 3, 96, 96), "conv1x1_7x7": (7, 1, 288, 64),
                       "conv3x3_35x35": (35, 3, 64, 96)}[case]
        ins = [rng.standard_normal((1, hw, hw, c)).astype(np.float32),
               rng.standard_normal((o, k, k, c)).astype(np.float32),
               rng.standard_normal(o).astype(np.float32)]
        cmd, shape = nnc.Cmd("CONVOLUTION", padding=k // 2, activation="relu"), (1, hw, hw, o)
    size = nnc.get_num_threads()
    outs = []
    try:
        nnc.set_num_threads(16)
        for n in (1, 3, 16):
            nnc.set_intra_op_threads(n)
            out = np.zeros(shape, np.float32)
            nnc.cmd_exec(cmd, ins, [out])
            outs.append(out)
    finally:
        nnc.set_intra_op_threads(None)
        nnc.set_num_threads(size)
    assert all(np.array_equal(o, outs[0]) for o in outs[1:])


def _probe_graphs(look, error):
    """Two one-node graphs: one whose CUSTOM command calls ``look()``, one whose command raises
    ``error``."""
    def probe(inputs, outputs):
        look()

    def boom(inputs, outputs):
        raise error

    g, bad = nnc.Graph(), nnc.Graph()
    g.exec(nnc.Cmd.custom(probe))
    bad.exec(nnc.Cmd.custom(boom))
    return g, bad


def test_a_splitting_run_keeps_helpers_spinning_only_while_it_runs():
    """g.run() at intra-op > 1 counts itself in progress (pool threads spin for its commands'
    parts instead of sleeping between them) and uncounts itself however it ends; at intra-op 1
    it does not count."""
    from nnc.base import parallel

    seen = []
    g, bad = _probe_graphs(lambda: seen.append(parallel._runs_in_progress()),
                           KeyboardInterrupt("from a command"))
    try:
        for threads, want in ((2, 1), (1, 0)):
            nnc.set_intra_op_threads(threads)
            g.run()
            assert seen[-1] == want
            assert parallel._runs_in_progress() == 0
        nnc.set_intra_op_threads(2)
        with pytest.raises(KeyboardInterrupt):
            bad.run()
        assert parallel._runs_in_progress() == 0
    finally:
        nnc.set_intra_op_threads(None)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="CPU counts need sched_getcpu")
def test_threads_count_themselves_working_on_their_cpu_only_while_they_work():
    """A synchronous run's caller counts itself on its CPU for the run (at intra-op > 1), a pool
    thread for the stream it serves; nobody is counted once they are done, however a run ends,
    and a forked child starts with no count (nnc/base/parallel.pyx, moving apart)."""
    from nnc.base import parallel

    seen = []

    def look(ins, outs):
        seen.append((os.sched_getaffinity(0), parallel._busy_counts()))

    g = nnc.Graph()
    g.exec(nnc.Cmd.custom(look))
    nnc.set_intra_op_threads(2)
    g.run()
    (_, counts), = seen
    assert sum(counts.values()) >= 1                    # the caller, at least
    assert parallel._busy_counts() == {}
    s = nnc.Stream("cpu")
    g.run(stream=s)
    assert s.wait(DEADLINE)
    assert sum(seen[-1][1].values()) >= 1               # the pool thread serving s
    deadline = time.monotonic() + DEADLINE
    while parallel._busy_counts() and time.monotonic() < deadline:
        time.sleep(0.001)                               # it leaves right after its last task
    assert parallel._busy_counts() == {}
    _, bad = _probe_graphs(lambda: None, KeyboardInterrupt("from a command"))
    with pytest.raises(KeyboardInterrupt):
        bad.run()
    assert parallel._busy_counts() == {}
    nnc.set_intra_op_threads(1)
    seen.clear()
    g.run()
    assert seen[0][1] == {}                             # not a splitting run: not counted


def test_a_run_on_a_cpu_stream_counts_itself_until_its_last_task():
    """g.run(stream=s) at intra-op > 1 counts a CPU-stream run in progress from its enqueue to
    its last task (pool threads spin for its parts), however its nodes end; at intra-op 1 it
    does not count; a synchronous run is counted apart."""
    from nnc.base import parallel

    seen = []
    g, bad = _probe_graphs(
        lambda: seen.append((parallel._runs_in_progress(streams=True),
                             parallel._runs_in_progress())),
        ValueError("from a command"))
    s = nnc.Stream("cpu")
    try:
        for threads, want in ((2, 1), (1, 0)):
            nnc.set_intra_op_threads(threads)
            g.run(stream=s)
            s.wait(timeout=DEADLINE)
            assert seen[-1] == (want, 0)
            assert parallel._runs_in_progress(streams=True) == 0
        nnc.set_intra_op_threads(2)
        for _ in range(3):
            bad.run(stream=s)
        with pytest.raises(nnc.NNCError):
            s.wait(timeout=DEADLINE)
        assert parallel._runs_in_progress(streams=True) == 0
    finally:
        nnc.set_intra_op_threads(None)


def test_a_stream_run_waiting_for_a_signal_does_not_keep_a_core_spinning():
    """Pool threads spin through a CPU-stream run for a bounded time past their last work
    only: a run whose stream waits 0.3 s for another stream's signal costs the process far
    less than 0.3 s of CPU meanwhile (with spinning bounded by the run's length, a spinner
    alone would burn all of it)."""
    sig = nnc.Signal()
    other, s = nnc.Stream("cpu"), nnc.Stream("cpu")
    x = np.ones((1, 17, 17, 64), np.float32)
    w = np.ones((64, 3, 3, 64), np.float32)
    y = np.zeros((1, 17, 17, 64), np.float32)
    g = nnc.Graph()
    g.exec(nnc.Cmd("CONVOLUTION", padding=1), [x, w], [y])
    nnc.set_intra_op_threads(2)
    try:
        g.run()                                 # the pool is up, the graph prepared
        other.add_callback(lambda: time.sleep(0.3))
        other.emit(sig)
        s.wait_signal(sig)
        cpu0, wall0 = time.process_time(), time.perf_counter()
        g.run(stream=s)
        assert s.wait(timeout=DEADLINE)
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    finally:
        nnc.set_intra_op_threads(None)
    assert wall >= 0.25
    assert cpu < 0.1, f"{cpu:.3f} s of CPU in a {wall:.3f} s wait"
    assert y[0, 8, 8, 0] == 9 * 64             # an inner pixel: every tap


@pytest.mark.skipif(sys.platform != "linux", reason="fork")
def test_a_child_forked_during_a_splitting_run_does_not_inherit_it():
    """A fork while another thread's g.run() keeps helpers spinning: the child's count of runs
    in progress starts at 0 (a run of a thread that is gone would keep its pool spinning), and
    so do its counts of threads working on each CPU."""
    from nnc.base import parallel

    inside, release = threading.Event(), threading.Event()

    def hold(inputs, outputs):
        inside.set()
        release.wait(DEADLINE)

    g = nnc.Graph()
    g.exec(nnc.Cmd.custom(hold))
    nnc.set_intra_op_threads(2)
    runner = threading.Thread(target=g.run)
    runner.start()
    try:
        assert inside.wait(DEADLINE) and parallel._runs_in_progress() == 1
        linux = sys.platform.startswith("linux")
        assert not linux or sum(parallel._busy_counts().values()) == 1   # the run's caller
        r, wfd = os.pipe()
        pid = os.fork()
        if pid == 0:
            clean = parallel._runs_in_progress() == 0 and parallel._busy_counts() == {}
            os.write(wfd, b"1" if clean else b"0")
            os._exit(0)
        os.close(wfd)
        _, status = os.waitpid(pid, 0)
        assert os.read(r, 1) == b"1" and status == 0
        os.close(r)
    finally:
        release.set()
        runner.join(DEADLINE)
        nnc.set_intra_op_threads(None)
    assert parallel._runs_in_progress() == 0
