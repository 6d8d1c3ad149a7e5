//! Kernel address to symbol, from `/proc/kallsyms`, read once on first use.
//!
//! Storage is compact because it is resident for the whole session (about
//! 120,000 text symbols on a distribution kernel): every name once in one
//! byte buffer, NUL-terminated, and a sorted index of 8-byte entries (the
//! address as an offset from the lowest one, and the name's offset).
//! Module symbols sit in their module's address range, so modules are a
//! short list of ranges rather than a field per symbol. The file is read
//! line by line, never whole, so the peak stays near what is kept.

use std::io::BufRead;
use std::path::PathBuf;
use std::thread::JoinHandle;

/// One symbol: its address (from the table's base) and name offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    addr: u32,
    name: u32,
}

#[derive(Debug, Default)]
struct Table {
    base: u64,
    /// Sorted by address.
    entries: Vec<Entry>,
    /// Names, each followed by a NUL.
    names: Vec<u8>,
    /// `(first, last address, name)` of each module's symbols.
    modules: Vec<(u64, u64, String)>,
}

/// What a lookup finds.
struct Found<'t> {
    name: &'t str,
    /// `None` for the kernel image itself.
    module: Option<&'t str>,
    offset: u64,
    size: u64,
}

pub struct Symbols {
    path: PathBuf,
    /// Text symbols sorted by address; `None` until first needed.
    table: Option<Table>,
    /// A read started by [`Symbols::preload`], joined on first use.
    loading: Option<JoinHandle<Table>>,
    /// The running kernel's DWARF for `symfileline`, opened on first use
    /// (`Err`: none, not looked for again).
    dwarf: Option<Result<crate::kdwarf::KernelDwarf, String>>,
}

impl Default for Symbols {
    fn default() -> Self {
        Symbols::new()
    }
}

impl Symbols {
    pub fn new() -> Symbols {
        Symbols::from_path("/proc/kallsyms")
    }

    /// A kallsyms-format file elsewhere (tests).
    pub fn from_path(path: impl Into<PathBuf>) -> Symbols {
        Symbols {
            path: path.into(),
            table: None,
            loading: None,
            dwarf: None,
        }
    }

    /// `symfileline`: the source file and line of a kernel address, from
    /// the running kernel's DWARF; `None` when there is none, or the
    /// address is in a module or in no function it describes. Run-time
    /// addresses are moved back to link time by the distance of `_text`
    /// (KASLR).
    pub fn file_line(&mut self, addr: u64) -> Option<(String, u64)> {
        let in_module = self.lookup(addr).is_some_and(|f| f.module.is_some());
        if in_module {
            return None;
        }
        let dwarf = self
            .dwarf
            .get_or_insert_with(crate::kdwarf::KernelDwarf::running)
            .as_ref()
            .ok()?;
        let linked = dwarf.symbol_address("_text")?;
        let loaded = kallsyms_address(&self.path, "_text")?;
        let address = addr.checked_sub(loaded)?.checked_add(linked)?;
        dwarf.address_line(address).ok().flatten()
    }

    /// Starts reading the table on another thread. The kernel takes tens
    /// of milliseconds to generate /proc/kallsyms, so a session starts this
    /// before attaching instead of paying for it on the start-up path or at
    /// the first event.
    pub fn preload(&mut self) {
        if self.table.is_none() && self.loading.is_none() {
            let path = self.path.clone();
            self.loading = Some(std::thread::spawn(move || read_table(&path)));
        }
    }

    /// `tcp_v4_rcv`, or the address in hex when no symbol covers it.
    pub fn name(&mut self, addr: u64) -> String {
        match self.lookup(addr) {
            Some(found) => found.name.to_string(),
            None => format!("0x{addr:x}"),
        }
    }

    /// `tcp_v4_rcv+0x91/0x1030 [kernel]`.
    pub fn data(&mut self, addr: u64) -> String {
        match self.lookup(addr) {
            Some(f) => format!(
                "{}+0x{:x}/0x{:x} [{}]",
                f.name,
                f.offset,
                f.size,
                f.module.unwrap_or("kernel")
            ),
            None => format!("0x{addr:x}"),
        }
    }

