"""Underlying allocators of the pools: where chunks come from (libc on the CPU)."""

import ctypes
import ctypes.util

_libc = ctypes.CDLL(ctypes.util.find_library("c") or None)
_libc.free.argtypes = [ctypes.c_void_p]
_libc.free.restype = None
_libc.malloc.argtypes = [ctypes.c_size_t]
_libc.malloc.restype = ctypes.c_void_p
_aligned = getattr(_libc, "aligned_alloc", None)
if _aligned is not None:
    _aligned.argtypes = [ctypes.c_size_t, ctypes.c_size_t]
    _aligned.restype = ctypes.c_void_p

memset = ctypes.memset
memmove = ctypes.memmove


class CPUSystemAllocator:
    """Aligned host memory from libc (the C library's aligned_alloc/free): the CPU pool's
    'underlying allocation', as cudaMalloc is the GPU pool's. Addresses are ints; 0 on failure."""

    alignment = 64

    def alloc(self, nbytes):
        if _aligned is not None:
            return _aligned(self.alignment, nbytes) or 0
        return _libc.malloc(nbytes) or 0  # glibc/macOS malloc: 16-byte aligned at least

    def free(self, addr):
        _libc.free(addr)
