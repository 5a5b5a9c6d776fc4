"""Schedule verification (nnc/graph/verify.pyx); Schedule.verify() is the entry point."""

from nnc.graph.schedule import Schedule

def schedule_verify(sc: Schedule) -> None: ...
