"""The nki-library compatibility plugin (``-p nkisim.compat.nkilib``), its shims, and the NKI 0.3 fixes it needed.

None of this needs an nki-library checkout. Expected values are written here: bf16
round-to-nearest-even as a bit formula, fp8/fp4 encodings and the x4 packing by hand.
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
import textwrap
import types
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nkisim
import nkisim.nki as nki_pkg
import nkisim.nki.isa as nisa
import nkisim.nki.language as nl
from nkisim import OperandError
from nkisim.compat import nkilib as nkilib_compat
from nkisim.compat import nkilib_shims
from nkisim.compat.nkilib_shims import static_cast

FAST = settings(max_examples=15, deadline=None)
TARGETS = ("trn1", "trn2", "trn3")

pytest_plugins = ["pytester"]


@pytest.fixture
def compat():
    """Activate the plugin's modules for one test and leave nothing behind."""
    nkilib_compat.activate()
    yield
    nkilib_compat.deactivate()
    leftovers = [
        n for n in sys.modules if n.split(".")[0] in ("nki", "nki_cpu_simulator", "neuron_dtypes", "neuronxcc")
    ]
    assert not leftovers


# -- neuron_dtypes.static_cast ------------------------------------------------------------


def ref_bf16_bits(x: np.ndarray) -> np.ndarray:
    """bfloat16 bits of float32 values by round-to-nearest-even on the bit pattern (finite inputs)."""
    bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


@FAST
@given(
    st.lists(st.floats(-3.0e38, 3.0e38, allow_nan=False).map(lambda v: float(np.float32(v))), min_size=1, max_size=64)
)
def test_static_cast_to_bf16_rounds_to_nearest_even(values):
    x = np.array(values, dtype=np.float32)
    out = static_cast(x, nl.bfloat16)
    assert out.dtype == np.dtype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(out.view(np.uint16), ref_bf16_bits(x))


@FAST
@given(
    st.sampled_from(["bfloat16", "float8_e4m3fn", "float8_e4m3", "float8_e5m2"]),
    st.sampled_from([(7,), (3, 5), (2, 3, 4), ()]),
    st.integers(0, 2**32 - 1),
    st.booleans(),
)
def test_static_cast_of_any_float32_bits_matches_ml_dtypes(name, shape, seed, transposed):
    # any bit pattern: NaNs, infinities, subnormals and values past the narrow type's range included
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 2**32, size=shape, dtype=np.uint64).astype(np.uint32).view(np.float32)
    if transposed:
        x = x.T  # a Fortran-ordered view for two or more dims
    target = np.dtype(getattr(ml_dtypes, name))
    with np.errstate(all="ignore"):
        expected = x.astype(target)
    out = static_cast(x, target)
    assert out.dtype == target and out.shape == expected.shape
    codes = np.uint8 if target.itemsize == 1 else np.uint16
    np.testing.assert_array_equal(out.view(codes), expected.view(codes))


def test_static_cast_bf16_ties_go_to_even():
    # 1 + 2^-8 is halfway between bf16 1.0 and 1 + 2^-7: even mantissa (1.0) wins; 1 + 3*2^-8 rounds up.
    x = np.array([1 + 2**-8, 1 + 3 * 2**-8, -(1 + 2**-8)], dtype=np.float32)
    np.testing.assert_array_equal(static_cast(x, "bfloat16").astype(np.float32), [1.0, 1 + 2**-6, -1.0])


def test_static_cast_fp8_e4m3fn_ties_go_to_even():
    # 3 mantissa bits: 1 + 1/16 lies between 1.0 and 1.125 (-> 1.0), 1 + 3/16 between 1.125 and 1.25 (-> 1.25)
    x = np.array([1.0625, 1.1875, 448.0, -0.5], dtype=np.float32)
    out = static_cast(x, nl.float8_e4m3fn)
    np.testing.assert_array_equal(out.astype(np.float32), [1.0, 1.25, 448.0, -0.5])
    np.testing.assert_array_equal(out.view(np.uint8), [0x38, 0x3A, 0x7E, 0xB0])


