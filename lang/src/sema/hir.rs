//! The elaborated program (HIR): what pass 2 hands to the IR lowering.
//!
//! Unlike the AST, every name here is resolved (local slot, global,
//! function, builtin), every expression carries its type, every probe point
//! is resolved to one concrete event, and context variables are typed
//! accesses with byte offsets taken from the kernel's BTF.

use crate::ast::{AssignOp, BinaryOp, BulkContext, PrettyDepth, SortDir, StatOp, UnaryOp};
use crate::kernel::{FunctionProto, TracepointArgs, TypeId};
use crate::source::Span;

/// The value types of the stap language.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Type {
    /// Not inferred (yet). A finished [`Program`] contains none.
    #[default]
    Unknown,
    Long,
    String,
    /// A statistics aggregate: only `<<<` and `@count(...)` etc. apply.
    Stats,
}

impl Type {
    pub fn name(self) -> &'static str {
        match self {
            Type::Unknown => "unknown",
            Type::Long => "long",
            Type::String => "string",
            Type::Stats => "stats",
        }
    }

    pub fn is_known(self) -> bool {
        self != Type::Unknown
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GlobalId(pub u32);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FunctionId(pub u32);

/// A slot in the enclosing function's or probe's `locals`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LocalId(pub u32);

/// Where code runs: compiled to BPF in the kernel, or JIT-compiled on the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    Kernel,
    Host,
}

/// Which sides use a function or a global.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sides {
    pub kernel: bool,
    pub host: bool,
}

impl Sides {
    pub fn add(&mut self, placement: Placement) -> bool {
        let flag = match placement {
            Placement::Kernel => &mut self.kernel,
            Placement::Host => &mut self.host,
        };
        let changed = !*flag;
        *flag = true;
        changed
    }

    pub fn describe(self) -> &'static str {
        match (self.kernel, self.host) {
            (true, true) => "both",
            (true, false) => "kernel",
            (false, true) => "host",
            (false, false) => "nothing",
        }
    }
}

/// The smallest and largest MAXSTRINGLEN accepted by `-D`.
pub const MIN_STRING_LEN: u64 = 8;
pub const MAX_STRING_LEN: u64 = 1 << 16;

/// The `-D` limits, with stap's defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    pub max_string_len: u64,
    pub max_map_entries: u64,
    /// Statements per probe hit; begin and end probes get ten times as many.
    pub max_action: u64,
    /// Run-time errors tolerated before the session ends.
    pub max_errors: u64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_string_len: 512,
            max_map_entries: 2048,
            max_action: 1000,
            max_errors: 0,
        }
    }
}

/// Which probe mechanisms the program needs from the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MechanismNeeds {
    pub raw_tracepoints: bool,
    pub classic_tracepoints: bool,
    pub fentry: bool,
    pub kprobes: bool,
    pub uprobes: bool,
    pub perf_events: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Program {
    pub globals: Vec<Global>,
    /// Only the functions some probe reaches; unused ones are elided.
    pub functions: Vec<Function>,
    pub probes: Vec<Probe>,
    pub limits: Limits,
    /// Every `-D NAME=VALUE`, as given.
    pub defines: Vec<(String, String)>,
    pub needs: MechanismNeeds,
    /// Wildcard matches the kernel cannot probe, left out (`-v` names them).
    pub skipped_functions: Vec<SkippedFunctions>,
}

/// The functions one kernel.function wildcard matched but cannot probe
/// (inlined away, `notrace`, blacklisted): skipped, never fatal, as stap
/// skips them.
#[derive(Debug, Clone, PartialEq)]
pub struct SkippedFunctions {
    /// The point, as written: `kernel.function("tcp_*").call`.
    pub point: String,
    /// Where the point is written (the REPL reports only its new input's).
    pub span: Span,
    /// How many functions the wildcard matched, the skipped ones included.
    pub matched: usize,
    /// Each skipped function, with why.
    pub skipped: Vec<(String, String)>,
}

impl Program {
    pub fn global(&self, id: GlobalId) -> &Global {
        &self.globals[id.0 as usize]
    }

