"""Timeline track names and the order reports show them in.

A track is one in-order queue of the simulated machine: an engine (``Vector``), a DMA
queue (``DMA q3``), or one unit of a replicated engine (``GpSimd 3``, ``TPC 17``). With
several NeuronCores each name carries a core prefix (``core1 DMA q3``).
"""

from __future__ import annotations

#: The NeuronCore's engines in the order reports list them; other kinds of track follow.
ENGINE_ORDER = ("Sync", "Tensor", "Vector", "Scalar", "GpSimd", "DMA")


def split_core(track: str) -> tuple[str, str]:
    """``core1 DMA q3`` -> (``core1 ``, ``DMA q3``); a single core's tracks have no prefix."""
    if track.startswith("core") and " " in track:
        core, rest = track.split(" ", 1)
        return core + " ", rest
    return "", track


def track_order(name: str) -> tuple[int, int, str]:
    """Sort key of a track name without its core prefix: engine order, then queue or unit number."""
    if name.startswith("DMA q"):
        return len(ENGINE_ORDER), int(name[5:]), ""
    if name == "DMA spill":  # the spill queue follows the numbered queues
        return len(ENGINE_ORDER), 1 << 30, ""
    kind, _, unit = name.rpartition(" ")
    if kind and unit.isdigit():
        rank = ENGINE_ORDER.index(kind) if kind in ENGINE_ORDER else len(ENGINE_ORDER) + 1
        return rank, int(unit), kind
    return (ENGINE_ORDER.index(name) if name in ENGINE_ORDER else len(ENGINE_ORDER) + 1), 0, name


def track_key(track: str) -> tuple[str, tuple[int, int, str]]:
    """Sort key of a full track name: by core, then :func:`track_order`."""
    core, rest = split_core(track)
    return core, track_order(rest)
