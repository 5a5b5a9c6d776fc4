"""Tasks and the scheduler: generators run inline until they block, then on one thread.

NNC: ``co.c`` (``co_scheduler_t``, ``_co_try``, ``_co_main``). A :class:`Scheduler` keeps a queue
of ready tasks and a count of tasks suspended on an outside event (:class:`~nnc.coro.WaitFor`).
:meth:`Scheduler.spawn` runs ready tasks **inline in the caller's thread** until every task is
either finished or blocked; if some are blocked, it starts **one** scheduler thread and returns.
That thread sleeps on a condition variable (no CPU while blocked) until a wake-up from an event
source makes a task ready, runs it, and exits as soon as nothing is ready or blocked. So the
caller never waits for control flow, and a scheduler never has more than one thread.

Wake-ups arrive through an *inbox* (:class:`Inbox`): an event source posts the woken task there
from any thread, and only the thread that drives the scheduler turns posts into ready tasks. So
a source never needs the scheduler's lock, nor the GIL if its inbox is implemented in C: the
stream layer gives its schedulers one (``nnc.stream.inbox``) that a stream worker posts to
without the GIL, which makes a wait on a stream exactly two thread hand-offs.

Two departures from NNC, both deliberate: a task spawned while the thread is active wakes it at
once (NNC waits for the next stream callback), and every task suspended on a sub-task is resumed
when that sub-task ends, however many passes it took (NNC's graph runner can lose track of them).

Only the standard library is used here, and nnc.base.core's check of a ``timeout=`` (the one every
wait of nnc makes); the stream layer supplies the ``coro_arm`` glue.
"""

import threading
from collections import deque

from nnc.base.core import timeout_seconds
from nnc.coro.traps import AwaitAny, AwaitTask, WaitFor

__all__ = ["Inbox", "Scheduler", "Task", "current_scheduler"]

_local = threading.local()              # .scheduler: the Scheduler running a task on this thread


def current_scheduler():
    """The scheduler whose task runs on this thread now, or None."""
    return getattr(_local, "scheduler", None)


class Task:
    """One generator driven by a scheduler. ``done`` once it returned or raised."""

    __slots__ = ("gen", "name", "done", "result", "exception", "_waiters", "_send", "_throw")

    def __init__(self, gen, name=None):
        self.gen = gen
        self.name = name or getattr(gen, "__name__", "task")
        self.done = False
        self.result = None
        self.exception = None
        self._waiters = []              # tasks suspended in AwaitTask/AwaitAny on this one
        self._send = gen.send
        self._throw = gen.throw

    def __repr__(self):
        state = "done" if self.done else "pending"
        return f"<nnc.coro.Task {self.name} {state}>"


class Inbox:
    """Where wake-ups are posted (any thread) and taken (the scheduler's driving thread).

    ``post(item)``: a woken Task, or None to make a sleeping taker look at the ready queue.
    ``take(block)``: every item posted so far, oldest first; with ``block`` it sleeps until
    there is at least one. A C implementation (``nnc.stream.inbox.Inbox``) has the same two methods.
    """

    __slots__ = ("_cond", "_items")

    def __init__(self):
        self._cond = threading.Condition(threading.Lock())
        self._items = []                # guarded by _cond

    def post(self, item):
        with self._cond:
            self._items.append(item)
            self._cond.notify()

    def take(self, block=True):
        with self._cond:
            while block and not self._items:
                self._cond.wait()
            items, self._items = self._items, []
        return items


