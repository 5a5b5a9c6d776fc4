"""The switch of nnc.trace and its host-side recording: what every layer that records needs.

Not an NNC port (NNC has no tracer). nnc.trace (the recorder, at the top) turns recording on and
off here; the layers below record into it without importing it: ``cmd_exec`` (nnc.cmd.command),
the sequential node loop (nnc.graph.graph) and sub-graph runs (nnc.graph.while_node, case_of) add
host slices with :func:`trace_host`; streams name their tasks with :func:`trace_label` and time
them in their own C buffers (nnc.stream.worker). This module imports nothing above the standard
library and _core.

Named for what it is, the switch: ``nnc.trace`` (nnc/trace.py, public) is the recorder the user
opens, which writes the file; this module is the on/off flag and the hook it installs below.

State: ``trace_on`` (C int, trace_switch.pxd) and ``_tracer`` (the active recorder or None), both
changed only with the GIL; the recorder's lists are appended to with the GIL.
"""

from cpython.pythread cimport PyThread_get_thread_ident

from nnc.base.core import NNCError

trace_on = 0
_tracer = None


cdef int trace_host(str name, str cat, double t0, double t1, object args) except -1:
    """Record a slice [t0, t1] named ``name`` on the calling thread's track (with the GIL)."""
    tracer = _tracer
    if tracer is not None:
        tracer._host_event(PyThread_get_thread_ident(), name, cat, t0, t1, args)
    return 0


cdef int trace_label(str text) except -1:
    """The index of ``text`` in the active recorder's label table (-1 when none records)."""
    tracer = _tracer
    if tracer is None:
        return -1
    return tracer.label(text)


def tracing_begin(tracer):
    """Make ``tracer`` the active recorder (NNCError if one already is)."""
    global _tracer, trace_on
    if _tracer is not None:
        raise NNCError("a trace is already being recorded; nnc.trace does not nest")
    _tracer = tracer
    trace_on = 1


def tracing_end():
    """Stop recording host slices and naming tasks."""
    global _tracer, trace_on
    trace_on = 0
    _tracer = None


def tracer():
    """The active recorder (an nnc.trace), or None."""
    return _tracer
