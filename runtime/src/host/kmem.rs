//! Kernel memory read from the host, for `%m`/`%M`, `kernel_long()`,
//! `kernel_string()` and `@cast(...)->member` in host probes. stap reads
//! it from its kernel module; a user process has two routes, tried in this
//! order on the first read:
//!
//! - a one-shot BPF program (a raw tracepoint program run with
//!   BPF_PROG_TEST_RUN, never attached) that calls `bpf_probe_read_kernel`
//!   into a one-entry array map: the kernel probes' own read, so a fault is
//!   a fault exactly where it would be one there;
//! - /proc/kcore (a kernel built with CONFIG_PROC_KCORE, no lockdown),
//!   where unbacked pages inside a segment (vmalloc holes) read as zeros.
//!
//! Both need root. Where neither works every read faults, in stap's
//! wording.

use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

use stap_lang::bpf::insn::{self, FP, Insn, R0, R1, R2, R3, R4, R6, helper};
use stap_lang::bpf::{MapRole, MapSpec};

use crate::sys;

pub struct KernelMemory {
    kcore: PathBuf,
    /// Try the BPF route first (the default; tests of the kcore parser
    /// turn it off).
    bpf: bool,
    /// `None` until the first read; `Some(None)` when no route works.
    route: Option<Option<Route>>,
}

enum Route {
    Bpf(Reader),
    Kcore(Image),
}

/// /proc/kcore's ELF program headers: which file range holds which
/// kernel virtual addresses.
struct Image {
    file: File,
    /// (virtual address, file offset, size) of each PT_LOAD segment.
    segments: Vec<(u64, u64, u64)>,
}

/// The reading program and the map it reads into.
struct Reader {
    prog: OwnedFd,
    buffer: OwnedFd,
}

const PT_LOAD: u32 = 1;
const PAGE: u64 = 4096;
/// The reader's buffer: a page and a string's NUL, rounded up.
const BUFFER: usize = 2 * PAGE as usize;

impl Default for KernelMemory {
    fn default() -> KernelMemory {
        KernelMemory {
            kcore: PathBuf::from("/proc/kcore"),
            bpf: true,
            route: None,
        }
    }
}

impl KernelMemory {
    /// Only a kcore-format ELF file elsewhere (tests).
    pub fn from_path(path: impl Into<PathBuf>) -> KernelMemory {
        KernelMemory {
            kcore: path.into(),
            bpf: false,
            route: None,
        }
    }

    fn route(&mut self) -> Option<&Route> {
        let (kcore, bpf) = (&self.kcore, self.bpf);
        self.route
            .get_or_insert_with(|| {
                let reader = if bpf { Reader::load() } else { None };
                reader
                    .map(Route::Bpf)
                    .or_else(|| open(kcore).map(Route::Kcore))
            })
            .as_ref()
    }

    /// `len` bytes at kernel address `addr`; `None` if they cannot be read.
    pub fn read(&mut self, addr: u64, len: usize) -> Option<Vec<u8>> {
        match self.route()? {
            Route::Kcore(image) => image.read(addr, len),
            Route::Bpf(reader) => {
                let mut bytes = Vec::with_capacity(len);
                while bytes.len() < len {
                    let at = addr.checked_add(bytes.len() as u64)?;
                    let chunk = (len - bytes.len()).min(PAGE as usize);
                    bytes.extend_from_slice(&reader.read(at, chunk, false)?);
                }
                Some(bytes)
            }
        }
    }

    /// The NUL-terminated string at `addr`, at most `max` bytes of it
    /// (without the NUL); `None` if a byte before its end cannot be read.
    /// Read a page at a time, so a short string near the end of a mapping
    /// does not fault on the bytes past it.
    pub fn read_string(&mut self, addr: u64, max: usize) -> Option<Vec<u8>> {
        let mut text = Vec::new();
        let mut at = addr;
        while text.len() < max {
            let to_page_end = (PAGE - at % PAGE) as usize;
            let want = to_page_end.min(max - text.len());
            let chunk = match self.route()? {
                Route::Kcore(image) => image.read_up_to(at, want)?,
                // The helper stops at the NUL and writes one.
                Route::Bpf(reader) => reader.read(at, want + 1, true)?,
            };
            // The BPF helper always writes a NUL, at `want` when the string
            // goes on: that one is not the end.
            match chunk.iter().position(|&b| b == 0) {
                Some(nul) if nul < want => {
                    text.extend_from_slice(&chunk[..nul]);
                    return Some(text);
                }
                _ => text.extend_from_slice(&chunk[..want.min(chunk.len())]),
            }
            at = at.checked_add(want.min(chunk.len()) as u64)?;
        }
        Some(text)
    }
}

impl Image {
    /// Up to `len` bytes at `addr`: fewer where its segment ends first.
    fn read_up_to(&self, addr: u64, len: usize) -> Option<Vec<u8>> {
        let &(vaddr, _, size) = self
            .segments
            .iter()
            .find(|(vaddr, _, size)| addr >= *vaddr && addr < vaddr.saturating_add(*size))?;
        let left = vaddr.saturating_add(size) - addr;
        self.read(addr, len.min(left as usize))
    }

