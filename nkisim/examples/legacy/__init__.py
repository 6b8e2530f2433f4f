"""Example kernels in the legacy ``neuronxcc.nki`` style (tiles as values, index expressions).

Each computes what its counterpart in ``nkisim.examples`` does, with the same instructions,
so the outputs and the simulated time are the same (``tests/test_legacy_examples.py``).
"""
