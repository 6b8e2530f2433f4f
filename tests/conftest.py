"""Every kernel of the test suite runs under the strictest sanitizer unless its test says otherwise.

The suite doubles as the sanitizer's false-alarm check: a test that means to provoke a
finding passes ``check=`` explicitly or turns the check off with ``nkisim.ignore_checks``.

Timing and cost tests, and a few rule tests, run instructions on placeholder tiles whose
values do not matter (adding the instructions that would fill them would change the timeline
being measured). They carry the ``placeholder_tiles`` marker, which turns off only the
``uninitialized-read`` check; every other check stays strict for them.
"""

import os
import re

import pytest

import nkisim

#: Tests whose kernels time instructions on placeholder tiles, by module or test name.
_TIMING_MODULE = re.compile(r"test_timing\w*\.py$")
_COST_TEST = re.compile(r"_cost\b|_costs?_|^test_costs?\b|cost_is")


def pytest_configure(config):
    os.environ.setdefault("NKISIM_CHECK", "strict")
    config.addinivalue_line(
        "markers", "placeholder_tiles: the kernels read tiles nothing wrote, on purpose (uninitialized-read is off)"
    )


def pytest_collection_modifyitems(items):
    for item in items:
        if _TIMING_MODULE.search(item.path.name) or _COST_TEST.search(item.originalname or item.name):
            item.add_marker(pytest.mark.placeholder_tiles)


@pytest.fixture(autouse=True)
def _placeholder_tiles(request):
    if request.node.get_closest_marker("placeholder_tiles") is None:
        yield
        return
    with nkisim.ignore_checks("uninitialized-read"):
        yield
