//! User-space address to symbol: the process's mappings from
//! `/proc/PID/maps`, then the mapped file's ELF symbols (`.symtab`, else
//! `.dynsym`) through `object`. Files are read once and kept.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use object::{Object, ObjectSegment, ObjectSymbol, SymbolKind};

/// One function or data symbol of an ELF file: its virtual address range.
#[derive(Debug, Clone)]
struct Function {
    addr: u64,
    size: u64,
    name: String,
}

/// What a mapped file gives: its function symbols sorted by address and
/// its loadable segments (`(file offset, virtual address, file size)`).
#[derive(Debug, Default)]
struct ElfSymbols {
    functions: Vec<Function>,
    segments: Vec<(u64, u64, u64)>,
}

#[derive(Default)]
pub struct UserSymbols {
    files: HashMap<PathBuf, ElfSymbols>,
}

/// A mapping of `/proc/PID/maps`.
struct Mapping {
    start: u64,
    end: u64,
    offset: u64,
    path: PathBuf,
}

/// What one address of a process is: its symbol (name, offset into it,
/// size) if one covers it, and the file mapped there.
struct Found {
    symbol: Option<(String, u64, u64)>,
    path: String,
}

/// How [`UserSymbols::describe`] names one address, as stap's functions
/// of one user address print it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddressText {
    /// `usymname`: the symbol, else the address in hex.
    Name,
    /// `usymdata`: `name+0xOFF/0xSIZE [file]`, else the address in hex.
    Data,
    /// `umodname`: the mapped file, else `<unknown>`.
    Module,
    /// One frame of `print_ubacktrace_brief`: `name+0xOFF`, else the
    /// address in hex.
    Brief,
}

impl UserSymbols {
    /// One frame of a user stack as `print_ustack` prints it (` 0xADDR :
    /// main+0x26/0x40 [/usr/bin/prog]`) with `full`, else as
    /// `sprint_ustack` (`main+0x26 [/usr/bin/prog]`); each ends in a
    /// newline. An address outside any file mapping (or of a process that
    /// has exited) prints as the address alone.
    pub fn frames(&mut self, tgid: u32, frames: &[u64], full: bool) -> String {
        let maps = read_maps(tgid);
        let mut out = String::new();
        for &addr in frames {
            let found = self
                .find(&maps, addr)
                .and_then(|f| Some((f.symbol?, f.path)));
            out.push_str(&match (found, full) {
                (Some(((name, off, size), path)), true) => {
                    format!(" 0x{addr:016x} : {name}+0x{off:x}/0x{size:x} [{path}]\n")
                }
                (Some(((name, off, _), path)), false) => format!("{name}+0x{off:x} [{path}]\n"),
                (None, true) => format!(" 0x{addr:016x}\n"),
                (None, false) => format!("0x{addr:x}\n"),
            });
        }
        if !full {
            out.pop();
        }
        out
    }

    /// One address of process `tgid`, named as `how` says.
    pub fn describe(&mut self, tgid: u32, addr: u64, how: AddressText) -> String {
        let maps = read_maps(tgid);
        let found = self.find(&maps, addr);
        let hex = format!("0x{addr:x}");
        match (how, found) {
            (AddressText::Module, Some(f)) => f.path,
            (AddressText::Module, None) => "<unknown>".into(),
            (
                _,
                Some(Found {
                    symbol: Some((name, off, size)),
                    path,
                }),
            ) => match how {
                AddressText::Data => format!("{name}+0x{off:x}/0x{size:x} [{path}]"),
                AddressText::Brief => format!("{name}+0x{off:x}"),
                _ => name,
            },
            _ => hex,
        }
    }

