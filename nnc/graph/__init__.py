"""Layer 4 graph. The concrete graph: nodes, edges, the run order and the node loop (graph),
while nodes and the multiview selection by loop count (while_node), case..of nodes (case_of),
what both share (subgraph) and their declarative expression `nnc.Compare` (compare), constant
weights (freeze: Graph.freeze, Graph.memory). Running them on streams is nnc.run.flow's
(layer 6). Imports layers 0-3.
"""
