//! Thin, safe wrappers over bpf(2), perf_event_open(2) and the perf ioctls.
//!
//! Every `unsafe` block of the loader lives in this file. Each command has
//! its own `#[repr(C)]` attribute struct holding only the prefix of
//! `union bpf_attr` it uses; the kernel treats the missing tail as zero.
//! Errors are `io::Error`s carrying the errno.
//!
//! Map access goes through [`MapRef`], which learns the map's key and value
//! sizes once (BPF_OBJ_GET_INFO_BY_FD) and checks every buffer against them:
//! the kernel copies `value_size` bytes (times the CPU count for per-CPU
//! maps) with no length argument, so an unchecked short buffer would be
//! memory corruption. The free functions (`map_lookup`, ...) do that query
//! on each call; hold a `MapRef` when reading many elements.

use std::ffi::CString;
use std::fs;
use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::OnceLock;

use stap_lang::bpf::MapSpec;

// ---- constants from the kernel's uapi linux/bpf.h and perf_event.h -------

const BPF_MAP_CREATE: u32 = 0;
const BPF_MAP_LOOKUP_ELEM: u32 = 1;
const BPF_MAP_UPDATE_ELEM: u32 = 2;
const BPF_MAP_DELETE_ELEM: u32 = 3;
const BPF_MAP_GET_NEXT_KEY: u32 = 4;
const BPF_PROG_LOAD: u32 = 5;
const BPF_PROG_TEST_RUN: u32 = 10;
const BPF_OBJ_GET_INFO_BY_FD: u32 = 15;
const BPF_RAW_TRACEPOINT_OPEN: u32 = 17;
const BPF_BTF_LOAD: u32 = 18;
const BPF_BTF_GET_FD_BY_ID: u32 = 19;
const BPF_MAP_FREEZE: u32 = 22;
const BPF_BTF_GET_NEXT_ID: u32 = 23;
const BPF_MAP_LOOKUP_BATCH: u32 = 24;
const BPF_LINK_CREATE: u32 = 28;

pub const BPF_MAP_TYPE_HASH: u32 = 1;
pub const BPF_MAP_TYPE_ARRAY: u32 = 2;
pub const BPF_MAP_TYPE_PERCPU_HASH: u32 = 5;
pub const BPF_MAP_TYPE_PERCPU_ARRAY: u32 = 6;
pub const BPF_MAP_TYPE_LRU_PERCPU_HASH: u32 = 10;
pub const BPF_MAP_TYPE_PERCPU_CGROUP_STORAGE: u32 = 21;
pub const BPF_MAP_TYPE_RINGBUF: u32 = 27;

/// Map flag: programs may only read the map (host writes, then freezes).
pub const BPF_F_RDONLY_PROG: u32 = 1 << 7;

// Program and attach types are facts of an `AttachKind`, defined beside it.
pub use stap_lang::bpf::attach::{
    BPF_NETFILTER, BPF_PROG_TYPE_KPROBE, BPF_PROG_TYPE_NETFILTER, BPF_PROG_TYPE_PERF_EVENT,
    BPF_PROG_TYPE_RAW_TRACEPOINT, BPF_PROG_TYPE_TRACEPOINT, BPF_PROG_TYPE_TRACING,
    BPF_TRACE_FENTRY, BPF_TRACE_FEXIT, BPF_TRACE_KPROBE_MULTI, BPF_TRACE_RAW_TP,
};
pub const BPF_PERF_EVENT: u32 = 41;

/// `src_reg` of an `ld_imm64` whose immediate is a map fd.
pub const BPF_PSEUDO_MAP_FD: u8 = 1;

/// `BPF_ANY`: create or update.
pub const BPF_ANY: u64 = 0;
pub const BPF_NOEXIST: u64 = 1;
pub const BPF_EXIST: u64 = 2;

pub const PERF_TYPE_SOFTWARE: u32 = 1;
pub const PERF_TYPE_TRACEPOINT: u32 = 2;
pub const PERF_COUNT_SW_CPU_CLOCK: u64 = 0;

const PERF_EVENT_IOC_ENABLE: libc::c_ulong = 0x2400;
const PERF_EVENT_IOC_DISABLE: libc::c_ulong = 0x2401;
const PERF_EVENT_IOC_SET_BPF: libc::c_ulong = 0x4004_2408;
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;

/// `perf_event_attr.flags` bits.
const PERF_ATTR_DISABLED: u64 = 1 << 0;
const PERF_ATTR_FREQ: u64 = 1 << 10;

/// Object names (maps, programs) hold at most 15 bytes and a NUL.
const OBJ_NAME_LEN: usize = 16;

// ---- the syscall seam ----------------------------------------------------

/// bpf(cmd, attr, sizeof attr). `T` must be one of this file's
/// `#[repr(C)]` attribute structs, whose pointers all refer to buffers that
/// outlive the call (callers guarantee that by borrowing them).
fn bpf<T>(cmd: u32, attr: &mut T) -> io::Result<i64> {
    // SAFETY: attr is a live, properly sized `#[repr(C)]` struct matching a
    // prefix of `union bpf_attr` for `cmd`; the kernel reads at most
    // size_of::<T>() bytes of it and writes only fields inside that prefix.
    // Buffers it points to are borrowed by the caller for the call's length.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd as libc::c_long,
            attr as *mut T,
            size_of::<T>() as libc::c_uint,
        )
    };
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret as i64)
    }
}

