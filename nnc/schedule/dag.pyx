"""DagBuffer: a policy's DAG (dag.pxd) built from Python successor lists, so that each policy's
test wrapper (ios_stages, wavefront_streams, asap_streams, nimble_streams) checks its input the
same way and runs the same C code the builder (nnc/schedule/builder.pyx) calls."""

from libc.stdlib cimport free, malloc

from nnc.base.core import ScheduleError

from nnc.schedule.costs cimport cost_add, cost_seconds


cdef class DagBuffer:
    """The DAG of successor lists ``succ`` over positions (every edge u -> v with u < v), and
    optional ``costs`` (one number >= 0 per position, checked as the builder checks a graph's
    costs: costs.pyx). Bad input raises ScheduleError."""

    def __dealloc__(self):
        free(self.buf)
        free(self.cost)

    cdef int load(self, object succ, object costs=None) except -1:
        cdef int m, k, e = 0, i, v
        cdef double total = 0
        cdef int* sstart
        cdef int* pstart
        cdef int* cmd
        cdef int* sidx
        cdef int* pidx
        if not isinstance(succ, (list, tuple)):
            raise ScheduleError(f"succ must be a list of successor lists, not "
                                f"{type(succ).__name__}")
        if len(succ) >= 2 ** 30:
            raise ScheduleError(f"{len(succ)} nodes is too many")
        m = len(succ)
        rows = []
        for k in range(m):
            if not isinstance(succ[k], (list, tuple)):
                raise ScheduleError(f"successors of {k} must be a list, not {succ[k]!r}")
            for x in succ[k]:
                if isinstance(x, bool) or not isinstance(x, int) or not k < x < m:
                    raise ScheduleError(f"edge {k} -> {x!r}: successors must be positions "
                                        f"after {k} and below {m}")
            rows.append(sorted(set(succ[k])))
            e += len(rows[k])
        self.buf = <int*>malloc((3 * (m + 1) + 2 * e + 1) * sizeof(int))
        if self.buf == NULL:
            raise MemoryError()
        sstart = self.buf
        pstart = sstart + m + 1
        cmd = pstart + m + 1            # the command ids: none here, all 0
        sidx = cmd + m + 1
        pidx = sidx + e
        sstart[0] = 0
        for k in range(m + 1):
            pstart[k] = 0
        for k in range(m):
            sstart[k + 1] = sstart[k] + len(rows[k])
            for i, v in enumerate(rows[k]):
                sidx[sstart[k] + i] = v
                pstart[v + 1] += 1
        for k in range(m):
            pstart[k + 1] += pstart[k]
            cmd[k] = pstart[k]          # fill pointers while the predecessors go in
        for k in range(m):              # sources ascending: each row stays ascending
            for i in range(sstart[k], sstart[k + 1]):
                pidx[cmd[sidx[i]]] = k
                cmd[sidx[i]] += 1
        for k in range(m):
            cmd[k] = 0
        self.d.m = self.d.split = m
        self.d.sstart = sstart
        self.d.sidx = sidx
        self.d.pstart = pstart
        self.d.pidx = pidx
        self.d.cmd = cmd
        self.d.cost = NULL
        self.d.reorder = NULL
        if costs is not None:
            if not isinstance(costs, (list, tuple)) or len(costs) != m:
                raise ScheduleError(f"costs must be a list of {m} numbers, not {costs!r}")
            self.cost = <double*>malloc((m if m else 1) * sizeof(double))
            if self.cost == NULL:
                raise MemoryError()
            for k in range(m):
                self.cost[k] = cost_seconds(k, costs[k])
                total = cost_add(k, self.cost[k], total)
            self.d.cost = self.cost
        return 0


cdef int dag_max_streams(object max_streams) except -1:
    """``max_streams`` of a test wrapper, checked: an int >= 0 (0: no limit)."""
    if (isinstance(max_streams, bool) or not isinstance(max_streams, int)
            or not 0 <= max_streams < 2 ** 31):
        raise ScheduleError(f"max_streams must be an int >= 0 (0: no limit), not {max_streams!r}")
    return max_streams