def test_static_cast_packs_fp8_x4_lsb_first_and_unpacks():
    x = np.array([[1.0, 2.0, -1.0, 0.5], [0.0, 0.0, 0.0, 1.0]], dtype=np.float32)
    packed = static_cast(x, nl.float8_e4m3fn_x4)
    assert packed.shape == (2, 1) and packed.itemsize == 4
    # e4m3fn: 1.0 = 0x38, 2.0 = 0x40, -1.0 = 0xB8, 0.5 = 0x30; value i in byte i from the low end
    np.testing.assert_array_equal(packed.view(np.uint32)[:, 0], [0x30B84038, 0x38000000])
    np.testing.assert_array_equal(static_cast(packed, np.float32), x)


def test_static_cast_packs_fp4_x4_by_nibbles():
    x = np.array([[1.0, 2.0, -1.0, 0.5]], dtype=np.float32)
    packed = static_cast(x, "float4_e2m1fn_x4")
    # e2m1: 1.0 = 0b0010, 2.0 = 0b0100, -1.0 = 0b1010, 0.5 = 0b0001
    assert packed.itemsize == 2 and int(packed.view(np.uint16)[0, 0]) == 0x1A42
    np.testing.assert_array_equal(static_cast(packed, np.float32), x)


def test_static_cast_to_x4_needs_a_last_axis_divisible_by_4():
    with pytest.raises(ValueError, match="divisible by 4"):
        static_cast(np.ones((2, 6), np.float32), nl.float8_e5m2_x4)


def test_static_cast_leaves_its_input_unchanged_and_copies():
    x = np.arange(8, dtype=np.int32)
    out = static_cast(x, np.int32)
    out[0] = 99
    assert x[0] == 0


def test_dtype_helpers():
    assert nkilib_shims.sizeinbytes(nl.bfloat16) == 2
    assert nkilib_shims.sizeinbytes(nl.float8_e4m3fn_x4) == 4
    assert nkilib_shims.sizeinbytes(np.float32) == 4
    assert nkilib_shims.is_float_type(nl.bfloat16) and nkilib_shims.is_float_type("float8_e5m2")
    assert nkilib_shims.is_float_type(nl.float4_e2m1fn_x4)
    assert not nkilib_shims.is_float_type(np.int32)
    assert float(nkilib_shims.finfo(nl.bfloat16).max) == (2 - 2**-7) * 2.0**127
    assert float(nkilib_shims.finfo(nl.float8_e4m3fn).max) == 448.0


def test_lock_status_round_trips_exit_codes():
    for status in nkilib_shims.LockStatus:
        assert nkilib_shims.LockStatus.from_exit_code(status.exit_code) is status
    assert nkilib_shims.LockStatus.from_exit_code(1234) is nkilib_shims.LockStatus.ERROR
    result = nkilib_shims.LockResult.from_json('{"status": "ALLOCATED", "cores": [0, 1], "extra": 1}')
    assert result.status is nkilib_shims.LockStatus.ALLOCATED and result.cores == [0, 1]
    with pytest.raises(RuntimeError, match="not available"):
        nkilib_shims.analyze_trace("x")


# -- module aliases ---------------------------------------------------------------------


def test_simulator_modules_are_nkisims_own(compat):
    import neuron_dtypes
    import neuronxcc.nki.typing as nt
    import nki
    import nki.isa
    import nki.isa.constants
    import nki.typing
    import nki_cpu_simulator.nki.isa as sim_isa
    import nki_cpu_simulator.nki.isa.constants as sim_constants
    import nki_cpu_simulator.nki.language as sim_nl
    import nki_cpu_simulator.nki.language.dtypes as sim_dtypes
    from neuronxcc.starfish.support.dtype import static_cast as starfish_cast
    from nki_cpu_simulator import nki as sim_nki

    assert sim_nki is nki is nki_pkg
    assert sim_isa is nki.isa is nisa and sim_nl is nl
    assert sim_constants is nki.isa.constants
    assert sim_constants.dge_mode is nisa.dge_mode and sim_constants.dma_engine is nisa.dma_engine
    assert nt is nki.typing
    assert sim_dtypes.bfloat16 is nl.bfloat16
    assert neuron_dtypes.static_cast is starfish_cast is static_cast
    assert nki.cpu_simulate is nkilib_compat.cpu_simulate
    assert importlib.import_module("nki_cpu_simulator.nki.compiler") is importlib.import_module(
        "nki_cpu_simulator.nki.compiler"
    )


