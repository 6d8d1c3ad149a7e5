//! The host side's access to kernel-shared globals: [`BpfMapOps`] over the
//! bpf(2) wrappers of `crate::sys`, with batched reads for whole-map dumps
//! (foreach and printing over big arrays).

use std::io;
use std::os::fd::BorrowedFd;

use crate::host::BpfMapOps;
use crate::sys::{self, MapRef};

/// Elements fetched per BPF_MAP_LOOKUP_BATCH call.
const BATCH_ELEMENTS: usize = 4096;
/// The kernel's internal ENOTSUPP, which bpf(2) can leak to user space.
const KERNEL_ENOTSUPP: i32 = 524;

pub struct SysMapOps {
    cpus: usize,
}

impl SysMapOps {
    pub fn new() -> SysMapOps {
        SysMapOps {
            cpus: sys::possible_cpus().unwrap_or(1).max(1),
        }
    }
}

/// # Safety
/// `fd` must be one of the session's map fds, which stay open (in
/// `load::Loaded`) for as long as the host runtime that calls these exists.
unsafe fn borrow(fd: i32) -> BorrowedFd<'static> {
    // SAFETY: guaranteed by the caller.
    unsafe { BorrowedFd::borrow_raw(fd) }
}

impl BpfMapOps for SysMapOps {
    fn lookup(&self, fd: i32, key: &[u8], value: &mut [u8]) -> io::Result<bool> {
        // SAFETY: the runtime only holds fds the session handed it.
        sys::map_lookup(unsafe { borrow(fd) }, key, value)
    }

    fn update(&self, fd: i32, key: &[u8], value: &[u8]) -> io::Result<()> {
        // SAFETY: as above.
        sys::map_update(unsafe { borrow(fd) }, key, value, 0)
    }

    fn delete(&self, fd: i32, key: &[u8]) -> io::Result<bool> {
        // SAFETY: as above.
        sys::map_delete(unsafe { borrow(fd) }, key)
    }

    fn next_key(&self, fd: i32, key: Option<&[u8]>, next: &mut [u8]) -> io::Result<bool> {
        // SAFETY: as above.
        sys::map_next_key(unsafe { borrow(fd) }, key, next)
    }

    fn possible_cpus(&self) -> usize {
        self.cpus
    }

    fn dump(&self, fd: i32, key_size: usize, value_size: usize) -> io::Result<(Vec<u8>, Vec<u8>)> {
        // SAFETY: as above.
        let map = MapRef::new(unsafe { borrow(fd) })?;
        if value_size != map.value_len() {
            return Err(io::Error::other(format!(
                "map dump with {value_size}-byte values, the map's take {}",
                map.value_len()
            )));
        }
        let (mut keys, mut values) = (Vec::new(), Vec::new());
        let mut key_buf = vec![0u8; key_size.max(1) * BATCH_ELEMENTS];
        let mut value_buf = vec![0u8; value_size.max(1) * BATCH_ELEMENTS];
        let cursor_len = key_size.max(8);
        let mut cursor: Option<Vec<u8>> = None;
        loop {
            let mut next = vec![0u8; cursor_len];
            let batch = match map.lookup_batch(
                cursor.as_deref(),
                &mut next,
                &mut key_buf,
                &mut value_buf,
            ) {
                Ok(batch) => batch,
                // Map types or kernels without batch ops: walk key by key.
                Err(e)
                    if cursor.is_none()
                        && matches!(
                            e.raw_os_error(),
                            Some(libc::EINVAL | libc::EOPNOTSUPP | KERNEL_ENOTSUPP)
                        ) =>
                {
                    return crate::host::kmap::walk(self, fd, key_size, value_size);
                }
                Err(e) => return Err(e),
            };
            keys.extend_from_slice(&key_buf[..batch.count * key_size]);
            values.extend_from_slice(&value_buf[..batch.count * value_size]);
            if batch.done {
                return Ok((keys, values));
            }
            cursor = Some(next);
        }
    }
}
