"""``python -m nkisim demo tpc``: TPC kernels written, checked and timed on simulated Gaudis."""

from __future__ import annotations

import numpy as np

import nkisim.tpc as tpc


def main() -> int:
    """ReLU and softmax on Gaudi, Gaudi2 and Gaudi3; custom_topk through torch when it is installed."""
    from nkisim.examples.tpc_relu import ReluFwdGlue
    from nkisim.examples.tpc_softmax import RowGlue

    x = np.random.default_rng(0).standard_normal((512, 1024)).astype(np.float32)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    references = {"relu": np.maximum(x, 0), "softmax": e / e.sum(axis=1, keepdims=True)}
    print(f"TPC kernels on float32[{x.shape[0]}, {x.shape[1]}]")
    ok = True
    for name, glue in (("relu", ReluFwdGlue("f32")), ("softmax", RowGlue("softmax_fwd", "f32"))):
        for device in tpc.gaudi_names():
            r = tpc.run(glue, [x], device=device)
            good = bool(np.allclose(r.outputs[0], references[name], rtol=1e-5, atol=1e-7))
            ok &= good
            print(f"  {name:8} {device:7} {'ok' if good else 'WRONG':5} {r.summary()}")
    try:
        import torch
    except ImportError:
        print("  (install torch to run seed 001's torch.ops.custom_op.custom_topk)")
        return 0 if ok else 1
    import nkisim.examples.tpc_topk  # noqa: F401 (registers the op)

    a = torch.randn(6, 6, generator=torch.Generator().manual_seed(0))
    values, indices = torch.ops.custom_op.custom_topk(a, 3, 1, False)
    good = torch.equal(values, torch.topk(a, 3, 1).values) and torch.equal(indices, torch.topk(a, 3, 1).indices)
    ok &= good
    print(f"  torch.ops.custom_op.custom_topk(a, 3, 1, False) == torch.topk(a, 3, 1): {good}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
