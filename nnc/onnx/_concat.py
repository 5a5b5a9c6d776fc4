"""The ONNX loader's zero-copy Concat placement (nnc.onnx._load's pass 2; docs/onnx.md,
"Zero-copy Concat"). A mixin of ``_load._Loader``, which supplies ``nodes``, ``skip``,
``producer``, ``consts``, ``alias``/``root``, ``layout``, ``shapes``, ``attrs``, ``at``,
``graph_outputs`` and ``strided_writers`` (the operators whose output may be a strided slice);
it fills ``placement`` (root value -> (Concat output, internal axis, offset)) and
``concat_plan`` (Concat node index -> (internal axis, [(input, offset, placed)]))."""

from nnc.onnx._ops import TO_NHWC


class ConcatPlanner:
    def _place(self):
        """Pass 2 of the load: each Concat, consumers first (so nested Concats get slices of
        the outer buffer), places every input whose producer can write a strided output into
        its slice of the Concat's buffer; the rest are copied in when emitted."""
        self.placement = {}  # root value -> (concat output, internal axis, offset)
        self.concat_plan = {}  # node index -> [(input, offset, placed)]
        group_out = {self.root(o) for o in self.graph_outputs}
        for k in range(len(self.nodes) - 1, -1, -1):
            n = self.nodes[k]
            if k in self.skip or n.op_type != "Concat":
                continue
            self.at(n)
            out = n.output[0]
            lay = self.layout[out]
            nd = len(self.shapes[out])
            axis = self.attrs[k]["axis"] % nd
            iaxis = TO_NHWC.index(axis) if lay == "nhwc" else axis
            offset, plan, mine = 0, [], set()
            for i in n.input:
                r = self.root(i)
                p = self.producer.get(r)
                ok = (i not in self.consts and p is not None and r not in self.placement
                      and r not in mine and r != self.root(out) and r not in group_out
                      and self.nodes[p].op_type in self.strided_writers
                      and self.layout.get(r) == lay and self.layout.get(i) == lay)
                if ok:
                    self.placement[r] = (out, iaxis, offset)
                    mine.add(r)
                plan.append((i, offset, ok))
                offset += self.shapes[i][axis]
            span = None if mine else self._placed_run(plan, iaxis, lay)
            if (span is not None and self.root(out) not in self.placement
                    and self.root(out) not in group_out
                    and not any(self.root(v) == self.root(out) for v in self.alias)):
                # Every input already sits, in order and back to back, in one later Concat's
                # buffer (DenseNet: each layer's Concat is a prefix of its block's last one,
                # so it was copied whole for every layer): this Concat is that range of the
                # buffer, a view, and copies nothing. Nothing may write in place over it, as
                # the range holds the later Concat's inputs.
                self.placement[self.root(out)] = span
                plan = [(i, offset, True) for i, offset, _ in plan]
            self.concat_plan[k] = (iaxis, plan)

    def _placed_run(self, plan, iaxis, lay):
        """(buffer, axis, offset) when every input of a Concat's ``plan`` is already placed in
        the same buffer along ``iaxis``, each at the Concat's own offset plus one base, in
        ``lay``; else None."""
        base, parent = None, None
        for i, offset, placed in plan:
            r = self.root(i)
            if placed or i in self.consts or r not in self.placement or self.layout.get(i) != lay:
                return None
            where, axis, at = self.placement[r]
            if parent is None:
                parent, base = where, at - offset
            if where != parent or axis != iaxis or at - offset != base:
                return None
        return None if parent is None else (parent, iaxis, base)
