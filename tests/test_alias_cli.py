"""Unmodified NKI kernel files: the opt-in ``nki`` import alias, ``python -m nkisim run``, the pytest plugin."""

from __future__ import annotations

import importlib
import json
import os
import runpy
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import nkisim
import nkisim.nki
import nkisim.nki.isa
import nkisim.nki.language
from nkisim.__main__ import main
from nkisim.compat.alias import NkiAliasError, is_installed

pytest_plugins = ("pytester",)

REPO = Path(__file__).resolve().parents[1]

KERNEL_FILE = """\
import nki
import nki.isa as nisa
import nki.language as nl
from nki.isa.constants import dge_mode
from nki.typing import tensor


@nki.jit
def scaled_exp(a: tensor[64, 32], scale=1.0):
    out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    x = nl.load(a, dtype=nl.float32)
    nl.store(out, nl.exp(nl.multiply(x, scale)))
    return out


def copy_into(a, out):
    tile = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=a, dge_mode=dge_mode.unknown)
    nisa.dma_copy(dst=out, src=tile)


def too_tall(a):
    return nl.ndarray((256, 4), dtype=nl.float32, buffer=nl.sbuf)  # @too-tall
"""


def line_of(text: str, marker: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), start=1) if line.rstrip().endswith(f"# @{marker}"))


@pytest.fixture
def alias():
    """Install the alias for one test and leave no ``nki`` module behind."""
    nkisim.install_nki_alias()
    yield
    nkisim.uninstall_nki_alias()
    assert not any(name == "nki" or name.startswith("nki.") for name in sys.modules)


@pytest.fixture
def kernel_file(tmp_path: Path) -> Path:
    path = tmp_path / "kern.py"
    path.write_text(KERNEL_FILE)
    return path