def test_deactivate_removes_cpu_simulate(compat):
    nkilib_compat.deactivate()
    assert not hasattr(nki_pkg, "cpu_simulate")
    nkilib_compat.activate()


def test_refuses_to_shadow_an_installed_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    root = tmp_path / "site"
    (root / "neuron_dtypes").mkdir(parents=True)
    (root / "neuron_dtypes" / "__init__.py").write_text("REAL = True\n")
    monkeypatch.syspath_prepend(str(root))
    importlib.invalidate_caches()
    with pytest.raises(nkilib_compat.CompatError, match="refusing to shadow the installed neuron_dtypes"):
        nkilib_compat.activate()
    assert not nkilib_compat.is_active() and not nkisim.compat.alias.is_installed()


def test_patch_orchestrator_gives_a_compiled_kernel_default(monkeypatch: pytest.MonkeyPatch):
    module = types.ModuleType("fake_suite.utils.test_orchestrator")

    class Orchestrator:
        pass

    module.Orchestrator = Orchestrator
    monkeypatch.setitem(sys.modules, module.__name__, module)
    assert nkilib_compat.patch_orchestrator() == 1
    assert Orchestrator()._compiled_kernel is None
    assert nkilib_compat.patch_orchestrator() == 0


def gather_two(x, group):
    import nkisim.nki.collectives as ncc

    src = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    dst = nl.ndarray((2 * x.shape[0], x.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=src, src=x)
    ncc.all_gather(srcs=[src], dsts=[dst], replica_group=group, collective_dim=0)
    return dst


def test_collective_tests_write_each_ranks_outputs_where_the_validator_reads(tmp_path: Path, monkeypatch):
    """A stand-in for the suite's orchestrator: its simulator path for collective_ranks > 1 is wrapped."""
    from nkisim.compat.nkilib_ranks import patch_collective_inference
    from nkisim.nki.collectives import ReplicaGroup

    module = types.ModuleType("fake_ranks_suite.utils.test_orchestrator")
    module.INF_ARTIFACT_DIR_NAME = "infer"
    module.InferenceException = type("InferenceException", (Exception,), {})
    dumped: dict[str, dict[str, np.ndarray]] = {}

    class Orchestrator:
        fs_config = types.SimpleNamespace(artifacts_output_directory_path=str(tmp_path))

        def _run_simulator_inference(self, kernel_under_test):
            return "single rank"

        def __dump_tensors__(self, directory, tensors, name_fn):
            dumped[directory] = {name_fn(k): v for k, v in tensors.items()}

    class PerRank:
        def __init__(self, make):
            self.make = make

        def for_rank(self, rank_id):
            return self.make(rank_id)

    module.Orchestrator = Orchestrator
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setenv("NKI_NC_VERSION", "gen3")  # the wrapper sets it, as the suite's simulator path does
    assert patch_collective_inference(lambda: "trn2") == 1
    assert patch_collective_inference(lambda: "trn2") == 0
    xs = [np.full((2, 3), r, np.float32) for r in range(2)]
    group = ReplicaGroup([[0, 1]])

    def test_args(ranks):
        return types.SimpleNamespace(
            kernel_func=gather_two,
            kernel_input=PerRank(lambda rank_id: {"x.must_alias_input": xs[rank_id], "group": group}),
            inference_args=types.SimpleNamespace(collective_ranks=ranks),
            compiler_input=types.SimpleNamespace(
                logical_nc_config=1, platform_target=types.SimpleNamespace(get_nc_gen=lambda: "gen3")
            ),
            validation_args=types.SimpleNamespace(
                golden_output=PerRank(lambda rank_id: {"out": np.zeros((4, 3), np.float32)})
            ),
        )

    assert Orchestrator()._run_simulator_inference(test_args(1)) == "single rank"
    base = Orchestrator()._run_simulator_inference(test_args(2))
    assert base == str(tmp_path / "infer")
    for rank in range(2):
        np.testing.assert_array_equal(dumped[f"{base}/output_worker_{rank}"]["out"], np.concatenate(xs))


# -- nki.cpu_simulate -------------------------------------------------------------------


def double(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=2.0)
    nisa.dma_copy(dst=out, src=t)
    return out


def which_target(x):
    out = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.shared_hbm)
    t = nl.full((1, 1), nisa.get_nc_version().value, dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=out, src=t)
    return out


