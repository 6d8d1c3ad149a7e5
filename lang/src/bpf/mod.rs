//! The BPF backend: IR functions placed in the kernel become eBPF programs.
//! Pure code generation: nothing here touches the kernel (runtime/ loads and
//! attaches what this produces).
//!
//! The output, an [`Object`], is the contract with the runtime loader.

pub mod attach;
pub mod btf;
mod bulk;
mod compile;
pub mod dispatch;
mod emit;
pub mod facts;
pub mod inline;
pub mod insn;
pub mod key_text;
pub mod layout;
mod listing;
pub mod maps;
pub mod records;
pub mod regalloc;
pub mod regex;
// Hand-built IR fixtures for the backend and verifier tests.
#[cfg(any(test, feature = "testing"))]
pub mod samples;
mod shape;
pub mod snprintf;

pub use compile::{compile, compile_with_source};
pub use listing::listing;
pub use shape::check_shape;

use crate::ir::FuncId;
use crate::ir::{GlobalId, Limits};
use crate::source::Span;

/// [`Options::cpus`] when the caller does not know better.
pub const DEFAULT_CPUS: u32 = 64;

/// Code generation settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// MAXSTRINGLEN: the size of every string slot, key part and value.
    pub max_string_len: u32,
    /// Test-only: the first statement of the first kernel probe that is not
    /// a `ReadKernel` gets an out-of-bounds stack read carrying that
    /// statement's span, so tests can prove the verifier's rejection maps
    /// back to the script line. Never set in normal runs.
    pub test_out_of_bounds: bool,
    /// CPUs a statistic extraction in a kernel probe (`@count(s)` etc.)
    /// visits: the verifier unrolls that loop, so it is sized at compile
    /// time. The runtime should pass the possible-CPU count
    /// (/sys/devices/system/cpu/possible); a statistic found on a CPU past
    /// it is a run-time error, never a silently wrong value.
    pub cpus: u32,
    /// How `kernel.trace` probes with BTF-typed arguments attach.
    pub tracepoint_mechanism: TracepointMechanism,
    /// What code generation needs from the kernel's BTF
    /// ([`facts::EmitFacts::for_module`]); the default knows nothing and is
    /// always safe.
    pub kernel: facts::EmitFacts,
    /// The host's time zone, for `tz_ctime` in kernel probes.
    pub local_time: LocalTime,
}

/// The host's time zone when the script is compiled: `tz_ctime()` in a
/// kernel probe formats with this offset and name (stap's `tz_gmtoff()`
/// and `tz_name()` are fixed at that moment too). The default is UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalTime {
    /// Seconds east of UTC.
    pub offset_east: i64,
    name: [u8; 16],
}

impl LocalTime {
    /// `name` is cut to 15 bytes; a `%` in it is dropped (it goes into a
    /// format string).
    pub fn new(offset_east: i64, name: &str) -> LocalTime {
        let mut bytes = [0u8; 16];
        let kept = name.bytes().filter(|b| *b != b'%' && *b != 0).take(15);
        for (slot, byte) in bytes.iter_mut().zip(kept) {
            *slot = byte;
        }
        LocalTime {
            offset_east,
            name: bytes,
        }
    }

    pub fn name(&self) -> &str {
        let end = self.name.iter().position(|b| *b == 0).unwrap_or(16);
        std::str::from_utf8(&self.name[..end]).unwrap_or("")
    }
}

impl Default for LocalTime {
    fn default() -> LocalTime {
        LocalTime::new(0, "UTC")
    }
}

/// `--tracepoint-mechanism`: raw tracepoints need no BTF at load time;
/// tp_btf programs are `BPF_PROG_TYPE_TRACING` attached through the
/// `btf_trace_NAME` typedef. Both run through the same kernel dispatch
/// (bench/analysis.md has the measurements behind the default).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TracepointMechanism {
    #[default]
    RawTp,
    TpBtf,
}

impl Options {
    pub fn from_limits(limits: &Limits) -> Options {
        Options {
            // Pass 2 refuses values outside this range (the host cuts
            // strings at the same length).
            max_string_len: limits
                .max_string_len
                .clamp(crate::ir::MIN_STRING_LEN, crate::ir::MAX_STRING_LEN)
                as u32,
            test_out_of_bounds: false,
            cpus: DEFAULT_CPUS,
            tracepoint_mechanism: TracepointMechanism::default(),
            kernel: facts::EmitFacts::default(),
            local_time: LocalTime::default(),
        }
    }
}

