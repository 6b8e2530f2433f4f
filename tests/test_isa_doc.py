"""docs/isa.md is generated from the registry and stays in sync; every instruction documents its
cost formula and dtypes; every registered signature follows the NKI 0.2 stub."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from typing import Any

import pytest

import nkisim.nki.isa as nisa
from nkisim.isa import REGISTRY
from nkisim.isa.catalog import isa_markdown
from nkisim.isa.spec import InstructionSpec

DOC = Path(__file__).resolve().parents[1] / "docs" / "isa.md"
REGENERATE = "python -m nkisim isa-doc > docs/isa.md"
#: NKI 0.2 (Beta 2) ``nki.isa`` signatures, one ``name(params)`` per line (from the public stub).
B2_SIGNATURES = Path(__file__).parent / "data" / "nki_0_2_isa_signatures.txt"
#: Instructions NKI added after 0.2, with their NKI 0.6 signatures (same format).
LATER_SIGNATURES = Path(__file__).parent / "data" / "nki_0_6_isa_signatures.txt"
DEFAULT_DTYPES = inspect.signature(InstructionSpec).parameters["dtypes"].default

#: Deliberate departures from the B2 stub order: instruction -> (extra parameters..., why).
#: The test checks that each is still there, so a fixed one must be removed from this list.
KNOWN_EXTRA_PARAMETERS = {
    "nc_matmul": ("accumulate", "NKI 0.3's accumulate=, inserted before tile_position as in 0.3"),
    "dma_compute": ("unique_indices", "oob_mode", "NKI 0.3's read-modify-write arguments, after reduce_op"),
    "nc_matmul_mx": ("accumulate", "NKI 0.3's accumulate=, after tile_size as in 0.3"),
    "sendrecv": ("dma_engine", "NKI 0.3's dma_engine=dma_engine.dma, after pipe_id as in 0.3"),
}

#: Defaults NKI 0.3 added to a B2 parameter: (instruction, parameter) -> (default, why).
KNOWN_NEW_DEFAULTS = {
    ("iota", "offset"): (0, "NKI 0.3's iota(dst, pattern, offset=0, ...)"),
    ("dma_compute", "scales"): (None, "NKI 0.3's dma_compute(dst, srcs, reduce_op, scales=None, ...)"),
    ("affine_select", "offset"): (0, "NKI 0.3's affine_select(..., cmp_op=equal, offset=0)"),
}

NAMES = sorted(REGISTRY)


def test_doc_is_generated_from_the_registry() -> None:
    expected = isa_markdown()
    actual = DOC.read_text() if DOC.exists() else ""
    assert actual == expected, f"docs/isa.md is out of date with the registry; regenerate it with `{REGENERATE}`"


def test_doc_has_one_row_per_instruction() -> None:
    rows = [line for line in isa_markdown().splitlines() if line.startswith("| `nisa.")]
    assert [row.split("`")[1] for row in rows] == [f"nisa.{name}" for name in NAMES]
    assert all(row.count(" | ") == 4 for row in rows), "a cell holds an unescaped '|'"


@pytest.mark.parametrize("name", NAMES)
def test_cost_formula_is_documented(name: str) -> None:
    formula = REGISTRY[name].cost_formula
    assert formula, f"the cost function of {name} needs a docstring whose first line is its formula"
    assert "cycles" in formula or " ns" in formula, f"{name}: the formula must name its unit: {formula!r}"


@pytest.mark.parametrize("name", NAMES)
def test_dtypes_are_documented(name: str) -> None:
    dtypes = REGISTRY[name].dtypes.strip()
    assert dtypes, f"{name} has an empty dtypes text"
    assert dtypes != DEFAULT_DTYPES, f"@instruction({name!r}, ..., dtypes=...) must state its operand dtypes"


# -- signatures against the NKI 0.2 stub -----------------------------------------------------


def _b2_signatures(path: Path = B2_SIGNATURES) -> dict[str, list[tuple[str, ast.expr | None]]]:
    """``name -> [(parameter, default expression or None)]`` for each signature of NKI 0.2 (or of ``path``)."""
    lines = [line for line in path.read_text().splitlines() if line and not line.startswith("#")]
    tree = ast.parse("\n".join(f"def {line}: ..." for line in lines))
    signatures = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            params = node.args.posonlyargs + node.args.args
            defaults: list[ast.expr | None] = [None] * (len(params) - len(node.args.defaults))
            defaults += node.args.defaults
            signatures[node.name] = [(p.arg, d) for p, d in zip(params, defaults)]
    return signatures


@pytest.fixture(scope="module")
def b2() -> dict[str, list[tuple[str, ast.expr | None]]]:
    """NKI 0.2's signatures, and NKI 0.6's for the instructions 0.2 does not have."""
    later = _b2_signatures(LATER_SIGNATURES)
    signatures = _b2_signatures()
    assert not set(later) & set(signatures), "a later signature repeats an NKI 0.2 instruction"
    return {**later, **signatures}


def _ours(name: str) -> list[inspect.Parameter]:
    return [p for p in inspect.signature(getattr(nisa, name)).parameters.values() if p.name != "name"]


def _same_default(stub_default: ast.expr, ours: Any) -> bool:
    """A literal default compares by value and type; ``enum.member`` or ``nl.op`` by its last name."""
    try:
        value = ast.literal_eval(stub_default)
    except ValueError:
        return ast.unparse(stub_default).rsplit(".", 1)[-1] == getattr(ours, "name", None)
    return type(value) is type(ours) and value == ours


@pytest.mark.parametrize("name", NAMES)
def test_signature_follows_the_b2_stub(name: str, b2: dict[str, list[tuple[str, ast.expr | None]]]) -> None:
    ours = _ours(name)
    if name not in b2:
        assert ours[0].name == "dst", f"{name} is not in the B2 stub; its first argument should be dst"
        return
    stub = [(p, d) for p, d in b2[name] if p != "name"]
    extra = KNOWN_EXTRA_PARAMETERS.get(name)
    for extra_name in extra[:-1] if extra is not None else ():
        assert extra_name in [p.name for p in ours], f"{name} no longer has {extra_name}; drop it from the known list"
        ours = [p for p in ours if p.name != extra_name]
    assert [p.name for p in ours] == [p for p, _ in stub], f"{name}: parameter order differs from NKI 0.2's"
    for param, (_, default) in zip(ours, stub):
        has_default = param.default is not inspect.Parameter.empty
        if (name, param.name) in KNOWN_NEW_DEFAULTS and default is None:
            assert param.default == KNOWN_NEW_DEFAULTS[name, param.name][0], f"{name}({param.name}): default changed"
            continue
        assert has_default == (default is not None), f"{name}({param.name}): a default in one signature only"
        if default is not None:
            assert _same_default(default, param.default), (
                f"{name}({param.name}={param.default!r}): NKI 0.2's default is {ast.unparse(default)}"
            )


@pytest.mark.parametrize("name", NAMES)
def test_first_operand_is_dst_or_the_stubs_first(name: str, b2: dict[str, list[tuple[str, ast.expr | None]]]) -> None:
    first = next(f for f in REGISTRY[name].operands.model_fields if f != "name")
    documented = b2[name][0][0] if name in b2 else "dst"
    assert first == documented, f"{name}: the operand model starts with {first}, NKI 0.2 with {documented}"