/// bpf() for commands that return a new file descriptor.
fn bpf_fd<T>(cmd: u32, attr: &mut T) -> io::Result<OwnedFd> {
    let fd = bpf(cmd, attr)?;
    // SAFETY: on success these commands return a new fd that nothing else
    // owns; wrapping it makes its closing ours.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

fn object_name(name: &str) -> [u8; OBJ_NAME_LEN] {
    // The kernel accepts [A-Za-z0-9_.] only; anything else is replaced so a
    // strange name never fails a load.
    let mut out = [0u8; OBJ_NAME_LEN];
    for (slot, byte) in out.iter_mut().zip(name.bytes().take(OBJ_NAME_LEN - 1)) {
        *slot = if byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'.' {
            byte
        } else {
            b'_'
        };
    }
    out
}

fn invalid(message: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, message.into())
}

fn cstring(text: &str) -> io::Result<CString> {
    CString::new(text).map_err(|_| invalid(format!("{text:?} contains a NUL byte")))
}

// ---- maps ----------------------------------------------------------------

#[repr(C)]
#[derive(Default)]
struct MapCreateAttr {
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
    inner_map_fd: u32,
    numa_node: u32,
    map_name: [u8; OBJ_NAME_LEN],
    map_ifindex: u32,
}

pub fn map_create(spec: &MapSpec) -> io::Result<OwnedFd> {
    let mut attr = MapCreateAttr {
        map_type: spec.map_type,
        key_size: spec.key_size,
        value_size: spec.value_size,
        max_entries: spec.max_entries,
        map_flags: spec.flags,
        map_name: object_name(&spec.name),
        ..Default::default()
    };
    bpf_fd(BPF_MAP_CREATE, &mut attr)
}

/// Makes a map read-only for the host from now on (programs keep their
/// access as created); used after filling `BPF_F_RDONLY_PROG` maps.
pub fn map_freeze(fd: BorrowedFd) -> io::Result<()> {
    let mut attr = FdOnlyAttr {
        fd: fd.as_raw_fd() as u32,
        _pad: 0,
    };
    bpf(BPF_MAP_FREEZE, &mut attr).map(drop)
}

#[repr(C)]
struct FdOnlyAttr {
    fd: u32,
    _pad: u32,
}

/// What the kernel says about a map (the prefix of `bpf_map_info`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(C)]
pub struct MapInfo {
    pub map_type: u32,
    pub id: u32,
    pub key_size: u32,
    pub value_size: u32,
    pub max_entries: u32,
    pub map_flags: u32,
    pub name: [u8; OBJ_NAME_LEN],
}

impl MapInfo {
    pub fn is_per_cpu(&self) -> bool {
        matches!(
            self.map_type,
            BPF_MAP_TYPE_PERCPU_HASH
                | BPF_MAP_TYPE_PERCPU_ARRAY
                | BPF_MAP_TYPE_LRU_PERCPU_HASH
                | BPF_MAP_TYPE_PERCPU_CGROUP_STORAGE
        )
    }

    /// Bytes one element's value occupies in user memory: `value_size`, or
    /// for per-CPU maps `value_size` rounded up to 8, once per possible CPU.
    pub fn value_len(&self) -> io::Result<usize> {
        if self.is_per_cpu() {
            Ok((self.value_size as usize).next_multiple_of(8) * possible_cpus()?)
        } else {
            Ok(self.value_size as usize)
        }
    }

    pub fn name(&self) -> String {
        let end = self
            .name
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(OBJ_NAME_LEN);
        String::from_utf8_lossy(&self.name[..end]).into_owned()
    }
}

#[repr(C)]
struct InfoAttr {
    bpf_fd: u32,
    info_len: u32,
    info: u64,
}

/// BPF_OBJ_GET_INFO_BY_FD into `info`, a `#[repr(C)]` prefix of the
/// kernel's info struct for that kind of object.
fn obj_info<T: Default>(fd: BorrowedFd) -> io::Result<T> {
    let mut info = T::default();
    let mut attr = InfoAttr {
        bpf_fd: fd.as_raw_fd() as u32,
        info_len: size_of::<T>() as u32,
        info: &mut info as *mut T as u64,
    };
    bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr)?;
    Ok(info)
}

pub fn map_info(fd: BorrowedFd) -> io::Result<MapInfo> {
    obj_info(fd)
}

#[repr(C)]
struct ElemAttr {
    map_fd: u32,
    _pad: u32,
    key: u64,
    /// `value`, or `next_key` for BPF_MAP_GET_NEXT_KEY.
    value: u64,
    flags: u64,
}

/// A map fd with its sizes, checked against every buffer passed in.
#[derive(Debug, Clone, Copy)]
pub struct MapRef<'fd> {
    fd: BorrowedFd<'fd>,
    info: MapInfo,
    value_len: usize,
}

