"""Errors of TPC kernels, glue code and Habana custom operators: every one is a :class:`nkisim.KernelError`.

Messages start with the ``file:line`` of the kernel statement (or glue or registration line) that broke
a rule, then name the kernel GUID, the TPC and index-space member where one is involved, and the rule::

    relu.py:21: tpc custom_relu_fwd_f32_gaudi2 [TPC 3, member 3, gaudi2]: v_f32_st_tnsr writes tensor 1 ...
"""

from __future__ import annotations

from nkisim.errors import CapacityError, KernelError, SourceLoc, user_location


class TpcError(KernelError):
    """Base of the TPC errors.

    Attributes:
        kernel: the kernel GUID (or function name).
        tpc: the TPC that ran the member, if one is involved.
        member: the index-space member (a piece of the index space), if one is involved.
    """

    def __init__(
        self,
        rule: str,
        *,
        loc: SourceLoc | None = None,
        kernel: str = "",
        tpc: int | None = None,
        member: int | None = None,
        device: str = "",
    ) -> None:
        where = []
        if tpc is not None:
            where.append(f"TPC {tpc}")
        if member is not None:
            where.append(f"member {member}")
        super().__init__(
            rule,
            loc=loc if loc is not None else user_location(3),
            instruction=f"tpc {kernel}" if kernel else "tpc",
            engine=", ".join(where),
            target=device,
        )
        self.kernel = kernel
        self.tpc = tpc
        self.member = member


class TpcSignatureError(TpcError):
    """The kernel's parameters break the TPC-C rules (tensors first, at most 16 tensors, 32 scalar words)."""


class TpcTypeError(TpcError):
    """An intrinsic got an operand of the wrong vector type, or a tensor of another data type."""


class TpcGlueError(TpcError):
    """The glue code returned an error code, or an index space or access pattern that is not valid."""


class TpcAccessPatternError(TpcError):
    """A member touched tensor elements outside its declared access pattern ``a*i + [start, end]``."""


class TpcRaceError(TpcError):
    """Members depend on each other's memory: one reads or writes what another writes (order dependence)."""


class TpcUnwrittenOutputError(TpcError):
    """Some elements of an output tensor were written by no member."""


class TpcLocalMemoryError(TpcError, CapacityError):
    """Local arrays exceed the scalar- or vector-local memory of the generation."""


class TpcCustomOpError(TpcError):
    """A Habana custom operator descriptor breaks a documented rule of the PyTorch CustomOp API."""