    pub fn function(&self, id: FunctionId) -> &Function {
        &self.functions[id.0 as usize]
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Global {
    pub name: String,
    /// The value type (`Stats` for aggregates).
    pub ty: Type,
    /// Key types of an array, in order; empty for a scalar.
    pub keys: Vec<Type>,
    pub is_array: bool,
    /// `global a[100]`.
    pub size: Option<u64>,
    /// `global a%[100]`: the oldest entries are overwritten when full.
    pub wrap: bool,
    /// Initial value (`global x = 5`, or a `-G` override).
    pub init: Option<Constant>,
    pub private: bool,
    /// Defined in a tapset rather than in the user's script.
    pub from_tapset: bool,
    pub used_by: Sides,
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Constant {
    Long(i64),
    String(String),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Local {
    pub name: String,
    pub ty: Type,
    /// The first place it appears.
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Function {
    pub name: String,
    /// The first `params.len()` entries of `locals` are the parameters.
    pub param_count: usize,
    pub ret: Type,
    /// Parameters first, then the locals the body introduces.
    pub locals: Vec<Local>,
    pub body: Block,
    pub runs_on: Sides,
    pub from_tapset: bool,
    pub span: Span,
}

impl Function {
    pub fn params(&self) -> &[Local] {
        &self.locals[..self.param_count]
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Probe {
    /// The point as the user wrote it (`tcp.sendmsg`, `kernel.trace("*skb")`).
    pub written: String,
    /// The concrete point (`kernel.trace("skb:kfree_skb")`).
    pub resolved: String,
    /// Aliases expanded on the way, outermost first.
    pub alias_chain: Vec<String>,
    pub kind: ProbeKind,
    pub placement: Placement,
    /// The context variables this point offers, in argument order.
    pub context: Vec<ContextVar>,
    pub locals: Vec<Local>,
    /// `probe POINT if (cond)`: the probe body only runs when it holds.
    pub condition: Option<Expr>,
    /// Alias prologues, then the user's body, then alias epilogues.
    pub body: Block,
    /// How many of `body`'s first statements are alias prologues (each a
    /// block of its own).
    pub prologues: usize,
    /// For a point with no function entry of its own (a system call's exit
    /// event), the event that saves its `@entry` values: resolved text, kind.
    pub entry_event: Option<(String, ProbeKind)>,
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq)]
pub enum ProbeKind {
    /// `begin`, `begin(N)`, `init`, `oneshot` (whose body ends with `exit()`).
    Begin {
        order: i64,
    },
    End {
        order: i64,
    },
    Error {
        order: i64,
    },
    Never,
    HostTimer {
        period_ns: u64,
        randomize_ns: u64,
    },
    /// `args` are the raw (BTF-typed, in ctx order) or classic (tracefs) fields.
    Tracepoint {
        system: String,
        name: String,
        args: TracepointArgs,
    },
    KernelFunction {
        /// The function's source name (what `ppfunc()` gives).
        name: String,
        is_return: bool,
        proto: FunctionProto,
        module: Option<String>,
        mechanism: FunctionMechanism,
        /// The compiler clones (`NAME.isra.0`) the kprobes go on when the
        /// function has no symbol of its own; empty otherwise.
        clones: Vec<String>,
        /// Written with `?` or `!` (itself or an alias on the way): when
        /// its module is not loaded at run time, the probe is left out
        /// instead of failing the run.
        optional: bool,
        /// `kernel.statement`: the line's first instruction as an offset
        /// from the function's symbol (a kprobe there); 0 at the entry.
        offset: u64,
    },
    Perf {
        /// `PERF_TYPE_*`.
        perf_type: u32,
        config: u64,
        /// Sample period in events, or samples a second with `frequency`.
        sample_period: u64,
        /// `.hz(N)`: `sample_period` is a frequency.
        frequency: bool,
        /// `sw.cpu_clock` etc., or `type(T).config(C)`.
        event: String,
    },
    TimerProfile,
    /// A uprobe. `target` is the function name or the statement spec; the
    /// address is resolved later from the binary's symbols/line table.
    Process {
        path: String,
        target: ProcessTarget,
        is_return: bool,
    },
    /// `netfilter.hook("NAME").pf("NF_INET")`: a BPF netfilter link in the
    /// current network namespace (observes only: always `NF_ACCEPT`).
    Netfilter {
        /// `NFPROTO_IPV4` or `NFPROTO_IPV6`.
        pf: u32,
        /// `NF_INET_PRE_ROUTING` (0) .. `NF_INET_POST_ROUTING` (4).
        hooknum: u32,
        priority: i32,
    },
    /// `procfs("NAME").read`/`.write` (`.maxsize(N)`): stap's
    /// `/proc/systemtap/MODULE/NAME` file, served by the session over HTTP
    /// as `/NAME` (`--http`); runs on the host with `$value`.
    Procfs {
        name: String,
        write: bool,
        /// `.maxsize(N)`: the largest `$value` (read) or body (write), in
        /// bytes; MAXSTRINGLEN without it, as in stap.
        maxsize: Option<u64>,
    },
}

/// The procfs file stap's `input.char`/`input.line` tapset writes to: not
/// served over HTTP, but fed the bytes of stap-rs's own standard input,
/// one byte a hit, as stap's staprun feeds it.
pub const STDIN_PROCFS: &str = "__stdin";

impl ProbeKind {
    /// `procfs("__stdin").write`: runs on each byte read from stdin.
    pub fn is_stdin_input(&self) -> bool {
        matches!(self, ProbeKind::Procfs { name, write: true, .. } if name == STDIN_PROCFS)
    }

    /// The family name, as messages say it ("begin probes").
    pub fn family(&self) -> &'static str {
        match self {
            ProbeKind::Begin { .. } => "begin",
            ProbeKind::End { .. } => "end",
            ProbeKind::Error { .. } => "error",
            ProbeKind::Never => "never",
            ProbeKind::HostTimer { .. } => "timer",
            ProbeKind::Tracepoint { .. } => "kernel.trace",
            ProbeKind::KernelFunction {
                mechanism: FunctionMechanism::Lsm,
                ..
            } => "kernel.lsm",
            ProbeKind::KernelFunction { .. } => "kernel.function",
            ProbeKind::Perf { .. } => "perf",
            ProbeKind::TimerProfile => "timer.profile",
            ProbeKind::Process { .. } => "process",
            ProbeKind::Netfilter { .. } => "netfilter",
            ProbeKind::Procfs { .. } => "procfs",
        }
    }

    /// How a probe of this kind runs, as the `-p2` listing says it
    /// (`mechanism: ...`). Its pass-4 counterpart, for kernel probes, is
    /// `bpf::AttachKind` (program type, attach type, point text).
    pub fn mechanism(&self) -> String {
        match self {
            ProbeKind::Begin { order } => format!("begin (order {order})"),
            ProbeKind::End { order } => format!("end (order {order})"),
            ProbeKind::Error { order } => format!("error (order {order})"),
            ProbeKind::Never => "never (not attached)".to_string(),
            ProbeKind::HostTimer {
                period_ns,
                randomize_ns,
            } if *randomize_ns == 0 => format!("host timer every {period_ns} ns"),
            ProbeKind::HostTimer {
                period_ns,
                randomize_ns,
            } => format!("host timer every {period_ns} ns, randomized by up to {randomize_ns} ns"),
            ProbeKind::Tracepoint { args, .. } => match args {
                TracepointArgs::Raw(_) => "raw tracepoint".to_string(),
                TracepointArgs::Classic(_) => "classic tracepoint (tracefs record)".to_string(),
            },
            ProbeKind::KernelFunction {
                mechanism,
                is_return,
                clones,
                offset,
                ..
            } => {
                if *offset != 0 {
                    return format!("kprobe at offset {offset:#x}");
                }
                let how = match (mechanism, is_return) {
                    (FunctionMechanism::Fentry, false) => "fentry",
                    (FunctionMechanism::Fentry, true) => "fexit",
                    (FunctionMechanism::Kprobe, false) => "kprobe",
                    (FunctionMechanism::Kprobe, true) => "kretprobe",
                    (FunctionMechanism::Lsm, _) => "BPF LSM program (trampoline)",
                };
                if clones.is_empty() {
                    how.to_string()
                } else {
                    format!("{how} on its compiler clone {}", clones.join(", "))
                }
            }
            ProbeKind::Perf {
                perf_type,
                config,
                sample_period,
                frequency,
                event,
            } => format!(
                "perf event {event} (type {perf_type}, config {config}), {}",
                if *frequency {
                    format!("{sample_period} samples a second")
                } else {
                    format!("every {sample_period} events")
                }
            ),
            ProbeKind::TimerProfile => "perf event cpu-clock sampling (timer.profile)".to_string(),
            ProbeKind::Process {
                path,
                target,
                is_return,
            } => {
                let what = match target {
                    ProcessTarget::Function(f) => format!("function {f}"),
                    ProcessTarget::Statement(s) => format!("statement {s}"),
                    ProcessTarget::Plt { name, offset } => {
                        format!("PLT stub of {name} at file offset {offset:#x}")
                    }
                    ProcessTarget::Mark {
                        provider,
                        name,
                        sites,
                    } => {
                        let semaphores = sites.iter().filter(|(_, s)| *s != 0).count();
                        let plural = if sites.len() == 1 { "" } else { "s" };
                        format!(
                            "SDT marker {provider}:{name} ({} site{plural}, {semaphores} with a semaphore)",
                            sites.len()
                        )
                    }
                };
                let kind = if *is_return { "uretprobe" } else { "uprobe" };
                format!("{kind} on {path}, {what} (address resolved from the binary)")
            }
            ProbeKind::Netfilter {
                pf,
                hooknum,
                priority,
            } => format!("netfilter link (pf {pf}, hook {hooknum}, priority {priority})"),
            ProbeKind::Procfs { .. } if self.is_stdin_input() => {
                "stap-rs's standard input, one byte a hit (input.char, input.line)".to_string()
            }
            ProbeKind::Procfs {
                name,
                write,
                maxsize,
            } => format!(
                "HTTP {} /{name} (procfs, --http), $value up to {}",
                if *write { "PUT/POST" } else { "GET" },
                match maxsize {
                    Some(n) => format!("{n} bytes"),
                    None => "MAXSTRINGLEN".to_string(),
                }
            ),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FunctionMechanism {
    /// fentry / fexit (BPF trampolines).
    Fentry,
    /// kprobe / kretprobe.
    Kprobe,
    /// A BPF LSM program (`kernel.lsm("HOOK")`) on the kernel's
    /// `bpf_lsm_HOOK` stub, through a BPF trampoline; its return value is
    /// the hook's verdict.
    Lsm,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProcessTarget {
    Function(String),
    Statement(String),
    /// SDT marker sites that share one argument layout (one program for
    /// all of them): `(file offset, semaphore file offset or 0)` each.
    Mark {
        provider: String,
        name: String,
        sites: Vec<(u64, u64)>,
    },
    /// The PLT stub through which the binary calls `name` (a file
    /// offset): `process(PATH).plt("PATTERN")`, one probe per stub.
    Plt {
        name: String,
        offset: u64,
    },
}

/// One context variable a probe point offers.
#[derive(Debug, Clone, PartialEq)]
pub struct ContextVar {
    pub name: String,
    pub ty: TypeId,
    /// The C spelling of `ty`, for listings.
    pub type_name: String,
    pub source: ContextSource,
}

#[derive(Debug, Clone, PartialEq)]
pub enum ContextSource {
    /// `ctx[index]` of a raw tracepoint.
    TracepointArg(u32),
    /// A field of a classic tracepoint's record.
    ClassicField { offset: u32, size: u32 },
    /// The `index`th parameter of a probed function.
    FunctionParam(u32),
    /// `$return` of a `.return` probe.
    Return,
    /// The 8-byte field at `offset` in the struct `ctx[index]` points to
    /// (netfilter: `state->in`).
    PointedField { index: u32, offset: u32 },
    /// A value known when the probe is resolved (netfilter: `$hooknum`).
    Constant(i64),
    /// `$argN` of an SDT marker, where its note says it is.
    SdtArg(crate::sdt::SdtArg),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Block {
    pub stmts: Vec<Stmt>,
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Stmt {
    pub kind: StmtKind,
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq)]
pub enum StmtKind {
    Block(Block),
    Expr(Expr),
    If {
        cond: Expr,
        then: Box<Stmt>,
        otherwise: Option<Box<Stmt>>,
    },
    While {
        cond: Expr,
        body: Box<Stmt>,
    },
    For {
        init: Option<Expr>,
        cond: Option<Expr>,
        step: Option<Expr>,
        body: Box<Stmt>,
    },
    Foreach(Box<Foreach>),
    Break,
    Continue,
    /// Leaves the probe handler.
    Next,
    Return(Option<Expr>),
    Delete(Delete),
    Empty,
    /// `try { body } catch [(message)] { handler }`.
    Try {
        body: Block,
        /// A string local set to the error's text.
        message: Option<LocalId>,
        handler: Block,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub enum Delete {
    /// A whole array, or a scalar global reset to its zero value.
    Global(GlobalId),
    Element {
        global: GlobalId,
        keys: Vec<Expr>,
    },
    Local(LocalId),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Foreach {
    pub global: GlobalId,
    /// `v = [a, b] in arr`.
    pub value: Option<LocalId>,
    pub keys: Vec<LocalId>,
    /// Sort marker per key (same length as `keys`).
    pub key_sort: Vec<Option<SortDir>>,
    /// `arr+` / `arr-`.
    pub value_sort: Option<SortDir>,
    /// The aggregate a stats array is sorted (or bound) by; `@count` when
    /// sorting a stats array without one.
    pub aggregate: Option<StatOp>,
    pub limit: Option<Expr>,
    pub body: Stmt,
}

impl Foreach {
    /// True when iteration order matters: a sort marker anywhere.
    pub fn is_sorted(&self) -> bool {
        self.value_sort.is_some() || self.key_sort.iter().any(Option::is_some)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Expr {
    pub kind: ExprKind,
    pub ty: Type,
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq)]
pub enum ExprKind {
    Long(i64),
    Str(String),
    Local(LocalId),
    /// A scalar global.
    Global(GlobalId),
    /// `arr[k1, k2]`.
    Index {
        global: GlobalId,
        keys: Vec<Expr>,
    },
    /// `$var`, `$var->f[2]->g`, `@cast(p, "T")->f`, `$return`, `$var$`.
    Context(Box<ContextAccess>),
    /// `$$vars`, `$$parms`, `$$return` (a string). With `$`/`$$`,
    /// `shapes` has one entry per variable: how it pretty-prints.
    Bulk {
        which: BulkContext,
        vars: Vec<ContextVar>,
        pretty: Option<PrettyDepth>,
        shapes: Vec<PrettyShape>,
    },
    Call {
        function: FunctionId,
        args: Vec<Expr>,
    },
    /// A built-in function from `builtins`.
    Builtin {
        name: String,
        args: Vec<Expr>,
    },
    /// `@count(s)`, `@hist_log(s)`, ... The operand is a stats global or
    /// element. Histograms (typed `string`) only appear as `print` arguments.
    Stat {
        op: StatOp,
        operand: Box<Expr>,
        args: Vec<Expr>,
    },
    /// `@entry(e)` in a `.return` probe: `e` evaluated at function entry.
    Entry(Box<Expr>),
    Unary {
        op: UnaryOp,
        operand: Box<Expr>,
    },
    Binary {
        op: BinaryOp,
        lhs: Box<Expr>,
        rhs: Box<Expr>,
    },
    /// The target is a `Local`, `Global`, `Index` (or a `Context`, refused
    /// as guru mode before it gets here).
    Assign {
        op: AssignOp,
        target: Box<Expr>,
        value: Box<Expr>,
    },
    Crement {
        increment: bool,
        prefix: bool,
        target: Box<Expr>,
    },
    Ternary {
        cond: Box<Expr>,
        then: Box<Expr>,
        otherwise: Box<Expr>,
    },
    In {
        keys: Vec<Expr>,
        global: GlobalId,
    },
    Regex {
        negated: bool,
        subject: Box<Expr>,
        pattern: Box<Expr>,
    },
    /// Stands for an expression whose error was already reported, so that
    /// elaboration can go on; a returned [`Program`] never contains one.
    Invalid,
}

/// A read of kernel data: a context variable or `@cast` pointer, followed
/// by member steps.
#[derive(Debug, Clone, PartialEq)]
pub struct ContextAccess {
    pub base: AccessBase,
    pub steps: Vec<AccessStep>,
    /// The kernel type reached after the last step.
    pub ty: TypeId,
    pub type_name: String,
    pub value: AccessValue,
    /// For [`AccessValue::Pretty`]: how the value prints.
    pub shape: Option<PrettyShape>,
}

/// How `$var$`, `$var$$` and `$$parms$` print a value of a kernel type,
/// decided at pass 2 from the type's BTF (or DWARF) layout, so the IR
/// lowering only walks it. Offsets are relative to the enclosing object.
#[derive(Debug, Clone, PartialEq)]
pub enum PrettyShape {
    /// An integer, enum, `_Bool` or `char`: `%d` if signed, else `%u`.
    Integer {
        bytes: u32,
        signed: bool,
        bitfield: Option<Bitfield>,
    },
    /// A pointer that is not followed: `%p`.
    Pointer,
    /// A `char *` at the top: the string it points to, quoted, or the
    /// address when it cannot be read (stap's `kernel_string_quoted`).
    StringPointer,
    /// A `char[len]` member: its bytes up to the first NUL, quoted.
    CharArray { len: u32 },
    /// A pointer to a struct or union at the top: the object it points to.
    Deref(Box<PrettyShape>),
    /// `{.a=1, .b=2}`; anonymous members are flattened into their parent.
    Struct(Vec<PrettyMember>),
    /// `[1, 2, 3]`.
    Array {
        elem_size: u32,
        len: u32,
        elem: Box<PrettyShape>,
    },
    /// Printed as is: `{...}` and `[...]` past the depth of a single `$`,
    /// `?` for what cannot be printed (floats, functions).
    Text(&'static str),
}

#[derive(Debug, Clone, PartialEq)]
pub struct PrettyMember {
    pub name: String,
    pub byte_offset: u32,
    pub shape: PrettyShape,
}

#[derive(Debug, Clone, PartialEq)]
pub enum AccessBase {
    /// A context variable (by name, with where it comes from).
    Var(ContextVar),
    /// `@cast(ptr, "T")`: `ptr` points at a `T`.
    Cast {
        ptr: Box<Expr>,
        target: TypeId,
        target_name: String,
    },
}

/// One step along a member chain. The cursor is either a value (a context
/// variable or a loaded pointer) or an object in kernel memory.
#[derive(Debug, Clone, PartialEq)]
pub enum AccessStep {
    /// `.name` / `->name`. When `through_pointer`, the cursor is a pointer
    /// value and the member lies at `*cursor + byte_offset`; otherwise the
    /// cursor is an in-memory struct and the member is `byte_offset` into it.
    Member {
        name: String,
        through_pointer: bool,
        byte_offset: u32,
        bitfield: Option<Bitfield>,
        ty: TypeId,
        type_name: String,
    },
    /// `[index]` on a pointer (`through_pointer`) or an in-memory array.
    Subscript {
        index: Box<Expr>,
        through_pointer: bool,
        elem_size: u32,
        ty: TypeId,
        type_name: String,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bitfield {
    /// Bit offset inside the storage starting at `byte_offset`.
    pub bit_shift: u32,
    pub bits: u32,
}

/// How the final cursor becomes a stap value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccessValue {
    /// An integer or enum of `bytes` bytes, sign- or zero-extended to long.
    Integer { bytes: u32, signed: bool },
    /// A pointer, as a long.
    Pointer,
    /// An array or struct: its address, as a long (`kernel_string($dev->name)`).
    Address,
    /// `&...`: the address of the final member, as a long.
    AddressOf,
    /// `$var$` / `$var$$`: pretty-printed as a string.
    Pretty(PrettyDepth),
}
