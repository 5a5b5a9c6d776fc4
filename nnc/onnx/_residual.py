"""The ONNX loader's plan of shortcuts added in place: an Add of a Conv's output and another
value becomes that Conv with the value as its residual, written over it (nnc.onnx._load's pass
2a; docs/onnx.md, "Shortcuts added in place"). A mixin of ``_load._Loader``, which supplies the
plan's ``nodes``, ``producer``, ``consumers``, ``alias``/``root``, ``layout``, ``shapes``,
``consts``, ``placement``, ``concat_plan``, ``skip`` and its ``_views``/``_ancestors``."""

import numpy as np


class ResidualPlanner:
    def _plan_residuals(self):
        """An Add of a Conv's output C and another value R (ResNet's shortcut) becomes that
        Conv with R as its residual, written over R (CONVOLUTION's residual may be its
        output): out = conv + bias + R lands in R's memory, each line read and written once,
        where writing a separate C first reads every line of it from memory (ResNet-50's
        56x56x256 expand layers ran 37 % faster so). The Conv is emitted where the Add was,
        when R is ready; the Add's output is R's memory. Only where nothing can tell: float32
        (CPU_OPT's tiles read each residual value before storing over it; its float64 and
        depthwise kernels do not, so neither is planned), C read by that Add alone, R of C's
        shape and layout, not a graph input or output, no view or Concat slice of anything,
        not read by the Conv itself, and every other node reading R's memory an ancestor of
        the Conv or of R's writers, which the Conv runs after. Other Adds stay as planned
        (in place into an operand, which Graph.simplify folds into a Conv before it)."""
        self.residual_of = {}   # Conv node index -> the residual value it adds in place
        self.deferred = {}      # Add node index -> the Conv node index emitted in its place
        if np.dtype(self.dtype) != np.float32:
            return
        view_of, anc = self._views(), self._ancestors()
        values = [v for v in set(self.producer) | set(self.consumers) if v not in self.consts]
        edge = set(self.graph_inputs) | set(self.graph_outputs)

        def upstream(r, k):
            # The values in r's memory (looked up afresh: each Add planned here joins two
            # classes), but those node k or its descendants make (an in-place Add's output is
            # its operand's memory: it and what aliases it later are not C's).
            return [v for v in values if self.root(v) == r and (
                self.producer.get(v) is None
                or (self.producer[v] != k and not (anc[self.producer[v]] >> k) & 1))]

        def sliced(r):
            return r in self.placement or any(self.root(self.nodes[j].output[0]) == r
                                              for j in self.concat_plan)

        def viewed(r):
            return any(self.root(v) == r or self.root(b) == r for v, b in view_of.items())

        def readers(vals):
            return {c for v in vals for c in self.consumers.get(v, ()) if c not in self.skip}

        def writers(vals):
            return {self.producer[v] for v in vals
                    if v in self.producer and self.producer[v] not in self.skip}

        def plain(r, vals):
            return (r not in self.consts and not sliced(r) and not viewed(r)
                    and not any(v in edge for v in vals))

        for k, n in enumerate(self.nodes):
            if (k in self.skip or n.op_type != "Add" or len(n.input) != 2
                    or any(i in self.consts or not i for i in n.input)):
                continue
            out = n.output[0]
            for c_val, r_val in ((n.input[0], n.input[1]), (n.input[1], n.input[0])):
                c, r = self.root(c_val), self.root(r_val)
                p = self.producer.get(c)
                if p is None or p in self.residual_of or self.nodes[p].op_type != "Conv":
                    continue
                w = self.consts.get(self.nodes[p].input[1])
                groups = self.attrs[p].get("group", 1)
                if w is None or (groups > 1 and w.shape[1] == 1 and w.shape[0] == groups):
                    continue            # depthwise: CPU_OPT adds its residual after storing
                shape = self.shapes.get(out)
                cs, rs = upstream(c, k), upstream(r, k)
                if (c == r or self.shapes.get(c_val) != shape or self.shapes.get(r_val) != shape
                        or self.layout.get(c_val) != "nhwc" or self.layout.get(r_val) != "nhwc"
                        or self.layout.get(out) != "nhwc" or not plain(c, cs)
                        or not plain(r, rs) or readers(cs) != {k}
                        or self.root(self.nodes[p].input[0]) == r):
                    continue
                before = anc[p]
                for q in writers(rs):
                    before |= anc[q] | (1 << q)
                if any(q != k and not (before >> q) & 1 for q in readers(rs)):
                    continue            # a reader of R that might run after the Conv
                self.residual_of[p] = r_val
                self.deferred[k] = p
                self.skip.add(k)
                self.alias[c] = r
                self.alias[out] = r_val
                break
