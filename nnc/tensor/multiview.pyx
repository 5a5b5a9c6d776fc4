"""Multiviews: one tensor that aliases a different version per loop iteration.

NNC: ``ccv_nnc_tensor_multiview_t`` and its wrap/unwrap/synchronize machinery
(``ccv_nnc_tensor.c``, ``ccv_nnc_graph_while.c``). A :class:`MultiView` *is* a Tensor (C
backends see its header, graph nodes store a pointer to it); selecting a version re-points that
header, so nothing is copied. Kinds:

- ``K0N``: at loop count ``i`` the version is ``versions[i % repeat]``;
- ``K1N``: ``versions[0]`` at count 0, then ``versions[1 + (i - 1) % repeat]``;
- ``PHI``: two versions, set by a case..of node: ``versions[0]`` (the fallback input) when no
  branch ran, ``versions[1]`` (the branch output) when one did.

``repeat`` is the number of cycled versions: ``len(versions)`` for K0N, one less for K1N.
Tensors registered with :meth:`MultiView.synchronize` follow the current version (NNC:
``ccv_nnc_tensor_synchronize_to_multiview``).

Re-pointing carries the read-only flag with the memory (``readonly`` is the current version's),
and a multiview, or a tensor following one, with any read-only version is never a valid output.

Who selects: the loop runners (nnc.graph.while_node, nnc.run.flow), just before a node that uses
the multiview runs, with its anchor loop's current count (NNC: ``_ccv_nnc_graph_exec_unwrap_io``);
never at the start of an iteration.
"""

from nnc.base.core import TensorError

from nnc.tensor.tensor cimport Tensor

_KINDS = {"K0N": MV_K0N, "K1N": MV_K1N, "PHI": MV_PHI}
_NAMES = {v: k for k, v in _KINDS.items()}
_NO_COPY = ("a MultiView cannot be copied or pickled: it belongs to a loop (its anchor graph "
            "re-points it every iteration); copy or pickle a version, mv.versions[i]")


cdef bint _same_layout(Tensor a, Tensor b):
    cdef int i
    if (a.t.datatype != b.t.datatype or a.t.ndim != b.t.ndim or a.t.contiguous != b.t.contiguous
            or a.t.format != b.t.format):
        return False
    for i in range(a.t.ndim):
        if a.t.dim[i] != b.t.dim[i] or a.t.stride[i] != b.t.stride[i]:
            return False
    return True


# The type of a K0N / K1N anchor: nnc.graph.graph.Graph, registered by that module when it is
# imported (the graph layer sits above this one). Before that no Graph exists, so None refuses.
cdef object _anchor_type = None


def register_anchor_type(tp):
    """Called once by nnc.graph.graph: anchors must be instances of ``tp`` (a loop body)."""
    global _anchor_type
    _anchor_type = tp


cdef class MultiView(Tensor):
    """``MultiView([x, z], anchor=body, kind="K0N")``: x at even counts of body's loop, z at odd.

    See the module docstring for the kinds. All versions must have one shape, dtype, format and
    layout.
    """

    def __init__(self, versions, anchor=None, kind="K0N"):
        cdef Tensor v
        if kind not in _KINDS:
            raise TensorError(f"unknown multiview kind {kind!r}; expected 'K0N', 'K1N' or 'PHI'")
        self.kind = _KINDS[kind]
        vs = tuple(versions)
        for x in vs:
            if not isinstance(x, Tensor):
                raise TensorError(f"multiview versions must be nnc.Tensor, not {type(x).__name__}")
            if isinstance(x, MultiView):
                raise TensorError("a multiview of multiviews is not supported; flatten it")
        need = {MV_K0N: 1, MV_K1N: 2, MV_PHI: 2}[self.kind]
        if len(vs) < need or (self.kind == MV_PHI and len(vs) != 2):
            raise TensorError(f"a {kind} multiview needs "
                              f"{'exactly 2' if self.kind == MV_PHI else f'at least {need}'} "
                              f"versions, got {len(vs)}")
        for x in vs[1:]:
            if not _same_layout(<Tensor>vs[0], <Tensor>x):
                raise TensorError(
                    f"multiview versions differ: {vs[0].shape} {vs[0].dtype} {vs[0].format} vs "
                    f"{x.shape} {x.dtype} {x.format}; all must have one shape, dtype, format "
                    "and layout"
                )
        if self.kind == MV_PHI:
            if anchor is not None:
                raise TensorError("a PHI multiview has no anchor: the case..of node selects it")
        else:
            if _anchor_type is None or not isinstance(anchor, _anchor_type):
                raise TensorError(f"a {kind} multiview needs anchor=<the loop body Graph>, "
                                  f"not {type(anchor).__name__}")
        self.versions = vs
        self.anchor = anchor
        self.repeat = len(vs) - (1 if self.kind == MV_K1N else 0)
        self._synced = []
        v = vs[0]
        self.t = v.t
        for x in vs:
            self._may_alias(<Tensor>x)
        self._make_movable()
        self.select(0)

    @property
    def kind_name(self):
        return _NAMES[self.kind]

    cdef int version_at(self, long long count) noexcept:
        """The version loop count ``count`` selects (K0N, K1N); PHI: the current one."""
        if self.kind == MV_K0N:
            return count % self.repeat
        if self.kind == MV_K1N:
            return 0 if count == 0 else 1 + (count - 1) % self.repeat
        return self.current

    cdef int select_count(self, long long count) except -1:
        if self.kind == MV_PHI:
            return 0
        return self.select(self.version_at(count))

    cdef int select(self, int i) except -1:
        self.current = i
        return self.refresh()

    cdef int refresh(self) except -1:
        """Alias the current version again (after a carry-over re-pointed it)."""
        cdef Tensor v = <Tensor>self.versions[self.current]
        cdef Tensor s
        self._point_to(v)
        for s in self._synced:
            s._point_to(v)
        return 0

    def synchronize(self, Tensor t not None):
        """Make ``t`` alias whichever version this multiview aliases, from now on.

        NNC: ccv_nnc_tensor_synchronize_to_multiview. ``t`` must have the versions' layout.
        ``t.readonly`` then follows the current version; ``t`` stops being a valid output
        (CommandError at build or run time) if any version is read-only.
        """
        if isinstance(t, MultiView):
            raise TensorError("cannot synchronise a multiview to another multiview")
        if not _same_layout(t, self):
            raise TensorError(f"cannot synchronise a {t.shape} {t.dtype} {t.format} tensor to "
                              f"a multiview of {self.shape} {self.dtype} {self.format}")
        # From now on t points at the versions' memory and takes its read-only flag; a node
        # writing t is refused if any version is read-only (nnc.cmd.command's cmd_validate).
        t._may_alias(self)
        t._make_movable()
        self._synced.append(t)
        t._point_to(<Tensor>self.versions[self.current])

    def view(self, shape, offset=0, strides=None):
        raise TensorError("a view of a multiview would not follow it; view a version instead, "
                          "or synchronise a tensor to the multiview")

    def __repr__(self):
        return (f"<nnc.MultiView {_NAMES[self.kind]} of {len(self.versions)} "
                f"{self.shape} {self.dtype}, current {self.current}>")

    def __reduce__(self):
        raise TypeError(_NO_COPY)

    def __copy__(self):
        raise TypeError(_NO_COPY)

    def __deepcopy__(self, memo):
        raise TypeError(_NO_COPY)
