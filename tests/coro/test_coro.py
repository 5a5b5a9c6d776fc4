"""nnc.coro: generator tasks, inline execution until blocked, one scheduler thread.

Event sources here are plain Python objects (the layer knows nothing of streams); the stream
glue is tested in test_while.py and test_case_of.py.
"""

import resource
import threading
import time

import pytest

from nnc.coro import AwaitAny, AwaitTask, Scheduler, WaitFor, current_scheduler

TIMEOUT = 10


class Gate:
    """An event source: complete once open() is called (from any thread)."""

    def __init__(self, done=False):
        self.done = done
        self.wakes = []
        self.lock = threading.Lock()

    def coro_arm(self, wake):
        with self.lock:
            if self.done:
                return False
            self.wakes.append(wake)
            return True

    def open(self):
        with self.lock:
            self.done = True
            wakes, self.wakes = self.wakes, []
        for w in wakes:
            w()


def test_tasks_that_never_block_run_inline_without_a_thread():
    sched = Scheduler()
    seen = []

    def task(n):
        for i in range(n):
            yield WaitFor(Gate(done=True))
            seen.append((i, threading.current_thread() is threading.main_thread()))
        return n

    t = sched.spawn(task(3))
    assert t.done and t.result == 3
    assert seen == [(0, True), (1, True), (2, True)]
    assert sched.threads_started == 0 and not sched.active


def test_blocked_task_hands_off_to_one_thread_and_the_caller_returns():
    sched = Scheduler()
    gate = Gate()
    where = []

    def task():
        where.append(threading.current_thread().name)
        yield WaitFor(gate)
        where.append(threading.current_thread().name)
        return "ok"

    t = sched.spawn(task(), name="t")
    assert not t.done and sched.active and sched.thread_alive
    assert where == ["MainThread"]
    gate.open()
    assert sched.join(TIMEOUT)
    assert t.done and t.result == "ok"
    assert where[1] == sched.name and sched.threads_started == 1
    # The thread exits once nothing is pending.
    deadline = time.monotonic() + TIMEOUT
    while sched.thread_alive and time.monotonic() < deadline:
        time.sleep(0.001)
    assert not sched.thread_alive


def test_many_blocked_tasks_share_one_thread():
    sched = Scheduler()
    gates = [Gate() for _ in range(50)]
    counts = []

    def task(g):
        yield WaitFor(g)
        counts.append(threading.active_count())

    for g in gates:
        sched.spawn(task(g))
    assert sched.threads_started == 1
    for g in reversed(gates):
        g.open()
    assert sched.join(TIMEOUT)
    assert len(counts) == 50 and sched.threads_started == 1


def test_blocked_scheduler_uses_no_cpu():
    sched = Scheduler()
    gate = Gate()

    def task():
        yield WaitFor(gate)

    sched.spawn(task())
    before = resource.getrusage(resource.RUSAGE_SELF)
    time.sleep(0.3)
    after = resource.getrusage(resource.RUSAGE_SELF)
    gate.open()
    assert sched.join(TIMEOUT)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    assert cpu < 0.1, f"blocked scheduler burned {cpu:.3f} s of CPU in 0.3 s"


def test_unknown_yield_raises_type_error_in_the_task():
    sched = Scheduler()
    caught = []

    def task():
        try:
            yield 42
        except TypeError as e:
            caught.append(str(e))
        yield "again"

    t = sched.spawn(task())
    assert t.done and isinstance(t.exception, TypeError)
    assert "42" in caught[0] and "WaitFor" in caught[0] and "yield from" in caught[0]


def test_bad_requests_are_refused_where_they_are_made():
    with pytest.raises(TypeError, match="coro_arm"):
        WaitFor(object())
    with pytest.raises(TypeError, match="Task"):
        AwaitTask("not a task")
    with pytest.raises(ValueError):
        AwaitAny([])


def test_sub_tasks_start_inline_and_are_awaited():
    sched = Scheduler()
    gates = [Gate(), Gate(), Gate()]
    order = []

    def child(k):
        order.append(f"start {k}")
        yield WaitFor(gates[k])
        order.append(f"end {k}")
        return k * 10

    def parent():
        kids = [sched.start(child(k)) for k in range(3)]
        order.append("started")
        got = []
        pending = list(kids)
        while pending:
            first = yield AwaitAny(pending)
            got.append(first.result)
            pending.remove(first)
        total = yield AwaitTask(kids[0])
        return got, total

    t = sched.spawn(parent())
    assert order == ["start 0", "start 1", "start 2", "started"]
    gates[2].open()
    gates[0].open()
    gates[1].open()
    assert sched.join(TIMEOUT)
    got, total = t.result
    assert sorted(got) == [0, 10, 20] and got[0] == 20 and total == 0


