"""The points of a sweep: one setting of the parameters on one target."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Point:
    """One simulation of a sweep.

    Attributes:
        index: the point's place in the sweep (records come back in this order).
        params: the parameter values, by name.
        target: the hardware generation, or None for the kernel's own default.
    """

    index: int
    params: dict[str, Any]
    target: str | None

    @property
    def key(self) -> str:
        """A stable text key of the point's parameters and target (for resuming from a results file)."""
        return point_key(self.params, self.target)


def point_key(params: Mapping[str, Any], target: str | None) -> str:
    return json.dumps({"params": dict(params), "target": target}, sort_keys=True, default=repr)


def expand(
    params: Mapping[str, Sequence[Any]] | Sequence[Mapping[str, Any]] | None,
    targets: Sequence[str] | str | None,
) -> list[Point]:
    """The points of a sweep, targets outermost: the Cartesian product of ``params`` (a mapping of
    name to values), or the settings listed (a sequence of mappings), on each target."""
    settings = _settings(params)
    target_list: list[str | None] = [targets] if isinstance(targets, str) else list(targets or [None])
    if not target_list:
        raise ValueError("nkisim.sweep: targets is empty; give at least one generation, or None for the default")
    points = []
    for target in target_list:
        for setting in settings:
            points.append(Point(len(points), setting, target))
    return points


def _settings(params: Mapping[str, Sequence[Any]] | Sequence[Mapping[str, Any]] | None) -> list[dict[str, Any]]:
    if params is None:
        return [{}]
    if isinstance(params, Mapping):
        names = list(params)
        values = []
        for name in names:
            choices = params[name]
            if isinstance(choices, (str, bytes)) or not isinstance(choices, Iterable):
                raise TypeError(f"nkisim.sweep: params[{name!r}] must be a list of values, got {choices!r}")
            choices = list(choices)
            if not choices:
                raise ValueError(f"nkisim.sweep: params[{name!r}] is empty")
            values.append(choices)
        return [dict(zip(names, combo)) for combo in itertools.product(*values)]
    settings = []
    for i, setting in enumerate(params):
        if not isinstance(setting, Mapping):
            raise TypeError(f"nkisim.sweep: params[{i}] must be a mapping of name to value, got {setting!r}")
        settings.append(dict(setting))
    return settings
