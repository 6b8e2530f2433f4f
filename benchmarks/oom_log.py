"""Out-of-memory kills in the kernel's log, to tell a suite worker the OOM killer stopped from one that crashed.

pytest-xdist reports a worker that died as "crashed" whatever stopped it. While a suite run goes on,
:class:`OomWatch` reads the kernel's log (``dmesg``) now and then and keeps the lines of the kills it
had not seen before the run, each with its own timestamp, so that a line the log's ring buffer drops
later is still counted. Where the log cannot be read (not Linux, no permission), nothing is known.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field

#: A kill by the kernel's OOM killer: its log timestamp, the process, its name and its resident memory.
KILL = re.compile(r"^\[\s*([\d.]+)\] Out of memory: Killed process (\d+) \(([^)]*)\).*?anon-rss:(\d+)kB", re.M)


@dataclass(frozen=True)
class Kill:
    """One OOM kill: the kernel's timestamp (seconds since boot), the process id, its name, its anonymous RSS."""

    at: float
    pid: int
    name: str
    rss_kb: int


def kills(log: str) -> list[Kill]:
    """The OOM kills a kernel log's text holds, in its order."""
    return [Kill(float(at), int(pid), name, int(rss)) for at, pid, name, rss in KILL.findall(log)]


def read_log() -> str | None:
    """The kernel's log as ``dmesg`` prints it, or None where it cannot be read."""
    try:
        done = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


@dataclass
class OomWatch:
    """The OOM kills of one run: :meth:`poll` it while the run goes on; :attr:`new` are the kills since it began.

    ``read`` reads the log (:func:`read_log` when None; a test gives its own texts).
    """

    read: Callable[[], str | None] | None = None
    known: bool = True
    _before: set[Kill] = field(default_factory=set)
    _seen: set[Kill] = field(default_factory=set)

    def __post_init__(self) -> None:
        log = self._read()
        if log is None:
            self.known = False
        else:
            self._before = set(kills(log))

    def _read(self) -> str | None:
        return (self.read or read_log)()

    def poll(self) -> None:
        """Read the log again and keep the kills it shows that were not there when the run began."""
        if not self.known:
            return
        log = self._read()
        if log is None:
            self.known = False
            return
        self._seen.update(k for k in kills(log) if k not in self._before)

    @property
    def new(self) -> list[Kill] | None:
        """The kills since the run began, oldest first (None where the log could not be read)."""
        return sorted(self._seen, key=lambda k: k.at) if self.known else None
