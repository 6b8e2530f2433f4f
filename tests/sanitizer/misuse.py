"""Buggy kernels: uses of an instruction the documentation calls undefined, or values it cannot hold.

Each kernel marks the line the sanitizer must name with ``# @<kernel name>``.
"""

import nkisim.nki.isa as nisa
import nkisim.nki.language as nl

P, F = 128, 64


def _loaded(a):
    t = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a)
    return t


def _stored(t):
    out = nl.ndarray(t.shape, t.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out


# -- the v2 partition-start rule ----------------------------------------------------------


def start_16_for_32_partitions(a):
    t = _loaded(a)
    res = nl.ndarray((32, F), a.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=t[16:48])  # @start_16_for_32_partitions
    return _stored(res)


def start_32_for_64_partitions(a):
    t = _loaded(a)
    res = nl.ndarray((64, F), a.dtype, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=res, data=t[32:96], op0=nl.add, operand0=1.0)  # @start_32_for_64_partitions
    return _stored(res)


def start_1_for_127_partitions(a):
    t = _loaded(a)
    res = nl.ndarray((127, F), a.dtype, buffer=nl.sbuf)
    nisa.activation(dst=res, op=nl.exp, data=t[1:128])  # @start_1_for_127_partitions
    return _stored(res)


def start_8_for_8_partitions_dst(a):
    t = _loaded(a)
    nisa.tensor_copy(dst=t[8:16], src=t[0:8])  # @start_8_for_8_partitions_dst
    return _stored(t)


# -- access-pattern field limits ------------------------------------------------------------


def pattern_five_free_dims(a):
    """A view whose free dims cannot merge: five of them, one more than a pattern holds."""
    t = nl.ndarray((P, 3, 3, 3, 3, 3), a.dtype, buffer=nl.sbuf)
    nisa.memset(dst=t, value=1.0)
    res = nl.ndarray((P, 2, 2, 2, 2, 2), a.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=t[:, 0:2, 0:2, 0:2, 0:2, 0:2])  # @pattern_five_free_dims
    return _stored(res.reshape((P, 32)))


def pattern_stride_too_long(a):
    """Every 40000th int8 element: a stride beyond the int16 field."""
    t = nl.ndarray((P, 2, 40000), nl.int8, buffer=nl.sbuf)
    nisa.memset(dst=t, value=1)
    res = nl.ndarray((P, 2), nl.int8, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=t[:, :, 0])  # @pattern_stride_too_long
    return _stored(res)


def pattern_prime_run_too_long(a):
    """A run of 65537 int8 values (a prime): no two uint16 pattern dims multiply to it."""
    t = nl.ndarray((P, 65537), nl.int8, buffer=nl.sbuf)
    nisa.memset(dst=t[:, 0:65536], value=1)
    nisa.memset(dst=t[:, 65536:65537], value=1)
    res = nl.ndarray((P, 65537), nl.int8, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=t)  # @pattern_prime_run_too_long
    return _stored(res[:, 0:F])


# -- PSUM accumulation onto another engine's values (v2, v3) ------------------------------------


def accumulate_onto_memset(a, b):
    lhs, rhs = _loaded(a), _loaded(b)
    acc = nl.ndarray((P, F), nl.float32, buffer=nl.psum)
    nisa.memset(dst=acc, value=0.0)
    nisa.nc_matmul(dst=acc, stationary=lhs, moving=rhs, accumulate=True)  # @accumulate_onto_memset
    res = nl.ndarray((P, F), nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=acc)
    return _stored(res)


def accumulate_onto_copy(a, b):
    lhs, rhs = _loaded(a), _loaded(b)
    acc = nl.ndarray((P, F), nl.float32, buffer=nl.psum)
    nisa.tensor_copy(dst=acc, src=rhs)
    nisa.nc_matmul(dst=acc, stationary=lhs, moving=rhs, accumulate=True)  # @accumulate_onto_copy
    res = nl.ndarray((P, F), nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=acc)
    return _stored(res)


def accumulate_onto_activation(a, b):
    lhs, rhs = _loaded(a), _loaded(b)
    acc = nl.ndarray((P, F), nl.float32, buffer=nl.psum)
    nisa.activation(dst=acc, op=nl.relu, data=rhs)
    nisa.nc_matmul(dst=acc, stationary=lhs, moving=rhs, accumulate=True)  # @accumulate_onto_activation
    res = nl.ndarray((P, F), nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=acc)
    return _stored(res)


# -- PSUM bank boundaries ------------------------------------------------------------------------


def matmul_across_banks(a, b):
    """A 2 KiB matmul result placed half in one bank, half in the next."""
    lhs, rhs = _loaded(a), _loaded(b)
    wide = nl.ndarray((P, 1024), nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=wide[:, 256:768], stationary=lhs, moving=rhs)  # @matmul_across_banks
    res = nl.ndarray((P, 512), nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=wide[:, 256:768])
    return _stored(res)


def transpose_across_banks(a):
    """A transpose result straddling the first bank boundary."""
    t = _loaded(a)
    wide = nl.ndarray((P, 1024), nl.float32, buffer=nl.psum)
    nisa.nc_transpose(dst=wide[:, 448:576], data=t)  # @transpose_across_banks
    res = nl.ndarray((P, P), nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=wide[:, 448:576])
    return _stored(res)


def matmul_small_across_banks(a, b):
    lhs, rhs = _loaded(a), _loaded(b)
    wide = nl.ndarray((P, 1024), nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=wide[:, 500:564], stationary=lhs, moving=rhs)  # @matmul_small_across_banks
    res = nl.ndarray((P, F), nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=wide[:, 500:564])
    return _stored(res)


# -- inputs outside an approximated function's valid range ---------------------------------------


def sin_beyond_pi(a):
    t = _loaded(a)
    res = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
    nisa.activation(dst=res, op=nl.sin, data=t, scale=10.0)  # @sin_beyond_pi
    return _stored(res)


def log_of_zero(a):
    t = _loaded(a)
    res = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
    nisa.activation(dst=res, op=nl.log, data=t, scale=0.0)  # @log_of_zero
    return _stored(res)


def arctan_beyond_half_pi(a):
    t = _loaded(a)
    res = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
    nisa.activation(dst=res, op=nl.arctan, data=t, bias=None, scale=4.0)  # @arctan_beyond_half_pi
    return _stored(res)


# -- float to integer writes that saturate -------------------------------------------------------


def int8_saturates(a):
    t = _loaded(a)
    res = nl.ndarray(a.shape, nl.int8, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=res, data=t, op0=nl.multiply, operand0=1000.0)  # @int8_saturates
    return _stored(res)


def nan_to_int32(a):
    t = _loaded(a)
    res = nl.ndarray(a.shape, nl.int32, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=res, data=t, op0=nl.multiply, operand0=0.0, op1=nl.divide, operand1=0.0)  # @nan_to_int32
    return _stored(res)


def uint8_negative(a):
    t = _loaded(a)
    res = nl.ndarray(a.shape, nl.uint8, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=res, data=t, op0=nl.subtract, operand0=5.0)  # @uint8_negative
    return _stored(res)


# -- rules every generation enforces (errors whatever check= says) --------------------------------


def both_inputs_in_psum(a, b):
    lhs, rhs = _loaded(a), _loaded(b)
    p1 = nl.ndarray((P, F), nl.float32, buffer=nl.psum)
    p2 = nl.ndarray((P, F), nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=p1, stationary=lhs, moving=rhs)
    nisa.nc_matmul(dst=p2, stationary=lhs, moving=rhs)
    res = nl.ndarray((P, F), nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=res, data1=p1, data2=p2, op=nl.add)  # @both_inputs_in_psum
    return _stored(res)