    /// One frame of a symbolized stack: with `full` as `print_stack` prints
    /// it (` 0xffffffff81a3b2c0 : tcp_v4_rcv+0x0/0x1030 [kernel]`), else as
    /// `sprint_stack` (`tcp_v4_rcv+0x0 [kernel]`); each ends in a newline.
    pub fn frame(&mut self, addr: u64, full: bool) -> String {
        match (self.lookup(addr), full) {
            (Some(f), true) => format!(
                " 0x{addr:016x} : {}+0x{:x}/0x{:x} [{}]\n",
                f.name,
                f.offset,
                f.size,
                f.module.unwrap_or("kernel")
            ),
            (Some(f), false) => format!(
                "{}+0x{:x} [{}]\n",
                f.name,
                f.offset,
                f.module.unwrap_or("kernel")
            ),
            (None, true) => format!(" 0x{addr:016x}\n"),
            (None, false) => format!("0x{addr:x}\n"),
        }
    }

    /// A kernel stack captured in a probe (innermost first), from the
    /// probed code outwards: the frames of the tracing machinery that ran
    /// the BPF program (the program itself, its trampoline, the tracepoint
    /// glue) come first in a capture and are dropped. `full` gives
    /// `print_stack`'s lines, else `sprint_stack`'s without the last
    /// newline.
    pub fn kernel_stack(&mut self, frames: &[u64], full: bool) -> String {
        // BPF code loaded after kallsyms was read resolves to nothing; with
        // no symbols at all every frame is kept.
        let first = frames
            .iter()
            .position(|&addr| {
                self.lookup(addr)
                    .is_some_and(|found| !is_machinery(found.name))
            })
            .unwrap_or(0);
        let mut out = String::new();
        for &addr in &frames[first..] {
            out.push_str(&self.frame(addr, full));
        }
        if !full {
            out.pop();
        }
        out
    }

    /// `kernel` or the module's name; stap prints `<unknown>` otherwise.
    pub fn module(&mut self, addr: u64) -> String {
        match self.lookup(addr) {
            Some(f) => f.module.unwrap_or("kernel").to_string(),
            None => "<unknown>".into(),
        }
    }

    /// The symbol covering `addr`, the offset into it and its size (the
    /// distance to the next symbol).
    fn lookup(&mut self, addr: u64) -> Option<Found<'_>> {
        if self.table.is_none() {
            let table = match self.loading.take() {
                Some(thread) => thread.join().unwrap_or_default(),
                None => read_table(&self.path),
            };
            self.table = Some(table);
        }
        self.table.as_ref()?.lookup(addr)
    }
}

/// The address kallsyms gives `name` (`_text`), read from its first lines.
fn kallsyms_address(path: &std::path::Path, name: &str) -> Option<u64> {
    use std::io::BufRead;
    let file = std::io::BufReader::new(std::fs::File::open(path).ok()?);
    file.lines().map_while(Result::ok).find_map(|line| {
        let mut fields = line.split_whitespace();
        let address = u64::from_str_radix(fields.next()?, 16).ok()?;
        (fields.nth(1)? == name).then_some(address)
    })
}

impl Table {
    fn lookup(&self, addr: u64) -> Option<Found<'_>> {
        let rel = u32::try_from(addr.checked_sub(self.base)?).ok()?;
        let index = self
            .entries
            .partition_point(|e| e.addr <= rel)
            .checked_sub(1)?;
        let entry = self.entries[index];
        let size = self
            .entries
            .get(index + 1)
            .map_or(0, |next| u64::from(next.addr - entry.addr));
        // Past the last symbol there is no size to bound it: unknown.
        if size == 0 {
            return None;
        }
        let start = entry.name as usize;
        let bytes = self.names.get(start..)?;
        let end = bytes.iter().position(|b| *b == 0).unwrap_or(bytes.len());
        let name = std::str::from_utf8(&bytes[..end]).ok()?;
        let module = self
            .modules
            .iter()
            .find(|(first, last, _)| {
                (*first..=*last).contains(&(self.base + u64::from(entry.addr)))
            })
            .map(|(_, _, m)| m.as_str());
        Some(Found {
            name,
            module,
            offset: addr - self.base - u64::from(entry.addr),
            size,
        })
    }
}

