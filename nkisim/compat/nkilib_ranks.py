"""The nki-library suite's collective tests (``InferenceArgs(collective_ranks=N)``) on N simulated ranks.

In simulation mode the suite runs a kernel once (``nki.cpu_simulate(kernel)[lnc]``) and
writes its outputs into one directory. A collective test gives each rank its inputs
(``PerRankLazyInputGenerator``, or one dict for every rank) and its goldens
(``PerRankLazyGoldenGenerator``, or one set that rank 0 is checked against), and the
suite's validator reads rank ``r``'s outputs from ``output_worker_<r>/`` under the
inference directory, as the hardware run leaves them.

:func:`patch_collective_inference` wraps the suite's ``Orchestrator._run_simulator_inference``:
for ``collective_ranks > 1`` it runs the kernel with ``nkisim.run(kernel[lnc], inputs, ranks=N)``
and writes each rank's outputs where the validator looks; other tests take the suite's path.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from nkisim.frontend.jit import Kernel, run

#: Marks the wrapped method, so a class is patched once.
_PATCHED = "_nkisim_ranks"


def rank_inputs(kernel_under_test: Any, rank: int) -> dict[str, Any]:
    """Rank ``rank``'s kernel arguments, without the suite's ``.must_alias_input`` suffixes."""
    given = kernel_under_test.kernel_input or {}
    inputs = given.for_rank(rank) if hasattr(given, "for_rank") else given
    return {name.removesuffix(".must_alias_input"): value for name, value in inputs.items()}


def rank_goldens(kernel_under_test: Any, rank: int) -> dict[str, Any]:
    """The goldens rank ``rank``'s outputs are named and typed after."""
    golden = kernel_under_test.validation_args.golden_output
    if hasattr(golden, "for_rank"):
        return golden.for_rank(rank)
    if hasattr(golden, "output_ndarray"):  # LazyGoldenGenerator: the names and dtypes, for every rank
        return golden.output_ndarray
    return dict(golden)


def run_ranks(kernel_under_test: Any, target: str | None) -> list[dict[str, np.ndarray]]:
    """Run the test's kernel on its ``collective_ranks`` ranks; each rank's outputs by golden name."""
    if kernel_under_test.validation_args is None:
        raise ValueError("Simulation mode requires validation_args to verify outputs")
    ranks = kernel_under_test.inference_args.collective_ranks
    lnc = kernel_under_test.compiler_input.logical_nc_config
    kernel = kernel_under_test.kernel_func
    kernel = kernel if isinstance(kernel, Kernel) else Kernel(kernel)
    launched = kernel[lnc] if lnc and lnc > 1 else kernel
    result = run(launched, [rank_inputs(kernel_under_test, r) for r in range(ranks)], target=target, ranks=ranks)
    outputs = []
    for rank, returned in enumerate(result.outputs):
        values = [] if returned is None else list(returned) if isinstance(returned, (list, tuple)) else [returned]
        goldens = rank_goldens(kernel_under_test, rank)
        if len(values) != len(goldens):
            raise RuntimeError(
                f"rank {rank}: the kernel returned {len(values)} outputs but the test names {len(goldens)}: "
                f"{list(goldens)}"
            )
        outputs.append(
            {
                name: np.asarray(value, dtype=getattr(golden, "dtype", None))
                for name, value, golden in zip(goldens, values, goldens.values())
            }
        )
    return outputs


def patch_collective_inference(target_from_env: Callable[[], str | None]) -> int:
    """Wrap the suite's ``Orchestrator._run_simulator_inference`` for collective tests; how many were wrapped."""
    patched = 0
    for name, module in list(sys.modules.items()):
        if not name.endswith("utils.test_orchestrator"):
            continue
        cls = getattr(module, "Orchestrator", None)
        original = getattr(cls, "_run_simulator_inference", None) if isinstance(cls, type) else None
        if original is None or getattr(original, _PATCHED, False):
            continue
        cls._run_simulator_inference = _wrap(original, module, target_from_env)  # type: ignore[union-attr]
        patched += 1
    return patched


def _wrap(original: Callable[..., Any], module: Any, target_from_env: Callable[[], str | None]) -> Callable[..., Any]:
    @functools.wraps(original)
    def _run_simulator_inference(self: Any, kernel_under_test: Any) -> str | None:
        if kernel_under_test.inference_args.collective_ranks <= 1:
            return original(self, kernel_under_test)
        os.environ["NKI_NC_VERSION"] = kernel_under_test.compiler_input.platform_target.get_nc_gen()
        try:
            outputs = run_ranks(kernel_under_test, target_from_env())
        except Exception as exc:
            raise module.InferenceException(str(exc)) from exc
        base = os.path.join(self.fs_config.artifacts_output_directory_path, module.INF_ARTIFACT_DIR_NAME)
        for rank, tensors in enumerate(outputs):
            self.__dump_tensors__(os.path.join(base, f"output_worker_{rank}"), tensors, lambda name: name)
        return base

    setattr(_run_simulator_inference, _PATCHED, True)
    return _run_simulator_inference


__all__ = ["patch_collective_inference", "rank_goldens", "rank_inputs", "run_ranks"]
