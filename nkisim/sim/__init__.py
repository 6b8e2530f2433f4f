"""The execution core: the machine that walks each instruction, engine queues, dependency tracking, the timeline."""

from nkisim.sim.deps import AccessTracker
from nkisim.sim.machine import PROGRESS_EVERY, Instruction, Machine
from nkisim.sim.scheduler import BandwidthCalendar, Scheduler, Timeline

__all__ = ["PROGRESS_EVERY", "AccessTracker", "BandwidthCalendar", "Instruction", "Machine", "Scheduler", "Timeline"]
