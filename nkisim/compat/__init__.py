"""Running code written for the real NKI toolchain unchanged.

* :mod:`nkisim.compat.alias`: the opt-in ``import nki`` alias onto :mod:`nkisim.nki`;
* :mod:`nkisim.compat.pytest_plugin`: ``pytest -p nkisim.compat.pytest_plugin --nki-alias``;
* :mod:`nkisim.compat.nkilib`: ``pytest -p nkisim.compat.nkilib``, which stands in for the
  pieces AWS's nki-library test suite imports from the Neuron toolchain;
* :mod:`nkisim.compat.nkilib_shims`: the ``neuron_dtypes`` and tooling functions it serves.
"""
