"""Record stream runs as a Chrome-trace / Perfetto timeline.

    with nnc.trace("run.json"):
        g.run(stream=s)
        s.wait()

Open the file in https://ui.perfetto.dev or chrome://tracing: one track per stream, one slice
per command (named after the graph node), "wait" slices showing how long a stream was held by a
signal, and flow arrows from each signal's emit to the waits it released. Leaving the ``with``
block waits for every stream, so everything enqueued inside it is recorded.
"""

import json
import os
import time

from nnc import stream as _stream

_KIND = {1: "cmd", 2: "cmd", 3: "emit", 4: "wait", 5: "wake", 6: "count"}


class trace:
    """Context manager recording every stream's tasks; writes JSON to ``path`` on exit."""

    def __init__(self, path):
        self.path = os.fspath(path)
        self.labels = []
        self._index = {}
        self.events = None  # after exit: [(stream index, [(t0, t1, kind, node, label, rec)])]

    def label(self, text):
        """Index of ``text`` in the label table (called by the runners while tracing)."""
        k = self._index.get(text)
        if k is None:
            k = self._index[text] = len(self.labels)
            self.labels.append(text)
        return k

    def __enter__(self):
        self._origin = time.perf_counter()
        _stream._trace_start(self)
        return self

    def __exit__(self, *exc):
        self.events = _stream._trace_stop()
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
                if what == "cmd":
                    name = self.labels[label] if label >= 0 else "callback"
                elif what in ("emit", "wait"):
                    name = f"{what} signal@{rec}"
                else:
                    name = what             # a loop count stored, a coroutine woken
                ts = (t0 - self._origin) * us
                out.append({"ph": "X", "name": name, "cat": what, "pid": 1, "tid": index,
                            "ts": ts, "dur": max((t1 - t0) * us, 0.01),
                            "args": {"node": node} if node >= 0 else {}})
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
        return {"traceEvents": out, "displayTimeUnit": "ms"}
