"""Layer 4 graph. The concrete graph: nodes, edges, the run order and the node loop (graph),
while and case..of nodes and their expressions (control). Imports layers 0-3.
"""
