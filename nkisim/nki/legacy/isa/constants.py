"""``neuronxcc.nki.isa.constants``: the legacy API's ISA enums and constants.

``from neuronxcc.nki.isa.constants import dge_mode`` and ``nisa.constants.engine.tensor``
name the same objects as ``nisa.dge_mode`` and ``nisa.engine``.
"""

from nkisim.hw import Engine as engine  # noqa: N813 - NKI's name
from nkisim.isa.enums import dge_mode, dma_engine, oob_mode, reduce_cmd
from nkisim.nki.isa import nc_version
from nkisim.nki.legacy.language import fp32

__all__ = ["dge_mode", "dma_engine", "engine", "fp32", "nc_version", "oob_mode", "reduce_cmd"]