impl<'fd> MapRef<'fd> {
    pub fn new(fd: BorrowedFd<'fd>) -> io::Result<MapRef<'fd>> {
        let info = map_info(fd)?;
        let value_len = info.value_len()?;
        Ok(MapRef {
            fd,
            info,
            value_len,
        })
    }

    pub fn info(&self) -> &MapInfo {
        &self.info
    }

    /// Bytes of one element's value as user space sees it (per-CPU values
    /// are `round_up(value_size, 8) * possible_cpus()`).
    pub fn value_len(&self) -> usize {
        self.value_len
    }

    fn check_key(&self, key: &[u8]) -> io::Result<()> {
        if key.len() != self.info.key_size as usize {
            return Err(invalid(format!(
                "map {}: key of {} bytes, the map's keys are {} bytes",
                self.info.name(),
                key.len(),
                self.info.key_size
            )));
        }
        Ok(())
    }

    fn check_value(&self, value: &[u8]) -> io::Result<()> {
        if value.len() < self.value_len {
            return Err(invalid(format!(
                "map {}: value buffer of {} bytes, the map's values take {} bytes",
                self.info.name(),
                value.len(),
                self.value_len
            )));
        }
        Ok(())
    }

    fn elem(&self, key: *const u8, value: u64, flags: u64) -> ElemAttr {
        ElemAttr {
            map_fd: self.fd.as_raw_fd() as u32,
            _pad: 0,
            key: key as u64,
            value,
            flags,
        }
    }

    /// Copies the value of `key` into `value`; `Ok(false)` if absent.
    pub fn lookup(&self, key: &[u8], value: &mut [u8]) -> io::Result<bool> {
        self.check_key(key)?;
        self.check_value(value)?;
        let mut attr = self.elem(key.as_ptr(), value.as_mut_ptr() as u64, 0);
        absent_is_false(bpf(BPF_MAP_LOOKUP_ELEM, &mut attr))
    }

    pub fn update(&self, key: &[u8], value: &[u8], flags: u64) -> io::Result<()> {
        self.check_key(key)?;
        self.check_value(value)?;
        let mut attr = self.elem(key.as_ptr(), value.as_ptr() as u64, flags);
        bpf(BPF_MAP_UPDATE_ELEM, &mut attr).map(drop)
    }

    /// `Ok(false)` if the key was not there.
    pub fn delete(&self, key: &[u8]) -> io::Result<bool> {
        self.check_key(key)?;
        let mut attr = self.elem(key.as_ptr(), 0, 0);
        absent_is_false(bpf(BPF_MAP_DELETE_ELEM, &mut attr))
    }

    /// The key after `key` (the first key for `None`) into `next`;
    /// `Ok(false)` at the end.
    pub fn next_key(&self, key: Option<&[u8]>, next: &mut [u8]) -> io::Result<bool> {
        if let Some(key) = key {
            self.check_key(key)?;
        }
        self.check_key(next)?;
        let key_ptr = key.map_or(std::ptr::null(), <[u8]>::as_ptr);
        let mut attr = self.elem(key_ptr, next.as_mut_ptr() as u64, 0);
        absent_is_false(bpf(BPF_MAP_GET_NEXT_KEY, &mut attr))
    }

    /// One BPF_MAP_LOOKUP_BATCH step: as many elements as fit in `keys`
    /// and `values` (whole elements of `key_size` and [`Self::value_len`]
    /// bytes), starting at `cursor` (`None` for the first call). `next`
    /// receives the cursor for the following call (`key_size` bytes; hash
    /// maps may use more, so pass a buffer of at least 8 bytes).
    pub fn lookup_batch(
        &self,
        cursor: Option<&[u8]>,
        next: &mut [u8],
        keys: &mut [u8],
        values: &mut [u8],
    ) -> io::Result<Batch> {
        let key_size = (self.info.key_size as usize).max(1);
        let cursor_len = key_size.max(8);
        if next.len() < cursor_len || cursor.is_some_and(|c| c.len() < cursor_len) {
            return Err(invalid(format!(
                "map {}: batch cursors must hold {cursor_len} bytes",
                self.info.name()
            )));
        }
        let count = (keys.len() / key_size).min(values.len() / self.value_len.max(1));
        if count == 0 {
            return Err(invalid("batch lookup with room for no element"));
        }
        let mut attr = BatchAttr {
            in_batch: cursor.map_or(0, |c| c.as_ptr() as u64),
            out_batch: next.as_mut_ptr() as u64,
            keys: keys.as_mut_ptr() as u64,
            values: values.as_mut_ptr() as u64,
            count: count as u32,
            map_fd: self.fd.as_raw_fd() as u32,
            elem_flags: 0,
            flags: 0,
        };
        match bpf(BPF_MAP_LOOKUP_BATCH, &mut attr) {
            Ok(_) => Ok(Batch {
                count: attr.count as usize,
                done: false,
            }),
            // ENOENT: this batch holds the last elements (maybe none).
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(Batch {
                count: attr.count as usize,
                done: true,
            }),
            Err(e) => Err(e),
        }
    }
}

#[repr(C)]
struct BatchAttr {
    in_batch: u64,
    out_batch: u64,
    keys: u64,
    values: u64,
    count: u32,
    map_fd: u32,
    elem_flags: u64,
    flags: u64,
}

/// The result of one [`map_lookup_batch`] step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Batch {
    /// Elements written to the front of `keys` and `values`.
    pub count: usize,
    /// No more elements after these.
    pub done: bool,
}

fn absent_is_false(result: io::Result<i64>) -> io::Result<bool> {
    match result {
        Ok(_) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Copies the value of `key` into `value`; `Ok(false)` on ENOENT.
pub fn map_lookup(fd: BorrowedFd, key: &[u8], value: &mut [u8]) -> io::Result<bool> {
    MapRef::new(fd)?.lookup(key, value)
}

pub fn map_update(fd: BorrowedFd, key: &[u8], value: &[u8], flags: u64) -> io::Result<()> {
    MapRef::new(fd)?.update(key, value, flags)
}

pub fn map_delete(fd: BorrowedFd, key: &[u8]) -> io::Result<bool> {
    MapRef::new(fd)?.delete(key)
}

/// `Ok(false)` at the end of the map.
pub fn map_next_key(fd: BorrowedFd, key: Option<&[u8]>, next: &mut [u8]) -> io::Result<bool> {
    MapRef::new(fd)?.next_key(key, next)
}

/// See [`MapRef::lookup_batch`].
pub fn map_lookup_batch(
    fd: BorrowedFd,
    cursor: Option<&[u8]>,
    next: &mut [u8],
    keys: &mut [u8],
    values: &mut [u8],
) -> io::Result<Batch> {
    MapRef::new(fd)?.lookup_batch(cursor, next, keys, values)
}

// ---- CPUs ----------------------------------------------------------------

/// Parses a kernel CPU list such as `0-3,8,10-11`.
pub fn parse_cpu_list(text: &str) -> Option<Vec<u32>> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((lo, hi)) => {
                let (lo, hi): (u32, u32) = (lo.parse().ok()?, hi.parse().ok()?);
                if hi < lo || hi - lo > 1 << 16 {
                    return None;
                }
                cpus.extend(lo..=hi);
            }
            None => cpus.push(part.parse().ok()?),
        }
    }
    Some(cpus)
}

