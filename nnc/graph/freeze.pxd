# Constant weights of a graph (nnc/graph/freeze.pyx): Graph.freeze and Graph.memory, registered
# with nnc.graph.graph (they walk while / case..of sub-graphs, which graph.pyx cannot cimport).
# No C contract: only Python entry points.
