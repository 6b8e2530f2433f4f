"""One BLAS thread while any kernel runs, safe when several threads run kernels at once.

The BLAS thread count is a setting of the whole process. Saving and restoring it
around each run races when runs overlap in different threads (one run restores the
caller's setting while another is still multiplying, and the last to leave may
restore the one-thread limit it found). Here the first run to enter sets the limit
and the last to leave restores what the caller had, under a lock; runs in between
only count themselves in and out.

threadpoolctl (3.8 and newer) lets only one "controlling" Python thread change
OpenBLAS's pthreads pool and silently ignores the others. The thread that sets
the limit here is often not the one that restores it, so each change first
releases that ownership (a public threadpoolctl call) and releases it again after,
leaving the caller's own ``threadpool_limits`` blocks free to act.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Iterator
from typing import Any

import threadpoolctl
from threadpoolctl import ThreadpoolController


@functools.cache
def _controller() -> ThreadpoolController:
    return ThreadpoolController()


def _release_openblas_ownership() -> None:
    """Let any thread change OpenBLAS's thread count next (threadpoolctl >= 3.8 pins it to one thread)."""
    openblas = getattr(threadpoolctl, "OpenBLASController", None)
    release = getattr(openblas, "clear_controlling_thread", None)
    if release is not None:
        release(force=True)


class _BlasLimit:
    """The process's single-BLAS-thread limit, held while at least one run is inside."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._inside = 0
        self._limiter: Any = None

    def enter(self) -> None:
        with self._lock:
            if self._inside == 0:
                _release_openblas_ownership()
                self._limiter = _controller().limit(limits=1, user_api="blas")
                _release_openblas_ownership()
            self._inside += 1

    def leave(self) -> None:
        with self._lock:
            self._inside -= 1
            if self._inside == 0:
                limiter, self._limiter = self._limiter, None
                _release_openblas_ownership()
                limiter.restore_original_limits()
                _release_openblas_ownership()

    @property
    def active_runs(self) -> int:
        """Runs inside the limit now."""
        return self._inside


_LIMIT = _BlasLimit()


@contextlib.contextmanager
def single_threaded_blas() -> Iterator[None]:
    """One BLAS thread while a kernel runs: its matmuls are tile-sized, and multi-threaded
    BLAS spin-waits, which slows tiny products a hundredfold when other processes use the cores.

    Reentrant and thread-safe: the caller's setting comes back when the last
    overlapping run leaves.
    """
    _LIMIT.enter()
    try:
        yield
    finally:
        _LIMIT.leave()
