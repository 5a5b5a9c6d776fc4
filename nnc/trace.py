"""Record what nnc runs as a Chrome-trace / Perfetto timeline.

    with nnc.trace("run.json"):
        g.run(stream=s)
        s.wait()
        g.run()                         # sequential runs are recorded too

Open the file in https://ui.perfetto.dev or chrome://tracing. Streams: one track per stream,
one slice per task (a graph node named after the node, an eager command named after the
command, a callback after its ``__qualname__``), "wait" slices showing how long a stream was
held by a signal, and flow arrows from each signal's emit to the waits it released. Host
threads: one track per thread that ran something synchronously, with a "Graph.run" slice
holding one slice per node, loop iterations and case..of branches nested inside their node,
and one slice per eager ``cmd_exec``. Leaving the ``with`` block waits for every stream, so
everything enqueued inside it is recorded. The format is described in docs/trace.md.
"""

import json
import os
import threading
import time

from nnc.stream import stream as _stream

_KIND = {1: "cmd", 2: "cmd", 3: "emit", 4: "wait", 5: "wake", 6: "count"}
HOST_TID = 100000                       # host thread k (in order of first event): tid 100000 + k


class trace:
    """Context manager recording every stream's tasks and the calling threads' synchronous
    runs; writes Chrome trace-event JSON to ``path`` on exit."""

    def __init__(self, path):
        self.path = os.fspath(path)
        self.labels = []
        self._index = {}
        self.events = None  # after exit: [(stream index, [(t0, t1, kind, node, label, rec)])]
        self.host = []      # [(thread ident, name, cat, t0, t1, args)], appended as slices end
        self.threads = {}   # thread ident -> thread name

    def label(self, text):
        """Index of ``text`` in the label table (called by the runners while tracing)."""
        k = self._index.get(text)
        if k is None:
            k = self._index[text] = len(self.labels)
            self.labels.append(text)
        return k

    def _host_event(self, ident, name, cat, t0, t1, args):
        """A slice that ran on a host thread (nnc.base.trace_switch.trace_host, with the GIL)."""
        if ident not in self.threads:
            self.threads[ident] = threading.current_thread().name
        self.host.append((ident, name, cat, t0, t1, args))

    def __enter__(self):
        self._origin = time.perf_counter()
        _stream.trace_start(self)
        return self

    def __exit__(self, exc_type, exc, tb):
        self.events = _stream.trace_stop()
        with open(self.path, "w") as f:
            json.dump(self.chrome_trace(), f)
        return False

    def chrome_trace(self):
        """The recorded events in Chrome's trace-event JSON format (a dict)."""
        out = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "nnc"}}]
        us = 1e6
        emits = {}
        for index, events in self.events or []:
            out.append({"ph": "M", "name": "thread_name", "pid": 1, "tid": index,
                        "args": {"name": f"stream #{index}"}})
            for t0, t1, kind, node, label, rec in events:
                what = _KIND.get(kind, "task")
                if kind == 2 and node < 0:
                    what = "call"           # a Python task that is no graph node
                if what in ("cmd", "call"):
                    name = self.labels[label] if label >= 0 else "task"
                elif what in ("emit", "wait"):
                    name = f"{what} signal@{rec}"
                else:
                    name = what             # a loop count stored, a coroutine woken
                ts = (t0 - self._origin) * us
                args = {"node": node} if node >= 0 else {}
                if kind in (1, 2):
                    # A C backend's task ran without the GIL; a Python one took it.
                    args["task"] = "C" if kind == 1 else "python"
                out.append({"ph": "X", "name": name, "cat": what, "pid": 1, "tid": index,
                            "ts": ts, "dur": max((t1 - t0) * us, 0.01), "args": args})
                if what == "emit":
                    emits[rec] = (index, ts)
                    out.append({"ph": "s", "id": rec, "name": "signal", "cat": "signal",
                                "pid": 1, "tid": index, "ts": ts})
        for index, events in self.events or []:
            for _t0, t1, kind, _node, _label, rec in events:
                if _KIND.get(kind) == "wait" and rec in emits:
                    out.append({"ph": "f", "bp": "e", "id": rec, "name": "signal",
                                "cat": "signal", "pid": 1, "tid": index,
                                "ts": (t1 - self._origin) * us})
        out.extend(self._host_slices())
        return {"traceEvents": out, "displayTimeUnit": "ms"}

    def _host_slices(self):
        """Host threads' slices, per track in start order, enclosing slices first (slices are
        recorded as they end, so a run's node slices come before the run's own)."""
        tids = {}
        out = []
        for ident in dict.fromkeys(e[0] for e in self.host):
            tids[ident] = tid = HOST_TID + len(tids)
            out.append({"ph": "M", "name": "thread_name", "pid": 1, "tid": tid,
                        "args": {"name": f"host: {self.threads[ident]}"}})
        us = 1e6
        for ident, name, cat, t0, t1, args in sorted(self.host, key=lambda e: (e[3], -e[4])):
            out.append({"ph": "X", "name": name, "cat": cat, "pid": 1, "tid": tids[ident],
                        "ts": (t0 - self._origin) * us, "dur": max((t1 - t0) * us, 0.01),
                        "args": dict(args) if args else {}})
        return out
