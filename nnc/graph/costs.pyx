"""Node costs for the cost-aware scheduling policies: what ``static_schedule(costs=...)``
accepts, checked once, and turned into one cost per run-order position for each graph built.

The forms: None (every node costs 1), a dict {GraphExec or node index: seconds}, a
callable(GraphExec) -> seconds, or "profile" (the graph's ``profile()`` measured now).
"profile" and a dict become a dict keyed by GraphExec, stored in the schedule's arguments, so a
rebuild (the graph changed) or a sub-graph (a while body, a case..of branch) reuses it without
measuring again. A graph none of whose run nodes the dict names (a sub-graph that ``profile()``
times only as a whole) is scheduled with unit costs; a graph it names partly is an error.
"""

from libc.math cimport isfinite

import numbers

from nnc._core import NNCError, ScheduleError

from nnc.graph.graph cimport Graph, GraphExec


cdef double _seconds(e, v) except -1:
    """v as a cost in seconds: a real number, finite and >= 0; else ScheduleError naming e."""
    cdef double x
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise ScheduleError(f"the cost of {e!r} must be a number of seconds, not {v!r}")
    x = float(v)
    if not isfinite(x) or x < 0:
        raise ScheduleError(f"the cost of {e!r} must be finite and >= 0 seconds, not {v!r}")
    return x


cdef object normalize_costs(Graph g, object costs):
    """costs as the builder stores it: None, a callable, or a dict {GraphExec: float}."""
    cdef dict out = {}
    if costs is None or (callable(costs) and not isinstance(costs, dict)):
        return costs
    if isinstance(costs, str) and costs == "profile":
        costs = dict(g.profile())
    if not isinstance(costs, dict):
        raise ScheduleError("costs must be None, a dict {GraphExec or node index: seconds}, a "
                            f"callable(GraphExec) -> seconds or \"profile\", not {costs!r}")
    for key, v in costs.items():
        if isinstance(key, GraphExec):
            e = key
        elif isinstance(key, int) and not isinstance(key, bool) and 0 <= key < g._size:
            e = GraphExec._new(g, key)
        else:
            raise ScheduleError(f"costs key {key!r} is neither a GraphExec nor a node index "
                                f"of {g!r} (0 .. {g._size - 1})")
        out[e] = _seconds(e, v)
    return out


cdef int fill_costs(Graph g, object costs, const int* order, int m, double* out) except -1:
    """out[k] = the cost of the node at position k. Returns 1, or 0 for unit costs (costs None,
    or a dict that names no run node of g)."""
    cdef int k, named = 0
    cdef GraphExec e
    if costs is None:
        return 0
    if isinstance(costs, dict):
        for k in range(m):
            named += GraphExec._new(g, order[k]) in costs
        if named == 0:
            return 0
        for k in range(m):
            e = GraphExec._new(g, order[k])
            if e not in costs:
                raise ScheduleError(f"costs name {named} of the {m} nodes that run in {g!r} "
                                    f"but not {e!r}")
            out[k] = costs[e]
        return 1
    for k in range(m):
        e = GraphExec._new(g, order[k])
        try:
            v = costs(e)
        except NNCError:
            raise
        except Exception as exc:
            raise ScheduleError(f"the costs function failed on {e!r}: {exc!r}") from exc
        out[k] = _seconds(e, v)
    return 1
