//! The host side of a running script: global storage, output, symbols and
//! the run-time library that JIT-compiled host code calls
//! (`crate::jit` compiles; nothing here interprets IR).

pub mod builtins;
mod deferred;
pub mod enums;
pub mod error;
pub mod globals;
pub mod hist;
pub mod json;
pub mod kmap;
pub mod kmem;
pub mod output;
pub mod procfs;
pub mod regexp;
pub mod rtlib;
pub mod speculative;
pub mod stats;
pub mod symbols;
pub mod system;
pub mod usymbols;
pub mod value;

use std::rc::Rc;

use stap_lang::ir::Module;
use stap_lang::printf::{self, Piece};

pub use error::RuntimeError;
pub use globals::Globals;
pub use kmap::BpfMapOps;
pub use output::{Format, Level, Output, Summary};
pub use symbols::Symbols;
pub use value::Value;

/// Function calls nested deeper than this fail, as stap's MAXNESTING.
pub const MAX_NESTING: i64 = 10;

/// The bytes of strings one probe hit may create (they are freed when the
/// hit ends). A hit past it fails with an error instead of growing the
/// process without bound.
pub const ARENA_LIMIT: usize = 256 << 20;

/// A string register's value: 0 is "", `1..=N` the module's string
/// constants, larger values index the per-probe-hit arena.
pub type StrHandle = i64;

/// Everything host code reaches at run time. JIT code gets a
/// `*mut HostRuntime` as its first argument.
pub struct HostRuntime {
    pub globals: Globals,
    pub output: Output,
    pub symbols: Symbols,
    /// User-space symbols for stacks that kernel probes captured.
    pub usymbols: usymbols::UserSymbols,
    /// `abort()` was called: the session ends without end probes.
    pub aborted: bool,
    pub enums: enums::EnumNames,
    /// Set by `exit()`: the session runs the end probes, then stops.
    pub exit_requested: bool,
    /// `target()`: the `-x` pid or the `-c` child's.
    pub target: i64,
    /// Non-zero once `error` is set; JIT code tests it after fallible
    /// calls (its offset is taken with `offset_of!`).
    pub(crate) failed: u8,
    pub(crate) error: Option<RuntimeError>,
    /// Where the innermost failing operation of this hit is in the script
    /// (set by JIT code on its failure path), for stap's `near ...`.
    pub error_span: Option<stap_lang::source::Span>,
    /// Statements counted by `Tick` in this probe hit.
    pub(crate) actions: u64,
    pub(crate) max_action: u64,
    pub(crate) depth: i64,
    pub(crate) consts: Rc<[Box<[u8]>]>,
    pub(crate) arena: Vec<Box<[u8]>>,
    /// Bytes held by `arena`.
    pub(crate) arena_bytes: usize,
    /// Parsed formats with their argument kinds, by `FormatId`.
    pub(crate) formats: Rc<[(Vec<Piece>, Vec<printf::ArgKind>)]>,
    pub(crate) iters: Vec<rtlib::Iter>,
    /// `printf`'s reused formatting buffer.
    pub(crate) printf_buf: Vec<u8>,
    pub(crate) max_string_len: usize,
    /// `tokenize`'s remembered input.
    pub(crate) tokenize_rest: Vec<u8>,
    /// `=~`'s compiled patterns and the captures `matched()` reads.
    pub(crate) regexes: regexp::Regexes,
    pub(crate) limits_max_action: u64,
    /// Each probe's point as `pp()` gives it, by probe index.
    pub(crate) probe_points: Rc<[Box<[u8]>]>,
    /// Each probe's point as written, for `pn()`.
    pub(crate) probe_names: Rc<[Box<[u8]>]>,
    /// Each probe's `probe_type()`.
    pub(crate) probe_types: Rc<[&'static str]>,
    /// The probe whose hit is running.
    pub(crate) probe: usize,
    /// Where `%m`/`%M` read kernel memory.
    pub kmem: kmem::KernelMemory,
    /// `$value` of the procfs probe being served.
    pub procfs: procfs::ProcfsValue,
    /// `system(cmd)`: commands to start once the probe is done.
    pub commands: system::Commands,
    /// Speculative output held until `commit`/`discard`.
    pub speculation: speculative::Speculation,
}

impl HostRuntime {
    pub fn new(module: &Module, output: Output) -> HostRuntime {
        let consts: Rc<[Box<[u8]>]> = module.strings.iter().map(|s| s.as_bytes().into()).collect();
        // Formats were checked in pass 2; one that still fails to parse
        // prints nothing rather than stopping the session.
        let formats: Rc<[(Vec<Piece>, Vec<printf::ArgKind>)]> = module
            .formats
            .iter()
            .map(|f| {
                let pieces = printf::parse(&f.text).unwrap_or_default();
                let kinds = printf::arg_kinds(&pieces);
                (pieces, kinds)
            })
            .collect();
        HostRuntime {
            globals: Globals::new(module),
            output,
            symbols: Symbols::new(),
            usymbols: usymbols::UserSymbols::default(),
            aborted: false,
            enums: enums::EnumNames::new(),
            exit_requested: false,
            target: 0,
            failed: 0,
            error: None,
            error_span: None,
            actions: 0,
            max_action: module.limits.max_action,
            depth: 0,
            consts,
            arena: Vec::new(),
            arena_bytes: 0,
            formats,
            iters: Vec::new(),
            printf_buf: Vec::new(),
            // Pass 2 refuses values outside this range; the clamp only
            // guards modules built by hand.
            max_string_len: module
                .limits
                .max_string_len
                .clamp(stap_lang::ir::MIN_STRING_LEN, stap_lang::ir::MAX_STRING_LEN)
                as usize,
            tokenize_rest: Vec::new(),
            regexes: regexp::Regexes::default(),
            limits_max_action: module.limits.max_action,
            probe_points: module
                .probes
                .iter()
                .map(|p| p.point.as_bytes().into())
                .collect(),
            probe_names: module
                .probes
                .iter()
                .map(|p| p.written.as_bytes().into())
                .collect(),
            probe_types: module
                .probes
                .iter()
                .map(stap_lang::ir::identity::probe_type)
                .collect(),
            probe: 0,
            kmem: kmem::KernelMemory::default(),
            procfs: procfs::ProcfsValue::default(),
            commands: system::Commands::default(),
            speculation: speculative::Speculation::new(module.limits.max_map_entries),
        }
    }

