"""Hold GPU memory (and keep the SMs busy) through the NVIDIA driver alone: no CUDA toolkit, no
framework. ``libcuda.so.1`` (the driver API, installed with the driver) allocates the memory; a tiny
kernel written in PTX (text the driver compiles itself) spins on the clock, so process utilization
samples have something to show. Used by ``bench/gpu_check.py``.

    python3 bench/gpu_hold.py --device 0 --mib 1024 --seconds 60 [--no-kernel]

Prints one JSON line once the memory is held (``{"pid", "device", "bytes", "kernel"}``), keeps it
until ``--seconds`` pass or stdin closes, then frees it.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import select
import sys
import time

SPIN_PTX = b"""
.version 6.0
.target sm_50
.address_size 64

.visible .entry spin(.param .u64 cycles)
{
    .reg .u64 %rd<4>;
    .reg .pred %p;
    ld.param.u64 %rd1, [cycles];
    mov.u64 %rd2, %clock64;
LOOP:
    mov.u64 %rd3, %clock64;
    sub.u64 %rd3, %rd3, %rd2;
    setp.lt.u64 %p, %rd3, %rd1;
    @%p bra LOOP;
    ret;
}
\x00"""


def check(cuda: ctypes.CDLL, result: int, what: str) -> None:
    if result != 0:
        name = ctypes.c_char_p()
        cuda.cuGetErrorName(result, ctypes.byref(name))
        raise RuntimeError(f"{what} failed: {name.value.decode() if name.value else result}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--mib", type=int, default=1024)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--no-kernel", action="store_true", help="only hold memory")
    args = ap.parse_args()
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        sys.exit(f"error: the NVIDIA driver's libcuda.so.1 cannot be loaded ({e})")
    check(cuda, cuda.cuInit(0), "cuInit")
    dev = ctypes.c_int()
    check(cuda, cuda.cuDeviceGet(ctypes.byref(dev), args.device), "cuDeviceGet")
    ctx = ctypes.c_void_p()
    check(cuda, cuda.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev), "cuCtxCreate")
    ptr = ctypes.c_uint64()
    size = args.mib * 2**20
    check(cuda, cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(size)), "cuMemAlloc")
    check(cuda, cuda.cuMemsetD8_v2(ptr, 1, ctypes.c_size_t(size)), "cuMemsetD8")  # touch it
    kernel = ""
    fn = ctypes.c_void_p()
    if not args.no_kernel:
        try:
            mod = ctypes.c_void_p()
            check(cuda, cuda.cuModuleLoadData(ctypes.byref(mod), ctypes.c_char_p(SPIN_PTX)), "cuModuleLoadData")
            check(cuda, cuda.cuModuleGetFunction(ctypes.byref(fn), mod, b"spin"), "cuModuleGetFunction")
            kernel = "spin"
        except RuntimeError as e:
            kernel = f"none ({e})"
    sms = ctypes.c_int()
    cuda.cuDeviceGetAttribute(ctypes.byref(sms), 16, dev)  # CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
    print(json.dumps({"pid": os.getpid(), "device": args.device, "bytes": size, "kernel": kernel,
                      "sms": sms.value}), flush=True)
    deadline = time.monotonic() + args.seconds
    cycles = ctypes.c_uint64(500_000_000)  # ~0.3 s at ~1.7 GHz
    params = (ctypes.c_void_p * 1)(ctypes.cast(ctypes.pointer(cycles), ctypes.c_void_p))
    while time.monotonic() < deadline:
        if sys.stdin in select.select([sys.stdin], [], [], 0)[0] and not sys.stdin.readline():
            break  # stdin closed: stop
        if kernel == "spin":
            check(cuda, cuda.cuLaunchKernel(fn, max(sms.value, 1) * 2, 1, 1, 128, 1, 1, 0, None, params, None),
                  "cuLaunchKernel")
            check(cuda, cuda.cuCtxSynchronize(), "cuCtxSynchronize")
        else:
            time.sleep(0.2)
    cuda.cuMemFree_v2(ptr)
    cuda.cuCtxDestroy_v2(ctx)


if __name__ == "__main__":
    main()
