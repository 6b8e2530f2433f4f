"""The instruction catalogue: docs/isa.md is generated from the registry by this module.

    python -m nkisim isa-doc > docs/isa.md
"""

from __future__ import annotations

from nkisim.hw import load_target
from nkisim.isa.spec import REGISTRY, InstructionSpec

#: The targets of each NeuronCore version, as the docs name them.
_TARGETS_OF_VERSION = {2: "trn1/inf2", 3: "trn2", 4: "trn3"}


def _generations(spec: InstructionSpec) -> str:
    versions = sorted({load_target(name).nc_version for name in ("trn1", "trn2", "trn3")})
    return ", ".join(_TARGETS_OF_VERSION[v] for v in versions if v >= spec.min_nc_version)


def isa_markdown() -> str:
    """The markdown of docs/isa.md: one row per registered instruction."""
    lines = [
        "# Instruction set",
        "",
        "Generated from the instruction registry by `python -m nkisim isa-doc`; a test keeps it in sync.",
        "Costs are in cycles of the instruction's engine; `N` is the number of elements per partition",
        "and `MIN_II` the engine's minimum initiation interval (64 cycles). Every constant is in",
        "`nkisim/hw/generations/*.toml`.",
        "",
        "| instruction | engines | generations | dtypes | cost |",
        "|---|---|---|---|---|",
    ]
    for name in sorted(REGISTRY):
        spec = REGISTRY[name]
        cells = [f"`nisa.{name}`", spec.engine_names, _generations(spec), spec.dtypes, spec.cost_formula]
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(lines) + "\n"