    fn read(&self, addr: u64, len: usize) -> Option<Vec<u8>> {
        let end = addr.checked_add(len as u64)?;
        let &(vaddr, offset, _) = self
            .segments
            .iter()
            .find(|(vaddr, _, size)| addr >= *vaddr && end <= vaddr.saturating_add(*size))?;
        let mut bytes = vec![0u8; len];
        self.file
            .read_exact_at(&mut bytes, offset + (addr - vaddr))
            .ok()?;
        Some(bytes)
    }
}

impl Reader {
    /// The map and the program; `None` where the kernel refuses either
    /// (no root, no BPF, no raw tracepoint test runs before Linux 5.10).
    fn load() -> Option<Reader> {
        let spec = MapSpec {
            name: "stap_kmem".into(),
            map_type: sys::BPF_MAP_TYPE_ARRAY,
            key_size: 4,
            value_size: BUFFER as u32,
            max_entries: 1,
            flags: 0,
            role: MapRole::Scratch,
        };
        let buffer = sys::map_create(&spec).ok()?;
        let code = program(buffer.as_raw_fd());
        let request = sys::ProgLoad {
            prog_type: sys::BPF_PROG_TYPE_RAW_TRACEPOINT,
            expected_attach_type: 0,
            name: "stap_kmem",
            insns: &code,
            attach_btf_id: 0,
            attach_btf_obj: None,
        };
        let prog = sys::prog_load(&request, None).ok()?;
        Some(Reader { prog, buffer })
    }

    /// `len` (at most [`BUFFER`]) bytes at `addr`, or the string there
    /// (its bytes and NUL, up to `len` with the NUL).
    fn read(&self, addr: u64, len: usize, string: bool) -> Option<Vec<u8>> {
        let ctx = [addr, len as u64, u64::from(string)];
        let run = sys::TestRun {
            ctx: &ctx,
            ..sys::TestRun::default()
        };
        // The helpers' result: 0 or the string's length with its NUL, or a
        // negative errno.
        let result = sys::prog_test_run(self.prog.as_fd(), &run).ok()? as i32;
        if result < 0 {
            return None;
        }
        let mut value = vec![0u8; BUFFER];
        if !sys::map_lookup(self.buffer.as_fd(), &0u32.to_ne_bytes(), &mut value).ok()? {
            return None;
        }
        let got = if string { result as usize } else { len };
        value.truncate(got.min(len));
        Some(value)
    }
}

/// The reader: ctx words are (address, length, string?). It reads into the
/// map's one value and returns the helper's result.
fn program(map_fd: i32) -> Vec<u64> {
    let [map_lo, map_hi] = Insn::ld_map_fd(R1);
    let code = [
        Insn::mov_reg(R6, R1),
        Insn::store_imm(insn::W, FP, -4, 0),
        Insn {
            imm: map_fd,
            ..map_lo
        },
        map_hi,
        Insn::mov_reg(R2, FP),
        Insn::alu64_imm(insn::ADD, R2, -4),
        Insn::call(helper::MAP_LOOKUP_ELEM),
        Insn::jump_imm(insn::JEQ, R0, 0, 10), // to `fail`
        Insn::mov_reg(R1, R0),
        Insn::load(insn::DW, R2, R6, 8),
        Insn::jump_imm(insn::JGT, R2, BUFFER as i32, 7), // to `fail`
        Insn::load(insn::DW, R3, R6, 0),
        Insn::load(insn::DW, R4, R6, 16),
        Insn::jump_imm(insn::JNE, R4, 0, 2), // to the string read
        Insn::call(helper::PROBE_READ_KERNEL),
        Insn::exit(),
        Insn::call(helper::PROBE_READ_KERNEL_STR),
        Insn::exit(),
        // fail: -EFAULT
        Insn::mov_imm(R0, -14),
        Insn::exit(),
    ];
    code.iter().map(|i| i.encode()).collect()
}

fn open(path: &PathBuf) -> Option<Image> {
    let file = File::open(path).ok()?;
    let mut header = [0u8; 64];
    file.read_exact_at(&mut header, 0).ok()?;
    // ELF64, little-endian (x86_64 and arm64 kcore).
    if &header[..4] != b"\x7fELF" || header[4] != 2 || header[5] != 1 {
        return None;
    }
    let u16_at = |b: &[u8], at: usize| u16::from_le_bytes([b[at], b[at + 1]]);
    let u64_at =
        |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap_or([0; 8]));
    let phoff = u64_at(&header, 0x20);
    let phentsize = u16_at(&header, 0x36) as usize;
    let phnum = u16_at(&header, 0x38) as usize;
    if phentsize < 56 {
        return None;
    }
    let mut table = vec![0u8; phentsize * phnum];
    file.read_exact_at(&mut table, phoff).ok()?;
    let segments = table
        .chunks_exact(phentsize)
        .filter(|ph| u32::from_le_bytes([ph[0], ph[1], ph[2], ph[3]]) == PT_LOAD)
        .map(|ph| (u64_at(ph, 16), u64_at(ph, 8), u64_at(ph, 32)))
        .collect();
    Some(Image { file, segments })
}
