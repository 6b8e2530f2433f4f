"""The instruction catalogue: docs/isa.md is generated from the registry by this module.

    python -m nkisim isa-doc > docs/isa.md

Each row comes from an :class:`~nkisim.isa.spec.InstructionSpec`: its engines, the
generations that have every capability it ``requires``, its ``dtypes`` text and the first line
of its cost function's docstring. The constants named in the legend are read from the
generation files, so the page changes when they do (and ``tests/test_isa_doc.py`` fails
until it is regenerated).
"""

from __future__ import annotations

from nkisim.hw import HwConfig, load_target
from nkisim.isa.spec import REGISTRY, InstructionSpec, missing_capability

#: The modelled targets, oldest first.
_TARGETS = ("trn1", "trn2", "trn3")


def _target_label(hw: HwConfig) -> str:
    """``trn1/inf2``: a generation's name with its product aliases (not ``gen2``-style ones)."""
    return "/".join([hw.name, *(a for a in hw.aliases if not a.startswith(("gen", "nc-")))])


def _generations(spec: InstructionSpec, targets: list[HwConfig]) -> str:
    """The targets that have every capability ``spec`` requires."""
    return ", ".join(_target_label(hw) for hw in targets if missing_capability(spec, hw) is None)


def _same(values: list[float]) -> str:
    """One number if every target agrees, else ``a/b/c`` in target order."""
    texts = [f"{v:g}" for v in values]
    return texts[0] if len(set(texts)) == 1 else "/".join(texts)


def _legend(targets: list[HwConfig]) -> list[str]:
    names = "/".join(hw.name for hw in targets)
    min_ii = _same([getattr(hw, e).min_ii_cycles for hw in targets for e in ("vector", "scalar", "gpsimd")])
    start = _same([hw.gpsimd.startup_cycles for hw in targets])
    latency = _same([hw.dma.fixed_latency_ns for hw in targets])
    bandwidth = _same([hw.dma.bytes_per_ns for hw in targets])
    return [
        "Costs are per instruction, in cycles of the engine that runs it (PE cycles on the Tensor",
        "Engine, whose clock differs from the others), and in ns for DMA. The cycles become time at",
        "each generation's engine clock. In the formulas:",
        "",
        "- `N`: elements per partition (the free size) of the instruction's data operand;",
        "  `M`, `N` for matmuls: the stationary and moving free sizes.",
        f"- `MIN_II`: the minimum initiation interval of the Vector, Scalar and GpSimd engines ({min_ii} cycles).",
        f"- `GPSIMD_START`: the GpSimd start-up ({start} cycles).",
        f"- `DMA_LAT`: the fixed DMA trigger latency ({latency} ns); `DMA_BW`: the core's aggregate DMA",
        f"  bandwidth ({bandwidth} bytes/ns on {names}).",
        '- "(estimate)": nkisim\'s own formula where NKI publishes none; the others are the',
        '  "Estimated instruction cost" of the NKI 0.1 `nki.isa` reference.',
        "",
        "Every constant is in `nkisim/hw/generations/*.toml`; docs/semantics.md explains the choices.",
        "Dtypes are NKI 0.2's: fp8 is float8_e4m3/float8_e5m2, tf32 tfloat32, `(u)int8` int8 and uint8.",
    ]


def isa_markdown() -> str:
    """The markdown of docs/isa.md: a legend, then one row per registered instruction."""
    targets = [load_target(name) for name in _TARGETS]
    lines = [
        "# Instruction set",
        "",
        "Generated from the instruction registry by `python -m nkisim isa-doc > docs/isa.md`;",
        "`tests/test_isa_doc.py` keeps it in sync.",
        "",
        *_legend(targets),
        "",
        "| instruction | engines | generations | dtypes | cost |",
        "|---|---|---|---|---|",
    ]
    for name in sorted(REGISTRY):
        spec = REGISTRY[name]
        cells = [f"`nisa.{name}`", spec.engine_names, _generations(spec, targets), spec.dtypes, spec.cost_formula]
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(lines) + "\n"
