"""Schedule verification (nnc/schedule/verify.pyx); Schedule.verify() is the entry point."""

from nnc.schedule.schedule import Schedule

def schedule_verify(sc: Schedule) -> None: ...
