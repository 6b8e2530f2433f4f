"""``neuronxcc.nki.compiler``: allocation and scheduling hints of the legacy compiler.

nkisim allocates tiles itself (docs/semantics.md), so these hints are accepted and have
no effect: ``ncc.sbuf.mod_alloc(...)`` buffers are ordinary ``nl.sbuf`` tensors.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from nkisim.memory import Buffer


class _Space:
    """``ncc.sbuf`` / ``ncc.psum``: a memory whose allocation functions return the plain buffer."""

    def __init__(self, buffer: Buffer) -> None:
        self.buffer = buffer

    def mod_alloc(self, *args: Any, **kwargs: Any) -> Buffer:
        return self.buffer

    def alloc(self, *args: Any, **kwargs: Any) -> Buffer:
        return self.buffer

    def auto_alloc(self, *args: Any, **kwargs: Any) -> Buffer:
        return self.buffer


sbuf = _Space(Buffer.sbuf)
psum = _Space(Buffer.psum)


def _decorator(func: Callable[..., Any] | None = None, **kwargs: Any) -> Any:
    return func if func is not None else (lambda f: f)


enable_stack_allocator = _decorator
force_auto_alloc = _decorator
skip_middle_end_transformations = _decorator


@contextlib.contextmanager
def allocation_scope() -> Iterator[None]:
    yield


@contextlib.contextmanager
def no_reorder() -> Iterator[None]:
    yield


def multi_buffer(factor: int = 2) -> Any:
    return factor


__all__ = [
    "allocation_scope",
    "enable_stack_allocator",
    "force_auto_alloc",
    "multi_buffer",
    "no_reorder",
    "psum",
    "sbuf",
    "skip_middle_end_transformations",
]
