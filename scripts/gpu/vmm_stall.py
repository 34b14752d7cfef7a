#!/usr/bin/env python3
"""Do the driver's virtual memory calls cost the GPU time, beyond the host's? 100 fp16 matmuls
of 8192x8192 are queued; while they run the host makes 40 calls of one kind on memory no kernel
uses; the matmuls' GPU time (CUDA events) is compared with rounds that make no call. Kinds:
create + release, map + set access + unmap of one kept handle (2, 8, 32 MiB), map + unmap without
set access, the whole cycle of the pool's pieces, and cudaMalloc + cudaFree. Rounds interleave
the kinds. Needs PyTorch and libcuda (CUDA's driver API, which HIP's hipMem* calls mirror).

Usage: python3 scripts/gpu/vmm_stall.py [OUT.json] [--rounds N]
"""
import argparse
import ctypes
import glob
import json
import os
import statistics

import torch

MIB = 1 << 20
CALLS = 40
MATMULS = 100


class Loc(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class Prop(ctypes.Structure):
    """CUmemAllocationProp, the layout the shim's `Vmm` uses too."""
    _fields_ = [("type", ctypes.c_int), ("handle_types", ctypes.c_int), ("loc", Loc),
                ("win32", ctypes.c_void_p), ("compression", ctypes.c_ubyte),
                ("rdma", ctypes.c_ubyte), ("usage", ctypes.c_ushort),
                ("reserved", ctypes.c_ubyte * 4)]


class Access(ctypes.Structure):
    _fields_ = [("loc", Loc), ("flags", ctypes.c_int)]


def ck(code, what):
    if code != 0:
        raise RuntimeError(f"{what} failed with {code}")


class Driver:
    """The calls under test, on one reserved range of 8 slots of 32 MiB."""

    def __init__(self, device):
        self.cu = ctypes.CDLL("libcuda.so.1")
        self.rt = runtime()
        self.prop = Prop(1, 0, Loc(1, device), None, 0, 0, 0)
        self.access = Access(Loc(1, device), 3)
        self.va = ctypes.c_uint64()
        ck(self.cu.cuMemAddressReserve(ctypes.byref(self.va), ctypes.c_size_t(256 * MIB),
                                       ctypes.c_size_t(0), ctypes.c_uint64(0),
                                       ctypes.c_ulonglong(0)), "reserve")
        self.kept = {}

    def create(self, size):
        h = ctypes.c_uint64()
        ck(self.cu.cuMemCreate(ctypes.byref(h), ctypes.c_size_t(size), ctypes.byref(self.prop),
                               ctypes.c_ulonglong(0)), "create")
        return h

    def handle(self, size):
        if size not in self.kept:
            self.kept[size] = self.create(size)
        return self.kept[size]

    def map(self, size, h, access):
        ck(self.cu.cuMemMap(self.va, ctypes.c_size_t(size), ctypes.c_size_t(0), h,
                            ctypes.c_ulonglong(0)), "map")
        if access:
            ck(self.cu.cuMemSetAccess(self.va, ctypes.c_size_t(size), ctypes.byref(self.access),
                                      ctypes.c_size_t(1)), "set access")
        ck(self.cu.cuMemUnmap(self.va, ctypes.c_size_t(size)), "unmap")

    def kinds(self):
        def create_release(size):
            return lambda: ck(self.cu.cuMemRelease(self.create(size)), "release")

        def remap(size, access=True):
            return lambda: self.map(size, self.handle(size), access)

        def cycle(size):
            def call():
                h = self.create(size)
                self.map(size, h, True)
                ck(self.cu.cuMemRelease(h), "release")
            return call

        def malloc(size):
            def call():
                p = ctypes.c_void_p()
                ck(self.rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(size)), "cudaMalloc")
                ck(self.rt.cudaFree(p), "cudaFree")
            return call

        return [("none", None), ("cycle8", cycle(8 * MIB)),
                ("create_release8", create_release(8 * MIB)),
                ("map_access_unmap2", remap(2 * MIB)), ("map_access_unmap8", remap(8 * MIB)),
                ("map_access_unmap32", remap(32 * MIB)),
                ("map_unmap8", remap(8 * MIB, access=False)), ("malloc8", malloc(8 * MIB))]


def runtime():
    """The CUDA runtime PyTorch loaded."""
    for name in ["libcudart.so.13", "libcudart.so.12", "libcudart.so"]:
        try:
            return ctypes.CDLL(name)
        except OSError:
            pass
    lib = os.path.join(os.path.dirname(torch.__file__), "..", "nvidia", "*", "lib", "libcudart.so*")
    return ctypes.CDLL(sorted(glob.glob(lib))[0])


def timed_round(x, y, call):
    """GPU milliseconds of the matmuls, with `CALLS` calls made while they run."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(MATMULS):
        torch.mm(x, x, out=y)
    end.record()
    for _ in range(CALLS if call else 0):
        call()
    end.synchronize()
    return start.elapsed_time(end)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", nargs="?")
    p.add_argument("--rounds", type=int, default=10)
    args = p.parse_args()
    x = torch.randn(8192, 8192, device="cuda", dtype=torch.half)
    y = x @ x
    driver = Driver(torch.cuda.current_device())
    kinds = driver.kinds()
    gpu_ms = {name: [] for name, _ in kinds}
    for _ in range(args.rounds):
        for name, call in kinds:
            gpu_ms[name].append(timed_round(x, y, call))
    base = statistics.median(gpu_ms["none"])
    summary = {}
    for name, ms in gpu_ms.items():
        med = statistics.median(ms)
        summary[name] = {"gpu_ms_median": round(med, 2),
                         "gpu_us_per_call": round((med - base) * 1000 / CALLS, 1),
                         "gpu_ms": [round(m, 1) for m in ms]}
        print(f"{name:20s} {med:8.2f} ms  {summary[name]['gpu_us_per_call']:7.1f} us a call  "
              f"rounds {min(ms):.1f}..{max(ms):.1f}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "summary": summary}, f, indent=1)


if __name__ == "__main__":
    main()