@pytest.fixture
def fake_real_nki(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory holding a package named ``nki``, first on ``sys.path``."""
    root = tmp_path / "site"
    (root / "nki").mkdir(parents=True)
    (root / "nki" / "__init__.py").write_text("REAL = True\n")
    monkeypatch.syspath_prepend(str(root))
    importlib.invalidate_caches()
    yield root
    sys.modules.pop("nki", None)


# -- the alias ------------------------------------------------------------------------


def test_alias_maps_nki_modules_to_nkisim(alias):
    import nki
    import nki.collectives as ncc
    import nki.isa as nisa
    import nki.language as nl
    from nki.collectives import ReplicaGroup
    from nki.isa.constants import dge_mode, reduce_cmd
    from nki.typing import tensor

    assert nki is nkisim.nki and nl is nkisim.nki.language and nisa is nkisim.nki.isa
    assert ncc is nkisim.nki.collectives and ReplicaGroup is nkisim.nki.collectives.ReplicaGroup
    assert nki.simulate is nkisim.nki.simulate and nki.jit is nkisim.jit
    assert dge_mode is nisa.dge_mode and reduce_cmd is nisa.reduce_cmd
    assert repr(tensor[128, 512]) == "nki.typing.tensor[128, 512]"
    assert nkisim.nki.__spec__.name == "nkisim.nki"  # nkisim's own modules are not renamed
    nkisim.install_nki_alias()  # a second install is a no-op
    assert is_installed()


def test_uninstall_removes_the_alias():
    nkisim.install_nki_alias()
    importlib.import_module("nki.language")
    nkisim.uninstall_nki_alias()
    assert not is_installed() and "nki" not in sys.modules and "nki.language" not in sys.modules
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("nki")
    nkisim.uninstall_nki_alias()  # a second uninstall is a no-op


def test_alias_refuses_to_shadow_a_real_nki(fake_real_nki):
    with pytest.raises(NkiAliasError, match=r"refusing to alias nki to nkisim: a real NKI is importable from .*nki"):
        nkisim.install_nki_alias()
    assert not is_installed()
    assert importlib.import_module("nki").REAL  # the real one is untouched


def test_alias_refuses_when_another_nki_is_already_imported(monkeypatch):
    monkeypatch.setitem(sys.modules, "nki", types.ModuleType("nki"))
    with pytest.raises(NkiAliasError, match="a module named nki is already imported"):
        nkisim.install_nki_alias()
    assert not is_installed()


def test_a_directory_named_nki_without_a_package_is_not_an_installation(tmp_path, monkeypatch, alias):
    nkisim.uninstall_nki_alias()
    (tmp_path / "nki").mkdir()  # e.g. a docs checkout: a namespace package at most
    monkeypatch.syspath_prepend(str(tmp_path))
    nkisim.install_nki_alias()
    assert importlib.import_module("nki") is nkisim.nki


def test_kernel_file_runs_through_runpy_with_the_alias(alias, kernel_file):
    namespace = runpy.run_path(str(kernel_file))
    a = np.linspace(-2, 2, 64 * 32, dtype=np.float32).reshape(64, 32)
    result = nkisim.run(namespace["scaled_exp"], [a], target="trn2")
    np.testing.assert_array_equal(result.outputs, np.exp(a))
    assert [i.opcode for i in result.profile.instructions] == ["dma_copy", "tensor_scalar", "activation", "dma_copy"]
    out = np.zeros((64, 32), np.float32)
    nkisim.nki.simulate(namespace["copy_into"])(a, out)
    np.testing.assert_array_equal(out, a)
    with pytest.raises(nkisim.ShapeError, match=rf"^kern\.py:{line_of(KERNEL_FILE, 'too-tall')}: nl\.ndarray"):
        nkisim.run(namespace["too_tall"], [a])


# -- python -m nkisim run -------------------------------------------------------------


def test_cli_runs_a_kernel_file_in_a_subprocess(kernel_file, tmp_path):
    a = np.linspace(-1, 1, 64 * 32).reshape(64, 32).astype(ml_dtypes.bfloat16)
    np.save(tmp_path / "a.npy", a.astype(np.float32))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [
        sys.executable,
        "-m",
        "nkisim",
        "run",
        f"{kernel_file}:scaled_exp",
        "--inputs",
        f"{tmp_path / 'a.npy'}:bfloat16",
        "--arg",
        "scale=0.5",
        "--target",
        "trn2",
        "--trace",
        str(tmp_path / "trace.json"),
        "--save",
        str(tmp_path / "out.npz"),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "scaled_exp on trn2:" in proc.stdout
    assert "output: float32[64, 32]" in proc.stdout
    assert "target trn2" in proc.stdout and "4 instructions" in proc.stdout
    expected = np.exp(a.astype(np.float32) * np.float32(0.5))
    np.testing.assert_array_equal(np.load(tmp_path / "out.npz")["output"], expected)
    assert json.loads((tmp_path / "trace.json").read_text())["traceEvents"]


def test_cli_saves_inputs_a_kernel_wrote_and_random_shapes(kernel_file, tmp_path, capsys):
    np.save(tmp_path / "a.npy", np.arange(8 * 4, dtype=np.float32).reshape(8, 4))
    save = tmp_path / "out.npz"
    args = ["run", f"{kernel_file}:copy_into", "--inputs", str(tmp_path / "a.npy"), "--shapes", "8x4:bfloat16"]
    assert main([*args, "--save", str(save)]) == 0
    text = capsys.readouterr().out
    assert "input_out: bfloat16[8, 4]" in text and "saved as float32: input_out (bfloat16)" in text
    saved = np.load(save)["input_out"]
    np.testing.assert_array_equal(saved, np.arange(32, dtype=np.float32).reshape(8, 4))
    assert not is_installed()  # the command removes the alias it installed


def test_cli_random_inputs_follow_the_seed(kernel_file, tmp_path):
    outs = []
    for seed in (3, 3, 4):
        save = tmp_path / f"o{len(outs)}.npz"
        assert main(["run", str(kernel_file), "--shapes", "64x32", "--seed", str(seed), "--save", str(save)]) == 0
        outs.append(np.load(save)["output"])
    assert np.array_equal(outs[0], outs[1]) and not np.array_equal(outs[0], outs[2])
    expected = np.exp(np.random.default_rng(3).standard_normal((64, 32)).astype(np.float32))
    np.testing.assert_array_equal(outs[0], expected)


def test_cli_errors(kernel_file, tmp_path, capsys):
    assert main(["run", f"{kernel_file}:missing"]) == 2
    assert "defines no function 'missing'" in capsys.readouterr().err
    assert main(["run", str(tmp_path / "none.py")]) == 2
    assert "no kernel file" in capsys.readouterr().err
    assert main(["run", f"{kernel_file}:scaled_exp", "--shapes", "64xq"]) == 2
    assert "is not like 128x512:float32" in capsys.readouterr().err
    assert main(["run", f"{kernel_file}:too_tall", "--shapes", "4x4"]) == 1
    assert f"kern.py:{line_of(KERNEL_FILE, 'too-tall')}: nl.ndarray" in capsys.readouterr().err
    assert not is_installed()


def test_cli_refuses_with_a_real_nki_installed(kernel_file, fake_real_nki, capsys):
    assert main(["run", f"{kernel_file}:scaled_exp", "--shapes", "64x32"]) == 2
    assert "refusing to alias nki" in capsys.readouterr().err


# -- pytest plugin --------------------------------------------------------------------

TEST_FILE = """
import numpy as np
import nki
import nki.language as nl


@nki.jit
def double(a):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.add(nl.load(a), nl.load(a)))
    return out


