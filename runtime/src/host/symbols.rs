//! Kernel address to symbol, from `/proc/kallsyms`, read once on first use.

use std::path::PathBuf;
use std::thread::JoinHandle;

#[derive(Debug, Clone, PartialEq, Eq)]
struct Symbol {
    addr: u64,
    name: String,
    /// `None` for the kernel image itself.
    module: Option<String>,
}

pub struct Symbols {
    path: PathBuf,
    /// Text symbols sorted by address; `None` until first needed.
    table: Option<Vec<Symbol>>,
    /// A read started by [`Symbols::preload`], joined on first use.
    loading: Option<JoinHandle<Vec<Symbol>>>,
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
        }
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
            Some((sym, _, _)) => sym.name.clone(),
            None => format!("0x{addr:x}"),
        }
    }

    /// `tcp_v4_rcv+0x91/0x1030 [kernel]`.
    pub fn data(&mut self, addr: u64) -> String {
        match self.lookup(addr) {
            Some((sym, offset, size)) => format!(
                "{}+0x{offset:x}/0x{size:x} [{}]",
                sym.name,
                sym.module.as_deref().unwrap_or("kernel")
            ),
            None => format!("0x{addr:x}"),
        }
    }

    /// One frame of a symbolized stack: with `full` as `print_stack` prints
    /// it (` 0xffffffff81a3b2c0 : tcp_v4_rcv+0x0/0x1030 [kernel]`), else as
    /// `sprint_stack` (`tcp_v4_rcv+0x0 [kernel]`); each ends in a newline.
    pub fn frame(&mut self, addr: u64, full: bool) -> String {
        match (self.lookup(addr), full) {
            (Some((sym, offset, size)), true) => format!(
                " 0x{addr:016x} : {}+0x{offset:x}/0x{size:x} [{}]\n",
                sym.name,
                sym.module.as_deref().unwrap_or("kernel")
            ),
            (Some((sym, offset, _)), false) => format!(
                "{}+0x{offset:x} [{}]\n",
                sym.name,
                sym.module.as_deref().unwrap_or("kernel")
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
                let name = self.lookup(addr).map(|(sym, _, _)| sym.name.as_str());
                name.is_some_and(|name| !is_machinery(name))
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
            Some((sym, _, _)) => sym.module.clone().unwrap_or_else(|| "kernel".into()),
            None => "<unknown>".into(),
        }
    }

    /// The symbol covering `addr`, the offset into it and its size (the
    /// distance to the next symbol).
    fn lookup(&mut self, addr: u64) -> Option<(&Symbol, u64, u64)> {
        if self.table.is_none() {
            let table = match self.loading.take() {
                Some(thread) => thread.join().unwrap_or_default(),
                None => read_table(&self.path),
            };
            self.table = Some(table);
        }
        let table = self.table.as_ref()?;
        let index = table.partition_point(|s| s.addr <= addr).checked_sub(1)?;
        let sym = &table[index];
        let size = table.get(index + 1).map_or(0, |next| next.addr - sym.addr);
        // Past the last symbol there is no size to bound it: unknown.
        if size == 0 {
            return None;
        }
        Some((sym, addr - sym.addr, size))
    }
}

/// Whether a kernel symbol belongs to the code that runs a BPF program
/// for an event rather than to the code that raised it: BPF programs and
/// trampolines, and the tracepoint and perf glue in front of them.
pub fn is_machinery(name: &str) -> bool {
    const PREFIXES: [&str; 6] = [
        "bpf_",
        "__bpf_",
        "__traceiter_",
        "perf_trace_",
        "trace_call_bpf",
        "kprobe_ftrace_handler",
    ];
    PREFIXES.iter().any(|p| name.starts_with(p))
}

/// Text symbols (`t`/`T`) of a kallsyms listing, sorted by address. Zero
/// addresses (unprivileged reads) are dropped: they cannot be resolved.
/// The text symbols of a kallsyms-format file; empty when it cannot be read
/// (symbols then print as addresses).
fn read_table(path: &std::path::Path) -> Vec<Symbol> {
    std::fs::read_to_string(path)
        .map(|text| parse(&text))
        .unwrap_or_default()
}

fn parse(text: &str) -> Vec<Symbol> {
    let mut table: Vec<Symbol> = text
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let addr = u64::from_str_radix(fields.next()?, 16).ok()?;
            let kind = fields.next()?;
            let name = fields.next()?;
            let module = fields
                .next()
                .map(|m| m.trim_start_matches('[').trim_end_matches(']').to_string());
            (addr != 0 && matches!(kind, "t" | "T")).then(|| Symbol {
                addr,
                name: name.to_string(),
                module,
            })
        })
        .collect();
    table.sort_by_key(|s| s.addr);
    table
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