/// Everything the loader needs: maps to create, then programs whose
/// `ld_imm64` map references it patches with the created map fds.
#[derive(Debug, Clone, PartialEq)]
pub struct Object {
    pub maps: Vec<MapSpec>,
    pub programs: Vec<Program>,
    /// Program BTF (`btf.rs`), one blob for every program: the loader
    /// loads it once with `BPF_BTF_LOAD` and passes its fd with each
    /// program's `func_info`/`line_info`. Empty when there are no programs.
    pub btf: Vec<u8>,
}

/// How a program attaches; the runtime picks the syscalls from this.
#[derive(Debug, Clone, PartialEq)]
pub enum AttachKind {
    /// `BPF_PROG_TYPE_RAW_TRACEPOINT`, attached with `BPF_RAW_TRACEPOINT_OPEN`.
    RawTracepoint { name: String },
    /// `BPF_PROG_TYPE_TRACING` with `expected_attach_type`
    /// `BPF_TRACE_RAW_TP`, loaded against the `btf_trace_NAME` typedef and
    /// attached with `BPF_RAW_TRACEPOINT_OPEN` (no name: the target is the
    /// program's).
    TpBtf { name: String },
    /// `BPF_PROG_TYPE_TRACEPOINT` through a perf event on the tracefs id.
    Tracepoint { system: String, name: String },
    /// A kprobe on `function` plus `offset` (a `kernel.statement` line;
    /// 0 at the entry).
    Kprobe {
        function: String,
        offset: u64,
        is_return: bool,
    },
    /// `BPF_PROG_TYPE_TRACING` with `expected_attach_type` FENTRY/FEXIT.
    Fentry {
        function: String,
        is_return: bool,
        module: Option<String>,
    },
    /// `BPF_PROG_TYPE_LSM` with `expected_attach_type` `BPF_LSM_MAC`,
    /// loaded against the BTF of `bpf_lsm_HOOK` and attached with
    /// `BPF_RAW_TRACEPOINT_OPEN` (a trampoline, as fentry); its return
    /// value is the hook's verdict.
    Lsm { hook: String },
    /// `BPF_PROG_TYPE_PERF_EVENT`.
    PerfEvent {
        perf_type: u32,
        config: u64,
        /// Events per sample, or samples a second with `frequency`.
        sample_period: u64,
        frequency: bool,
        /// On every online CPU (`timer.profile`), or only on the first:
        /// stap's BPF backend anchors `perf.*` probes to one CPU, so a
        /// `.sample(N)` of the CPU clock fires as a timer would, once per
        /// period rather than once per period and CPU.
        every_cpu: bool,
        /// Its place among the programs sharing this event, if others do.
        chain: PerfChain,
    },
    Uprobe {
        path: String,
        function: String,
        is_return: bool,
    },
    /// An SDT marker: a uprobe at each site (a file offset), with the
    /// uprobe's reference counter on the site's semaphore (a file offset;
    /// 0 without one), which the kernel increments while it is attached.
    Marker {
        path: String,
        provider: String,
        name: String,
        sites: Vec<(u64, u64)>,
    },
    /// A uprobe (or uretprobe) at a PLT stub, a file offset.
    Plt {
        path: String,
        name: String,
        offset: u64,
        is_return: bool,
    },
    /// One kprobe program on many kernel functions: the handlers of a
    /// wildcard probe whose code does not depend on which function fired.
    /// With `multi`, one kprobe_multi link (the program is loaded with
    /// expected attach type `BPF_TRACE_KPROBE_MULTI`); otherwise a kprobe
    /// perf event per function. Functions the kernel cannot probe are
    /// skipped and counted, not fatal.
    Kprobes {
        functions: Vec<String>,
        is_return: bool,
        multi: bool,
        /// Per function (parallel to `functions`), the BPF cookie its
        /// attachment carries: where its row of the program's bulk-list
        /// table is (`bulk`). Empty when the program reads none.
        cookies: Vec<u64>,
    },
    /// `syscalls:sys_enter_NAME`/`sys_exit_NAME` events, implemented on
    /// the raw `sys_enter`/`sys_exit` tracepoint
    /// (`BPF_PROG_TYPE_RAW_TRACEPOINT`): the program returns at once unless
    /// the system call number is one of `events`' (number, event name),
    /// and reads the record's fields from the same places the classic event
    /// copies them from (docs/ARCHITECTURE.md, "System call events"). A
    /// raw tracepoint link detaches without the classic perf event's
    /// grace-period wait, and the runtime puts every such program of one
    /// direction behind one dispatcher link.
    Syscall {
        exit: bool,
        events: Vec<(u32, String)>,
    },
    /// `BPF_PROG_TYPE_NETFILTER`, attached with `BPF_LINK_CREATE` in the
    /// current network namespace.
    Netfilter {
        pf: u32,
        hooknum: u32,
        priority: i32,
    },
}

