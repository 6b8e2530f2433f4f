"""Every public entry point checks what it is given and answers bad input with one clear line.

API misuse is a ``TypeError``/``ValueError`` naming the entry point, the argument and the
rule; what concerns the kernel is a ``KernelError`` at the kernel's own line. The CLI
prints one line starting with ``error:`` and exits non-zero, never a traceback.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import nkisim
import nkisim.nki.isa as nisa
import nkisim.nki.language as nl
from nkisim import KernelError, OperandError, TargetError
from nkisim.__main__ import main

FILE = Path(__file__).name
A = np.ones((4, 4), np.float32)


def copy(a):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a)
    nisa.dma_copy(dst=out, src=t)
    return out


def endless(a):
    return endless(a)  # @recursion


def line_of(marker: str) -> int:
    lines = Path(__file__).read_text().splitlines()
    return next(n for n, text in enumerate(lines, 1) if text.rstrip().endswith(f"# @{marker}"))


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (
            lambda: nkisim.run(42, [A]),
            TypeError,
            r"^nkisim\.run: kernel must be an @nki\.jit kernel or a kernel "
            r"function, got int 42$",
        ),
        (
            lambda: nkisim.run(copy, None),
            TypeError,
            r"^nkisim\.run: inputs must be a list or tuple .* got NoneType "
            r"None \(pass \[\] for a kernel without arguments\)$",
        ),
        (lambda: nkisim.run(copy, {1: A}), TypeError, r"inputs given as a mapping must be keyed by argument name"),
        (
            lambda: nkisim.run(copy, [A], target=2),
            TypeError,
            r"^nkisim\.run: target must be a generation name such "
            r"as 'trn2', the path of a \.toml file or an HwConfig, got int 2$",
        ),
        (
            lambda: nkisim.profile(copy, [((-4, 4), np.float32)]),
            ValueError,
            r"^nkisim\.profile: input 0 .*: the "
            r"shape \(-4, 4\) has a negative size$",
        ),
        (
            lambda: nkisim.profile(copy, [((4, "x"), np.float32)]),
            TypeError,
            r"^nkisim\.profile: input 0 .*: a shape "
            r"holds integers, got 'x'$",
        ),
        (lambda: nkisim.profile(copy, {"a": ((4, 2.5), np.float32)}), TypeError, r"input 'a' .*got 2\.5$"),
        (lambda: nkisim.run(copy, [A], check="loud"), ValueError, r"check must be one of 'strict', 'warn', 'off'"),
    ],
)
def test_api_misuse_names_the_argument_and_the_rule(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_an_unknown_target_is_a_target_error_at_the_callers_line():
    with pytest.raises(TargetError, match=rf"^{FILE}:\d+: unknown target 'trn9'; choose one of .*trn1, trn2, trn3"):
        nkisim.run(copy, [A], target="trn9")


def test_an_input_of_no_nki_dtype_is_an_operand_error():
    with pytest.raises(OperandError, match=r"input 'a' object is not an NKI data type \(supported: bool_, int8"):
        nkisim.run(copy, [np.array([object()] * 4)])
    with pytest.raises(OperandError, match=r"input 'a' 'floaty' is not an NKI data type"):
        nkisim.profile(copy, [((4, 4), "floaty")])


def test_endless_recursion_in_a_kernel_is_a_kernel_error_at_its_line():
    with pytest.raises(KernelError, match=rf"^{FILE}:{line_of('recursion')}: the kernel recursed past Python's limit"):
        nkisim.run(endless, [A])


# -- the CLI -------------------------------------------------------------------------------------

GOOD = """\
import nki
import nki.language as nl
import nki.isa as nisa


def k(a):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a)
    nisa.dma_copy(dst=out, src=t)
    return out
"""


@pytest.fixture
def files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "good.py").write_text(GOOD)
    (tmp_path / "bad.py").write_text("import nki\n\n\ndef k(a):\n    return a +\n")
    (tmp_path / "bad.npy").write_text("not an array\n")
    return tmp_path


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "bad.py:k", "--shapes", "4x4:float32"], r"error: bad\.py:5: syntax error in the kernel file"),
        (["run", "good.py:k", "--inputs", "bad.npy"], r"error: cannot read input file 'bad\.npy' as \.npy or \.npz"),
        (["run", "good.py:k", "--inputs", "missing.npy"], r"error: no input file 'missing\.npy'"),
        (["run", "good.py:k", "--shapes", "4xq:float32"], r"error: --shapes '4xq:float32' is not like 128x512"),
        (["run", "good.py:nothere", "--shapes", "4x4:float32"], r"error: good\.py defines no function 'nothere'"),
        (
            ["profile", "good.py:k", "--shapes", "100000x100000x100000:float32"],
            r"error: --shapes '100000x100000x100000:float32' needs 4,000,000,000,000,000 bytes, more than the "
            r"target's 17,179,869,184 bytes of HBM",
        ),
    ],
)
def test_the_cli_answers_bad_input_with_one_line(files, capsys, argv, message):
    assert main(argv) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert re.match(message, err[0]), err[0]


def test_the_cli_runs_a_good_kernel(files, capsys):
    assert main(["run", "good.py:k", "--shapes", "4x4:float32"]) == 0
    assert "k on target trn1" in capsys.readouterr().out


# -- the framework wrappers ------------------------------------------------------------------------


def test_the_framework_wrappers_check_their_arguments():
    torch = pytest.importorskip("torch")
    del torch
    with pytest.raises(TypeError, match=r"^nkisim\.torch\.custom_op: kernel must be an @nki\.jit kernel .* got int 42"):
        nkisim.torch.custom_op("ns::op", 42)
    with pytest.raises(TypeError, match=r"^nkisim\.torch\.custom_op: the operator name must be a string"):
        nkisim.torch.custom_op(7, copy)
    with pytest.raises(TypeError, match=r"^nkisim\.torch\.custom_op: target must be a generation name"):
        nkisim.torch.custom_op("ns::op", copy, target=1)


def test_the_jax_wrapper_checks_its_arguments():
    jnp = pytest.importorskip("jax.numpy")
    with pytest.raises(TypeError, match=r"^nkisim\.jax\.call: kernel must be an @nki\.jit kernel .* got int 42"):
        nkisim.jax.call(42, jnp.ones((4, 4)))
    with pytest.raises(TypeError, match=r"^nkisim\.jax\.call: target must be a generation name .* got int 3"):
        nkisim.jax.call(copy, jnp.ones((4, 4)), target=3)


def test_a_pair_that_names_no_dtype_is_an_ordinary_argument():
    seen = []

    def kernel(a, how):
        seen.append(how)
        return copy(a)

    np.testing.assert_array_equal(nkisim.run(kernel, [A, (("select", 3), "dynamic")]).outputs, A)
    assert seen == [(("select", 3), "dynamic")]
