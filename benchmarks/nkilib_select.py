"""A pytest plugin for ``nkilib_suite.py --rerun``: run only the suite's tests named in a file.

Naming the tests on pytest's command line fails the whole run when one of them is not collected
("ERROR: not found", and no test runs), and some of the suite's sweeps draw their parameters
with Python's unseeded ``random`` at import, so a test recorded by one run is not collected by
the next. With this plugin the re-run collects the tests' files and keeps, of what they hold, the
tests whose node ids (relative to the suite's ``test/`` root) the file named by
:data:`ONLY_ENV` lists, one per line; the others are reported as deselected. The script counts
the listed tests that did not run.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

#: The environment variable naming the file of node ids to keep.
ONLY_ENV = "NKISIM_SUITE_ONLY"


def wanted_ids() -> frozenset[str] | None:
    """The node ids the file named by :data:`ONLY_ENV` lists, or None when the variable is not set."""
    path = os.environ.get(ONLY_ENV)
    if not path:
        return None
    return frozenset(line for line in Path(path).read_text().splitlines() if line)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    wanted = wanted_ids()
    if wanted is None:
        return
    # a file recorded as failing to collect is named by its path: all it holds now runs
    keep = [item for item in items if item.nodeid in wanted or item.nodeid.partition("::")[0] in wanted]
    if len(keep) < len(items):
        kept = {id(item) for item in keep}
        config.hook.pytest_deselected(items=[item for item in items if id(item) not in kept])
        items[:] = keep
