#!/usr/bin/env python3
"""IPC through the CUDA driver API (ctypes on libcuda: cuIpcGetMemHandle, cuIpcOpenMemHandle_v2,
cuIpcCloseMemHandle), as libraries that skip the runtime do, on tensors from PyTorch's cache.
The producer exports the allocation holding each tensor (found with cuMemGetAddressRange) and
writes handles, offsets and the expected bytes to a directory; a second process opens each
handle, reads the tensor at its offset and compares.

Prints `CHECK ipc-driver intact N failed-to-open N wrong N`; exit 1 when any arrived wrong.
Run it with and without LD_PRELOAD=librocmguard.so (both processes inherit it).
"""

import ctypes
import os
import subprocess
import sys
import tempfile

import torch

SIZES = [4 << 10, 1 << 20, 3 << 20, 10 << 20, 40 << 20]


class Handle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_ubyte * 64)]


def driver():
    cuda = ctypes.CDLL("libcuda.so.1")
    cuda.cuIpcOpenMemHandle_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), Handle, ctypes.c_uint]
    return cuda


def produce(out):
    cuda = driver()
    keep = []
    gen = torch.Generator().manual_seed(1)
    with open(os.path.join(out, "list"), "w") as f:
        for i, size in enumerate(SIZES * 2):
            base = torch.randint(0, 255, (size * 3,), dtype=torch.uint8, generator=gen).cuda()
            t = base[[0, size // 2 + 512 * i][i % 2] :][:size]
            torch.cuda.synchronize()
            start, length = ctypes.c_uint64(), ctypes.c_size_t()
            assert cuda.cuMemGetAddressRange_v2(ctypes.byref(start), ctypes.byref(length), ctypes.c_uint64(t.data_ptr())) == 0
            h = Handle()
            code = cuda.cuIpcGetMemHandle(ctypes.byref(h), ctypes.c_uint64(start.value))
            t.cpu().numpy().tofile(os.path.join(out, f"{i}.bin"))
            f.write(f"{i} {code} {t.data_ptr() - start.value} {size} {bytes(h.reserved).hex()}\n")
            keep.append(base)
    done = subprocess.run([sys.executable, __file__, "--consume", out], capture_output=True, text=True, timeout=300)
    sys.stdout.write(done.stdout)
    sys.stderr.write(done.stderr[-2000:])
    return done.returncode


def consume(out):
    torch.zeros(1, device="cuda")  # a current context for the driver calls
    cuda = driver()
    intact = failed = wrong = 0
    for line in open(os.path.join(out, "list")):
        i, code, offset, size, hexed = line.split()
        if int(code) != 0:
            failed += 1
            continue
        h = Handle()
        h.reserved = (ctypes.c_ubyte * 64)(*bytes.fromhex(hexed))
        ptr = ctypes.c_uint64()
        if cuda.cuIpcOpenMemHandle_v2(ctypes.byref(ptr), h, 1) != 0:
            failed += 1
            continue
        got = (ctypes.c_uint8 * int(size))()
        assert cuda.cuMemcpyDtoH_v2(got, ctypes.c_uint64(ptr.value + int(offset)), ctypes.c_size_t(int(size))) == 0
        want = open(os.path.join(out, f"{i}.bin"), "rb").read()
        if bytes(got) == want:
            intact += 1
        else:
            wrong += 1
        cuda.cuIpcCloseMemHandle(ctypes.c_uint64(ptr.value))
    print(f"CHECK ipc-driver intact {intact} failed-to-open {failed} wrong {wrong}", flush=True)
    return 1 if wrong else 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--consume":
        sys.exit(consume(sys.argv[2]))
    with tempfile.TemporaryDirectory() as d:
        sys.exit(produce(d))