def test_await_task_reraises_the_sub_task_exception():
    sched = Scheduler()
    gate = Gate()

    def child():
        yield WaitFor(gate)
        raise ValueError("inner")

    def parent():
        c = sched.start(child())
        try:
            yield AwaitTask(c)
        except ValueError as e:
            return f"caught {e}"

    t = sched.spawn(parent())
    gate.open()
    assert sched.join(TIMEOUT)
    assert t.result == "caught inner"


class CustomBase(BaseException):
    """A BaseException of the user's own."""


@pytest.mark.parametrize("kind", [KeyboardInterrupt, SystemExit, GeneratorExit, CustomBase],
                         ids=lambda k: k.__name__)
@pytest.mark.parametrize("blocked", [False, True], ids=["inline", "on_thread"])
def test_a_base_exception_ends_only_its_task(kind, blocked):
    """A task that raises any BaseException finishes with it (its awaiter gets it thrown, as an
    Exception), a source whose coro_arm raises one throws it into the task, and the scheduler
    (its thread too) goes on running other tasks: nothing is lost, nothing hangs."""
    sched = Scheduler()
    gate = Gate(done=not blocked)
    raised = kind()

    def child():
        yield WaitFor(gate)
        raise raised

    class Broken:
        def coro_arm(self, wake):
            raise raised

    def parent():
        c = sched.start(child())
        try:
            yield AwaitTask(c)
        except BaseException as e:
            got = [e]
        try:
            yield WaitFor(Broken())
        except BaseException as e:
            got.append(e)
        c2 = sched.start(child())
        first = yield AwaitAny([c2])
        return got + [first.exception]

    t = sched.spawn(parent())
    gate.open()
    assert sched.join(TIMEOUT)
    assert t.done and t.exception is None and t.result == [raised] * 3
    assert sched.threads_started == (1 if blocked else 0)
    # The scheduler (and a fresh thread of it) still runs tasks.
    later = Gate()

    def waiter():
        yield WaitFor(later)
        return "ran"

    t2 = sched.spawn(waiter())
    later.open()
    assert sched.join(TIMEOUT) and t2.result == "ran"


def test_spawn_while_the_thread_runs_is_picked_up_at_once():
    sched = Scheduler()
    gate = Gate()
    ran = threading.Event()

    def blocker():
        yield WaitFor(gate)

    def quick():
        ran.set()
        return
        yield

    sched.spawn(blocker())
    sched.spawn(quick())            # the thread is active: it runs this one, no stream wait
    assert ran.wait(TIMEOUT)
    gate.open()
    assert sched.join(TIMEOUT)


def test_join_from_a_task_is_refused_and_start_outside_a_task_too():
    sched = Scheduler()

    def task():
        assert current_scheduler() is sched
        with pytest.raises(RuntimeError, match="own scheduler"):
            sched.join()
        return 1
        yield

    assert sched.spawn(task()).result == 1
    assert current_scheduler() is None

    def gen():
        yield

    with pytest.raises(RuntimeError, match="from a task"):
        sched.start(gen())


def test_source_that_fails_to_arm_raises_in_the_task():
    sched = Scheduler()

    class Broken:
        def coro_arm(self, wake):
            raise OSError("cannot arm")

    def task():
        with pytest.raises(OSError):
            yield WaitFor(Broken())
        return "recovered"

    assert sched.spawn(task()).result == "recovered"
    assert not sched.active


def test_join_times_out_while_blocked():
    sched = Scheduler()
    gate = Gate()

    def task():
        yield WaitFor(gate)

    sched.spawn(task())
    assert sched.join(0.05) is False
    gate.open()
    assert sched.join(TIMEOUT)


def test_a_task_waits_on_a_real_stream():
    """The stream glue: WaitFor(stream) suspends until the stream's work is done; an idle
    stream does not suspend; Stream.wait() joins the stream's scheduler first."""
    import numpy as np

    import nnc

    s = nnc.Stream("cpu")
    x = nnc.Tensor(np.zeros(1, np.float32))
    seen = []

    def slow(inputs, outputs):
        time.sleep(0.05)
        outputs[0][0] = 7

    def task():
        nnc.cmd_exec(nnc.Cmd.custom(slow), [], [x], stream=s)
        yield WaitFor(s)
        seen.append((float(x.numpy()[0]), threading.current_thread().name))
        yield WaitFor(s)   # idle now: no hand-off
        seen.append("again")

    sched = s.scheduler
    assert sched is s.scheduler
    t0 = time.perf_counter()
    sched.spawn(task())
    assert time.perf_counter() - t0 < 0.04 and not seen
    s.wait()
    assert seen == [(7.0, sched.name), "again"] and sched.threads_started == 1


