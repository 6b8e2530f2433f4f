"""NKI for nkisim: ``import nkisim.nki as nki`` in place of ``import nki``.

``nki.jit``, ``nki.language`` and ``nki.isa`` have NKI 0.2's names, argument names
and defaults, so a kernel changes only its imports; ``nki.collectives`` has NKI's
collectives between ranks (docs/collectives.md). ``nki.simulate`` is NKI 0.3's
CPU-simulator entry point. To run kernel files that ``import nki`` unchanged, see
:func:`nkisim.install_nki_alias`.
"""

from numpy import dtype  # the type of every NKI data type (``nl.bfloat16`` is a numpy dtype here)

from nkisim.frontend.jit import Kernel, jit
from nkisim.frontend.simulate import simulate
from nkisim.nki import collectives, isa, language

__all__ = ["Kernel", "collectives", "dtype", "isa", "jit", "language", "simulate"]
