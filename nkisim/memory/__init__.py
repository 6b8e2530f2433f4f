"""HBM, SBUF and PSUM as real bytes; tensors as views at allocated addresses."""

from nkisim.memory.dtypes import NKI_DTYPES, cast, dtype_name, is_float, is_float8, is_integer, to_dtype
from nkisim.memory.space import ON_CHIP_BUFFERS, Buffer, OnChipMemory, Storage
from nkisim.memory.system import MemorySystem
from nkisim.memory.tensor import DynSlice, Region, Tensor
from nkisim.memory.views import same_bytes

__all__ = [
    "NKI_DTYPES",
    "ON_CHIP_BUFFERS",
    "Buffer",
    "DynSlice",
    "MemorySystem",
    "OnChipMemory",
    "Region",
    "Storage",
    "Tensor",
    "cast",
    "dtype_name",
    "is_float",
    "is_float8",
    "is_integer",
    "same_bytes",
    "to_dtype",
]