@pytest.mark.parametrize("kind", ["python", "c"])
def test_inbox_returns_posts_in_order_and_take_without_block_never_waits(kind):
    from nnc.coro import Inbox as PyInbox
    from nnc.stream.inbox import Inbox as CInbox

    box = PyInbox() if kind == "python" else CInbox()
    assert box.take(False) == []
    items = [object() for _ in range(5)]
    for it in items[:3]:
        box.post(it)
    got = box.take(True)
    assert got == items[:3] and all(a is b for a, b in zip(got, items))
    # A post from another thread wakes a blocked take.
    t = threading.Timer(0.05, box.post, (items[3],))
    t.start()
    assert box.take(True) == [items[3]]
    t.join()
    assert box.take(False) == []


def test_c_inbox_owns_its_items_until_taken_or_dropped():
    import sys

    from nnc.stream.inbox import Inbox

    item = object()
    base = sys.getrefcount(item)
    box = Inbox()
    box.post(item)
    box.post(item)
    assert sys.getrefcount(item) == base + 2
    del box                         # undelivered items are released with the inbox
    assert sys.getrefcount(item) == base
    box = Inbox()
    box.post(item)
    assert box.take() == [item]
    assert sys.getrefcount(item) == base


def test_stream_schedulers_are_woken_from_c_and_loops_store_counts_in_c(tmp_path):
    """A WaitFor on a stream is a C task that posts to the scheduler's C inbox, and a loop
    without multiviews or carry-overs stores its count with a C task: an iteration runs no
    Python on the worker (the trace shows 'wake' and 'count' tasks, no 'callback')."""
    import json

    import numpy as np

    import nnc
    from nnc.stream.inbox import Inbox

    s = nnc.Stream("cpu")
    assert isinstance(s.scheduler._inbox, Inbox)
    g, body = nnc.Graph(), nnc.Graph()
    x = nnc.Tensor(np.ones(1, np.float32))
    noop = body.exec(nnc.Cmd("NOOP"))
    m = body.exec(nnc.Cmd("SCALAR_MUL", a=2.0), [x], [x])
    body.concat(noop, m)
    body.set_while_expr(lambda count: count < 6, [], [noop])
    g.while_(body)
    path = tmp_path / "loop.json"
    with nnc.trace(path):
        g.run(stream=s)
        s.wait()
    assert body.while_count == 6 and x.numpy()[0] == 64.0
    events = [e for e in json.loads(path.read_text())["traceEvents"] if e["ph"] == "X"]
    names = [e["name"] for e in events]
    assert names.count("count") == 7            # counts 0..6: the 7th head ends the loop
    assert names.count("wake") == 7
    # Python runs on the worker only once per run (restoring the loop, finishing the run).
    assert [e["name"] for e in events if e["cat"] == "call"] == ["WhileNode._finish", "_finish"]



def test_wake_up_delivered_after_its_inbox_is_dropped_is_freed():
    """A stream can still hold a wake-up for an inbox that is gone: the inbox's C state lives
    until that message arrives, and the message's item is then released (no leak, no crash)."""
    import sys

    import numpy as np

    import nnc
    from nnc.stream.inbox import Inbox

    class Wake:                         # the shape of nnc.coro's one-shot wake-up
        def __init__(self, inbox, item):
            self.inbox, self.item = inbox, item

        def __call__(self):             # pragma: no cover - the C path must be taken
            raise AssertionError("the stream called the Python wake-up")

    s = nnc.Stream("cpu")
    gate = threading.Event()
    x = nnc.Tensor(np.zeros(1, np.float32))
    nnc.cmd_exec(nnc.Cmd.custom(lambda i, o: gate.wait(TIMEOUT)), [], [x], stream=s)
    item = object()
    base = sys.getrefcount(item)
    wake = Wake(Inbox(), item)
    assert s.coro_arm(wake) is True
    assert wake.item is None and sys.getrefcount(item) == base + 1  # the message owns it
    del wake                            # drops the inbox while the message is queued
    gate.set()
    s.wait()
    assert sys.getrefcount(item) == base
