//! The IR: pass 3's output and the one contract for both backends, the BPF
//! emitter (`crate::bpf`, kernel handlers) and the Cranelift JIT (runtime,
//! host code).
//!
//! A [`Module`] holds every global's storage decision and one [`Function`]
//! per probe handler and per (user function, side) pair: a user function
//! called from both sides is lowered twice, once for each backend. Functions
//! are basic blocks over typed virtual registers; every map access, context
//! read, output record and run-time failure is an explicit instruction, so a
//! backend never has to rediscover meaning from the tree.
//!
//! Invariants (checked by `verify`): every register has one type; every
//! block ends in exactly one terminator; register and block ids are in
//! range; string ops take string registers and arithmetic takes longs;
//! kernel-side functions call only kernel-side functions.

pub mod identity;
pub mod lower;
pub mod print;
pub mod verify;

use crate::ast::{BinaryOp, StatOp};
use crate::source::Span;

// The vocabulary the front end and both backends share, defined with the
// HIR that produces it. Backends name it through `ir` (never `sema`), so
// the IR stays their one contract.
pub use crate::sema::hir::{
    Constant, FunctionMechanism, GlobalId, Limits, MAX_STRING_LEN, MIN_STRING_LEN, Placement,
    ProbeKind, ProcessTarget,
};

/// The two value types a register can hold. Statistics never live in a
/// register: they are only touched through `StatAdd`/`StatGet`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ValType {
    Long,
    Str,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Reg(pub u32);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlockId(pub u32);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FuncId(pub u32);

/// Index into [`Module::strings`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StrId(pub u32);

/// Index into [`Module::formats`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FormatId(pub u32);

/// One `name=value` piece of `Op::BulkArgs`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BulkItem {
    pub name: String,
    pub source: BulkSource,
}

/// Where a `BulkItem`'s value is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BulkSource {
    /// Argument `index` of the probed function (`Op::ContextArg`).
    Arg(u32),
    /// The return value (`Op::ContextReturn`).
    Return,
}

/// A `foreach` iterator slot within one function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IterId(pub u32);

#[derive(Debug, Clone, PartialEq)]
pub struct Module {
    /// Indexed by the HIR's `GlobalId`.
    pub globals: Vec<Global>,
    pub functions: Vec<Function>,
    /// One per HIR probe, in the HIR's order.
    pub probes: Vec<ProbeHandler>,
    pub strings: Vec<String>,
    pub formats: Vec<Format>,
    pub limits: Limits,
}

impl Module {
    pub fn function(&self, id: FuncId) -> &Function {
        &self.functions[id.0 as usize]
    }

    pub fn global(&self, id: GlobalId) -> &Global {
        &self.globals[id.0 as usize]
    }

    pub fn string(&self, id: StrId) -> &str {
        &self.strings[id.0 as usize]
    }

