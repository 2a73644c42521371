//! Allocation exports for the host and small helpers to view host-provided buffers.

use std::alloc::{alloc, dealloc, Layout};

/// Returned by kernels when a scratch buffer cannot be allocated.
pub const OUT_OF_MEMORY: i32 = -2;
/// Returned by kernels on success.
pub const OK: i32 = -1;

/// Every host buffer is 8-byte aligned, so the host can view it as any typed array.
const ALIGN: usize = 8;

/// Allocates `size` bytes (8-byte aligned); returns 0 when memory cannot grow.
/// A zero-size request returns a non-null dangling pointer that must not be read.
#[no_mangle]
pub extern "C" fn ctxr_alloc(size: usize) -> *mut u8 {
    if size == 0 {
        return ALIGN as *mut u8;
    }
    match Layout::from_size_align(size, ALIGN) {
        Ok(layout) => unsafe { alloc(layout) },
        Err(_) => core::ptr::null_mut(),
    }
}

/// Frees a block from `ctxr_alloc`; `size` must be the size it was allocated with.
///
/// # Safety
/// `ptr` must come from `ctxr_alloc(size)` and not have been freed.
#[no_mangle]
pub unsafe extern "C" fn ctxr_free(ptr: *mut u8, size: usize) {
    if size == 0 || ptr.is_null() {
        return;
    }
    dealloc(ptr, Layout::from_size_align_unchecked(size, ALIGN));
}

/// A host buffer as a slice; `len == 0` gives an empty slice whatever the pointer.
///
/// # Safety
/// `ptr..ptr+len` must be a valid, initialised, suitably aligned buffer.
pub unsafe fn view<'a, T>(ptr: *const T, len: usize) -> &'a [T] {
    if len == 0 {
        &[]
    } else {
        core::slice::from_raw_parts(ptr, len)
    }
}

/// A mutable host buffer as a slice; `len == 0` gives an empty slice whatever the pointer.
///
/// # Safety
/// As `view`, and the buffer must not be aliased.
pub unsafe fn view_mut<'a, T>(ptr: *mut T, len: usize) -> &'a mut [T] {
    if len == 0 {
        &mut []
    } else {
        core::slice::from_raw_parts_mut(ptr, len)
    }
}

/// A vector of `len` copies of `value`, or `None` when memory cannot grow (instead of aborting).
pub fn try_filled<T: Clone>(len: usize, value: T) -> Option<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(len).ok()?;
    v.resize(len, value);
    Some(v)
}