fn read_cpu_list(path: &str) -> io::Result<Vec<u32>> {
    let text = fs::read_to_string(path)?;
    parse_cpu_list(&text)
        .filter(|cpus| !cpus.is_empty())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, format!("{path}: {text:?}")))
}

/// The number of possible CPUs: per-CPU map values hold one slot for each
/// (the highest possible CPU + 1, as the kernel counts them).
pub fn possible_cpus() -> io::Result<usize> {
    static POSSIBLE: OnceLock<usize> = OnceLock::new();
    if let Some(n) = POSSIBLE.get() {
        return Ok(*n);
    }
    let cpus = read_cpu_list("/sys/devices/system/cpu/possible")?;
    let n = cpus.iter().max().map_or(1, |max| *max as usize + 1);
    Ok(*POSSIBLE.get_or_init(|| n))
}

/// The CPUs online now, where per-CPU perf events are opened.
pub fn online_cpus() -> io::Result<Vec<u32>> {
    read_cpu_list("/sys/devices/system/cpu/online")
}

// ---- programs ------------------------------------------------------------

/// The prefix of `union bpf_attr` that BPF_PROG_LOAD reads.
#[repr(C)]
#[derive(Default)]
struct ProgLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; OBJ_NAME_LEN],
    prog_ifindex: u32,
    expected_attach_type: u32,
    prog_btf_fd: u32,
    func_info_rec_size: u32,
    func_info: u64,
    func_info_cnt: u32,
    line_info_rec_size: u32,
    line_info: u64,
    line_info_cnt: u32,
    attach_btf_id: u32,
    attach_btf_obj_fd: u32,
    _pad: u32,
}

/// One BPF_PROG_LOAD request.
#[derive(Debug, Clone, Copy)]
pub struct ProgLoad<'a> {
    pub prog_type: u32,
    pub expected_attach_type: u32,
    pub name: &'a str,
    /// Encoded instructions, 8 bytes each, map fds already patched in.
    pub insns: &'a [u64],
    /// Tracing programs: the BTF id of the function attached to, in
    /// vmlinux or in the module BTF `attach_btf_obj` refers to.
    pub attach_btf_id: u32,
    pub attach_btf_obj: Option<BorrowedFd<'a>>,
}

/// Program BTF for one BPF_PROG_LOAD: the loaded blob's fd and the
/// encoded `bpf_func_info` / `bpf_line_info` records.
#[derive(Debug, Clone, Copy)]
pub struct ProgBtf<'a> {
    pub fd: BorrowedFd<'a>,
    pub func_info: &'a [u8],
    pub func_info_rec_size: u32,
    pub line_info: &'a [u8],
    pub line_info_rec_size: u32,
}

/// The prefix of `union bpf_attr` that BPF_BTF_LOAD reads (the last word
/// is `btf_log_true_size` on 6.4+, zero here so older kernels accept it).
#[repr(C)]
#[derive(Default)]
struct BtfLoadAttr {
    btf: u64,
    btf_log_buf: u64,
    btf_size: u32,
    btf_log_size: u32,
    btf_log_level: u32,
    _pad: u32,
}

/// BPF_BTF_LOAD of a program BTF blob. With `log = Some(buffer)` the
/// kernel's BTF checker writes why it rejected the blob.
pub fn btf_load(blob: &[u8], log: Option<&mut [u8]>) -> io::Result<OwnedFd> {
    let (log_level, log_buf, log_size) = match log {
        Some(buffer) if !buffer.is_empty() => (
            1,
            buffer.as_mut_ptr() as u64,
            buffer.len().min(u32::MAX as usize) as u32,
        ),
        _ => (0, 0, 0),
    };
    let mut attr = BtfLoadAttr {
        btf: blob.as_ptr() as u64,
        btf_log_buf: log_buf,
        btf_size: u32::try_from(blob.len()).map_err(|_| invalid("BTF blob too large"))?,
        btf_log_size: log_size,
        btf_log_level: log_level,
        _pad: 0,
    };
    bpf_fd(BPF_BTF_LOAD, &mut attr)
}

/// Loads a program (license "GPL"). With `log = Some((level, buffer))` the
/// verifier writes its log into `buffer` (NUL-terminated).
pub fn prog_load(request: &ProgLoad, log: Option<(u32, &mut [u8])>) -> io::Result<OwnedFd> {
    prog_load_with_btf(request, None, log)
}