    /// Records a run-time error; JIT code returns as soon as it sees it.
    pub(crate) fn fail(&mut self, error: RuntimeError) {
        if self.error.is_none() {
            self.error = Some(error);
        }
        self.failed = 1;
    }

    /// Prepares a hit of probe `probe`: `action_scale` is 10 for
    /// begin/end/error.
    pub(crate) fn begin_hit(&mut self, probe: usize, action_scale: u64) {
        self.probe = probe;
        self.failed = 0;
        self.error = None;
        self.error_span = None;
        self.actions = 0;
        self.depth = 0;
        self.max_action = self.limits_max_action.saturating_mul(action_scale);
    }

    /// Ends a probe hit: frees its strings and iterators.
    pub(crate) fn end_hit(&mut self) -> Result<(), RuntimeError> {
        self.arena.clear();
        self.arena_bytes = 0;
        self.iters.clear();
        self.failed = 0;
        match self.error.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    pub(crate) fn str(&self, handle: StrHandle) -> &[u8] {
        let consts = self.consts.len() as i64;
        if handle <= 0 {
            &[]
        } else if handle <= consts {
            // A literal is a value like any other: cut to MAXSTRINGLEN - 1
            // bytes, as the kernel side cuts it when it stores it.
            let text = &self.consts[(handle - 1) as usize];
            &text[..text.len().min(self.max_string_len.saturating_sub(1))]
        } else {
            self.arena
                .get((handle - consts - 1) as usize)
                .map_or(&[], |s| &s[..])
        }
    }

    /// Writes script output (print, printf, statistics); a failed write
    /// fails the probe hit.
    pub(crate) fn write_output(&mut self, bytes: &[u8]) {
        let named = self.name_stacks(bytes);
        if let Err(e) = self.output.write(&named) {
            self.fail(RuntimeError::Internal(format!("cannot write output: {e}")));
        }
    }

    /// Stores a new string (truncated to MAXSTRINGLEN - 1) and returns its handle.
    pub(crate) fn new_str(&mut self, mut bytes: Vec<u8>) -> StrHandle {
        if bytes.is_empty() {
            return 0;
        }
        globals::truncate_string(&mut bytes, self.max_string_len);
        // Strings live until the hit ends, so a loop that builds strings
        // grows the arena by one per iteration: bounded, as stap bounds a
        // hit's work with MAXACTION, by a fixed budget.
        self.arena_bytes += bytes.len();
        if self.arena_bytes > ARENA_LIMIT {
            self.fail(RuntimeError::StringSpace(ARENA_LIMIT));
            return 0;
        }
        self.arena.push(bytes.into_boxed_slice());
        self.consts.len() as i64 + self.arena.len() as i64
    }
}
