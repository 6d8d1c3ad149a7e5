//! Kernel memory read from the host, for `%m`/`%M` in host probes: stap
//! reads it from its kernel module; a user process can read it only
//! through /proc/kcore (root, a kernel built with CONFIG_PROC_KCORE, and no
//! lockdown). Where that is missing every read faults, in stap's wording.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

/// /proc/kcore's ELF program headers: which file range holds which
/// kernel virtual addresses.
pub struct KernelMemory {
    path: PathBuf,
    /// `None` until the first read; `Some(None)` when kcore is unusable.
    image: Option<Option<Image>>,
}

struct Image {
    file: File,
    /// (virtual address, file offset, size) of each PT_LOAD segment.
    segments: Vec<(u64, u64, u64)>,
}

const PT_LOAD: u32 = 1;

impl Default for KernelMemory {
    fn default() -> KernelMemory {
        KernelMemory::from_path("/proc/kcore")
    }
}

impl KernelMemory {
    /// A kcore-format ELF file elsewhere (tests).
    pub fn from_path(path: impl Into<PathBuf>) -> KernelMemory {
        KernelMemory {
            path: path.into(),
            image: None,
        }
    }

    /// `len` bytes at kernel address `addr`; `None` if they cannot be read.
    pub fn read(&mut self, addr: u64, len: usize) -> Option<Vec<u8>> {
        let path = &self.path;
        let image = self.image.get_or_insert_with(|| open(path)).as_ref()?;
        let end = addr.checked_add(len as u64)?;
        let &(vaddr, offset, _) = image
            .segments
            .iter()
            .find(|(vaddr, _, size)| addr >= *vaddr && end <= vaddr.saturating_add(*size))?;
        let mut bytes = vec![0u8; len];
        image
            .file
            .read_exact_at(&mut bytes, offset + (addr - vaddr))
            .ok()?;
        Some(bytes)
    }
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
