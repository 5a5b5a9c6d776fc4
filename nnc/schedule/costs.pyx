"""Node costs for the cost-aware scheduling policies: what ``static_schedule(costs=...)``
accepts, checked once, and turned into one cost per run-order position for each graph built.

The forms: None (every node costs 1), a dict {GraphExec or node index: seconds}, a
callable(GraphExec) -> seconds, or "profile" (the graph's ``profile()`` measured now).
"profile" and a dict become a dict keyed by GraphExec, stored in the schedule's arguments, so a
rebuild (the graph changed) or a sub-graph (a while body, a case..of branch) reuses it without
measuring again. A graph none of whose run nodes the dict names (a sub-graph that ``profile()``
times only as a whole) is scheduled with unit costs; a graph it names partly is an error.

One check of a cost for every policy, the policies' test wrappers (dag.pyx) and the simulator
(simulate.pyx): cost_seconds for each cost, cost_add for the running sum of one graph's costs.
A cost is a real number, not a bool, >= 0 and finite as a double; the costs of one graph must
sum to a finite double. Every sum a policy or the simulator forms is at most that sum (plus the
model's own overheads), so none overflows to inf, where it would compare equal to every other.
"""

from libc.float cimport DBL_MAX
from libc.math cimport isfinite, isinf

import numbers
import reprlib

from nnc.base.core import NNCError, ScheduleError

from nnc.base.core cimport error_repr

from nnc.graph.graph cimport Graph, GraphExec


# Shortens a huge number (10**400: 40 characters of its 401 digits) and nothing that fits a
# message (an exception's repr, a cost's).
_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 1000


cdef str shown(object v):
    """repr(v) for an error message: shortened (_REPR), and error_repr's stand-in when v's own
    repr raises, so that the message about a bad value never fails on that value."""
    try:
        return _REPR.repr(v)
    except BaseException:
        return error_repr(v)


cdef str _who(object who):
    return f"node {who}" if isinstance(who, int) else repr(who)


cdef double cost_seconds(object who, object v) except -1:
    """v as a cost in seconds: a real number (not a bool), finite as a double and >= 0; else
    ScheduleError naming ``who`` (a GraphExec, or a position of a policy's test wrapper) and
    v."""
    cdef double x
    if type(v) is float:            # the common case, without the ABC check
        x = v
        if isfinite(x) and x >= 0:
            return x
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise ScheduleError(f"costs: the cost of {_who(who)} must be a number of seconds, not "
                            f"{shown(v)}")
    try:
        x = float(v)
    except OverflowError:           # an int or a Fraction past the doubles
        x = DBL_MAX * 2
        past = True
    except Exception as exc:        # a Real whose __float__ fails
        raise ScheduleError(f"costs: the cost of {_who(who)} must be a number of seconds, not "
                            f"{shown(v)} (float() failed: {shown(exc)})") from exc
    else:
        past = False
        if isinf(x) and not isinstance(v, float):
            try:
                past = bool(v != x)     # np.longdouble(1e4000) is finite, its double is not
            except Exception:
                past = False
    if past:
        raise ScheduleError(f"costs: the cost of {_who(who)} is {shown(v)}, too large for a "
                            f"double (at most {DBL_MAX:.6g} seconds)")
    if not isfinite(x) or x < 0:
        raise ScheduleError(f"costs: the cost of {_who(who)} is {shown(v)}; it must be finite "
                            "and >= 0 seconds")
    return x


cdef double cost_add(object who, double x, double total) except -1:
    """total + x, the running sum of one graph's costs, where x is the cost of ``who``; a sum
    past the largest double is a ScheduleError naming who and x."""
    total += x
    if isinf(total):
        raise ScheduleError(f"costs: the costs sum past the largest double ({DBL_MAX:.6g} "
                            f"seconds) at {_who(who)}, whose cost is {x!r}: no run that long "
                            "can be scheduled or simulated")
    return total


cdef object normalize_costs(Graph g, object costs):
    """costs as the builder stores it: None, a callable, or a dict {GraphExec: float}.
    static_schedule has turned "profile" into a dict already (it runs the graph, which must
    not be marked busy then)."""
    cdef dict out = {}
    if costs is None or (callable(costs) and not isinstance(costs, dict)):
        return costs
    if not isinstance(costs, dict):
        raise ScheduleError("costs must be None, a dict {GraphExec or node index: seconds}, a "
                            f"callable(GraphExec) -> seconds or \"profile\", not {shown(costs)}")
    for key, v in costs.items():
        if isinstance(key, GraphExec):
            e = key
        elif isinstance(key, int) and not isinstance(key, bool) and 0 <= key < g._size:
            e = GraphExec._new(g, key)
        else:
            raise ScheduleError(f"costs key {shown(key)} is neither a GraphExec nor a node index "
                                f"of {g!r} (0 .. {g._size - 1})")
        out[e] = cost_seconds(e, v)
    return out


cdef int fill_costs(Graph g, object costs, const int* order, int m, double* out) except -1:
    """out[k] = the cost of the node at position k, each checked and their sum finite. Returns
    1, or 0 for unit costs (costs None, or a dict that names no run node of g)."""
    cdef int k, named = 0
    cdef double total = 0
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
            out[k] = costs[e]       # checked by normalize_costs
            total = cost_add(e, out[k], total)
        return 1
    for k in range(m):
        e = GraphExec._new(g, order[k])
        try:
            v = costs(e)
        except NNCError:
            raise
        except Exception as exc:
            raise ScheduleError(f"the costs function failed on {e!r}: {shown(exc)}") from exc
        out[k] = cost_seconds(e, v)
        total = cost_add(e, out[k], total)
    return 1
