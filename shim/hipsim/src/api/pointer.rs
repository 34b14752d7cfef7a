//! What a pointer is: its attributes, and the allocation or mapping it lies in.

use std::ffi::c_void;
use std::os::raw::{c_int, c_uint};
use std::ptr;

use crate::error::{self, *};
use crate::memory::Kind;
use crate::state;

/// `hipPointerAttribute_t`.
#[repr(C)]
pub struct PointerAttributes {
    memory_type: c_int,
    device: c_int,
    device_pointer: *mut c_void,
    host_pointer: *mut c_void,
    is_managed: c_int,
    allocation_flags: c_uint,
}

hip_export! {
    /// Interior pointers resolve to their block; an unknown pointer is "unregistered", device
    /// -1, with success, as in ROCm 6.
    "hip_4.2" fn hipPointerGetAttributes(
        attributes: *mut PointerAttributes,
        ptr: *const c_void,
    ) -> c_int {
        error::api(|| {
            if attributes.is_null() || ptr.is_null() {
                return Err(INVALID_VALUE);
            }
            let block = state::with(|s| s.mem.block_containing(ptr as usize));
            let p = ptr as *mut c_void;
            attributes.write(match block {
                Some((_, b)) => PointerAttributes {
                    memory_type: if b.kind == Kind::Managed { 3 } else { 2 },
                    device: b.device,
                    device_pointer: p,
                    host_pointer: if b.kind == Kind::Managed { p } else { ptr::null_mut() },
                    is_managed: (b.kind == Kind::Managed) as c_int,
                    allocation_flags: b.flags,
                },
                None => PointerAttributes {
                    memory_type: 0,
                    device: -1,
                    device_pointer: ptr::null_mut(),
                    host_pointer: ptr::null_mut(),
                    is_managed: 0,
                    allocation_flags: 0,
                },
            });
            Ok(())
        })
    }
}

/// The live allocation or `hipMemMap` mapping holding `ptr`, interior pointers included:
/// `(start, size)`. ROCm's clr answers both queries below from the memory object that
/// `getMemoryObject` finds for any address inside it (`hipamd/src/hip_memory.cpp` at f9f995c:
/// `hipMemPtrGetInfo` lines 793-806, `hipErrorInvalidValue` when none; `hipMemGetAddressRange`
/// lines 853-868, base `getSvmPtr()`, size `getSize()`, `hipErrorNotFound` when none); a mapping
/// is its own object there (`hipMemUnmap` finds it with `FindMemObj`, `hip_vm.cpp` line 352).
/// clr writes through the out-pointers unchecked; here a null one is `hipErrorInvalidValue`.
fn block_of(ptr: *mut c_void) -> Option<(usize, usize)> {
    state::with(|s| s.mem.block_containing(ptr as usize)).map(|(start, b)| (start, b.size))
}

hip_export! {
    "hip_4.2" fn hipMemGetAddressRange(base: *mut *mut c_void, size: *mut usize, ptr: *mut c_void) -> c_int {
        error::api(|| {
            if base.is_null() || size.is_null() {
                return Err(INVALID_VALUE);
            }
            let (start, bytes) = block_of(ptr).ok_or(NOT_FOUND)?;
            base.write(start as *mut c_void);
            size.write(bytes);
            Ok(())
        })
    }
}

hip_export! {
    "hip_4.2" fn hipMemPtrGetInfo(ptr: *mut c_void, size: *mut usize) -> c_int {
        error::api(|| {
            if size.is_null() {
                return Err(INVALID_VALUE);
            }
            size.write(block_of(ptr).ok_or(INVALID_VALUE)?.1);
            Ok(())
        })
    }
}