class Scheduler:
    """Runs tasks inline until all block, then on one thread (see the module docstring).

    ``inbox``: where wake-ups are posted; an :class:`Inbox` unless the event source's layer
    supplies a faster one (nnc.Stream does).
    """

    def __init__(self, name="nnc-coro", inbox=None):
        self.name = name
        self._inbox = Inbox() if inbox is None else inbox
        self._lock = threading.Lock()
        # Joiners sleep on _idle; the scheduler thread sleeps in _inbox.take(), never here.
        self._idle = threading.Condition(self._lock)
        # All fields below are guarded by _lock.
        self._ready = deque()           # (task, value, exc) to resume, oldest first
        # Tasks suspended in WaitFor whose wake-up has not been taken from the inbox yet: it
        # counts a posted wake-up until then, so join() cannot miss a task in transit.
        self._await_count = 0
        self._running = False           # a thread (caller or scheduler thread) drives _ready
        self._thread = None             # the scheduler thread while it exists
        self.threads_started = 0        # statistics: scheduler threads ever started

    # -- public ---------------------------------------------------------------------------

    def spawn(self, gen, name=None):
        """Schedule ``gen`` as a root task; run ready tasks inline if nobody else is; return it.

        Returns once every task is finished or blocked (then the scheduler thread takes over).
        """
        task = Task(gen, name)
        with self._lock:
            self._ready.append((task, None, None))
            running = self._running
            self._running = True
        if running:
            self._inbox.post(None)      # the thread may be asleep in take()
            return task
        self._drive(inline=True)
        return task

    def start(self, gen, name=None):
        """Run ``gen`` now, from inside a task, until it first suspends or ends (co_resume).

        The caller goes on at once; it can later ``yield AwaitTask(t)`` or ``AwaitAny``.
        """
        if current_scheduler() is not self:
            raise RuntimeError("Scheduler.start must be called from a task of this scheduler")
        task = Task(gen, name)
        self._step(task, None, None)
        return task

    @property
    def active(self):
        """True while any task is ready, running or blocked."""
        with self._lock:
            return self._running or bool(self._ready) or self._await_count > 0

    @property
    def thread_alive(self):
        """True while the scheduler thread exists."""
        with self._lock:
            return self._thread is not None

    def join(self, timeout=None):
        """Block until no task is ready, running or blocked. Returns False on timeout
        (None or +inf: no limit; a negative timeout is 0; NaN or a non-number: StreamError).

        Must not be called from one of this scheduler's tasks (it would wait for itself).
        """
        if current_scheduler() is self:
            raise RuntimeError(
                "a task cannot join its own scheduler; yield WaitFor/AwaitTask instead"
            )
        import time

        limit = timeout_seconds(timeout)
        deadline = None if limit < 0 else time.monotonic() + limit
        with self._lock:
            while self._running or self._ready or self._await_count:
                # Wake up now and then so that Ctrl-C reaches the waiting thread.
                step = 0.1 if deadline is None else min(0.1, deadline - time.monotonic())
                if step <= 0:
                    return False
                self._idle.wait(step)
        return True

    def __repr__(self):
        return f"<nnc.coro.Scheduler {self.name}>"

    # -- driving ----------------------------------------------------------------------------

    def _drive(self, inline):
        """Run ready tasks until none is ready. Inline: hand off to a thread if some block."""
        prev = current_scheduler()
        _local.scheduler = self
        try:
            while True:
                with self._lock:
                    if self._ready:
                        task, value, exc = self._ready.popleft()
                    elif self._await_count == 0:
                        self._running = False
                        if not inline:
                            self._thread = None
                        self._idle.notify_all()
                        return
                    else:
                        task = None
                if task is not None:
                    self._step(task, value, exc)
                    continue
                # Every task is blocked. The thread sleeps until a wake-up is posted; the
                # caller only collects what has already arrived, then hands over and returns.
                items = self._inbox.take(not inline)
                if items:
                    self._deliver(items)
                    continue
                with self._lock:
                    if self._thread is None:
                        self._thread = threading.Thread(
                            target=self._drive, args=(False,), name=self.name, daemon=True
                        )
                        self.threads_started += 1
                        self._thread.start()
                return
        finally:
            _local.scheduler = prev

    def _deliver(self, items):
        """Make the tasks whose wake-ups were taken from the inbox ready (None: a nudge)."""
        with self._lock:
            for task in items:
                if task is not None:
                    self._await_count -= 1
                    self._ready.append((task, None, None))

    def _step(self, task, value, exc):
        """Resume ``task`` and keep it going while its requests complete at once."""
        while True:
            try:
                if exc is not None:
                    req = task._throw(exc)
                else:
                    req = task._send(value)
            except StopIteration as stop:
                self._finish(task, stop.value, None)
                return
            except BaseException as e:
                self._finish(task, None, e)
                return
            value = exc = None
            cls = type(req)
            if cls is WaitFor:
                with self._lock:
                    self._await_count += 1
                try:
                    armed = req.source.coro_arm(_Wake(self._inbox, task))
                except BaseException as e:
                    armed = False
                    exc = e
                if armed:
                    return
                with self._lock:
                    self._await_count -= 1
            elif cls is AwaitTask:
                t = req.task
                if t.done:
                    if t.exception is not None:
                        exc = t.exception
                    else:
                        value = t.result
                    continue
                t._waiters.append((task, req))
                return
            elif cls is AwaitAny:
                first = next((t for t in req.tasks if t.done), None)
                if first is not None:
                    value = first
                    continue
                for t in req.tasks:
                    t._waiters.append((task, req))
                return
            else:
                exc = TypeError(
                    f"a task yielded {req!r}; tasks may only yield the requests of "
                    "nnc.coro.traps (WaitFor, AwaitTask, AwaitAny); use 'yield from' to call "
                    "another generator"
                )

    def _finish(self, task, result, exc):
        task.done = True
        task.result = result
        task.exception = exc
        waiters, task._waiters = task._waiters, []
        for waiter, req in waiters:
            if type(req) is AwaitAny:
                # The first task to finish hands the waiter back; forget it everywhere else.
                for other in req.tasks:
                    if other is not task:
                        other._waiters = [w for w in other._waiters if w[0] is not waiter]
                item = (waiter, task, None)
            elif exc is not None:
                item = (waiter, None, exc)
            else:
                item = (waiter, result, None)
            with self._lock:
                self._ready.append(item)


class _Wake:
    """The one-shot wake-up handed to a WaitFor source; a second call is ignored.

    A source that recognises ``inbox``'s type may instead post ``item`` to it itself (from C,
    say): it then sets ``item`` to None first, so the wake-up still happens exactly once.
    """

    __slots__ = ("inbox", "item")

    def __init__(self, inbox, item):
        self.inbox = inbox
        self.item = item

    def __call__(self):
        item, self.item = self.item, None
        if item is not None:
            self.inbox.post(item)