    /// The mapping of `maps` that holds `addr`, and the symbol of its file
    /// (functions and data objects) that covers it.
    fn find(&mut self, maps: &[Mapping], addr: u64) -> Option<Found> {
        let m = maps.iter().find(|m| (m.start..m.end).contains(&addr))?;
        let file_offset = addr - m.start + m.offset;
        let symbols = self
            .files
            .entry(m.path.clone())
            .or_insert_with(|| read_elf(&m.path));
        let symbol = symbols
            .segments
            .iter()
            .find(|(off, _, size)| (*off..off + size).contains(&file_offset))
            .map(|(off, vaddr, _)| vaddr + (file_offset - off))
            .and_then(|vaddr| {
                let index = symbols
                    .functions
                    .partition_point(|f| f.addr <= vaddr)
                    .checked_sub(1)?;
                let f = &symbols.functions[index];
                (vaddr < f.addr + f.size.max(1)).then(|| (f.name.clone(), vaddr - f.addr, f.size))
            });
        Some(Found {
            symbol,
            path: m.path.display().to_string(),
        })
    }
}

fn read_maps(tgid: u32) -> Vec<Mapping> {
    let Ok(text) = std::fs::read_to_string(format!("/proc/{tgid}/maps")) else {
        return Vec::new();
    };
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let (start, end) = fields.next()?.split_once('-')?;
            let _perms = fields.next()?;
            let offset = u64::from_str_radix(fields.next()?, 16).ok()?;
            let _dev = fields.next()?;
            let _inode = fields.next()?;
            let path = fields.next().filter(|p| p.starts_with('/'))?;
            Some(Mapping {
                start: u64::from_str_radix(start, 16).ok()?,
                end: u64::from_str_radix(end, 16).ok()?,
                offset,
                path: PathBuf::from(path),
            })
        })
        .collect()
}

fn read_elf(path: &Path) -> ElfSymbols {
    let Ok(data) = std::fs::read(path) else {
        return ElfSymbols::default();
    };
    let Ok(file) = object::File::parse(&*data) else {
        return ElfSymbols::default();
    };
    let segments = file
        .segments()
        .map(|s| {
            let (offset, size) = s.file_range();
            (offset, s.address(), size)
        })
        .collect();
    let symbols: Vec<_> = if file.symbols().next().is_some() {
        file.symbols().collect()
    } else {
        file.dynamic_symbols().collect()
    };
    let mut functions: Vec<Function> = symbols
        .iter()
        // Data objects too: usymdata() names a variable's address.
        .filter(|s| matches!(s.kind(), SymbolKind::Text | SymbolKind::Data) && s.address() != 0)
        .filter_map(|s| {
            Some(Function {
                addr: s.address(),
                size: s.size(),
                name: s.name().ok()?.to_string(),
            })
        })
        .collect();
    functions.sort_by_key(|f| f.addr);
    ElfSymbols {
        functions,
        segments,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This test binary's own stack: an address inside a function of it
    /// resolves to that function in the binary's path.
    #[test]
    fn resolves_an_address_of_this_process() {
        #[inline(never)]
        fn marker() -> u64 {
            marker as *const () as u64
        }
        let addr = marker();
        let mut symbols = UserSymbols::default();
        let text = symbols.frames(std::process::id(), &[addr], true);
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        assert!(text.contains(&format!("[{}]", exe.display())), "{text}");
        assert!(text.contains("marker"), "{text}");
        assert!(text.starts_with(&format!(" 0x{addr:016x} : ")), "{text}");
    }

    /// One address of this process, as usymname, usymdata and umodname
    /// name it; address 0 is in no mapping.
    #[test]
    fn describes_one_address_of_this_process() {
        #[inline(never)]
        fn marker() -> u64 {
            marker as *const () as u64
        }
        let addr = marker();
        let pid = std::process::id();
        let mut symbols = UserSymbols::default();
        let exe = std::fs::read_link("/proc/self/exe")
            .unwrap()
            .display()
            .to_string();
        let name = symbols.describe(pid, addr, AddressText::Name);
        assert!(name.contains("marker"), "{name}");
        let data = symbols.describe(pid, addr + 1, AddressText::Data);
        assert!(
            data.starts_with(&format!("{name}+0x1/0x")) && data.ends_with(&format!(" [{exe}]")),
            "{data}"
        );
        assert_eq!(symbols.describe(pid, addr, AddressText::Module), exe);
        assert_eq!(
            symbols.describe(pid, addr, AddressText::Brief),
            format!("{name}+0x0")
        );
        assert_eq!(symbols.describe(pid, 0, AddressText::Name), "0x0");
        assert_eq!(symbols.describe(pid, 0, AddressText::Module), "<unknown>");
    }
}