/// [`prog_load`] with program BTF (func_info for callbacks, line_info so
/// the verifier's log quotes script lines).
pub fn prog_load_with_btf(
    request: &ProgLoad,
    btf: Option<&ProgBtf>,
    log: Option<(u32, &mut [u8])>,
) -> io::Result<OwnedFd> {
    const LICENSE: &[u8] = b"GPL\0";
    let (log_level, log_buf, log_size) = match log {
        Some((level, buffer)) if !buffer.is_empty() => (
            level,
            buffer.as_mut_ptr() as u64,
            buffer.len().min(u32::MAX as usize) as u32,
        ),
        _ => (0, 0, 0),
    };
    let mut attr = ProgLoadAttr {
        prog_type: request.prog_type,
        insn_cnt: u32::try_from(request.insns.len()).map_err(|_| invalid("program too long"))?,
        insns: request.insns.as_ptr() as u64,
        license: LICENSE.as_ptr() as u64,
        log_level,
        log_size,
        log_buf,
        prog_name: object_name(request.name),
        expected_attach_type: request.expected_attach_type,
        attach_btf_id: request.attach_btf_id,
        attach_btf_obj_fd: request.attach_btf_obj.map_or(0, |fd| fd.as_raw_fd() as u32),
        ..Default::default()
    };
    if let Some(btf) = btf {
        attr.prog_btf_fd = btf.fd.as_raw_fd() as u32;
        if !btf.func_info.is_empty() {
            attr.func_info_rec_size = btf.func_info_rec_size;
            attr.func_info = btf.func_info.as_ptr() as u64;
            attr.func_info_cnt = (btf.func_info.len() / btf.func_info_rec_size as usize) as u32;
        }
        if !btf.line_info.is_empty() {
            attr.line_info_rec_size = btf.line_info_rec_size;
            attr.line_info = btf.line_info.as_ptr() as u64;
            attr.line_info_cnt = (btf.line_info.len() / btf.line_info_rec_size as usize) as u32;
        }
    }
    bpf_fd(BPF_PROG_LOAD, &mut attr)
}

/// The prefix of `bpf_prog_info` up to `recursion_misses`.
#[repr(C)]
#[derive(Clone, Copy)]
struct ProgInfoRaw {
    prog_type: u32,
    id: u32,
    _skip: [u8; 56],
    name: [u8; OBJ_NAME_LEN],
    _skip2: [u8; 112],
    run_time_ns: u64,
    run_cnt: u64,
    recursion_misses: u64,
}

impl Default for ProgInfoRaw {
    fn default() -> Self {
        ProgInfoRaw {
            prog_type: 0,
            id: 0,
            _skip: [0; 56],
            name: [0; OBJ_NAME_LEN],
            _skip2: [0; 112],
            run_time_ns: 0,
            run_cnt: 0,
            recursion_misses: 0,
        }
    }
}

/// Turns on `run_cnt`/`run_time_ns` counting for every BPF program for as
/// long as the returned fd is open (BPF_ENABLE_STATS; the fd form of
/// `kernel.bpf_stats_enabled`, undone when the process goes away).
pub fn enable_run_stats() -> io::Result<OwnedFd> {
    const BPF_ENABLE_STATS: u32 = 32;
    const BPF_STATS_RUN_TIME: u32 = 0;
    #[repr(C)]
    struct EnableStatsAttr {
        stats_type: u32,
    }
    let mut attr = EnableStatsAttr {
        stats_type: BPF_STATS_RUN_TIME,
    };
    bpf_fd(BPF_ENABLE_STATS, &mut attr)
}

/// Run statistics of a loaded program. `run_cnt`/`run_time_ns` count only
/// while `kernel.bpf_stats_enabled` is on; recursion misses always count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ProgInfo {
    pub prog_type: u32,
    pub id: u32,
    pub run_time_ns: u64,
    pub run_cnt: u64,
    /// Runs skipped because a BPF program was already running on that CPU.
    pub recursion_misses: u64,
}

pub fn prog_info(fd: BorrowedFd) -> io::Result<ProgInfo> {
    let raw: ProgInfoRaw = obj_info(fd)?;
    Ok(ProgInfo {
        prog_type: raw.prog_type,
        id: raw.id,
        run_time_ns: raw.run_time_ns,
        run_cnt: raw.run_cnt,
        recursion_misses: raw.recursion_misses,
    })
}

/// The `test` member of `union bpf_attr` (BPF_PROG_TEST_RUN).
#[repr(C)]
#[derive(Default)]
struct TestRunAttr {
    prog_fd: u32,
    retval: u32,
    data_size_in: u32,
    data_size_out: u32,
    data_in: u64,
    data_out: u64,
    repeat: u32,
    duration: u32,
    ctx_size_in: u32,
    ctx_size_out: u32,
    ctx_in: u64,
    ctx_out: u64,
    flags: u32,
    cpu: u32,
    batch_size: u32,
    _pad: u32,
}

/// `BPF_F_TEST_RUN_ON_CPU`: run on `cpu` instead of the caller's CPU.
const BPF_F_TEST_RUN_ON_CPU: u32 = 1;

/// What BPF_PROG_TEST_RUN gives a program: packet `data` (socket
/// filters), a `ctx` (a raw tracepoint's argument words), and where to run.
#[derive(Debug, Default, Clone, Copy)]
pub struct TestRun<'a> {
    pub data: &'a [u8],
    pub ctx: &'a [u64],
    /// Run on this CPU rather than the caller's.
    pub cpu: Option<u32>,
}

/// Runs a loaded program once with BPF_PROG_TEST_RUN (tests drive the
/// emitted code this way); returns the program's return value.
pub fn prog_test_run(prog: BorrowedFd, run: &TestRun) -> io::Result<u32> {
    let mut attr = TestRunAttr {
        prog_fd: prog.as_raw_fd() as u32,
        data_size_in: u32::try_from(run.data.len()).map_err(|_| invalid("data too large"))?,
        data_in: if run.data.is_empty() {
            0
        } else {
            run.data.as_ptr() as u64
        },
        ctx_size_in: u32::try_from(size_of_val(run.ctx)).map_err(|_| invalid("ctx too large"))?,
        ctx_in: if run.ctx.is_empty() {
            0
        } else {
            run.ctx.as_ptr() as u64
        },
        // repeat 0: once (raw tracepoint runs refuse any other value).
        repeat: 0,
        flags: if run.cpu.is_some() {
            BPF_F_TEST_RUN_ON_CPU
        } else {
            0
        },
        cpu: run.cpu.unwrap_or(0),
        ..Default::default()
    };
    bpf(BPF_PROG_TEST_RUN, &mut attr)?;
    Ok(attr.retval)
}

