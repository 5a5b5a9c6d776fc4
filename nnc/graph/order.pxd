# A graph's order over its node array, shared by its run order (Graph._compile) and a partial
# schedule's part (nnc.schedule.schedule.part_order): a topological order of every node (Kahn),
# then which nodes lie between sources and destinations. Inline C over the nodes' successor
# arrays; no module is built from this file.

from libc.string cimport memset

from nnc.graph.graph cimport exec_info_t


# Kahn over all n nodes (no sources or destinations limit it): fills queue with a topological
# order and returns how many nodes it holds; fewer than n means a cycle, whose nodes keep
# indegree > 0 (what Graph._cycle reads to name it). Both arrays hold at least n ints.
cdef inline int order_all(const exec_info_t* nodes, int n, int* indegree,
                          int* queue) noexcept nogil:
    cdef int i, k, j, head = 0, tail = 0
    memset(indegree, 0, sizeof(int) * n)
    for i in range(n):
        for k in range(nodes[i].outgoing_size):
            indegree[nodes[i].outgoings[k]] += 1
    for i in range(n):
        if indegree[i] == 0:
            queue[tail] = i
            tail += 1
    while head < tail:
        i = queue[head]
        head += 1
        for k in range(nodes[i].outgoing_size):
            j = nodes[i].outgoings[k]
            indegree[j] -= 1
            if indegree[j] == 0:
                queue[tail] = j
                tail += 1
    return tail


# With bit 1 set in mark for the sources: set it on every node reachable from them, walking
# queue (a topological order of all n nodes) forward.
cdef inline void order_mark_reached(const exec_info_t* nodes, int n, const int* queue,
                                    char* mark) noexcept nogil:
    cdef int h, i, k
    for h in range(n):
        i = queue[h]
        if mark[i] & 1:
            for k in range(nodes[i].outgoing_size):
                mark[nodes[i].outgoings[k]] |= 1


# With bit 2 set in mark for the destinations: set it on every node that reaches one, walking
# queue backward. Nodes marked 3 then lie on a path from a source to a destination.
cdef inline void order_mark_reaching(const exec_info_t* nodes, int n, const int* queue,
                                     char* mark) noexcept nogil:
    cdef int h, i, k
    for h in range(n - 1, -1, -1):
        i = queue[h]
        for k in range(nodes[i].outgoing_size):
            if mark[nodes[i].outgoings[k]] & 2:
                mark[i] |= 2
                break
