"""A Python program that reaches the HIP runtime through ctypes (dlopen RTLD_LOCAL + dlsym), as
Python bindings do. Prints `key value` lines for tests/tests/guard.rs."""
import ctypes

hip = ctypes.CDLL("libamdhip64.so.6")
free_b, total_b = ctypes.c_size_t(), ctypes.c_size_t()
assert hip.hipMemGetInfo(ctypes.byref(free_b), ctypes.byref(total_b)) == 0
print("total", total_b.value)
p = ctypes.c_void_p()
print("malloc_2gib", hip.hipMalloc(ctypes.byref(p), ctypes.c_size_t(2 << 30)))
print("malloc_256mib", hip.hipMalloc(ctypes.byref(p), ctypes.c_size_t(256 << 20)))
print("free", hip.hipFree(p))
