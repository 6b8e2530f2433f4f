"""References and tile helpers shared by the Vector Engine accumulation and scan tests.

Each operator reference is numpy in float32, written from the NKI documentation."""

from __future__ import annotations

import numpy as np

import nkisim.nki.language as nl

F32 = np.float32


def ref(name, x, y, reverse=False):
    with np.errstate(all="ignore"):
        x, y = np.asarray(x, F32), np.asarray(y, F32)
        return np.asarray(REF_OPS[name](y, x) if reverse else REF_OPS[name](x, y), F32)


def tile(shape, dtype=nl.float32, buffer=nl.sbuf):
    return nl.ndarray(tuple(shape), dtype=dtype, buffer=buffer)


REF_OPS = {
    "add": np.add,
    "subtract": np.subtract,
    "multiply": np.multiply,
    "maximum": np.maximum,
    "minimum": np.minimum,
    "divide": np.divide,
    "equal": lambda x, y: flag(x == y),
    "not_equal": lambda x, y: flag(x != y),
    "greater": lambda x, y: flag(x > y),
    "greater_equal": lambda x, y: flag(x >= y),
    "less": lambda x, y: flag(x < y),
    "less_equal": lambda x, y: flag(x <= y),
    "logical_and": lambda x, y: flag((x != 0) & (y != 0)),
    "logical_or": lambda x, y: flag((x != 0) | (y != 0)),
    "logical_xor": lambda x, y: flag((x != 0) ^ (y != 0)),
    "abs_max": lambda x, y: np.maximum(np.abs(x), np.abs(y)),
    "abs_min": lambda x, y: np.minimum(np.abs(x), np.abs(y)),
    "abs": lambda x, y: np.abs(x),
    "square": lambda x, y: x * x,
    "reciprocal": lambda x, y: F32(1) / x,
}


def flag(mask):
    return np.asarray(mask).astype(F32)


SCAN_OPS = sorted(REF_OPS)
