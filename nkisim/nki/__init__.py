"""NKI for nkisim: ``import nkisim.nki as nki`` in place of ``import nki``.

``nki.jit``, ``nki.language`` and ``nki.isa`` have NKI 0.2's names, argument names
and defaults, so a kernel changes only its imports; ``nki.collectives`` has NKI's
collectives between ranks (docs/collectives.md). ``nki.simulate`` is NKI 0.3's
CPU-simulator entry point. To run kernel files that ``import nki`` unchanged, see
:func:`nkisim.install_nki_alias`.
"""

import numpy as np

from nkisim.frontend.jit import Kernel, jit
from nkisim.frontend.simulate import simulate
from nkisim.memory.dtypes import NKI_DTYPES
from nkisim.nki import collectives, isa, language


class _DtypeType(type):
    """``isinstance`` and ``issubclass`` against :class:`dtype` ask numpy's dtype."""

    def __instancecheck__(cls, obj: object) -> bool:
        return isinstance(obj, np.dtype)

    def __subclasscheck__(cls, sub: type) -> bool:
        return issubclass(sub, np.dtype)


class dtype(metaclass=_DtypeType):
    """NKI's data types by name (``nki.dtype.float8_e4m3``), and their type.

    ``isinstance(nl.bfloat16, nki.dtype)`` holds (each is a numpy dtype here), annotations
    such as ``compute_dtype: nki.dtype`` read as in NKI, and ``import nki.dtype as nt``
    followed by ``nt.float8_e4m3`` (nki-library's tests) finds the data types.
    """


for _name, _value in NKI_DTYPES.items():
    setattr(dtype, _name, _value)

__all__ = ["Kernel", "collectives", "dtype", "isa", "jit", "language", "simulate"]