/// The prefix of `struct bpf_link_info` up to a perf-event kprobe's
/// `missed` count (Linux 6.7).
#[repr(C)]
#[derive(Default)]
struct LinkInfoKprobe {
    link_type: u32,
    id: u32,
    prog_id: u32,
    _pad: u32,
    perf_event_type: u32,
    _pad2: u32,
    func_name: u64,
    name_len: u32,
    offset: u32,
    addr: u64,
    missed: u64,
}

const BPF_LINK_TYPE_PERF_EVENT: u32 = 7;
const BPF_PERF_EVENT_KPROBE: u32 = 3;
const BPF_PERF_EVENT_KRETPROBE: u32 = 4;

/// How often the kprobe behind perf-event link `link` was hit but could not
/// run its program (another kprobe was running on that CPU), or `None` when
/// the kernel does not say (before 6.7, or not a kprobe link).
pub fn kprobe_link_missed(link: BorrowedFd) -> io::Result<Option<u64>> {
    let mut info = LinkInfoKprobe::default();
    let mut attr = InfoAttr {
        bpf_fd: link.as_raw_fd() as u32,
        info_len: size_of::<LinkInfoKprobe>() as u32,
        info: &mut info as *mut LinkInfoKprobe as u64,
    };
    bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr)?;
    // The kernel writes back how much of the struct it knows.
    let known = attr.info_len as usize >= size_of::<LinkInfoKprobe>();
    let kprobe = matches!(
        info.perf_event_type,
        BPF_PERF_EVENT_KPROBE | BPF_PERF_EVENT_KRETPROBE
    );
    Ok((known && info.link_type == BPF_LINK_TYPE_PERF_EVENT && kprobe).then_some(info.missed))
}

// ---- attaching -----------------------------------------------------------

#[repr(C)]
struct RawTracepointAttr {
    name: u64,
    prog_fd: u32,
    _pad: u32,
}

/// Attaches a raw tracepoint program to `name` (`sys_enter`), or a tracing
/// (fentry/fexit/tp_btf) program to its load-time target with `None`.
/// Closing the returned link detaches.
pub fn raw_tracepoint_open(prog: BorrowedFd, name: Option<&str>) -> io::Result<OwnedFd> {
    let name = name.map(cstring).transpose()?;
    let mut attr = RawTracepointAttr {
        name: name.as_ref().map_or(0, |n| n.as_ptr() as u64),
        prog_fd: prog.as_raw_fd() as u32,
        _pad: 0,
    };
    bpf_fd(BPF_RAW_TRACEPOINT_OPEN, &mut attr)
}

#[repr(C)]
struct LinkCreateAttr {
    prog_fd: u32,
    target_fd: u32,
    attach_type: u32,
    flags: u32,
    target_btf_id: u32,
    _pad: u32,
}

/// BPF_LINK_CREATE: `target` is a perf event fd for `BPF_PERF_EVENT`, or
/// none for tracing programs (then attached where they were loaded for).
pub fn link_create(
    prog: BorrowedFd,
    target: Option<BorrowedFd>,
    attach_type: u32,
) -> io::Result<OwnedFd> {
    let mut attr = LinkCreateAttr {
        prog_fd: prog.as_raw_fd() as u32,
        target_fd: target.map_or(0, |fd| fd.as_raw_fd() as u32),
        attach_type,
        flags: 0,
        target_btf_id: 0,
        _pad: 0,
    };
    bpf_fd(BPF_LINK_CREATE, &mut attr)
}

#[repr(C)]
struct LinkCreatePerfEventAttr {
    prog_fd: u32,
    target_fd: u32,
    attach_type: u32,
    flags: u32,
    // `link_create.perf_event`.
    bpf_cookie: u64,
}

/// BPF_LINK_CREATE of `prog` on the perf event `event` (Linux 5.15),
/// with the value `bpf_get_attach_cookie` returns in it.
pub fn link_create_perf_event(
    prog: BorrowedFd,
    event: BorrowedFd,
    cookie: u64,
) -> io::Result<OwnedFd> {
    let mut attr = LinkCreatePerfEventAttr {
        prog_fd: prog.as_raw_fd() as u32,
        target_fd: event.as_raw_fd() as u32,
        attach_type: BPF_PERF_EVENT,
        flags: 0,
        bpf_cookie: cookie,
    };
    bpf_fd(BPF_LINK_CREATE, &mut attr)
}

#[repr(C)]
struct LinkCreateNetfilterAttr {
    prog_fd: u32,
    target_fd: u32,
    attach_type: u32,
    flags: u32,
    // `link_create.netfilter`.
    pf: u32,
    hooknum: u32,
    priority: i32,
    netfilter_flags: u32,
}

/// BPF_LINK_CREATE of a netfilter program on hook `hooknum` of protocol
/// family `pf` (`NFPROTO_*`), in the caller's network namespace.
pub fn link_create_netfilter(
    prog: BorrowedFd,
    pf: u32,
    hooknum: u32,
    priority: i32,
) -> io::Result<OwnedFd> {
    let mut attr = LinkCreateNetfilterAttr {
        prog_fd: prog.as_raw_fd() as u32,
        target_fd: 0,
        attach_type: BPF_NETFILTER,
        flags: 0,
        pf,
        hooknum,
        priority,
        netfilter_flags: 0,
    };
    bpf_fd(BPF_LINK_CREATE, &mut attr)
}

#[repr(C)]
struct LinkCreateKprobeMultiAttr {
    prog_fd: u32,
    target_fd: u32,
    attach_type: u32,
    flags: u32,
    // `link_create.kprobe_multi`.
    multi_flags: u32,
    cnt: u32,
    syms: u64,
    addrs: u64,
    cookies: u64,
}

