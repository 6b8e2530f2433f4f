"""``python -m nkisim demo gpsimd``: a custom operator written, checked and timed without hardware."""

from __future__ import annotations

import numpy as np

import nkisim.gpsimd as gpsimd


def main() -> int:
    """Run the seed's tensor_negate and the three ReLU versions; print values and simulated times."""
    from nkisim.examples.gpsimd_negate import negate_lib
    from nkisim.examples.gpsimd_relu import PUBLISHED_IT_PER_S, make_libraries, mlp_iterations_per_second

    x = np.array([1.0, -2.0, 3.5, 0.25], dtype=np.float32)
    result = gpsimd.run(negate_lib.tensor_negate, [x])
    print("GPSIMD custom operators (simulated on trn1)")
    print(f"  tensor_negate({x.tolist()}) = {result.outputs.tolist()}   {result.total_ns / 1000:.2f} us")
    data = np.random.default_rng(0).standard_normal(32 * 4096).astype(np.float32)
    print(f"  ReLU on {data.size} float32 elements:")
    ops = make_libraries()
    for name, op in ops.items():
        sample = data[:4096] if name == "relu_element" else data
        run = gpsimd.run(op, [sample])
        if not np.array_equal(run.outputs, np.maximum(sample, 0)):
            print(f"  {name}: wrong result")
            return 1
        launch = run.profile.instructions[0].duration_ns
        total = launch + (run.total_ns - launch) * data.size / sample.size
        cores = len(run.core_busy_ns)
        note = " (timed on 4096 elements, scaled)" if sample is not data else ""
        print(f"    {name:20s} {total / 1000:10.1f} us on {cores} core(s){note}")
    print("  In the published MNIST MLP benchmark (inferences/s, trn1):")
    for name, op in ops.items():
        its = mlp_iterations_per_second(op, sample=4096 if name == "relu_element" else None)
        print(f"    {name:20s} simulated {its:7.2f}   published {PUBLISHED_IT_PER_S[name]:7.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
