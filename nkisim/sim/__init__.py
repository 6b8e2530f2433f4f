"""The execution core: the machine that walks each instruction, engine queues, dependency tracking, the timeline."""

from nkisim.sim.machine import DEFAULT_MAX_INSTRUCTIONS, PROGRESS_EVERY, Budget, Instruction, Machine
from nkisim.sim.scheduler import Scheduler
from nkisim.sim.timeline import Site, Timeline
from nkisim.sim.tracker import AccessTracker

__all__ = [
    "DEFAULT_MAX_INSTRUCTIONS",
    "PROGRESS_EVERY",
    "AccessTracker",
    "Budget",
    "Instruction",
    "Machine",
    "Scheduler",
    "Site",
    "Timeline",
]
