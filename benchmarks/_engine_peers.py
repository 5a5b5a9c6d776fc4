"""What benchmarks/engine.py compares nnc.Engine with: dask's threaded scheduler and a
``concurrent.futures`` thread pool with explicit dependency tracking, both given the
dependency lists of ``benchmarks._engine_work.dependencies`` (they know no read/mutate sets).

Both run ``bodies[i](*args[i])`` for op i: a Python function, or a ctypes call of a C
function (which releases the GIL while C runs).
"""

import concurrent.futures
import functools
import threading

try:
    import dask.threaded
except ImportError:  # dask is an optional benchmark dependency (pip install -e '.[bench]')
    dask = None


def dask_missing():
    """Why the dask column is absent, or None."""
    return None if dask is not None else "dask not installed (pip install -e '.[bench]')"


def _call(body, arg, *_deps):
    # dask passes the results of the dependencies after the literal argument; they are Nones
    return body(arg)


def _call0(body, *_deps):
    return body()


class DaskRun:
    """A dask graph of the ops: key ``"op-i"`` holds the task ``(_call, body, arg, *deps)``,
    where deps are the keys of op i's dependencies, so dask passes their results in and runs
    op i after them. ``run()`` asks ``dask.threaded.get`` for the ops nothing depends on,
    which needs every op."""

    def __init__(self, bodies, args, deps, workers):
        keys = [f"op-{i}" for i in range(len(deps))]
        self.graph = {}
        needed = set()
        for i, ds in enumerate(deps):
            dep_keys = [keys[d] for d in ds]
            needed.update(ds)
            if args is None:
                self.graph[keys[i]] = (_call0, bodies[i], *dep_keys)
            else:
                self.graph[keys[i]] = (_call, bodies[i], args[i], *dep_keys)
        self.sinks = [keys[i] for i in range(len(deps)) if i not in needed]
        self.workers = workers

    def run(self):
        dask.threaded.get(self.graph, self.sinks, num_workers=self.workers)


class FuturesRun:
    """A ``ThreadPoolExecutor`` of ``workers`` threads and a dependency tracker: op i is
    submitted once the futures of all its dependencies are done, from the done-callback
    (``add_done_callback``) of the last of them; ``run()`` submits the ops with no
    dependency and waits until every op has finished. The first exception of a body stops
    further submissions and is raised by ``run()``."""

    def __init__(self, bodies, args, deps, workers, timeout=600.0):
        n = len(deps)
        self.bodies = bodies
        self.args = [()] * n if args is None else [(a,) for a in args]
        self.counts = [len(ds) for ds in deps]
        self.dependents = [[] for _ in range(n)]
        for i, ds in enumerate(deps):
            for d in ds:
                self.dependents[d].append(i)
        self.roots = [i for i in range(n) if not deps[i]]
        self.pool = concurrent.futures.ThreadPoolExecutor(workers)
        self.timeout = timeout
        self._tls = threading.local()

    def close(self):
        self.pool.shutdown(wait=True)

    def run(self):
        n = len(self.counts)
        pending = list(self.counts)
        lock = threading.Lock()
        finished = threading.Event()
        state = {"left": n, "error": None}
        dependents = self.dependents

        def done(i, fut):
            exc = fut.exception()
            ready = []
            with lock:
                if exc is not None and state["error"] is None:
                    state["error"] = exc
                    finished.set()
                for j in dependents[i]:
                    pending[j] -= 1
                    if pending[j] == 0:
                        ready.append(j)
                state["left"] -= 1
                if state["left"] == 0:
                    finished.set()
            if ready and state["error"] is None:
                submit(ready)

        callbacks = [functools.partial(done, i) for i in range(n)]

        def submit(ready):
            # A future already done runs its callback inline, inside add_done_callback,
            # which submits again: a trampoline (one queue per thread) keeps a long chain of
            # such inline completions from recursing once per op.
            tls = self._tls
            queue = getattr(tls, "queue", None)
            if queue is not None:
                queue.extend(ready)
                return
            tls.queue = queue = list(ready)
            try:
                while queue:
                    i = queue.pop()
                    fut = self.pool.submit(self.bodies[i], *self.args[i])
                    fut.add_done_callback(callbacks[i])
            finally:
                tls.queue = None

        if n:
            submit(self.roots)
            if not finished.wait(self.timeout):
                raise TimeoutError(f"futures tracker: {state['left']} of {n} ops unfinished "
                                   f"after {self.timeout} s")
        if state["error"] is not None:
            raise state["error"]
