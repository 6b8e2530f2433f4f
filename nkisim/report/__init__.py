"""Profiles and their exports (text summary, Perfetto/Chrome trace)."""

from nkisim.report.analysis import LineCost
from nkisim.report.profile import InstructionRecord, Profile

__all__ = ["InstructionRecord", "LineCost", "Profile"]
