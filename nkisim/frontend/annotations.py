"""``neuronxcc.nki.typing``'s tensor annotations (below :mod:`nkisim.nki.legacy.typing`, which exports them)."""

from __future__ import annotations

from typing import Any


class TensorAnnotation:
    """``tensor[128, 512]`` or ``tensor[[128, 512], nl.bfloat16]``: a shape (and dtype) for a kernel parameter.

    As an annotation it is not enforced. Passed as an argument to a kernel decorated by
    ``nki.benchmark`` or ``nki.profile``, one with a dtype stands for an input of that shape
    and dtype: the kernel is then simulated on shapes alone, as those decorators ignore
    input values. ``name`` shows in its repr.
    """

    def __init__(self, shape: tuple[Any, ...] = (), name: str = "tensor", dtype: Any = None) -> None:
        self.shape = shape
        self.name = name
        self.dtype = dtype

    def __getitem__(self, key: Any) -> TensorAnnotation:
        if isinstance(key, tuple) and len(key) == 2 and isinstance(key[0], (tuple, list)):
            return TensorAnnotation(tuple(key[0]), self.name, key[1])
        return TensorAnnotation(key if isinstance(key, tuple) else (key,), self.name)

    def __repr__(self) -> str:
        shape = ", ".join(map(str, self.shape))
        if self.dtype is not None:
            return f"{self.name}[[{shape}], {getattr(self.dtype, '__name__', self.dtype)}]"
        return f"{self.name}[{shape}]" if self.shape else self.name