/// Whether a kernel symbol belongs to the code that runs a BPF program
/// for an event rather than to the code that raised it: BPF programs and
/// trampolines, and the tracepoint and perf glue in front of them.
pub fn is_machinery(name: &str) -> bool {
    const PREFIXES: [&str; 7] = [
        "bpf_",
        "__bpf_",
        "__traceiter_",
        "perf_trace_",
        // The syscalls:* events' perf glue.
        "perf_syscall_",
        "trace_call_bpf",
        "kprobe_ftrace_handler",
    ];
    PREFIXES.iter().any(|p| name.starts_with(p))
}

/// The text symbols (`t`/`T`) of a kallsyms-format file; empty when it
/// cannot be read (symbols then print as addresses). Zero addresses
/// (unprivileged reads) are dropped: they cannot be resolved.
fn read_table(path: &std::path::Path) -> Table {
    match std::fs::File::open(path) {
        Ok(file) => parse(std::io::BufReader::with_capacity(64 * 1024, file)),
        Err(_) => Table::default(),
    }
}

fn parse(mut input: impl BufRead) -> Table {
    let mut entries: Vec<Entry> = Vec::new();
    // The kernel lists its text first, from the lowest address; modules
    // follow, higher up, within 4 GiB. A text symbol outside that span
    // (no such kernel seen) is left out.
    let mut base = None;
    let mut names = Vec::new();
    let mut modules: Vec<(u64, u64, String)> = Vec::new();
    let mut line = Vec::new();
    loop {
        line.clear();
        match input.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let text = std::str::from_utf8(&line).unwrap_or("");
        let mut fields = text.split_ascii_whitespace();
        let (Some(addr), Some(kind), Some(name)) = (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let Ok(addr) = u64::from_str_radix(addr, 16) else {
            continue;
        };
        if addr == 0 || !matches!(kind, "t" | "T") {
            continue;
        }
        if let Some(module) = fields.next() {
            let module = module.trim_start_matches('[').trim_end_matches(']');
            // A module's symbols come together: extend its range.
            match modules.last_mut() {
                Some((first, last, m)) if m == module => {
                    *first = (*first).min(addr);
                    *last = (*last).max(addr);
                }
                _ => modules.push((addr, addr, module.to_string())),
            }
        }
        let base = *base.get_or_insert(addr);
        let (Some(rel), Ok(offset)) = (
            addr.checked_sub(base).and_then(|r| u32::try_from(r).ok()),
            u32::try_from(names.len()),
        ) else {
            continue;
        };
        names.extend_from_slice(name.as_bytes());
        names.push(0);
        entries.push(Entry {
            addr: rel,
            name: offset,
        });
    }
    // Stable: of symbols at one address, the last listed wins, as before.
    entries.sort_by_key(|e| e.addr);
    entries.shrink_to_fit();
    names.shrink_to_fit();
    Table {
        base: base.unwrap_or(0),
        entries,
        names,
        modules,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_names_offsets_and_modules() {
        let dir = std::env::temp_dir().join(format!("stap-rs-kallsyms-{}", std::process::id()));
        std::fs::write(
            &dir,
            "ffffffff81000000 T _stext\n\
             ffffffff81000100 t helper\n\
             ffffffff81000200 D some_data\n\
             ffffffff81001000 T tcp_v4_rcv\n\
             ffffffff81002030 T next_fn\n\
             ffffffffc0000000 t e1000_xmit\t[e1000]\n\
             ffffffffc0000400 t e1000_end\t[e1000]\n",
        )
        .unwrap();
        let mut syms = Symbols::from_path(&dir);
        assert_eq!(syms.name(0xffffffff81001091), "tcp_v4_rcv");
        assert_eq!(
            syms.data(0xffffffff81001091),
            "tcp_v4_rcv+0x91/0x1030 [kernel]"
        );
        assert_eq!(syms.module(0xffffffff81001091), "kernel");
        // Data symbols do not split text symbols.
        assert_eq!(syms.data(0xffffffff81000250), "helper+0x150/0xf00 [kernel]");
        assert_eq!(syms.module(0xffffffffc0000010), "e1000");
        assert_eq!(syms.name(0x10), "0x10");
        assert_eq!(syms.module(0x10), "<unknown>");
        std::fs::remove_file(&dir).unwrap();
    }
}