    pub fn format(&self, id: FormatId) -> &Format {
        &self.formats[id.0 as usize]
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Global {
    pub name: String,
    pub storage: Storage,
    pub init: Option<Constant>,
    /// Which sides touch it: kernel-touched globals must live in BPF maps.
    pub kernel: bool,
    pub host: bool,
    pub span: Span,
    /// Bytes of each string part of this global's key, when what can reach
    /// the key is shorter than MAXSTRINGLEN (`bpf::key_text`): `execname()`
    /// keys take 16 bytes, not 512. `None`: MAXSTRINGLEN.
    pub key_text_bytes: Option<u32>,
}

impl Global {
    /// Bytes of each string part of the key, given MAXSTRINGLEN.
    pub fn key_text_bytes(&self, max_string_len: u32) -> u32 {
        self.key_text_bytes.unwrap_or(max_string_len)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Storage {
    Scalar(ValType),
    Array {
        keys: Vec<ValType>,
        value: ValType,
        /// `global a[N]`, else MAXMAPENTRIES.
        max_entries: u64,
        /// `global a%[N]`: overwrite the oldest entry when full.
        wrap: bool,
    },
    /// A statistic (`keys` empty) or an array of them.
    Stats {
        keys: Vec<ValType>,
        max_entries: u64,
        /// Only what the program extracts is kept per entry.
        needs: StatNeeds,
    },
}

/// What a statistic's per-CPU value must hold. Count and sum are always kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StatNeeds {
    pub min_max: bool,
    /// stap's integer Welford state (`@variance`).
    pub variance: bool,
    pub hist_log: bool,
    /// `@hist_linear(s, lo, hi, width)`; one linear layout per statistic.
    pub hist_linear: Option<LinearHist>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinearHist {
    pub lo: i64,
    pub hi: i64,
    pub width: i64,
}

/// A probe handler: the function that runs when the probe fires.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeHandler {
    /// The resolved point, e.g. `kernel.trace("skb:kfree_skb")`.
    pub point: String,
    /// The point as the script wrote it (`pn()`), e.g. `kernel.trace("*skb")`.
    pub written: String,
    pub kind: ProbeKind,
    pub placement: Placement,
    pub function: FuncId,
    pub span: Span,
}

/// A printf-family format, kept as text; `crate::printf::parse` gives its
/// pieces (it was checked in pass 2, so parsing it again cannot fail).
#[derive(Debug, Clone, PartialEq)]
pub struct Format {
    pub text: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Function {
    /// `probe0 kernel.trace("skb:kfree_skb")` or `devname@kernel`.
    pub name: String,
    pub side: Placement,
    /// The first `param_count` registers are the parameters, in order.
    pub param_count: usize,
    pub ret: Option<ValType>,
    /// The type of each register.
    pub regs: Vec<ValType>,
    /// `blocks[0]` is the entry.
    pub blocks: Vec<Block>,
    /// Iterator slots used by `foreach` (host functions only).
    pub iters: u32,
    pub span: Span,
}

impl Function {
    pub fn reg_type(&self, reg: Reg) -> ValType {
        self.regs[reg.0 as usize]
    }

    pub fn block(&self, id: BlockId) -> &Block {
        &self.blocks[id.0 as usize]
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Block {
    pub insts: Vec<Inst>,
    pub term: Term,
    pub term_span: Span,
    /// Inside `try`: a run-time error anywhere in this block (an
    /// instruction, a called function, or its `Term::Fail`) goes to the
    /// handler instead of ending the handler and counting towards
    /// MAXERRORS.
    pub catch: Option<Catch>,
}

/// Where a block's run-time errors go (see [`Block::catch`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Catch {
    pub handler: BlockId,
    /// `catch (msg)`: set to stap's error text before the handler runs.
    pub message: Option<Reg>,
}

/// One instruction and the script span it came from (for `--dump`
/// annotations and mapping verifier errors back to script lines).
#[derive(Debug, Clone, PartialEq)]
pub struct Inst {
    pub op: Op,
    pub span: Span,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnOp {
    Neg,
    /// Logical not: 1 if zero, else 0.
    Not,
    BitNot,
}

/// Long arithmetic. `Div`/`Mod` never see a zero divisor: lowering branches
/// to a `Term::Fail(DivisionByZero)` block first (BPF defines x/0 as 0, stap
/// calls it an error). Signed semantics throughout, as stap's longs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    Mod,
    Shl,
    /// Arithmetic shift right (stap longs are signed).
    Shr,
    And,
    Or,
    Xor,
}

impl BinOp {
    pub fn from_ast(op: BinaryOp) -> Option<BinOp> {
        Some(match op {
            BinaryOp::Add => BinOp::Add,
            BinaryOp::Sub => BinOp::Sub,
            BinaryOp::Mul => BinOp::Mul,
            BinaryOp::Div => BinOp::Div,
            BinaryOp::Mod => BinOp::Mod,
            BinaryOp::Shl => BinOp::Shl,
            BinaryOp::Shr => BinOp::Shr,
            BinaryOp::BitAnd => BinOp::And,
            BinaryOp::BitOr => BinOp::Or,
            BinaryOp::BitXor => BinOp::Xor,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

/// Which statistic value `StatGet` extracts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatValue {
    Count,
    Sum,
    Min,
    Max,
    Avg,
    /// `@variance(s, shift)`.
    Variance {
        shift: u32,
    },
}

impl StatValue {
    pub fn from_op(op: StatOp, shift: u32) -> Option<StatValue> {
        Some(match op {
            StatOp::Count => StatValue::Count,
            StatOp::Sum => StatValue::Sum,
            StatOp::Min => StatValue::Min,
            StatOp::Max => StatValue::Max,
            StatOp::Avg => StatValue::Avg,
            StatOp::Variance => StatValue::Variance { shift },
            StatOp::HistLog | StatOp::HistLinear => return None,
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HistKind {
    Log,
    Linear(LinearHist),
}

/// What a `foreach` sorts by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SortBy {
    /// The Nth key.
    Key(u32),
    /// The element's value (for a stats array: the aggregate below).
    Value,
    /// A stats array sorted by this extractor.
    Aggregate(StatValue),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sort {
    pub by: SortBy,
    pub descending: bool,
}

/// An argument of a printf record. Address-to-name conversions that only
/// the host can do (it reads /proc/kallsyms) travel as the address and are
/// resolved when the record is printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrintArg {
    Value(Reg),
    /// `symname(addr)`, `symdata(addr)`, `modname(addr)` or
    /// `enum_name("E", value)` directly as an argument of `printf` in
    /// kernel code (`addr` holds the value).
    Symbol {
        addr: Reg,
        how: SymbolText,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SymbolText {
    /// `tcp_v4_rcv`
    Name,
    /// `tcp_v4_rcv+0x91/0x1030 [kernel]`
    Data,
    /// `kernel` or the module name.
    Module,
    /// `enum_name("E", value)`: the enumerator of kernel enum `E` (the
    /// string constant) with this value, from the kernel's BTF.
    Enum(StrId),
    /// The stack where the probe fired (`print_backtrace()`,
    /// `sprint_backtrace()`, `print_ubacktrace()`, ...): the kernel code
    /// captures the frames into the record (`addr` is unused), the host
    /// symbolizes them. `full` is `print_stack`'s layout (` 0xADDR :
    /// sym+off/size [mod]` lines), else `sprint_stack`'s (`sym+off [mod]`).
    Stack { user: bool, full: bool },
    /// `ctime(secs)` (`local`: `tz_ctime`): the host formats the date.
    Time { local: bool },
}

#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    // Values.
    Const {
        dst: Reg,
        value: i64,
    },
    ConstStr {
        dst: Reg,
        id: StrId,
    },
    Move {
        dst: Reg,
        src: Reg,
    },
    Unary {
        dst: Reg,
        op: UnOp,
        src: Reg,
    },
    Binary {
        dst: Reg,
        op: BinOp,
        lhs: Reg,
        rhs: Reg,
    },
    /// Long comparison; `dst` is 1 or 0.
    Compare {
        dst: Reg,
        op: CmpOp,
        lhs: Reg,
        rhs: Reg,
    },
    /// String comparison (bytewise, like strcmp); `dst` is 1 or 0.
    StrCompare {
        dst: Reg,
        op: CmpOp,
        lhs: Reg,
        rhs: Reg,
    },
    /// `lhs . rhs`, truncated to MAXSTRINGLEN - 1 bytes.
    Concat {
        dst: Reg,
        lhs: Reg,
        rhs: Reg,
    },

    // Scalar globals.
    LoadGlobal {
        dst: Reg,
        global: GlobalId,
    },
    StoreGlobal {
        global: GlobalId,
        src: Reg,
    },
    /// Atomic `global += delta` (for `++`, `--`, `+=`, `-=` on shared longs).
    AddGlobal {
        global: GlobalId,
        delta: Reg,
    },

    // Associative arrays. A missing element reads as 0 or "".
    MapGet {
        dst: Reg,
        global: GlobalId,
        keys: Vec<Reg>,
    },
    MapSet {
        global: GlobalId,
        keys: Vec<Reg>,
        src: Reg,
    },
    /// Atomic `arr[keys] += delta`, creating the element at 0 first.
    MapAdd {
        global: GlobalId,
        keys: Vec<Reg>,
        delta: Reg,
    },
    MapDelete {
        global: GlobalId,
        keys: Vec<Reg>,
    },
    MapContains {
        dst: Reg,
        global: GlobalId,
        keys: Vec<Reg>,
    },
    /// Test-and-set in kernel code (`if (!(k in a)) { a[k] = v; ... }`,
    /// `sema::concurrency`): stores `src` only if the element is missing,
    /// atomically. `dst` = 1 when this store created it, 0 when it was
    /// there (left as it was). A full array is the overflow error, as for
    /// a plain store.
    MapInsert {
        dst: Reg,
        global: GlobalId,
        keys: Vec<Reg>,
        src: Reg,
    },
    /// `delete arr`, or `delete scalar` (reset to 0 / "" / empty stats).
    Clear {
        global: GlobalId,
    },

    // Statistics (`keys` empty for a scalar statistic).
    /// `s <<< value`
    StatAdd {
        global: GlobalId,
        keys: Vec<Reg>,
        value: Reg,
    },
    /// `@count(s)` etc. over all CPUs. `@avg`/`@min`/`@max`/`@variance` of
    /// an empty statistic is a run-time error, as in stap.
    StatGet {
        dst: Reg,
        global: GlobalId,
        keys: Vec<Reg>,
        what: StatValue,
    },
    /// `print(@hist_log(s))` / `print(@hist_linear(...))` (host only).
    PrintHist {
        global: GlobalId,
        keys: Vec<Reg>,
        kind: HistKind,
    },

    // foreach (host only: the iterator walks a snapshot taken at `IterStart`).
    IterStart {
        iter: IterId,
        global: GlobalId,
        sort: Option<Sort>,
        limit: Option<Reg>,
    },
    /// Fetches the next element into `keys` (and `value`); `has` is 0 at the end.
    IterNext {
        iter: IterId,
        has: Reg,
        keys: Vec<Reg>,
        value: Option<Reg>,
    },

    // Calls.
    Call {
        dst: Option<Reg>,
        func: FuncId,
        args: Vec<Reg>,
    },
    /// A built-in from `sema::builtins`, by name. Output and exit are the
    /// dedicated ops below, not builtins.
    Builtin {
        dst: Option<Reg>,
        name: String,
        args: Vec<Reg>,
    },

    // Kernel context (kernel side only).
    /// Argument `index` of the probed event: raw tracepoint `ctx[index]`,
    /// fentry/kprobe/uprobe argument `index`.
    ContextArg {
        dst: Reg,
        index: u32,
    },
    /// A field of the context: a classic tracepoint record's, or a
    /// register in a kprobe's or uprobe's `pt_regs` (an SDT argument).
    ContextField {
        dst: Reg,
        offset: u32,
        size: u32,
        signed: bool,
    },
    /// `$return` of a `.return` probe.
    ContextReturn {
        dst: Reg,
    },
    /// `$$parms`, `$$vars` or `$$return` of a function probe, unpretty:
    /// `name=%#x` pieces joined by spaces, read from the probed
    /// function's arguments. The op reads them itself, so handlers of one
    /// wildcard whose lists differ (para-callgraph.stp's `$$parms`) differ
    /// only in `items`: a shared program takes each function's list from a
    /// table (`bpf::compile`).
    BulkArgs {
        dst: Reg,
        items: Vec<BulkItem>,
    },
    /// Reads `size` (1, 2, 4 or 8) bytes of kernel memory at `addr`, sign-
    /// or zero-extended. A fault is a run-time error naming the address.
    ReadKernel {
        dst: Reg,
        addr: Reg,
        size: u32,
        signed: bool,
    },
    /// The same for user memory (`user_long` and uprobe arguments).
    ReadUser {
        dst: Reg,
        addr: Reg,
        size: u32,
        signed: bool,
    },

    // Output and control.
    /// printf to the script's output. Kernel side: a ring-buffer record.
    Printf {
        format: FormatId,
        args: Vec<PrintArg>,
    },
    Sprintf {
        dst: Reg,
        format: FormatId,
        args: Vec<Reg>,
    },
    /// `exit()`: end probes run, then the session ends. The handler goes on
    /// to its end, as in stap.
    Exit,
    /// Loop back-edge guard: counts towards MAXACTION and fails with
    /// "MAXACTION exceeded" past it.
    Tick,
}

/// Why a handler stops with a run-time error.
#[derive(Debug, Clone, PartialEq)]
pub enum Failure {
    DivisionByZero,
    /// `error(msg)`.
    Explicit(Reg),
}

#[derive(Debug, Clone, PartialEq)]
pub enum Term {
    Jump(BlockId),
    Branch {
        cond: Reg,
        then: BlockId,
        otherwise: BlockId,
    },
    /// `None` for handlers and functions without a value.
    Return(Option<Reg>),
    /// A run-time error: reported in stap's wording; the session goes on or
    /// ends according to MAXERRORS.
    Fail(Failure),
}