/// `BPF_F_KPROBE_MULTI_RETURN`: the link fires on return (kretprobes).
const BPF_F_KPROBE_MULTI_RETURN: u32 = 1;

/// BPF_LINK_CREATE of a kprobe program (loaded with expected attach type
/// `BPF_TRACE_KPROBE_MULTI`) on every function in `symbols` at once, one
/// fprobe for all of them (Linux 5.18 and later, `CONFIG_FPROBE`). The
/// kernel refuses the whole link if one symbol cannot be probed.
///
/// `cookies` (one per symbol) are what `bpf_get_attach_cookie` returns
/// when the program runs for that function.
pub fn link_create_kprobe_multi(
    prog: BorrowedFd,
    symbols: &[std::ffi::CString],
    cookies: &[u64],
    is_return: bool,
) -> io::Result<OwnedFd> {
    assert_eq!(symbols.len(), cookies.len(), "one cookie per symbol");
    let pointers: Vec<*const std::ffi::c_char> = symbols.iter().map(|s| s.as_ptr()).collect();
    let mut attr = LinkCreateKprobeMultiAttr {
        prog_fd: prog.as_raw_fd() as u32,
        target_fd: 0,
        attach_type: BPF_TRACE_KPROBE_MULTI,
        flags: 0,
        multi_flags: if is_return {
            BPF_F_KPROBE_MULTI_RETURN
        } else {
            0
        },
        cnt: pointers.len() as u32,
        syms: pointers.as_ptr() as u64,
        addrs: 0,
        cookies: cookies.as_ptr() as u64,
    };
    bpf_fd(BPF_LINK_CREATE, &mut attr)
}

// ---- BTF objects ---------------------------------------------------------

#[repr(C)]
#[derive(Default)]
struct BtfInfoRaw {
    btf: u64,
    btf_size: u32,
    id: u32,
    name: u64,
    name_len: u32,
    kernel_btf: u32,
}

/// An fd for the kernel BTF object named `module` (a loaded module's BTF),
/// for `attach_btf_obj_fd`; `Ok(None)` if no loaded BTF has that name.
pub fn kernel_btf_fd(module: &str) -> io::Result<Option<OwnedFd>> {
    let mut id = 0u32;
    loop {
        let mut attr = NextIdAttr {
            start_id: id,
            next_id: 0,
            open_flags: 0,
        };
        match bpf(BPF_BTF_GET_NEXT_ID, &mut attr) {
            Ok(_) => id = attr.next_id,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(None),
            Err(e) => return Err(e),
        }
        let mut by_id = NextIdAttr {
            start_id: id,
            next_id: 0,
            open_flags: 0,
        };
        let fd = match bpf_fd(BPF_BTF_GET_FD_BY_ID, &mut by_id) {
            Ok(fd) => fd,
            // Unloaded between the two calls.
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => continue,
            Err(e) => return Err(e),
        };
        let mut name = [0u8; 64];
        let mut info = BtfInfoRaw {
            name: name.as_mut_ptr() as u64,
            name_len: name.len() as u32,
            ..Default::default()
        };
        let mut attr = InfoAttr {
            bpf_fd: fd.as_raw_fd() as u32,
            info_len: size_of::<BtfInfoRaw>() as u32,
            info: &mut info as *mut BtfInfoRaw as u64,
        };
        bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr)?;
        let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
        if info.kernel_btf != 0 && &name[..end] == module.as_bytes() {
            return Ok(Some(fd));
        }
    }
}

/// `bpf_attr` for the *_GET_NEXT_ID and *_GET_FD_BY_ID commands.
#[repr(C)]
struct NextIdAttr {
    start_id: u32,
    next_id: u32,
    open_flags: u32,
}

// ---- perf events -----------------------------------------------------------

/// `struct perf_event_attr` (PERF_ATTR_SIZE_VER7, 128 bytes).
#[repr(C)]
#[derive(Default, Clone, Copy)]
struct PerfEventAttr {
    perf_type: u32,
    size: u32,
    config: u64,
    sample_period_or_freq: u64,
    sample_type: u64,
    read_format: u64,
    flags: u64,
    wakeup_events: u32,
    bp_type: u32,
    config1: u64,
    config2: u64,
    branch_sample_type: u64,
    sample_regs_user: u64,
    sample_stack_user: u32,
    clockid: i32,
    sample_regs_intr: u64,
    aux_watermark: u32,
    sample_max_stack: u16,
    _reserved_2: u16,
    aux_sample_size: u32,
    _reserved_3: u32,
    sig_data: u64,
}

/// What to open with [`perf_event_open`].
#[derive(Debug, Clone, Default)]
pub struct PerfEvent {
    pub perf_type: u32,
    pub config: u64,
    /// Sample every N events (or ns for the clock events); 0 for
    /// tracepoints and probes, which fire on every hit.
    pub sample_period: u64,
    /// Sample N times a second instead of by period.
    pub sample_freq: Option<u64>,
    /// kprobe/uprobe PMUs: the function name or binary path (`config1`).
    pub probe_name: Option<String>,
    /// kprobe/uprobe PMUs: the offset (`config2`).
    pub probe_offset: u64,
}

