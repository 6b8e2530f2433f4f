"""Sweeps: many simulations of one kernel at once, over parameters and generations.

::

    table = nkisim.sweep(matmul_optimized, [((2048, 2048), bf16), ((2048, 2048), bf16)],
                         params={"blocks_m": [1, 2, 4], "blocks_n": [1, 2]}, targets=["trn1", "trn2"],
                         executor=ProcessPoolExecutor())
    table.best(), table.to_csv("sweep.csv"), table.plot("sweep.html")

See docs/sweeps.md.
"""

from nkisim.sweeps.points import Point, expand
from nkisim.sweeps.runner import Task, run_point, sweep
from nkisim.sweeps.table import SweepRecord, SweepTable

__all__ = ["Point", "SweepRecord", "SweepTable", "Task", "expand", "run_point", "sweep"]
