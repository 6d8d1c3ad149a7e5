//! The host side's access to kernel-shared globals: [`BpfMapOps`] over the
//! bpf(2) wrappers of `crate::sys`, with batched reads for whole-map dumps
//! (foreach and printing over big arrays).

use std::cell::RefCell;
use std::collections::HashMap;
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
    /// Each map's sizes, asked for once (BPF_OBJ_GET_INFO_BY_FD) rather
    /// than on every element access. The session's fds stay open, and so
    /// keep their maps, for as long as this exists.
    maps: RefCell<HashMap<i32, MapRef<'static>>>,
}

impl SysMapOps {
    pub fn new() -> SysMapOps {
        SysMapOps {
            cpus: sys::possible_cpus().unwrap_or(1).max(1),
            maps: RefCell::new(HashMap::new()),
        }
    }

    fn map(&self, fd: i32) -> io::Result<MapRef<'static>> {
        if let Some(map) = self.maps.borrow().get(&fd) {
            return Ok(*map);
        }
        // SAFETY: the runtime only holds fds the session handed it.
        let map = MapRef::new(unsafe { borrow(fd) })?;
        self.maps.borrow_mut().insert(fd, map);
        Ok(map)
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
        self.map(fd)?.lookup(key, value)
    }

    fn update(&self, fd: i32, key: &[u8], value: &[u8]) -> io::Result<()> {
        self.map(fd)?.update(key, value, 0)
    }

    fn delete(&self, fd: i32, key: &[u8]) -> io::Result<bool> {
        self.map(fd)?.delete(key)
    }

    fn next_key(&self, fd: i32, key: Option<&[u8]>, next: &mut [u8]) -> io::Result<bool> {
        self.map(fd)?.next_key(key, next)
    }

    fn possible_cpus(&self) -> usize {
        self.cpus
    }

    fn for_each_batch(
        &self,
        fd: i32,
        key_size: usize,
        value_size: usize,
        each: &mut dyn FnMut(&[u8], &[u8]),
    ) -> io::Result<()> {
        let map = self.map(fd)?;
        if value_size != map.value_len() {
            return Err(io::Error::other(format!(
                "map dump with {value_size}-byte values, the map's take {}",
                map.value_len()
            )));
        }
        let mut key_buf = vec![0u8; key_size.max(1) * BATCH_ELEMENTS];
        let mut value_buf = vec![0u8; value_size.max(1) * BATCH_ELEMENTS];
        let cursor_len = key_size.max(8);
        let mut cursor: Option<Vec<u8>> = None;
        let mut next = vec![0u8; cursor_len];
        loop {
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
                    let (keys, values) = crate::host::kmap::walk(self, fd, key_size, value_size)?;
                    each(&keys, &values);
                    return Ok(());
                }
                Err(e) => return Err(e),
            };
            each(
                &key_buf[..batch.count * key_size],
                &value_buf[..batch.count * value_size],
            );
            if batch.done {
                return Ok(());
            }
            // The cursor the kernel wrote becomes the next call's input.
            match &mut cursor {
                Some(c) => std::mem::swap(c, &mut next),
                None => cursor = Some(std::mem::replace(&mut next, vec![0u8; cursor_len])),
            }
        }
    }
}
