"""Little-endian loads, trailing zeros and ``pext`` for the numba kernels.

Spec ("Encodings and compression"): all fixed-width numbers are
little-endian.  Hosts are little-endian too (checked at import), so
:func:`ld_u64` and :func:`ld_u32` compile to one unaligned load each, as
``kernels/gts_types.cuh``'s loads do on the device.  Each intrinsic is a
plain Python function -- what runs when the kernels run as Python (tests) --
with an ``@overload`` that compiled code uses instead.
"""

from __future__ import annotations

import sys

import numpy as np
from llvmlite import ir
from numba.core import cgutils, types
from numba.cpython.unsafe.numbers import trailing_zeros
from numba.extending import intrinsic, overload

from ...jit import slow_pext


if sys.byteorder != "little":  # pragma: no cover - the kernels load little-endian words directly
    raise ImportError("gtsamples.decode.cpu needs a little-endian host")


U64_0 = np.uint64(0)
U64_1 = np.uint64(1)


def ld_u64(b, p):
    """Little-endian u64 at ``b[p:p+8]`` (caller checked the bounds).

    Compiled code uses one unaligned 8-byte load (:func:`_ld_u64_impl`); this
    Python body is what runs when the kernels run as Python (tests).
    """
    return np.uint64(int.from_bytes(bytes(b[p : p + 8]), "little"))


def ld_u32(b, p):
    """Little-endian u32 at ``b[p:p+4]``, widened to u64 (caller checked the bounds)."""
    return np.uint64(int.from_bytes(bytes(b[p : p + 4]), "little"))


def tz64(x):
    """Trailing zero bits of a nonzero u64."""
    x = int(x)
    return np.int64((x & -x).bit_length() - 1)


def _unaligned_load_intrinsic(bits):
    """An intrinsic loading ``bits`` little-endian bits at byte ``p`` of a uint8 array.

    Byte-wise loads with numba's negative-index wraparound were the largest
    cost of the varint loops (about 2x); one ``align 1`` load is what C would
    emit.  Hosts are little-endian (checked at import).
    """

    @intrinsic
    def load(typingctx, arr, pos):
        if not isinstance(arr, types.Array) or arr.dtype != types.uint8 or not isinstance(pos, types.Integer):
            return None
        sig = types.uint64(arr, pos)

        def codegen(context, builder, signature, args):
            ary = context.make_array(signature.args[0])(context, builder, args[0])
            idx = context.cast(builder, args[1], signature.args[1], types.intp)
            ptr = builder.bitcast(builder.gep(ary.data, [idx]), ir.IntType(bits).as_pointer())
            v = builder.load(ptr, align=1)
            return builder.zext(v, ir.IntType(64)) if bits < 64 else v

        return sig, codegen

    return load


_ld_u64_impl = _unaligned_load_intrinsic(64)
_ld_u32_impl = _unaligned_load_intrinsic(32)


@overload(ld_u64, inline="always")
def _ld_u64_ol(b, p):
    return lambda b, p: _ld_u64_impl(b, p)


@overload(ld_u32, inline="always")
def _ld_u32_ol(b, p):
    return lambda b, p: _ld_u32_impl(b, p)


@overload(tz64, inline="always")
def _tz64_ol(x):
    return lambda x: np.int64(trailing_zeros(x))


def _host_pext() -> tuple[bool, bool]:
    """``(has_bmi2, fast_pext)`` of the CPU numba compiles for (the host, or the target
    ``NUMBA_CPU_NAME``/``NUMBA_CPU_FEATURES`` name: ``generic`` has no BMI2).

    ``pext`` packs the 7-bit groups of a varint in one instruction.  It is
    one cycle of throughput on Intel since Haswell and AMD since Zen 3, but
    microcoded (tens to hundreds of cycles) on Zen 1/2, where the shift-and-mask
    :func:`compact7` is faster.  Numba's cache is keyed by the host CPU name
    and features, so a kernel compiled with either choice is only reused on a
    CPU of the same kind.
    """
    import platform

    import llvmlite.binding as ll

    if platform.machine().lower() not in ("x86_64", "amd64"):  # pragma: no cover - other hosts
        return False, False
    from numba.core import config

    try:  # the target numba compiles for: NUMBA_CPU_NAME / NUMBA_CPU_FEATURES, else the host
        name = config.CPU_NAME or ll.get_host_cpu_name()
        features = config.CPU_FEATURES if config.CPU_FEATURES is not None else ll.get_host_cpu_features().flatten()
    except Exception:  # pragma: no cover - llvmlite without host introspection
        return False, False
    has = "+bmi2" in features.split(",")
    return has, has and not slow_pext(name)


HAS_BMI2, FAST_PEXT = _host_pext()


def pext(x, m):
    """``pext(x, m)``: the bits of ``x`` at the set bits of ``m``, packed low.

    Compiled code emits the BMI2 instruction (only where :data:`FAST_PEXT`
    selects it); this body runs when the kernels run as Python (tests).
    """
    x, m = int(x), int(m)
    out = k = 0
    while m:
        low = m & -m
        if x & low:
            out |= 1 << k
        k += 1
        m ^= low
    return np.uint64(out)


@intrinsic
def _pext_impl(typingctx, x, m):
    if not (isinstance(x, types.Integer) and isinstance(m, types.Integer)):
        return None
    sig = types.uint64(types.uint64, types.uint64)

    def codegen(context, builder, signature, args):
        i64 = ir.IntType(64)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(i64, [i64, i64]), "llvm.x86.bmi.pext.64")
        return builder.call(fn, list(args))

    return sig, codegen


@overload(pext, inline="always")
def _pext_ol(x, m):
    return lambda x, m: _pext_impl(x, m)
