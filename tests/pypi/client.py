"""A third-party HIP client as users write one, through PyPI's bindings, which load the HIP
runtime themselves: `hip-python` (`from hip import hip`, dlopen of `libamdhip64.so`) or
`rocm-bindings-hip` (`from rocm.bindings import hip`, `$ROCM_PATH/lib/libamdhip64.so`).

    python client.py hip|rocm CAP_BYTES

Run by scripts/pypi-clients.sh on hipsim under the shim with a cap. Prints one `name value`
line per thing it saw, for the script to judge, and exits 0 unless a call it needs fails.
"""
import ctypes
import sys

BLOCK = 4096


def main():
    which, cap = sys.argv[1], int(sys.argv[2])
    if which == "hip":
        from hip import hip
    else:
        from rocm.bindings import hip
    ok = hip.hipError_t.hipSuccess

    err, free, total = hip.hipMemGetInfo()
    assert err == ok, err
    print("total", total)
    print("free", free)

    # Twice the cap: a device of 16 GiB has room for it, the cap does not.
    err, _ = hip.hipMalloc(2 * cap)
    print("over_cap", err.name)

    # A small block, written and read back through hipMemcpy, freed, then asked for again:
    # the second one is served from the pool (the guard's stats at exit count it as a hit).
    pattern = bytes((i * 7 + 3) % 251 for i in range(BLOCK))
    for n in range(2):
        err, dev = hip.hipMalloc(BLOCK)
        assert err == ok, err
        src = ctypes.create_string_buffer(pattern, BLOCK)
        back = ctypes.create_string_buffer(BLOCK)
        (err,) = hip.hipMemcpy(dev, src, BLOCK, hip.hipMemcpyKind.hipMemcpyHostToDevice)
        assert err == ok, err
        (err,) = hip.hipMemcpy(back, dev, BLOCK, hip.hipMemcpyKind.hipMemcpyDeviceToHost)
        assert err == ok, err
        print(f"roundtrip{n}", "intact" if back.raw == pattern else "corrupt")
        (err,) = hip.hipFree(dev)
        assert err == ok, err


if __name__ == "__main__":
    main()
