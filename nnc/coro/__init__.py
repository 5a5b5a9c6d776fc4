"""Layer 0 base. Generator-based coroutines with one scheduler thread (NNC: co.h / co.c).

Depends only on the standard library, like NNC's ``co.c`` (and on nnc.base.core's check of a
``timeout=``, shared by every wait of nnc); ``nnc.Stream`` provides the glue
that lets a task wait on a stream (``coro_arm``). See docs/threading.md for the model.
"""

from nnc.coro.scheduler import Inbox, Scheduler, Task, current_scheduler
from nnc.coro.traps import AwaitAny, AwaitTask, WaitFor

__all__ = ["AwaitAny", "AwaitTask", "Inbox", "Scheduler", "Task", "WaitFor", "current_scheduler"]