/// perf_event_open(attr, pid, cpu, -1, CLOEXEC), opened disabled: attach a
/// program, then [`perf_event_enable`].
pub fn perf_event_open(event: &PerfEvent, pid: i32, cpu: i32) -> io::Result<OwnedFd> {
    let name = event.probe_name.as_deref().map(cstring).transpose()?;
    let mut attr = PerfEventAttr {
        perf_type: event.perf_type,
        size: size_of::<PerfEventAttr>() as u32,
        config: event.config,
        sample_period_or_freq: event.sample_freq.unwrap_or(event.sample_period),
        flags: PERF_ATTR_DISABLED
            | if event.sample_freq.is_some() {
                PERF_ATTR_FREQ
            } else {
                0
            },
        wakeup_events: 1,
        config1: name.as_ref().map_or(0, |n| n.as_ptr() as u64),
        config2: event.probe_offset,
        ..Default::default()
    };
    // SAFETY: attr is a live perf_event_attr with its own size in `size`;
    // config1 points to a NUL-terminated string alive until after the call.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            &mut attr as *mut PerfEventAttr,
            pid as libc::pid_t,
            cpu as libc::c_int,
            -1 as libc::c_int,
            PERF_FLAG_FD_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new fd from the kernel that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// PERF_EVENT_IOC_SET_BPF: run `prog` on each event of `event`.
pub fn perf_event_set_bpf(event: BorrowedFd, prog: BorrowedFd) -> io::Result<()> {
    // SAFETY: the ioctl takes the program fd by value; event is a perf fd
    // we hold (a wrong kind of fd gets ENOTTY, not memory access).
    let ret = unsafe {
        libc::ioctl(
            event.as_raw_fd(),
            PERF_EVENT_IOC_SET_BPF as _,
            prog.as_raw_fd() as libc::c_int,
        )
    };
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

pub fn perf_event_enable(event: BorrowedFd) -> io::Result<()> {
    perf_event_switch(event, PERF_EVENT_IOC_ENABLE)
}

pub fn perf_event_disable(event: BorrowedFd) -> io::Result<()> {
    perf_event_switch(event, PERF_EVENT_IOC_DISABLE)
}

fn perf_event_switch(event: BorrowedFd, request: libc::c_ulong) -> io::Result<()> {
    // SAFETY: ENABLE and DISABLE take an integer argument (0) and touch no
    // memory.
    let ret = unsafe { libc::ioctl(event.as_raw_fd(), request as _, 0) };
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// A short errno name (`EPERM`) for error messages.
pub fn errno_name(error: &io::Error) -> String {
    match error.raw_os_error() {
        Some(libc::EPERM) => "EPERM".into(),
        Some(libc::EACCES) => "EACCES".into(),
        Some(libc::EINVAL) => "EINVAL".into(),
        Some(libc::ENOENT) => "ENOENT".into(),
        Some(libc::ESRCH) => "ESRCH".into(),
        Some(libc::E2BIG) => "E2BIG".into(),
        Some(libc::ENOSPC) => "ENOSPC".into(),
        Some(libc::ENOMEM) => "ENOMEM".into(),
        Some(libc::EBUSY) => "EBUSY".into(),
        Some(libc::EEXIST) => "EEXIST".into(),
        Some(libc::ENOSYS) => "ENOSYS".into(),
        Some(libc::EOPNOTSUPP) => "EOPNOTSUPP".into(),
        // The kernel's internal ENOTSUPP leaks out of bpf().
        Some(524) => "ENOTSUPP".into(),
        Some(other) => format!("errno {other}"),
        None => "error".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attribute_structs_match_the_uapi_sizes() {
        // Offsets checked against linux/bpf.h and linux/perf_event.h.
        assert_eq!(size_of::<PerfEventAttr>(), 128);
        assert_eq!(std::mem::offset_of!(PerfEventAttr, config1), 56);
        assert_eq!(std::mem::offset_of!(MapCreateAttr, map_name), 28);
        assert_eq!(std::mem::offset_of!(ProgLoadAttr, attach_btf_id), 108);
        assert_eq!(std::mem::offset_of!(ProgLoadAttr, prog_btf_fd), 72);
        assert_eq!(std::mem::offset_of!(ProgLoadAttr, line_info_cnt), 104);
        assert_eq!(std::mem::offset_of!(BtfLoadAttr, btf_log_level), 24);
        assert_eq!(std::mem::offset_of!(BatchAttr, flags), 48);
        assert_eq!(std::mem::offset_of!(MapInfo, name), 24);
        assert_eq!(std::mem::offset_of!(ProgInfoRaw, name), 64);
        assert_eq!(std::mem::offset_of!(ProgInfoRaw, run_time_ns), 192);
        assert_eq!(std::mem::offset_of!(ProgInfoRaw, recursion_misses), 208);
        assert_eq!(std::mem::offset_of!(BtfInfoRaw, kernel_btf), 28);
        assert_eq!(std::mem::offset_of!(TestRunAttr, batch_size), 72);
    }

    #[test]
    fn cpu_lists_parse() {
        assert_eq!(parse_cpu_list("0-1\n"), Some(vec![0, 1]));
        assert_eq!(parse_cpu_list("0,2-3,7"), Some(vec![0, 2, 3, 7]));
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("x"), None);
    }

    #[test]
    fn object_names_are_cut_and_cleaned() {
        assert_eq!(&object_name("stap_p0")[..8], b"stap_p0\0");
        let long = object_name("a_very_long_program_name");
        assert_eq!(&long[..15], b"a_very_long_pro");
        assert_eq!(long[15], 0);
        assert_eq!(&object_name("a-b:c")[..6], b"a_b_c\0");
    }

    #[test]
    fn per_cpu_values_round_up_per_cpu() {
        let info = MapInfo {
            map_type: BPF_MAP_TYPE_PERCPU_ARRAY,
            value_size: 12,
            ..Default::default()
        };
        assert_eq!(info.value_len().unwrap(), 16 * possible_cpus().unwrap());
        let plain = MapInfo {
            map_type: BPF_MAP_TYPE_HASH,
            value_size: 12,
            ..Default::default()
        };
        assert_eq!(plain.value_len().unwrap(), 12);
    }
}