/// Where a perf-event program sits among the handlers of probes that share
/// one perf event (the same type, config, period and CPUs: perf1.stp's
/// `perf.type(1).config(0).sample(1000000)` and `perf.type(1).config(0)`).
/// The first is attached to the event; each of the others is put at its
/// `slot` of the object's [`MapRole::PerfChain`] program array, and every
/// program but the last tail-calls the `next` slot when it is done. So
/// each sample runs every sharing probe's handler once, in script order,
/// and the probes count the same samples on any kernel, however late the
/// timer interrupt comes (a perf event runs at most one program).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PerfChain {
    /// `None` for the program attached to the event itself.
    pub slot: Option<u32>,
    /// The slot to tail-call once this handler is done.
    pub next: Option<u32>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Program {
    /// Unique, ≤ 15 chars, valid as a BPF object name (`stap_p0`).
    pub name: String,
    /// Index into `ir::Module::probes`.
    pub probe: usize,
    /// The IR function this program runs.
    pub function: FuncId,
    pub attach: AttachKind,
    /// Encoded instructions, 8 bytes each (an `ld_imm64` takes two).
    pub insns: Vec<u64>,
    /// Instruction index of each `ld_imm64` whose immediate is a map fd,
    /// and the index into `Object::maps` to put there. The loader writes
    /// only the fd into the first slot's `imm`: `src_reg` is already set,
    /// to `BPF_PSEUDO_MAP_FD` (the map) or `BPF_PSEUDO_MAP_VALUE` (a
    /// pointer into a one-entry array's value, offset in the second slot).
    pub map_relocs: Vec<(usize, usize)>,
    /// Instruction index → the script span it came from, sorted by index;
    /// a verifier error at instruction N maps to the last entry ≤ N.
    pub lines: Vec<(usize, Span)>,
    /// Bytes of BPF stack used (≤ 512), for diagnostics: with callbacks,
    /// the deepest call chain, as the verifier counts it.
    pub stack_bytes: u32,
    /// One record per BPF function (the handler at 0, then each callback),
    /// type ids into `Object::btf`.
    pub func_info: Vec<btf::FuncInfo>,
    /// Script lines per instruction, strings in `Object::btf`; empty when
    /// compiled without the source map.
    pub line_info: Vec<btf::LineInfo>,
    /// How many of `func_info`'s functions are plain subprograms (called,
    /// not handed to a helper as callbacks).
    pub plain_subprograms: usize,
}

impl Program {
    /// A program with callbacks (kernel `foreach`) cannot load without
    /// program BTF; others (plain subprograms included) only lose line
    /// info in verifier logs.
    pub fn needs_btf(&self) -> bool {
        self.func_info.len() > 1 + self.plain_subprograms
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct MapSpec {
    /// ≤ 15 chars (`stap_funcs`).
    pub name: String,
    /// `BPF_MAP_TYPE_*`.
    pub map_type: u32,
    pub key_size: u32,
    pub value_size: u32,
    pub max_entries: u32,
    pub flags: u32,
    pub role: MapRole,
}

/// What a map is for, so the host side knows how to read it.
#[derive(Debug, Clone, PartialEq)]
pub enum MapRole {
    /// A script global; the key/value layout is in `records.rs`' docs.
    Global(GlobalId),
    /// The ring buffer carrying printf/exit/error records to the host.
    Events,
    /// Per-CPU scratch space for strings, keys and records.
    Scratch,
    /// Per-CPU counters the host reads at exit (lost events, overflow, ...).
    Counters,
    /// The run flag: handlers do nothing until the host sets it (after the
    /// begin probes ran), and stop once it is cleared at exit.
    Control,
    /// `bpf_snprintf` formats (`sprintf`, `symname` in kernel probes): a
    /// one-entry `ARRAY` created with `BPF_F_RDONLY_PROG`. The loader must
    /// write these bytes as entry 0 and then `BPF_MAP_FREEZE` the map
    /// before loading any program (the verifier reads the formats).
    Formats(Vec<u8>),
    /// `BPF_MAP_TYPE_PROG_ARRAY` of the programs that run from a perf
    /// event another program is attached to ([`PerfChain`]): the attacher
    /// puts each at its slot and keeps the map open while they run (the
    /// kernel empties a program array when its last user fd closes).
    PerfChain,
}
