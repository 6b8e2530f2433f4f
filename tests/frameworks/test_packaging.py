"""The package surface: framework adapters load lazily, and a missing extra is named."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120)


def test_import_nkisim_loads_neither_framework():
    done = _python(
        """
        import sys
        import nkisim
        print("torch" in sys.modules, "jax" in sys.modules, "nkisim.torch" in sys.modules)
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "False", "False"]


def test_running_a_numpy_kernel_imports_no_framework() -> None:
    code = (
        "import sys, numpy as np\n"
        "import nkisim, nkisim.nki, nkisim.nki.language, nkisim.nki.isa\n"
        "from nkisim.examples.tensor_add import nki_tensor_add\n"
        "a = np.ones((128, 512), np.float32)\n"
        "assert (nki_tensor_add(a, a) == 2).all()\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'jax', 'jaxlib')))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "[]"


def test_torch_adapter_is_an_attribute_after_import_nkisim():
    pytest.importorskip("torch")
    done = _python(
        """
        import nkisim
        print(nkisim.torch.custom_op.__module__, "torch" in dir(nkisim))
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["nkisim.torch", "True"]


def test_jax_adapter_is_an_attribute_after_import_nkisim():
    pytest.importorskip("jax")
    done = _python("import nkisim; print(nkisim.jax.call.__module__)")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "nkisim.jax"


@pytest.mark.parametrize(("module", "extra", "library"), [("torch", "torch", "PyTorch"), ("jax", "jax", "JAX")])
def test_a_missing_framework_names_the_extra_to_install(module, extra, library):
    done = _python(
        f"""
        import sys
        sys.modules[{module!r}] = None  # as if it were not installed
        import nkisim
        try:
            nkisim.{module}
        except ImportError as exc:
            print(exc)
        """
    )
    assert done.returncode == 0, done.stderr
    expected = f"nkisim.{module} needs {library}, which is not installed: pip install 'nkisim[{extra}]'"
    assert done.stdout.strip() == expected


def test_an_unknown_attribute_is_an_attribute_error():
    import nkisim

    with pytest.raises(AttributeError, match="module 'nkisim' has no attribute 'nonexistent'"):
        nkisim.nonexistent  # noqa: B018


def test_package_root_holds_only_the_public_api():
    from pathlib import Path

    import nkisim

    root = Path(nkisim.__file__).parent
    modules = sorted(p.name for p in root.glob("*.py"))
    assert modules == ["__init__.py", "__main__.py", "errors.py", "jax.py", "torch.py"]
