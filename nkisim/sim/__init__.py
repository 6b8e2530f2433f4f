"""Engine queues, dependency tracking and the scheduler that turn a program into a timeline."""

from nkisim.sim.deps import AccessTracker
from nkisim.sim.scheduler import BandwidthCalendar, Scheduler, Timeline

__all__ = ["AccessTracker", "BandwidthCalendar", "Scheduler", "Timeline"]
