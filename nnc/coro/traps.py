"""Everything a task may yield to its scheduler. Nothing else may be yielded.

A task is a generator. It suspends by yielding one of the requests below and is resumed with the
value described for each. Yielding anything else is a programming error: the scheduler throws a
``TypeError`` into the task at that ``yield`` (trio's ``_traps`` module is the model).

NNC: ``co_stream_await`` (:class:`WaitFor`), ``co_await`` (:class:`AwaitTask`),
``co_await_any`` (:class:`AwaitAny`); ``co_resume`` and ``co_apply`` are
:meth:`Scheduler.start` and ``yield from``.
"""

__all__ = ["AwaitAny", "AwaitTask", "WaitFor"]


class WaitFor:
    """Suspend until ``source`` reports completion; resumes with None.

    ``source`` implements ``coro_arm(wake) -> bool``: it returns False if it is already complete
    (the task then continues at once, with no thread hand-off), or True after arranging for
    ``wake()`` to be called exactly once, from any thread, when it completes. ``nnc.Stream``
    implements it (the stream layer owns that glue; this package knows nothing of streams).
    ``wake.inbox`` and ``wake.item`` let a source that recognises the scheduler's inbox post
    ``item`` there itself (a stream does so from C, without the GIL); it must then set
    ``wake.item`` to None, so that the wake-up still happens exactly once.
    """

    __slots__ = ("source",)

    def __init__(self, source):
        if not callable(getattr(source, "coro_arm", None)):
            raise TypeError(
                f"WaitFor needs an object with coro_arm(wake) -> bool (an nnc.Stream, say), "
                f"not {type(source).__name__}"
            )
        self.source = source

    def __repr__(self):
        return f"WaitFor({self.source!r})"


class AwaitTask:
    """Suspend until ``task`` has finished; resumes with its result, or raises its exception."""

    __slots__ = ("task",)

    def __init__(self, task):
        from nnc.coro.scheduler import Task

        if not isinstance(task, Task):
            raise TypeError(f"AwaitTask needs an nnc.coro.Task, not {type(task).__name__}")
        self.task = task

    def __repr__(self):
        return f"AwaitTask({self.task!r})"


class AwaitAny:
    """Suspend until any of ``tasks`` has finished; resumes with that Task (never raises)."""

    __slots__ = ("tasks",)

    def __init__(self, tasks):
        from nnc.coro.scheduler import Task

        self.tasks = tuple(tasks)
        if not self.tasks:
            raise ValueError("AwaitAny needs at least one task")
        for t in self.tasks:
            if not isinstance(t, Task):
                raise TypeError(f"AwaitAny needs nnc.coro.Task objects, not {type(t).__name__}")

    def __repr__(self):
        return f"AwaitAny({len(self.tasks)} tasks)"
