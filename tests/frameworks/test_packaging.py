"""The framework integrations are optional: importing nkisim never imports PyTorch or JAX."""

from __future__ import annotations

import subprocess
import sys


def test_importing_nkisim_imports_no_framework() -> None:
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