@pytest.mark.parametrize(("nc", "gen"), [("gen2", 2), ("gen3", 3), ("gen4", 4)])
def test_cpu_simulate_follows_nki_nc_version(nc: str, gen: int, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("NKI_NC_VERSION", nc)
    out = nkilib_compat.cpu_simulate(which_target)[1](x=np.zeros((1, 1), np.float32))
    assert int(out[0, 0]) == gen


def test_cpu_simulate_lnc2_leaves_inputs_unchanged(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("NKI_NC_VERSION", "gen3")
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    before = x.copy()
    out = nkilib_compat.cpu_simulate(double)[2](x=x)
    np.testing.assert_array_equal(out, before * 2)
    np.testing.assert_array_equal(x, before)


def test_bad_nc_version_is_named(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("NKI_NC_VERSION", "gen9")
    with pytest.raises(ValueError, match="NKI_NC_VERSION='gen9'"):
        nkilib_compat.target_from_env()


# -- the plugin in a pytest run ---------------------------------------------------------


def test_plugin_installs_before_conftest_and_cleans_up(pytester: pytest.Pytester):
    pytester.makeconftest(
        """
        import nki.isa as nisa  # a suite's conftest imports nki at module level
        import neuron_dtypes
        """
    )
    pytester.makepyfile(
        textwrap.dedent(
            """
            import numpy as np
            import nki
            import nki_cpu_simulator.nki.isa as sim_isa

            def test_identity():
                assert sim_isa is nki.isa
                assert callable(nki.cpu_simulate)
            """
        )
    )
    result = pytester.runpytest_subprocess("-p", "nkisim.compat.nkilib", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*nkisim.compat.nkilib*"])


def test_a_failure_whose_traceback_pytest_cannot_format_is_reported_as_a_failure(pytester: pytest.Pytester):
    """pytest's report of a failure raised TypeError (a traceback entry without a line number, as pytest-timeout's
    signal can leave on Python 3.11); in an xdist worker that ended the whole suite run. The plugin reports the
    test as failed, with the exception's message, and the run goes on."""
    pytester.makeconftest(
        textwrap.dedent(
            """
            import pytest

            @pytest.hookimpl(tryfirst=True)
            def pytest_runtest_makereport(item, call):
                if call.excinfo is not None:
                    raise TypeError("unsupported operand type(s) for -: 'NoneType' and 'int'")
            """
        )
    )
    pytester.makepyfile(
        textwrap.dedent(
            """
            def test_fails():
                raise RuntimeError("Timeout (>150.0s) from pytest-timeout.")

            def test_after():
                pass
            """
        )
    )
    result = pytester.runpytest_subprocess("-p", "nkisim.compat.nkilib", "-p", "no:cacheprovider", "-rf")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*RuntimeError: Timeout (>150.0s) from pytest-timeout.*could not format*"])


def test_nki_dtype_is_the_type_of_the_data_types_and_names_them(pytester: pytest.Pytester):
    """As in the suite's simulation setup, ``nki.dtype`` is in sys.modules; the import reads the attribute."""
    pytester.makeconftest("import sys, types\nsys.modules['nki.dtype'] = types.ModuleType('nki.dtype')\n")
    pytester.makepyfile(
        textwrap.dedent(
            """
            import ml_dtypes
            import numpy as np
            import nki
            import nki.dtype as nt
            import nki.language as nl

            def test_dtype():
                assert nt.float8_e4m3 == nl.float8_e4m3 and nt.bfloat16 == np.dtype(ml_dtypes.bfloat16)
                assert isinstance(nl.float32, nki.dtype) and not isinstance("float32", nki.dtype)
            """
        )
    )
    result = pytester.runpytest_subprocess("-p", "nkisim.compat.nkilib", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


def test_plugin_skips_trace_only_tests(pytester: pytest.Pytester):
    pytester.makeini("[pytest]\nmarkers =\n    trace_only: x\n")
    pytester.makepyfile("import pytest\n\n@pytest.mark.trace_only\ndef test_t():\n    raise AssertionError\n")
    result = pytester.runpytest_subprocess("-p", "nkisim.compat.nkilib", "-p", "no:cacheprovider", "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*trace_only test*"])


_OUTPUT_HELPER = """
import os
from pathlib import Path

def resolve_base_output_directory(config):
    return str(Path(config.rootpath) / "outputs")

def construct_test_output_directory_name():
    return "out-" + os.environ["PYTEST_CURRENT_TEST"].split("::")[-1].split(" ")[0]
"""

_WRITING_TESTS = """
import os
from pathlib import Path

def _write(name):
    path = Path("outputs") / f"out-{name}"
    path.mkdir(parents=True)
    (path / "golden.bin").write_bytes(b"x" * 64)

def test_passes():
    _write("test_passes")

def test_fails():
    _write("test_fails")
    raise AssertionError("wrong result")
"""


@pytest.mark.parametrize(("option", "kept"), [("artifacts", {"out-test_fails"}), ("all-artifacts", set())])
def test_pruning_removes_passing_outputs_or_every_output(pytester: pytest.Pytester, option: str, kept: set[str]):
    """The suite's own helper names each test's directory; a stand-in plays it here."""
    pytester.mkpydir("test")
    pytester.mkpydir("test/utils")
    (pytester.path / "test" / "utils" / "feature_flag_helper.py").write_text(_OUTPUT_HELPER)
    pytester.makepyfile(test_outputs=_WRITING_TESTS)
    result = pytester.runpytest_subprocess(
        "-p", "nkisim.compat.nkilib", "-p", "no:cacheprovider", f"--nkisim-prune-{option}", "test_outputs.py"
    )
    result.assert_outcomes(passed=1, failed=1)
    assert {p.name for p in (pytester.path / "outputs").iterdir()} == kept


_CRASHING_TEST = """
import os
from pathlib import Path

def test_killed():
    path = Path("outputs") / "out-test_killed"
    path.mkdir(parents=True)
    (path / "golden.bin").write_bytes(b"x" * 64)
    os._exit(9)  # as the OOM killer ends a worker: no teardown
"""


@pytest.mark.parametrize(("option", "kept"), [("artifacts", {"out-test_killed"}), ("all-artifacts", set())])
def test_a_killed_workers_test_outputs_are_removed_with_all_artifacts(
    pytester: pytest.Pytester, option: str, kept: set[str]
):
    pytest.importorskip("xdist")  # a worker to lose: the suite's runs use pytest-xdist (benchmarks/nkilib_suite.py)
    pytester.mkpydir("test")
    pytester.mkpydir("test/utils")
    (pytester.path / "test" / "utils" / "feature_flag_helper.py").write_text(_OUTPUT_HELPER)
    pytester.makepyfile(test_crash=_CRASHING_TEST)
    result = pytester.runpytest_subprocess(
        "-p", "nkisim.compat.nkilib", "-p", "no:cacheprovider", "-n", "1", f"--nkisim-prune-{option}", "test_crash.py"
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*crashed while running*test_killed*"])
    assert {p.name for p in (pytester.path / "outputs").iterdir()} == kept


# -- NKI 0.3 behaviour nkisim gained for the suite --------------------------------------


@pytest.mark.parametrize("target", TARGETS)
def test_nc_versions_are_ordered(target: str):
    assert nisa.nc_version.gen2 < nisa.nc_version.gen3 <= nisa.nc_version.gen3 < nisa.nc_version.gen4
    assert max(nisa.nc_version) is nisa.nc_version.gen4

    def k(x):
        ok = nisa.get_nc_version() >= nisa.nc_version.gen3
        out = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=nl.full((1, 1), int(ok), dtype=nl.int32, buffer=nl.sbuf))
        return out

    out = nkisim.run(k, [np.zeros((1, 1), np.float32)], target=target).outputs
    assert int(out[0, 0]) == (target != "trn1")


@FAST
@given(st.integers(1, 64), st.integers(1, 16), st.integers(-8, 8))
def test_iota_offset_defaults_to_zero(parts: int, n: int, multiplier: int):
    def k(x):
        t = nl.ndarray((parts, n), dtype=nl.int32, buffer=nl.sbuf)
        nisa.iota(dst=t, pattern=[[1, n]], channel_multiplier=multiplier)
        out = nl.ndarray((parts, n), dtype=nl.int32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t)
        return out

    out = nkisim.run(k, [np.zeros((1, 1), np.float32)], target="trn2").outputs
    expected = np.arange(parts)[:, None] * multiplier + np.arange(n)[None, :]
    np.testing.assert_array_equal(out, expected)


def test_affine_select_offset_defaults_to_zero():
    n = 8

    def k(x):
        t = nl.ndarray((n, n), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        nisa.affine_select(dst=t, pattern=[[1, n]], channel_multiplier=-1, on_true_tile=t, on_false_value=0.0)
        out = nl.ndarray((n, n), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t)
        return out

    x = np.arange(n * n, dtype=np.float32).reshape(n, n) + 1
    out = nkisim.run(k, [x], target="trn2").outputs
    # predicate: 0 + (-1) * p + f == 0 keeps the diagonal (cmp_op equal)
    np.testing.assert_array_equal(out, np.diag(np.diag(x)))


def test_shared_constant_loads_a_npy_file(tmp_path: Path):
    path = tmp_path / "c.npy"
    values = np.arange(6, dtype=np.float32).reshape(2, 3) * 0.5
    np.save(path, values)

    def k(x):
        c = nl.shared_constant(str(path))
        t = nl.ndarray((2, 3), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=c)
        out = nl.ndarray((2, 3), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t)
        return out

    np.testing.assert_array_equal(nkisim.run(k, [np.zeros((1, 1), np.float32)]).outputs, values)

    def bad(x):
        nl.shared_constant(str(tmp_path / "missing.npy"))

    with pytest.raises(OperandError, match=r"cannot load .*missing\.npy"):
        nkisim.run(bad, [np.zeros((1, 1), np.float32)])


@FAST
@given(st.integers(0, 3), st.sampled_from(["trn2", "trn3"]))
def test_scalar_offset_moves_by_the_reshaped_dims_stride(index: int, target: str):
    # an HBM (8, 4) input reshaped to (4, 2, 4): indirect dim 0 steps by 2 * 4 elements, not by 4
    def k(x, idx):
        i = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=i, src=idx)
        view = x.reshape((4, 2, 4)).ap(pattern=[[4, 2], [1, 4]], offset=0, scalar_offset=i, indirect_dim=0)
        t = nl.ndarray((2, 4), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=view)
        out = nl.ndarray((2, 4), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t)
        return out

    x = np.arange(32, dtype=np.float32).reshape(8, 4)
    out = nkisim.run(k, [x, np.array([[index]], np.int32)], target=target).outputs
    np.testing.assert_array_equal(out, x[2 * index : 2 * index + 2])


def test_nki_object_and_annotations():
    class Config(nl.NKIObject):
        pass

    c = Config(a=1, b="x")
    assert (c.a, c.b) == (1, "x")

    @dataclasses.dataclass
    class Dims(nl.NKIObject):
        h: int
        w: int
        k: int = 4
        note = None  # a plain class attribute, set by keyword as NKI does

    d = Dims(2, note="n")  # w not given: left unset, as NKI translates the object's __dict__
    assert vars(d) == {"h": 2, "note": "n", "k": 4}
    with pytest.raises(TypeError, match="at most 3 positional"):
        Dims(1, 2, 3, 4)

    class Own(nl.NKIObject):
        def __init__(self, v):
            self.v = v * 2

    assert Own(3).v == 6
    assert isinstance(nl.bfloat16, nki_pkg.dtype)
    assert [m.name for m in nisa.dma_engine] == ["dma", "gpsimd_dma"]


@pytest.mark.parametrize("target", TARGETS)
def test_integer_indexed_hbm_element_is_a_view(target: str):
    # sink[b, 0] style: an all-integer index of an HBM tensor is read and written in place
    def k(x):
        out = nl.ndarray((4, 1), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=x)
        nisa.dma_copy(dst=out[2, 0], src=x[1, 0])
        return out

    x = np.array([[1.0], [2.0], [3.0], [4.0]], dtype=np.float32)
    out = nkisim.run(k, [x], target=target).outputs
    np.testing.assert_array_equal(out, [[1.0], [2.0], [2.0], [4.0]])


@pytest.mark.parametrize("target", TARGETS)
def test_explicitly_placed_tiles_may_alias(target: str):
    # kernels that manage addresses rotate buffers through the same bytes while older handles still exist
    def k():
        a = nl.ndarray((128, 4), nl.float32, address=(0, 512))
        b = nl.ndarray((128, 4), nl.float32, address=(0, 512))
        nisa.memset(dst=b, value=3.0)
        out = nl.ndarray((128, 4), nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=a)  # a names b's bytes
        return out

    np.testing.assert_array_equal(nkisim.run(k, target=target).outputs, np.full((128, 4), 3.0, np.float32))


@pytest.mark.parametrize("target", TARGETS)
def test_shared_identity_matrix_is_an_sbuf_tile(target: str):
    def k():
        eye = nl.shared_identity_matrix(8, dtype=nl.bfloat16)
        assert eye.buffer == nl.sbuf and tuple(eye.shape) == (8, 8)
        into = nl.ndarray((8, 8), nl.float32, buffer=nl.sbuf)
        assert nl.shared_identity_matrix(8, dst=into) is into
        out = nl.ndarray((2, 8, 8), nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out[0], src=into)
        t = nl.ndarray((8, 8), nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=t, src=eye)
        nisa.dma_copy(dst=out[1], src=t)
        return out

    out = nkisim.run(k, target=target).outputs
    np.testing.assert_array_equal(out, np.stack([np.eye(8), np.eye(8)]).astype(np.float32))

    def bad():
        nl.shared_identity_matrix(8, dst=nl.ndarray((8, 4), nl.float32, buffer=nl.sbuf))

    with pytest.raises(nkisim.ShapeError, match=r"dst must be an SBUF \[8, 8\] tile"):
        nkisim.run(bad, target=target)


def test_nki_dtype_checks_against_numpy_dtypes_in_process():
    import nkisim.nki as nki
    import nkisim.nki.language as nl

    assert isinstance(nl.bfloat16, nki.dtype) and issubclass(type(nl.float32), nki.dtype)
    assert not isinstance(np.float32, nki.dtype) and not issubclass(int, nki.dtype)
    assert nki.dtype.float8_e4m3 == nl.float8_e4m3 and nki.dtype.int32 == np.dtype(np.int32)
