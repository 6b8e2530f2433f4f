"""The DMA guide's payload-efficiency curve, written independently of nkisim for the timing tests."""

from __future__ import annotations

import itertools
import math


def payload_efficiency(hw, run):
    """The table's points (bytes, efficiency), interpolated in log2(bytes), flat beyond both ends."""
    points = hw.dma.payload_efficiency
    if run <= points[0][0]:
        return points[0][1]
    for (lo, lo_eff), (hi, hi_eff) in itertools.pairwise(points):
        if run <= hi:
            return lo_eff + (hi_eff - lo_eff) * math.log2(run / lo) / math.log2(hi / lo)
    return points[-1][1]