def test_double():
    a = np.arange(64, dtype=np.float32).reshape(8, 8)
    np.testing.assert_array_equal(nki.simulate(double)(a), 2 * a)
"""


def test_pytest_plugin_installs_the_alias_for_the_session(pytester):
    pytester.makepyfile(test_uses_nki=textwrap.dedent(TEST_FILE))
    result = pytester.runpytest("-p", "nkisim.compat.pytest_plugin", "--nki-alias", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*'import nki' is aliased to nkisim.nki*"])
    assert not is_installed()  # removed when the session ended


def test_pytest_plugin_is_opt_in(pytester):
    pytester.makepyfile(test_uses_nki=textwrap.dedent(TEST_FILE))
    result = pytester.runpytest("-p", "nkisim.compat.pytest_plugin", "-p", "no:cacheprovider")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*No module named 'nki'*"])


def test_pytest_plugin_refuses_with_a_real_nki(pytester, fake_real_nki):
    pytester.makepyfile(test_uses_nki=textwrap.dedent(TEST_FILE))
    result = pytester.runpytest("-p", "nkisim.compat.pytest_plugin", "--nki-alias", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--nki-alias: refusing to alias nki to nkisim*"])


TORCH_SAMPLE = """\
import torch
import torch_neuronx
from torch_xla.core import xla_model as xm
import neuronxcc.nki.language as nl


@torch_neuronx.nki_jit
def add_rows(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.add(nl.load(a), nl.load(b)))
    return out


def run(a, b):
    device = xm.xla_device()
    result = add_rows(torch.from_numpy(a).to(device), torch.from_numpy(b).to(device))
    xm.mark_step()
    return device, result
"""


def test_torch_samples_run_on_the_cpu_stand_in_for_the_xla_device(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    if importlib.util.find_spec("torch_xla") is not None or importlib.util.find_spec("torch_neuronx") is not None:
        pytest.skip("a real torch_xla or torch_neuronx is installed: the alias leaves it alone")
    (tmp_path / "torch_sample.py").write_text(TORCH_SAMPLE)
    monkeypatch.syspath_prepend(str(tmp_path))
    a = np.arange(128 * 8, dtype=np.float32).reshape(128, 8)
    b = np.full((128, 8), 0.5, np.float32)
    nkisim.install_nki_alias()
    try:
        assert importlib.util.find_spec("torch_xla") is None  # the stand-ins are asked for, never implied
    finally:
        nkisim.uninstall_nki_alias()
    nkisim.install_nki_alias(xla_device=True)
    try:
        sample = importlib.import_module("torch_sample")
        device, result = sample.run(a, b)
        assert device == torch.device("cpu") and isinstance(result, torch.Tensor)
        np.testing.assert_array_equal(result.numpy(), a + b)
    finally:
        nkisim.uninstall_nki_alias()
        sys.modules.pop("torch_sample", None)
    assert not any(name == "torch_neuronx" or name.startswith("torch_xla") for name in sys.modules)
