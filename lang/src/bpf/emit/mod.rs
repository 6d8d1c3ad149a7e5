//! Code generation for one kernel probe handler: one pass over the IR
//! blocks, emitting instructions per `Op`/`Term`, with labels patched into
//! jump offsets at the end.
//!
//! Conventions:
//! - Long registers live where `regalloc` put them (r6–r9 or a stack spill
//!   slot); r0–r5 are scratch inside one op (helper calls clobber them).
//!   Results are computed into r0 and then moved to their home, so an op
//!   may name the same register as operand and result.
//! - String registers are fixed slots in this nesting level's scratch
//!   region, always NUL-padded to `max_string_len` (hash keys built from
//!   them compare bytewise); in a handler whose strings are all short map
//!   keys, slots in the stack frame instead (`plan_stack_strings`). Zeroing uses `bpf_probe_read_kernel` from
//!   address 0: the read faults and the helper zero-fills its destination,
//!   a memset in one helper call.
//! - The stack frame (offsets from r10) is fixed: see the `FRAME_*`
//!   constants; spill slots follow it.

mod bulk;
mod context;
mod dates;
mod foreach;
mod format;
mod globals;
mod output;
mod sorted;
mod stack;
mod statistics;
mod strfuncs;
mod strings;

use hashbrown::{HashMap, HashSet};

use super::bulk::{BulkFormats, BulkPlace};
use super::insn::{self, B, DW, FP, H, Insn, R0, R1, R2, R3, R4, R5, W, helper};
use super::layout::{self, StatLayout};
use super::maps::{self, COUNTER_DEPTH, COUNTER_LOST_EVENTS};
use super::records::{self, HEADER_BYTES};
use super::regalloc::{self, Allocation, Location};
use super::{AttachKind, Options};
use crate::diag::Diagnostic;
use crate::ir::{
    BinOp, CmpOp, Failure, Function, Module, Op, PrintArg, Reg, StatValue, Storage, SymbolText,
    Term, UnOp, ValType,
};
use crate::ir::{FunctionMechanism, GlobalId, ProbeKind};
use crate::kernel::TracepointArgs;
use crate::source::Span;

/// Saved context pointer.
const FRAME_CTX: i16 = -8;
/// The IR builtin that sets a program's verdict (`sema::builtins::SET_VERDICT`).
const SET_VERDICT: &str = "__set_verdict";
/// This level's scratch region (a map value pointer).
const FRAME_SCRATCH: i16 = -16;
/// The per-CPU counters value (a map value pointer).
const FRAME_COUNTERS: i16 = -24;
/// A loop callback's context struct (foreach.rs, and sorted.rs's rounds),
/// its fields' byte offsets.
const CTX_PROBE_CTX: i16 = 0;
const CTX_SCRATCH: i16 = 8;
const CTX_COUNTERS: i16 = 16;
/// How the callback stopped the loop: `CODE_*` (foreach.rs).
const CTX_CODE: i16 = 24;
/// `Tick` count for MAXACTION.
const FRAME_TICKS: i16 = -32;
/// Helper output (probe reads), one-entry map keys, counters' key.
const FRAME_TMP: i16 = -40;
/// The running offset of a record being built.
const FRAME_RECORD_OFFSET: i16 = -48;
/// 64 bytes: long-only map keys, small records (exit, errors).
const FRAME_SMALL: i16 = -112;
const SMALL_BYTES: u32 = 64;
/// 64 bytes: zeroed statistic values for inserts.
const FRAME_SMALL_VALUE: i16 = -176;
const FRAME_FIXED_BYTES: u32 = 176;
/// At most this many bytes of string registers go on the stack.
const STACK_STRINGS_BYTES: u32 = 128;
/// The verifier unrolls the per-CPU loop of a statistic extraction and
/// keeps a pending state per branch; past about 8192 of them it gives up,
/// so the loop is capped.
const MAX_CPUS: u32 = 512;
const MAX_STACK: u32 = 512;

/// Which object map each role and global is.
pub(super) struct MapIndex {
    pub globals: HashMap<u32, usize>,
    pub events: usize,
    pub scratch: usize,
    pub counters: usize,
    pub control: usize,
    pub formats: Option<FormatsIndex>,
    /// The program array of perf-event handlers sharing one event.
    pub perf_chain: Option<usize>,
}

/// Where each `bpf_snprintf` format sits in the formats map's value.
pub(super) use format::FormatPart;
pub(super) use strfuncs::literal;

#[derive(Debug, Clone)]
pub(super) struct FormatsIndex {
    pub map: usize,
    /// `FormatId` → byte offset.
    pub offsets: HashMap<u32, u32>,
    /// Formats `bpf_snprintf` cannot take whole, in parts (`format.rs`).
    pub segments: HashMap<u32, Vec<FormatPart>>,
    /// `%ps` (symname) and `%pS` (symdata).
    pub symname: u32,
    pub symdata: u32,
    /// `" 0x%lx"`: a frame of `backtrace()` (from its second byte for the
    /// first frame).
    pub hex_frame: u32,
    /// The DFA table of each `=~` pattern (`bpf::regex`), by its text.
    pub regexes: HashMap<String, RegexPlace>,
    /// `ctime`/`tz_ctime`'s names and formats, when a handler calls them.
    pub ctime: Option<CtimePlace>,
    /// The piece formats of `$$parms` and kin (`bpf::bulk`), if used.
    pub bulk_formats: Option<BulkFormats>,
    /// Where each program's bulk-list rows are, by its probe's index.
    pub bulk: HashMap<usize, BulkPlace>,
}

/// Where `ctime`'s pieces sit in the formats map's value.
#[derive(Debug, Clone, Copy)]
pub(super) struct CtimePlace {
    pub days: u32,
    pub months: u32,
    pub utc: u32,
    pub local: u32,
    /// `tz_ctime`'s offset east of UTC, in seconds.
    pub offset_east: i64,
}

/// Where a pattern's DFA table sits in the formats map's value.
#[derive(Debug, Clone, Copy)]
pub(super) struct RegexPlace {
    pub offset: u32,
    pub row: u32,
    pub mask: u32,
    pub start: u16,
}

pub(super) struct Emitted {
    pub insns: Vec<u64>,
    pub map_relocs: Vec<(usize, usize)>,
    pub lines: Vec<(usize, Span)>,
    pub stack_bytes: u32,
    /// Bytes of the scratch region this handler uses (0 = none).
    pub scratch_bytes: u32,
    /// First instruction of each callback (kernel `foreach` bodies) and
    /// plain subprogram, in order; the handler itself starts at 0.
    pub callbacks: Vec<usize>,
    /// How many of `callbacks` are plain subprograms.
    pub plain_subprograms: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Label(usize);

/// Where a record's next argument goes.
#[derive(Debug, Clone, Copy)]
enum RecordOffset {
    /// Known at compile time.
    Fixed(u32),
    /// Kept at `FRAME_RECORD_OFFSET` (after a variable-length string).
    Running,
}

/// String registers kept in the stack frame instead of the scratch
/// region (`plan_stack_strings`): below the spill slots, `slot_bytes` each.
#[derive(Debug, Clone, Copy)]
struct StackStrings {
    base: i16,
    slot_bytes: u32,
    bytes: u32,
}

/// Offsets inside this handler's scratch region.
#[derive(Debug, Default)]
struct ScratchLayout {
    /// Twice `stride`: concatenation and `strlen` work space.
    temp: u32,
    key: u32,
    value: u32,
    record: u32,
    /// `bpf_snprintf`'s u64 argument array.
    sprintf: u32,
    /// Kernel `foreach` state the verifier must not track (a value in a
    /// map, unlike the stack, is an unknown scalar to it, so a callback's
    /// states converge): the MAXACTION tick count, then each loop's
    /// `limit` countdown.
    loops: u32,
    /// A captured stack (`stack.rs`): frame bytes, tgid, frames.
    stack: u32,
    /// Output framing state (`output.rs`, present when `record_bytes > 0`):
    /// a `u64` [`HELD_SENT`] | held record length, then the `u32` nesting
    /// level and the `u32` run number on this stream (kept across runs:
    /// the region persists).
    out: u32,
    record_bytes: u32,
    size: u32,
}

/// The framing state's bit saying a record of this run already went out
/// with `FLAG_MORE`; its low 16 bits are the length of the record held in
/// scratch (0: none). Records are shorter than 64 KiB (scratch is 32).
const HELD_SENT: i32 = 1 << 30;
const HELD_LEN_MASK: i32 = 0xffff;

/// How the handler reaches its context.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ContextStyle {
    /// `u64 ctx[]`: raw tracepoints, fentry/fexit (`ret_index` = arg count).
    /// `btf_typed`: the verifier types pointer slots as kernel objects
    /// (fentry/fexit, tp_btf, netfilter), see `context.rs`.
    U64Array {
        ret_index: Option<u32>,
        btf_typed: bool,
    },
    /// x86_64 `struct pt_regs`: kprobes, uprobes (`user`: the stack is
    /// user memory).
    PtRegs { user: bool },
    /// A classic tracepoint's record.
    Record,
    /// The raw `sys_enter(regs, id)` / `sys_exit(regs, ret)` tracepoint
    /// standing in for `syscalls:` events: `ctx[0]` is the task's
    /// `pt_regs`; a record field is read from where the event copies it.
    /// `Emitter::syscall_calls` are the numbers the program runs for.
    Syscall { exit: bool },
    /// Perf events: no arguments.
    None,
}

/// x86_64 `struct pt_regs` offsets of the argument registers di, si, dx,
/// cx, r8, r9, and of ax (the return value).
const PT_REGS_ARGS: [i16; 6] = [112, 104, 96, 88, 72, 64];
const PT_REGS_AX: i16 = 80;
const PT_REGS_CS: i16 = 136;
/// `struct pt_regs` offset of ip.
const PT_REGS_IP: i16 = 128;
/// `struct pt_regs` offset of sp.
const PT_REGS_SP: i16 = 152;
/// x86_64 `struct pt_regs` offsets of the system call arguments (di, si,
/// dx, r10, r8, r9: the syscall convention passes the fourth in r10) and
/// of orig_ax, the call number (`syscall_get_nr`).
const PT_REGS_SYSCALL_ARGS: [i16; 6] = [112, 104, 96, 56, 72, 64];
const PT_REGS_ORIG_AX: i16 = 120;
/// A `syscalls:` record: the common fields, `int __syscall_nr` at 8, then
/// the arguments (enter) or `long ret` (exit) in 8-byte slots from 16.
const SYSCALL_NR_FIELD: u32 = 8;
const SYSCALL_FIRST_SLOT: u32 = 16;

pub(super) fn emit_probe(
    module: &Module,
    probe_index: usize,
    function: &Function,
    attach: &AttachKind,
    options: &Options,
    maps: &MapIndex,
    out_of_bounds: bool,
) -> Result<Emitted, Vec<Diagnostic>> {
    // A `catch` whose `try` body has no run-time error in this backend
    // (every fail site decides that as it is emitted) is dead code, which
    // the verifier rejects: emit again without it until none is left.
    let mut dead_catches = HashSet::new();
    loop {
        let emitter = emit_handler(
            module,
            (probe_index, function, attach),
            options,
            maps,
            out_of_bounds,
            &dead_catches,
        );
        let unused: Vec<u32> = catch_handlers(function, &emitter.reachable)
            .filter(|h| !emitter.used_catches.contains(h) && !dead_catches.contains(h))
            .collect();
        if unused.is_empty() {
            return finish_probe(module, probe_index, emitter);
        }
        dead_catches.extend(unused);
    }
}

/// The handler blocks of the `catch`es of reachable blocks.
fn catch_handlers<'f>(
    function: &'f Function,
    reachable: &'f [bool],
) -> impl Iterator<Item = u32> + 'f {
    let mut handlers: Vec<u32> = function
        .blocks
        .iter()
        .zip(reachable)
        .filter(|(_, reachable)| **reachable)
        .filter_map(|(block, _)| block.catch.map(|c| c.handler.0))
        .collect();
    handlers.sort_unstable();
    handlers.dedup();
    handlers.into_iter()
}

/// One emission of the handler (the probe's index, its inlined function
/// and how it attaches); `dead_catches` are `catch` handler blocks treated
/// as unreachable.
fn emit_handler<'a>(
    module: &'a Module,
    (probe_index, function, attach): (usize, &'a Function, &AttachKind),
    options: &Options,
    maps: &'a MapIndex,
    out_of_bounds: bool,
    dead_catches: &HashSet<u32>,
) -> Emitter<'a> {
    let probe = &module.probes[probe_index];
    let alloc = regalloc::allocate(function);
    let n = options.max_string_len.max(8);
    let stride = n.div_ceil(8) * 8;
    let mut emitter = Emitter {
        module,
        function,
        alloc,
        probe: probe_index as u32,
        n,
        stride,
        str_widths: super::key_text::string_read_widths(module, function, n),
        maps,
        chain_next: match attach {
            AttachKind::PerfEvent { chain, .. } => chain.next,
            _ => None,
        },
        context: context_style(
            &probe.kind,
            attach,
            options
                .kernel
                .tracepoint_mechanism(probe_index, options.tracepoint_mechanism)
                == super::TracepointMechanism::TpBtf,
        ),
        compat: options.kernel.compat,
        syscall_calls: match attach {
            AttachKind::Syscall { events, .. } => events.iter().map(|(nr, _)| *nr).collect(),
            _ => Vec::new(),
        },
        max_action: module.limits.max_action,
        cpus: options.cpus.clamp(1, MAX_CPUS) as i32,
        local_time: options.local_time,
        insns: Vec::new(),
        relocs: Vec::new(),
        lines: Vec::new(),
        labels: Vec::new(),
        fixups: Vec::new(),
        span: probe.span,
        diags: Vec::new(),
        scratch: ScratchLayout::default(),
        stack_strings: None,
        epilogue: Label(0),
        release: Label(0),
        out_of_bounds,
        regions: Vec::new(),
        block_owner: Vec::new(),
        reachable: Vec::new(),
        pending_callbacks: Vec::new(),
        callback_starts: Vec::new(),
        func_fixups: Vec::new(),
        in_callback: false,
        clear_callback: None,
        current_block: 0,
        frame_labels: Vec::new(),
        flush_sub: None,
        byte_loops: Vec::new(),
        task: options.kernel.task,
        pointer_slots: options.kernel.pointer_slots(probe_index),
        dead_catches: dead_catches.clone(),
        used_catches: HashSet::new(),
        error_tails: Vec::new(),
        fused: fused_compares(function),
        verdict: None,
    };
    let sets_verdict = (function.blocks.iter()).any(|block| {
        (block.insts.iter())
            .any(|inst| matches!(&inst.op, Op::Builtin { name, .. } if name == SET_VERDICT))
    });
    if sets_verdict {
        // One more spill slot, past the allocator's own.
        emitter.verdict = Some(Emitter::spill_offset(emitter.alloc.spill_slots));
        emitter.alloc.spill_slots += 1;
    }
    emitter.plan_regions();
    emitter.stack_strings = emitter.plan_stack_strings();
    emitter.scratch = emitter.plan_scratch();
    emitter.function_body();
    emitter
}

/// Stack and scratch checks, then the final instructions.
fn finish_probe(
    module: &Module,
    probe_index: usize,
    mut emitter: Emitter<'_>,
) -> Result<Emitted, Vec<Diagnostic>> {
    let probe = &module.probes[probe_index];
    // Every frame (handler and callbacks) has the same layout; the
    // verifier adds up the frames of the deepest call chain, each rounded
    // up to 32 bytes.
    let mut frame_bytes = FRAME_FIXED_BYTES + 8 * emitter.alloc.spill_slots;
    frame_bytes += emitter.stack_strings.map_or(0, |s| s.bytes);
    let depth = emitter.regions.iter().map(|r| r.depth).max().unwrap_or(0);
    if depth > 0 {
        // A callback keeps its context pointer past the spill slots.
        frame_bytes += 8;
    }
    let mut stack_bytes = if depth > 0 {
        frame_bytes.div_ceil(32) * 32 * (1 + depth)
    } else {
        frame_bytes
    };
    if emitter.clear_callback.is_some() || !emitter.byte_loops.is_empty() {
        // The `delete ARRAY` callback's frame (empty) or a string loop's
        // (its scratch pointer), rounded up to 32.
        stack_bytes = stack_bytes.div_ceil(32) * 32 + 32;
    }
    let sorted = foreach::sorted_depth(&emitter.regions);
    if sorted > 0 {
        // Each sorted loop in the chain adds its round's frame (empty,
        // rounded up to 32) above its body's, and the walk's frame sits
        // under the innermost round.
        stack_bytes = stack_bytes.div_ceil(32) * 32 + 32 * (sorted + 1);
    }
    if emitter.flush_sub.is_some() {
        // The flush subprogram's frame (24 bytes, rounded up to 32) under
        // the handler's own; callbacks flush inline.
        stack_bytes = stack_bytes.max(frame_bytes.div_ceil(32) * 32 + 32);
    }
    if stack_bytes > MAX_STACK {
        let callbacks = if depth > 0 {
            format!(", counting {depth} nested foreach callback frame(s)")
        } else {
            String::new()
        };
        emitter.diags.push(
            Diagnostic::error(format!(
                "probe {} needs {stack_bytes} bytes of BPF stack (the limit is {MAX_STACK}){callbacks}",
                probe.point
            ))
            .at(probe.span, "in this probe")
            .note("split the handler or use fewer local variables"),
        );
    }
    if emitter.scratch.size > maps::MAX_SCRATCH_BYTES {
        emitter.diags.push(
            Diagnostic::error(format!(
                "probe {} needs {} bytes of per-CPU scratch space (the limit is {})",
                probe.point,
                emitter.scratch.size,
                maps::MAX_SCRATCH_BYTES
            ))
            .at(probe.span, "in this probe")
            .note("lower MAXSTRINGLEN or use fewer string values"),
        );
    }
    if !emitter.diags.is_empty() {
        return Err(emitter.diags);
    }
    let insns = emitter.finish()?;
    let mut callbacks: Vec<usize> = emitter.callback_starts.iter().map(|(at, _)| *at).collect();
    callbacks.sort();
    Ok(Emitted {
        insns,
        map_relocs: emitter.relocs,
        lines: emitter.lines,
        stack_bytes,
        scratch_bytes: emitter.scratch.size,
        callbacks,
        plain_subprograms: usize::from(emitter.flush_sub.is_some()),
    })
}

fn context_style(kind: &ProbeKind, attach: &AttachKind, tp_btf: bool) -> ContextStyle {
    if let AttachKind::Syscall { exit, .. } = attach {
        return ContextStyle::Syscall { exit: *exit };
    }
    match kind {
        ProbeKind::Tracepoint {
            args: TracepointArgs::Raw(_),
            ..
        } => ContextStyle::U64Array {
            ret_index: None,
            btf_typed: tp_btf,
        },
        ProbeKind::Tracepoint { .. } => ContextStyle::Record,
        ProbeKind::KernelFunction {
            mechanism: FunctionMechanism::Fentry | FunctionMechanism::Lsm,
            is_return,
            proto,
            ..
        } => ContextStyle::U64Array {
            ret_index: is_return.then_some(proto.params.len() as u32),
            btf_typed: true,
        },
        ProbeKind::KernelFunction { .. } => ContextStyle::PtRegs { user: false },
        ProbeKind::Process { .. } => ContextStyle::PtRegs { user: true },
        // `struct bpf_nf_ctx { state; skb; }`: two 8-byte pointers.
        ProbeKind::Netfilter { .. } => ContextStyle::U64Array {
            ret_index: None,
            btf_typed: true,
        },
        _ => ContextStyle::None,
    }
}

/// What every path of the handler returns unless the body sets a verdict
/// (under -g): tracing programs' value is ignored (0), an LSM program's 0
/// allows, and a netfilter program's is the packet's verdict, `NF_ACCEPT`.
fn return_value(kind: &ProbeKind) -> i32 {
    const NF_ACCEPT: i32 = 1;
    match kind {
        ProbeKind::Netfilter { .. } => NF_ACCEPT,
        _ => 0,
    }
}

/// Blocks reachable from the entry, in order (the verifier rejects
/// unreachable instructions).
fn reachable_blocks(function: &Function, dead_catches: &HashSet<u32>) -> Vec<bool> {
    let mut seen = vec![false; function.blocks.len()];
    let mut stack = vec![0u32];
    while let Some(b) = stack.pop() {
        let Some(flag) = seen.get_mut(b as usize) else {
            continue;
        };
        if *flag {
            continue;
        }
        *flag = true;
        let block = &function.blocks[b as usize];
        stack.extend(regalloc::successors(&block.term));
        stack.extend(
            block
                .catch
                .map(|c| c.handler.0)
                .filter(|h| !dead_catches.contains(h)),
        );
    }
    seen
}

struct Emitter<'a> {
    module: &'a Module,
    function: &'a Function,
    alloc: Allocation,
    probe: u32,
    /// MAXSTRINGLEN.
    n: u32,
    stride: u32,
    /// Per string register, the bytes its uses can read
    /// (`key_text::string_read_widths`): how far a definition must write
    /// and NUL-pad.
    str_widths: Vec<u32>,
    maps: &'a MapIndex,
    /// The chain slot to tail-call at the exit (`PerfChain::next`).
    chain_next: Option<u32>,
    context: ContextStyle,
    /// What a raw system call program checks first (`ContextStyle::Syscall`):
    /// the ia32 flag, then the call number against these.
    compat: super::facts::CompatCheck,
    syscall_calls: Vec<u32>,
    max_action: u64,
    /// CPUs a statistic extraction visits.
    cpus: i32,
    /// The host's zone at compile time: `tz_gmtoff()` and `tz_name()`.
    local_time: super::LocalTime,
    insns: Vec<Insn>,
    relocs: Vec<(usize, usize)>,
    lines: Vec<(usize, Span)>,
    labels: Vec<Option<usize>>,
    fixups: Vec<(usize, Label)>,
    /// The span of the op being emitted.
    span: Span,
    diags: Vec<Diagnostic>,
    scratch: ScratchLayout,
    /// Set when every string register is short and only feeds map keys.
    stack_strings: Option<StackStrings>,
    epilogue: Label,
    /// After the epilogue's output flush: gives the nesting level back.
    release: Label,
    out_of_bounds: bool,
    /// Kernel `foreach` loops (`foreach.rs`).
    regions: Vec<foreach::Region>,
    /// Per block, the innermost loop whose callback holds it (None: the
    /// handler).
    block_owner: Vec<Option<usize>>,
    reachable: Vec<bool>,
    /// Loops whose callback is still to be emitted.
    pending_callbacks: Vec<usize>,
    /// (first instruction, loop) of each emitted callback (`usize::MAX`:
    /// the `delete ARRAY` callback).
    callback_starts: Vec<(usize, usize)>,
    /// `ld_imm64` of a callback's address, patched in `finish`.
    func_fixups: Vec<(usize, Label)>,
    /// Emitting a callback: ticks count in the scratch region.
    in_callback: bool,
    /// The shared `delete ARRAY` callback, if any (`globals.rs`), and the
    /// span of its first use for its line info.
    clear_callback: Option<(Label, Span)>,
    /// The IR block being emitted.
    current_block: usize,
    /// Block labels of the BPF function being emitted (a callback maps
    /// its loop's header and exit to its own returns).
    frame_labels: Vec<Label>,
    /// The subprogram that sends a held record (`output.rs`), once used.
    flush_sub: Option<Label>,
    /// `bpf_loop` callbacks of string built-ins (`strfuncs.rs`), emitted
    /// after the handler.
    byte_loops: Vec<(Label, Span, strfuncs::ByteLoop)>,
    /// BTF offsets for `ppid()`/`euid()`.
    task: super::facts::TaskLayout,
    /// Context slots that may hold BTF-typed pointers (`facts.rs`).
    pointer_slots: u64,
    /// `catch` handler blocks no error reaches: not emitted.
    dead_catches: HashSet<u32>,
    /// `catch` handler blocks some emitted error jumps to.
    used_catches: HashSet<u32>,
    /// Shared error tails by error kind (`output.rs`), emitted after the
    /// handler's exit.
    error_tails: Vec<(u32, Label)>,
    /// Per block: its branch tests the comparison that ends it, whose
    /// result nothing else reads ([`fused_compares`]).
    fused: Vec<bool>,
    /// Programs whose body sets their verdict (LSM `$return`, netfilter
    /// `$verdict`, under -g): the frame slot holding it, returned on every
    /// way out.
    verdict: Option<i16>,
}

impl Emitter<'_> {
    // ----- plumbing -----

    fn push(&mut self, insn: Insn) {
        self.insns.push(insn);
    }

    fn push2(&mut self, pair: [Insn; 2]) {
        self.insns.extend(pair);
    }

    fn new_label(&mut self) -> Label {
        self.labels.push(None);
        Label(self.labels.len() - 1)
    }

    fn bind(&mut self, label: Label) {
        self.labels[label.0] = Some(self.insns.len());
    }

    /// A jump to `label`, its offset patched in `finish`.
    fn jump(&mut self, insn: Insn, label: Label) {
        self.fixups.push((self.insns.len(), label));
        self.push(insn);
    }

    fn goto(&mut self, label: Label) {
        self.jump(Insn::ja(0), label);
    }

    fn finish(&mut self) -> Result<Vec<u64>, Vec<Diagnostic>> {
        for (at, label) in std::mem::take(&mut self.fixups) {
            let target = self.labels[label.0].unwrap_or(at + 1);
            let offset = target as i64 - at as i64 - 1;
            let Ok(offset) = i16::try_from(offset) else {
                return Err(vec![
                    Diagnostic::error(format!(
                        "probe handler {} is too large for BPF jumps (offset {offset})",
                        self.function.name
                    ))
                    .at(self.function.span, "in this probe"),
                ]);
            };
            self.insns[at].off = offset;
        }
        for (at, label) in std::mem::take(&mut self.func_fixups) {
            let target = self.labels[label.0].unwrap_or(at + 1);
            self.insns[at].imm = (target as i64 - at as i64 - 1) as i32;
        }
        Ok(self.insns.iter().map(|i| i.encode()).collect())
    }

    fn note_span(&mut self, span: Span) {
        self.span = span;
        if self.lines.last().map(|(_, s)| *s) != Some(span) {
            self.lines.push((self.insns.len(), span));
        }
    }

    /// A line entry here even if the span did not change: each BPF
    /// function must start with a line_info record.
    fn force_span(&mut self, span: Span) {
        self.span = span;
        self.lines.push((self.insns.len(), span));
    }

    fn unsupported(&mut self, what: impl std::fmt::Display) {
        self.diags.push(Diagnostic::unsupported(what, self.span));
    }

    fn ld_map(&mut self, into: u8, map: usize) {
        self.relocs.push((self.insns.len(), map));
        self.push2(Insn::ld_map_fd(into));
    }

    fn ld_map_value(&mut self, into: u8, map: usize, offset: i32) {
        self.relocs.push((self.insns.len(), map));
        self.push2(Insn::ld_map_value(into, offset));
    }

    fn global_map(&mut self, global: GlobalId) -> usize {
        match self.maps.globals.get(&global.0) {
            Some(map) => *map,
            None => {
                let name = self.module.global(global).name.clone();
                self.diags.push(
                    Diagnostic::error(format!("internal: no BPF map for global {name}"))
                        .at(self.span, "used here"),
                );
                0
            }
        }
    }

    fn call(&mut self, id: i32) {
        self.push(Insn::call(id));
    }

    fn const_to(&mut self, into: u8, value: i64) {
        match i32::try_from(value) {
            Ok(small) => self.push(Insn::mov_imm(into, small)),
            Err(_) => self.push2(Insn::ld_imm64(into, value)),
        }
    }

    fn frame_ptr(&mut self, into: u8, offset: i16) {
        self.push(Insn::mov_reg(into, FP));
        self.push(Insn::alu64_imm(insn::ADD, into, offset as i32));
    }

    // ----- registers -----

    /// Every allocated register and spill slot starts at 0, so no path
    /// reads an uninitialised one.
    pub(super) fn zero_registers_and_spills(&mut self) {
        let mut used = [false; 10];
        for location in &self.alloc.locations {
            if let Location::Register(machine) = location {
                used[*machine as usize] = true;
            }
        }
        for (machine, used) in used.iter().enumerate() {
            if *used {
                self.push(Insn::mov_imm(machine as u8, 0));
            }
        }
        for slot in 0..self.alloc.spill_slots {
            self.push(Insn::store_imm(DW, FP, Self::spill_offset(slot), 0));
        }
    }

    /// The handler's start: only longs that some path reads before
    /// writing (live at entry, `regalloc`) need their 0; every other
    /// register is written on each path before any read, so the verifier
    /// never sees it uninitialised.
    fn zero_entry_live_longs(&mut self) {
        let mut zeroed = [false; 10];
        for reg in self.alloc.entry_live.clone() {
            match self.alloc.location(reg) {
                Location::Register(machine) if !zeroed[machine as usize] => {
                    zeroed[machine as usize] = true;
                    self.push(Insn::mov_imm(machine, 0));
                }
                Location::Spill(slot) => {
                    self.push(Insn::store_imm(DW, FP, Self::spill_offset(slot), 0));
                }
                _ => {}
            }
        }
    }

    fn spill_offset(slot: u32) -> i16 {
        -(FRAME_FIXED_BYTES as i16) - 8 - 8 * slot as i16
    }

    /// The machine register holding long `reg`, loading a spilled value
    /// into `tmp` first.
    fn operand(&mut self, reg: Reg, tmp: u8) -> u8 {
        match self.alloc.location(reg) {
            Location::Register(machine) => machine,
            Location::Spill(slot) => {
                self.push(Insn::load(DW, tmp, FP, Self::spill_offset(slot)));
                tmp
            }
            Location::StrSlot(_) | Location::Unused => {
                self.push(Insn::mov_imm(tmp, 0));
                tmp
            }
        }
    }

    /// Long `reg` into exactly `into`.
    fn load_to(&mut self, reg: Reg, into: u8) {
        let got = self.operand(reg, into);
        if got != into {
            self.push(Insn::mov_reg(into, got));
        }
    }

    /// Stores machine register `from` as long `reg`'s new value.
    fn set_result(&mut self, reg: Reg, from: u8) {
        match self.alloc.location(reg) {
            Location::Register(machine) if machine != from => {
                self.push(Insn::mov_reg(machine, from))
            }
            Location::Spill(slot) => self.push(Insn::store(DW, FP, Self::spill_offset(slot), from)),
            _ => {}
        }
    }

    fn scratch_addr(&mut self, into: u8, offset: u32) {
        self.push(Insn::load(DW, into, FP, FRAME_SCRATCH));
        if offset != 0 {
            self.push(Insn::alu64_imm(insn::ADD, into, offset as i32));
        }
    }

    /// The address of string register `reg`'s slot.
    fn str_addr(&mut self, reg: Reg, into: u8) {
        let slot = match self.alloc.location(reg) {
            Location::StrSlot(slot) => slot,
            _ => 0,
        };
        match self.stack_strings {
            Some(s) => self.frame_ptr(into, s.base + (slot * s.slot_bytes) as i16),
            None => self.scratch_addr(into, slot * self.stride),
        }
    }

    /// Bytes of string register `reg` that a definition must write: what
    /// its uses read, at most MAXSTRINGLEN.
    fn str_width(&self, reg: Reg) -> u32 {
        let width = self.str_widths.get(reg.0 as usize).copied();
        width.unwrap_or(self.n).min(self.n)
    }

    /// Zeroes bytes `from..to` of string register `reg`'s slot (`from` a
    /// multiple of 8): a few stores when short, else one helper call.
    fn zero_str_bytes(&mut self, reg: Reg, from: u32, to: u32) {
        if to <= from {
            return;
        }
        self.str_addr(reg, R1);
        if to - from <= SMALL_BYTES && from.is_multiple_of(8) {
            // Whole words: the slot is `stride` bytes, a multiple of 8.
            for at in (from..to).step_by(8) {
                self.push(Insn::store_imm(DW, R1, at as i16, 0));
            }
        } else {
            self.push(Insn::alu64_imm(insn::ADD, R1, from as i32));
            self.call_memset(to - from);
        }
    }

    /// `memset(r1, 0, size)`: a probe read from address 0 faults and the
    /// helper zero-fills its destination.
    fn call_memset(&mut self, size: u32) {
        self.push(Insn::mov_imm(R2, size as i32));
        self.push(Insn::mov_imm(R3, 0));
        self.call(helper::PROBE_READ_KERNEL);
    }

    /// `memcpy(r1, r3, size)`.
    fn call_memcpy(&mut self, size: u32) {
        self.push(Insn::mov_imm(R2, size as i32));
        self.call(helper::PROBE_READ_KERNEL);
    }

    /// Copies a whole string slot (NUL padding included).
    fn copy_str(&mut self, dst: Reg, src: Reg) {
        if self.alloc.location(dst) == self.alloc.location(src) {
            return;
        }
        self.str_addr(dst, R1);
        self.str_addr(src, R3);
        self.call_memcpy(self.n);
    }

    // ----- scratch planning -----

    /// Whether the string registers can live in the stack frame: each is
    /// read at most `SMALL_BYTES` wide (`str_width`), all of them fit in
    /// `STACK_STRINGS_BYTES`, and the only ops that touch them are the ones
    /// that write a short string (`execname()`, a literal) and map ops that
    /// use them as key parts of a key that fits `FRAME_SMALL`. Such a
    /// handler (`c[execname()]++`, `s[execname()] <<< 1`) then needs no
    /// scratch region, so no nesting level and its two map lookups per
    /// event, and builds its key on the stack.
    fn plan_stack_strings(&self) -> Option<StackStrings> {
        let slots = self.alloc.string_slots;
        // Kernel `foreach` callbacks share the frame layout; strings read
        // before written would need zeroing at entry.
        if slots == 0 || !self.regions.is_empty() {
            return None;
        }
        let is_str = |reg: &Reg| self.function.reg_type(*reg) == ValType::Str;
        if self.alloc.entry_live.iter().any(is_str) {
            return None;
        }
        let mut widest = 8;
        for block in &self.function.blocks {
            for inst in &block.insts {
                let defs = regalloc::op_defs(&inst.op);
                let uses = regalloc::op_uses(&inst.op);
                let strings: Vec<Reg> = defs.iter().chain(&uses).copied().filter(is_str).collect();
                if strings.is_empty() {
                    continue;
                }
                // What a definition writes whatever its uses read.
                let writes = match &inst.op {
                    Op::Builtin { name, .. } if name == "execname" => self.n.min(16),
                    Op::ConstStr { id, .. } => {
                        let text = self.module.string(*id).len() as u32;
                        text.min(self.n - 1).div_ceil(8) * 8
                    }
                    _ => 0,
                };
                widest = widest.max(writes.next_multiple_of(8));
                let allowed = match &inst.op {
                    Op::Builtin { name, .. } => name == "execname",
                    Op::ConstStr { .. } => true,
                    Op::MapGet { global, keys, .. }
                    | Op::MapSet { global, keys, .. }
                    | Op::MapAdd { global, keys, .. }
                    | Op::MapDelete { global, keys }
                    | Op::MapContains { global, keys, .. }
                    | Op::MapInsert { global, keys, .. }
                    | Op::StatAdd { global, keys, .. } => {
                        strings.iter().all(|reg| keys.contains(reg))
                            && self.key_bytes(*global) <= SMALL_BYTES
                    }
                    _ => false,
                };
                if !allowed {
                    return None;
                }
                for reg in strings {
                    widest = widest.max(self.str_width(reg).next_multiple_of(8));
                }
            }
        }
        let bytes = slots * widest;
        if widest > SMALL_BYTES || bytes > STACK_STRINGS_BYTES {
            return None;
        }
        let below = FRAME_FIXED_BYTES + 8 * self.alloc.spill_slots + bytes;
        Some(StackStrings {
            base: -(below as i16),
            slot_bytes: widest,
            bytes,
        })
    }

    fn plan_scratch(&self) -> ScratchLayout {
        let stride = self.stride;
        let mut layout = ScratchLayout::default();
        let on_stack = self.stack_strings.is_some();
        let mut next = if on_stack {
            0
        } else {
            self.alloc.string_slots * stride
        };
        if self.alloc.string_slots > 0 && !on_stack {
            layout.temp = next;
            next += 2 * stride;
        }
        let pmax = self.padded_max();
        let mut key = 0;
        let mut value = 0;
        let mut record = 0;
        let mut sprintf = 0;
        let mut stack = false;
        for block in &self.function.blocks {
            for inst in &block.insts {
                match &inst.op {
                    Op::MapGet { global, keys, .. }
                    | Op::MapSet { global, keys, .. }
                    | Op::MapAdd { global, keys, .. }
                    | Op::MapDelete { global, keys, .. }
                    | Op::MapContains { global, keys, .. }
                    | Op::MapInsert { global, keys, .. }
                    | Op::StatGet { global, keys, .. }
                    | Op::StatAdd { global, keys, .. }
                    | Op::PrintHist { global, keys, .. } => {
                        if !keys.is_empty() && !self.key_fits_stack(*global) {
                            key = key.max(self.key_bytes(*global));
                        }
                        if matches!(inst.op, Op::PrintHist { .. }) {
                            let key_bytes = self.key_bytes(*global).div_ceil(8) * 8;
                            record = record.max(HEADER_BYTES + 8 + key_bytes);
                        }
                        if let Storage::Stats { needs, .. } = &self.module.global(*global).storage {
                            let size = StatLayout::new(needs).value_size();
                            if size > SMALL_BYTES {
                                value = value.max(size);
                            }
                        }
                    }
                    Op::Printf { args, format } => {
                        let mut size = HEADER_BYTES;
                        let memory = self.memory_args(format.0);
                        for (i, arg) in args.iter().enumerate() {
                            let memory = memory.get(i).copied().flatten();
                            size += match (arg, memory) {
                                (PrintArg::Value(_), Some(memory)) => self.memory_arg_bytes(memory),
                                (PrintArg::Value(reg), None)
                                    if self.function.reg_type(*reg) == ValType::Str =>
                                {
                                    8 + pmax
                                }
                                (PrintArg::Value(_), None) => 8,
                                (
                                    PrintArg::Symbol {
                                        how: SymbolText::Stack { .. },
                                        ..
                                    },
                                    _,
                                ) => {
                                    stack = true;
                                    8 + records::STACK_BYTES
                                }
                                (PrintArg::Symbol { .. }, _) => 16,
                            };
                        }
                        record = record.max(size + stride);
                    }
                    Op::Builtin { name, .. }
                        if matches!(name.as_str(), "error" | "warn" | "system" | "speculate") =>
                    {
                        record = record.max(HEADER_BYTES + 16 + 8 + pmax + stride)
                    }
                    Op::Builtin { name, .. }
                        if name == "symname" || name == "symdata" || name == "modname" =>
                    {
                        sprintf = sprintf.max(8)
                    }
                    Op::Builtin { name, .. } if name == "ctime" || name == "tz_ctime" => {
                        sprintf = sprintf.max(40)
                    }
                    Op::Builtin { name, .. } if stack::walks_stack(name) => {
                        sprintf = sprintf.max(8);
                        stack = true;
                    }
                    // Two arguments and the running position.
                    Op::BulkArgs { .. } => sprintf = sprintf.max(format::DIGITS_BYTES),
                    Op::Sprintf { args, format, .. } => {
                        sprintf = sprintf.max(8 * args.len() as u32);
                        // Split formats also keep their digits there.
                        let split = self.maps.formats.as_ref();
                        if split.is_some_and(|f| f.segments.contains_key(&format.0)) {
                            sprintf = sprintf.max(format::DIGITS_BYTES);
                        }
                    }
                    _ => {}
                }
            }
            if let Term::Fail(Failure::Explicit(_)) = block.term {
                record = record.max(HEADER_BYTES + 16 + 8 + pmax + stride);
            }
        }
        let mut take = |bytes: u32| {
            let here = next;
            next += bytes.div_ceil(8) * 8;
            here
        };
        layout.key = take(key);
        layout.value = take(value);
        if record > 0 {
            // Room for an error record too: framed handlers hold theirs.
            record = record.max(HEADER_BYTES + records::ERROR_SPAN_BYTES + 8);
        }
        layout.record = take(record);
        layout.record_bytes = record.div_ceil(8) * 8;
        if record > 0 {
            layout.out = take(16);
        }
        layout.sprintf = take(sprintf);
        layout.loops = take(foreach::loops_bytes(&self.regions));
        layout.stack = take(if stack { records::STACK_BYTES } else { 0 });
        layout.size = next;
        layout
    }

    /// The largest padded text length: `(max_string_len - 1)` rounded up.
    fn padded_max(&self) -> u32 {
        (self.n - 1).div_ceil(8) * 8
    }

    fn global_keys(&self, global: GlobalId) -> &[ValType] {
        match &self.module.global(global).storage {
            Storage::Array { keys, .. } | Storage::Stats { keys, .. } => keys,
            Storage::Scalar(_) => &[],
        }
    }

    /// Bytes of each string part of the global's key (`key_text.rs`).
    fn key_text(&self, global: GlobalId) -> u32 {
        self.module.global(global).key_text_bytes(self.n)
    }

    fn key_bytes(&self, global: GlobalId) -> u32 {
        layout::key_size(self.global_keys(global), self.key_text(global))
    }

    /// Long-only keys of at most `SMALL_BYTES`, or any such key when the
    /// string registers are on the stack too (`plan_stack_strings`).
    fn key_fits_stack(&self, global: GlobalId) -> bool {
        let keys = self.global_keys(global);
        let longs = keys.iter().all(|k| *k == ValType::Long);
        (longs || self.stack_strings.is_some()) && self.key_bytes(global) <= SMALL_BYTES
    }

    // ----- the function -----

    fn function_body(&mut self) {
        self.epilogue = self.new_label();
        self.release = self.new_label();
        let bail = self.new_label();
        let function = self.function;
        let block_labels: Vec<Label> = function.blocks.iter().map(|_| self.new_label()).collect();
        self.prologue(bail);
        self.reachable = reachable_blocks(function, &self.dead_catches);
        self.frame_labels = block_labels.clone();
        // Blocks of kernel `foreach` bodies go to their callbacks.
        let order: Vec<usize> = (0..function.blocks.len())
            .filter(|b| self.reachable[*b] && self.block_owner.get(*b).copied().flatten().is_none())
            .collect();
        self.emit_blocks(&order, &block_labels, self.out_of_bounds);
        // Shared exit: the held record goes out, then the nesting level
        // is given back.
        self.bind(self.epilogue);
        self.flush_output_unit();
        self.bind(self.release);
        if self.scratch.size > 0 {
            self.push(Insn::load(DW, R1, FP, FRAME_COUNTERS));
            self.push(Insn::load(DW, R2, R1, (COUNTER_DEPTH * 8) as i16));
            self.push(Insn::alu64_imm(insn::SUB, R2, 1));
            self.push(Insn::store(DW, R1, (COUNTER_DEPTH * 8) as i16, R2));
        }
        self.bind(bail);
        self.tail_call_next_handler();
        match self.verdict {
            Some(verdict) => self.return_verdict(verdict),
            None => {
                let kind = &self.module.probes[self.probe as usize].kind;
                self.push(Insn::mov_imm(R0, return_value(kind)));
            }
        }
        self.push(Insn::exit());
        self.emit_error_tails();
        self.emit_callbacks(&block_labels);
        self.emit_clear_callback();
        self.emit_flush_sub();
        self.emit_byte_loops();
    }

    /// The verdict into r0, within what the verifier accepts:
    /// - LSM (since 6.9 the hook's range, `-MAX_ERRNO..=0` for the int
    ///   hooks): a positive value allows, one below -4095 is -4095;
    /// - netfilter (NF_DROP 0 or NF_ACCEPT 1 only): 0 drops, anything
    ///   else accepts (stap's NF_STOLEN, NF_QUEUE, ... have no BPF form).
    fn return_verdict(&mut self, verdict: i16) {
        const MAX_ERRNO: i32 = 4095;
        self.push(Insn::load(DW, R0, FP, verdict));
        match self.module.probes[self.probe as usize].kind {
            ProbeKind::Netfilter { .. } => {
                self.push(Insn::jump_imm(insn::JEQ, R0, 0, 1));
                self.push(Insn::mov_imm(R0, 1));
            }
            _ => {
                self.push(Insn::jump_imm(insn::JSLE, R0, 0, 1));
                self.push(Insn::mov_imm(R0, 0));
                self.push(Insn::jump_imm(insn::JSGE, R0, -MAX_ERRNO, 1));
                self.push(Insn::mov_imm(R0, -MAX_ERRNO));
            }
        }
    }

    /// `$return = e` in an LSM probe, `$verdict = e` in a netfilter probe.
    pub(super) fn set_verdict(&mut self, value: Reg) {
        let Some(verdict) = self.verdict else {
            return;
        };
        if self.in_callback {
            self.unsupported("setting a probe's verdict inside a foreach over a kernel array");
            return;
        }
        let v = self.operand(value, R1);
        self.push(Insn::store(DW, FP, verdict, v));
    }

    /// `$ctx` in an LSM probe: the address of the argument array. The
    /// context pointer is copied through memory so that the script gets a
    /// number (the verifier refuses arithmetic on a context pointer it
    /// would then dereference).
    pub(super) fn lsm_ctx(&mut self, dst: Reg) {
        self.push(Insn::mov_reg(R3, FP));
        self.push(Insn::alu64_imm(insn::ADD, R3, FRAME_CTX as i32));
        self.frame_ptr(R1, FRAME_TMP);
        self.push(Insn::mov_imm(R2, 8));
        self.call(helper::PROBE_READ_KERNEL);
        self.push(Insn::load(DW, R0, FP, FRAME_TMP));
        self.set_result(dst, R0);
    }

    /// On every way out of a handler that shares its perf event with later
    /// probes' (`PerfChain`): run the next one, with this run's context.
    /// A tail call that fails (no program in the slot) falls through to
    /// the exit.
    fn tail_call_next_handler(&mut self) {
        let (Some(map), Some(next)) = (self.maps.perf_chain, self.chain_next) else {
            return;
        };
        self.push(Insn::load(DW, R1, FP, FRAME_CTX));
        self.ld_map(R2, map);
        self.push(Insn::mov_imm(R3, next as i32));
        self.call(helper::TAIL_CALL);
    }

    /// Emits `order`'s blocks in one BPF function; jumps go to `labels`.
    fn emit_blocks(&mut self, order: &[usize], labels: &[Label], out_of_bounds: bool) {
        let function = self.function;
        let block_labels = labels;
        let mut out_of_bounds = out_of_bounds;
        for (position, &b) in order.iter().enumerate() {
            self.bind(block_labels[b]);
            self.current_block = b;
            let block = &function.blocks[b];
            let next = order.get(position + 1).map(|nb| block_labels[*nb]);
            if let Some(exit) = self.loop_exit_of_header(b) {
                // The helper call at `IterStart` ran the whole loop.
                if next != Some(block_labels[exit]) {
                    self.goto(block_labels[exit]);
                }
                continue;
            }
            let (insts, fused) = match (self.fused[b], block.insts.split_last()) {
                (true, Some((last, rest))) => (rest, Some(last)),
                _ => (&block.insts[..], None),
            };
            for inst in insts {
                self.note_span(inst.span);
                // Skips the handler's own set-up (local initialisation
                // carries the whole probe's span) to land on a statement.
                let statement = inst.span != function.span;
                if out_of_bounds && statement && !matches!(inst.op, Op::ReadKernel { .. }) {
                    // Test-only: a stack read past the 512-byte frame, which
                    // the verifier must reject at this statement's line.
                    out_of_bounds = false;
                    self.push(Insn::load(DW, R0, FP, -520));
                }
                self.op(&inst.op);
            }
            if let (
                Some(compare),
                Term::Branch {
                    then, otherwise, ..
                },
            ) = (fused, &block.term)
            {
                self.note_span(compare.span);
                let (then, otherwise) = (
                    block_labels[then.0 as usize],
                    block_labels[otherwise.0 as usize],
                );
                self.compare_and_branch(&compare.op, then, otherwise, next);
                continue;
            }
            self.note_span(block.term_span);
            self.term(&block.term, block_labels, next);
        }
    }

    /// A block's closing `Compare` and the `Branch` on its result, as one
    /// conditional jump: `if ($id == 3)` was the comparison made into
    /// 0 or 1 (three instructions and a move) and then a test of that.
    fn compare_and_branch(
        &mut self,
        compare: &Op,
        then: Label,
        otherwise: Label,
        next: Option<Label>,
    ) {
        let Op::Compare { op, lhs, rhs, .. } = compare else {
            unreachable!("fused_compares only fuses Compare");
        };
        let l = self.operand(*lhs, R1);
        let r = self.operand(*rhs, R2);
        if Some(then) == next {
            self.jump(Insn::jump_reg(jump_op(negated(*op)), l, r, 0), otherwise);
        } else {
            self.jump(Insn::jump_reg(jump_op(*op), l, r, 0), then);
            if Some(otherwise) != next {
                self.goto(otherwise);
            }
        }
    }

    fn prologue(&mut self, bail: Label) {
        self.note_span(self.function.span);
        self.push(Insn::store(DW, FP, FRAME_CTX, R1));
        if let Some(verdict) = self.verdict {
            // What the program returns unless the body says otherwise
            // (also when it does not run).
            let kind = &self.module.probes[self.probe as usize].kind;
            self.push(Insn::store_imm(DW, FP, verdict, return_value(kind)));
        }
        if let ContextStyle::Syscall { .. } = self.context {
            self.syscall_filter(bail);
        }
        // Do nothing unless the host set the run flag.
        self.ld_map_value(R1, self.maps.control, (maps::CONTROL_RUN * 8) as i32);
        self.push(Insn::load(DW, R1, R1, 0));
        self.jump(Insn::jump_imm(insn::JNE, R1, 1, 0), bail);
        // The MAXACTION count, if anything counts: a loop's `Tick` or a
        // kernel `foreach`, which carries the count into its callback.
        let counts_ticks = !self.regions.is_empty()
            || (self.function.blocks.iter())
                .any(|block| block.insts.iter().any(|inst| matches!(inst.op, Op::Tick)));
        if counts_ticks {
            self.push(Insn::store_imm(DW, FP, FRAME_TICKS, 0));
        }
        self.zero_entry_live_longs();
        if self.scratch.size == 0 {
            return;
        }
        // Take a nesting level: its scratch region is ours until exit.
        let too_deep = self.new_label();
        let have_level = self.new_label();
        self.push(Insn::store_imm(W, FP, FRAME_TMP, 0));
        self.ld_map(R1, self.maps.counters);
        self.frame_ptr(R2, FRAME_TMP);
        self.call(helper::MAP_LOOKUP_ELEM);
        self.jump(Insn::jump_imm(insn::JEQ, R0, 0, 0), bail);
        self.push(Insn::store(DW, FP, FRAME_COUNTERS, R0));
        let depth = (COUNTER_DEPTH * 8) as i16;
        self.push(Insn::load(DW, R1, R0, depth));
        self.jump(
            Insn::jump_imm(insn::JGE, R1, maps::NESTING_LEVELS as i32, 0),
            too_deep,
        );
        self.push(Insn::mov_reg(R2, R1));
        self.push(Insn::alu64_imm(insn::ADD, R2, 1));
        self.push(Insn::store(DW, R0, depth, R2));
        self.push(Insn::store(W, FP, FRAME_TMP, R1));
        self.ld_map(R1, self.maps.scratch);
        self.frame_ptr(R2, FRAME_TMP);
        self.call(helper::MAP_LOOKUP_ELEM);
        self.jump(Insn::jump_imm(insn::JEQ, R0, 0, 0), self.release);
        self.push(Insn::store(DW, FP, FRAME_SCRATCH, R0));
        if self.scratch.record_bytes > 0 {
            // Nothing held or sent yet; the level names this run's stream,
            // and the run gets the next number on it.
            let out = self.scratch.out as i16;
            self.push(Insn::store_imm(DW, R0, out, 0));
            self.push(Insn::load(W, R1, FP, FRAME_TMP));
            self.push(Insn::store(W, R0, out + 8, R1));
            self.push(Insn::load(W, R1, R0, out + 12));
            self.push(Insn::alu64_imm(insn::ADD, R1, 1));
            self.push(Insn::store(W, R0, out + 12, R1));
        }
        // Strings read before written are "" (the slots hold old data).
        for reg in self.alloc.entry_live.clone() {
            if self.function.reg_type(reg) == ValType::Str {
                self.str_addr(reg, R1);
                self.call_memset(self.n);
            }
        }
        self.goto(have_level);
        self.bind(too_deep);
        let skipped = (maps::COUNTER_SKIPPED * 8) as i16;
        self.push(Insn::load(DW, R1, R0, skipped));
        self.push(Insn::alu64_imm(insn::ADD, R1, 1));
        self.push(Insn::store(DW, R0, skipped, R1));
        self.goto(bail);
        self.bind(have_level);
    }

    fn term(&mut self, term: &Term, blocks: &[Label], next: Option<Label>) {
        match term {
            Term::Jump(to) => {
                let target = blocks[to.0 as usize];
                if Some(target) != next {
                    self.goto(target);
                }
            }
            Term::Branch {
                cond,
                then,
                otherwise,
            } => {
                let c = self.operand(*cond, R1);
                let (then, otherwise) = (blocks[then.0 as usize], blocks[otherwise.0 as usize]);
                if Some(then) == next {
                    self.jump(Insn::jump_imm(insn::JEQ, c, 0, 0), otherwise);
                } else {
                    self.jump(Insn::jump_imm(insn::JNE, c, 0, 0), then);
                    if Some(otherwise) != next {
                        self.goto(otherwise);
                    }
                }
            }
            Term::Return(_) => {
                if next.is_some() {
                    self.goto(self.epilogue);
                }
            }
            Term::Fail(Failure::DivisionByZero) => {
                self.fail(records::ERROR_DIVISION_BY_ZERO, None);
            }
            Term::Fail(Failure::Explicit(message)) => {
                self.fail_explicit(*message);
            }
        }
    }

    // ----- ops -----

    fn op(&mut self, op: &Op) {
        match op {
            Op::Const { dst, value } => match self.alloc.location(*dst) {
                Location::Register(machine) => self.const_to(machine, *value),
                _ => {
                    self.const_to(R0, *value);
                    self.set_result(*dst, R0);
                }
            },
            Op::ConstStr { dst, id } => self.const_str(*dst, self.module.string(*id)),
            Op::Move { dst, src } => match self.function.reg_type(*dst) {
                ValType::Long => {
                    let s = self.operand(*src, R0);
                    self.set_result(*dst, s);
                }
                ValType::Str => self.copy_str(*dst, *src),
            },
            Op::Unary { dst, op, src } => {
                self.load_to(*src, R1);
                match op {
                    UnOp::Neg => {
                        self.push(Insn::mov_reg(R0, R1));
                        self.push(Insn::neg(R0));
                    }
                    UnOp::BitNot => {
                        self.push(Insn::mov_reg(R0, R1));
                        self.push(Insn::alu64_imm(insn::XOR, R0, -1));
                    }
                    UnOp::Not => {
                        self.push(Insn::mov_imm(R0, 1));
                        self.push(Insn::jump_imm(insn::JEQ, R1, 0, 1));
                        self.push(Insn::mov_imm(R0, 0));
                    }
                }
                self.set_result(*dst, R0);
            }
            Op::Binary { dst, op, lhs, rhs } => {
                self.binary(*op, *lhs, *rhs);
                self.set_result(*dst, R0);
            }
            Op::Compare { dst, op, lhs, rhs } => {
                let l = self.operand(*lhs, R1);
                let r = self.operand(*rhs, R2);
                self.push(Insn::mov_imm(R0, 1));
                self.push(Insn::jump_reg(jump_op(*op), l, r, 1));
                self.push(Insn::mov_imm(R0, 0));
                self.set_result(*dst, R0);
            }
            Op::StrCompare { dst, op, lhs, rhs } => {
                self.str_compare(*op, *lhs, *rhs);
                self.set_result(*dst, R0);
            }
            Op::Concat { dst, lhs, rhs } => self.concat(*dst, *lhs, *rhs),
            Op::LoadGlobal { dst, global } => {
                let map = self.global_map(*global);
                self.ld_map_value(R1, map, 0);
                match self.function.reg_type(*dst) {
                    ValType::Long => {
                        self.push(Insn::load(DW, R0, R1, 0));
                        self.set_result(*dst, R0);
                    }
                    ValType::Str => {
                        self.push(Insn::mov_reg(R3, R1));
                        self.str_addr(*dst, R1);
                        self.call_memcpy(self.n);
                    }
                }
            }
            Op::StoreGlobal { global, src } => {
                let map = self.global_map(*global);
                match self.function.reg_type(*src) {
                    ValType::Long => {
                        self.ld_map_value(R1, map, 0);
                        let s = self.operand(*src, R2);
                        self.push(Insn::store(DW, R1, 0, s));
                    }
                    ValType::Str => {
                        self.ld_map_value(R1, map, 0);
                        self.str_addr(*src, R3);
                        self.call_memcpy(self.n);
                    }
                }
            }
            Op::AddGlobal { global, delta } => {
                let map = self.global_map(*global);
                self.ld_map_value(R1, map, 0);
                let d = self.operand(*delta, R2);
                self.push(Insn::atomic_add64(R1, 0, d));
            }
            Op::MapGet { dst, global, keys } => self.map_get(*dst, *global, keys),
            Op::MapSet { global, keys, src } => self.map_set(*global, keys, *src),
            Op::MapAdd {
                global,
                keys,
                delta,
            } => self.map_add(*global, keys, *delta),
            Op::MapDelete { global, keys } => {
                self.lookup_setup(*global, keys);
                self.call(helper::MAP_DELETE_ELEM);
            }
            Op::MapContains { dst, global, keys } => {
                self.lookup_setup(*global, keys);
                self.call(helper::MAP_LOOKUP_ELEM);
                self.push(Insn::jump_imm(insn::JEQ, R0, 0, 1));
                self.push(Insn::mov_imm(R0, 1));
                self.set_result(*dst, R0);
            }
            Op::MapInsert {
                dst,
                global,
                keys,
                src,
            } => self.map_insert(*dst, *global, keys, *src),
            Op::Clear { global } => self.clear(*global),
            Op::StatAdd {
                global,
                keys,
                value,
            } => self.stat_add(*global, keys, *value),
            Op::StatGet {
                dst,
                global,
                keys,
                what,
            } => self.stat_get(*dst, *global, keys, *what),
            Op::PrintHist { global, keys, kind } => self.print_hist(*global, keys, *kind),
            Op::IterStart { global, limit, .. } => self.iter_start(*global, *limit),
            // Decoded at the start of the loop's callback.
            Op::IterNext { .. } => {}
            Op::Call { .. } => self.unsupported(
                "calling a script function from a kernel probe (the BPF backend does not inline functions yet)",
            ),
            Op::Builtin { dst, name, args } => self.builtin(*dst, name, args),
            Op::ContextArg { dst, index } => self.context_arg(*dst, *index),
            Op::ContextField {
                dst,
                offset,
                size,
                signed,
            } if matches!(self.context, ContextStyle::Syscall { .. }) => {
                self.syscall_field(*offset, *size, *signed);
                self.set_result(*dst, R0);
            }
            Op::ContextField {
                dst,
                offset,
                size,
                signed,
            } => {
                // A classic tracepoint's record, or a probe's `pt_regs`
                // (an SDT marker's register argument): a load either way.
                if !matches!(self.context, ContextStyle::Record | ContextStyle::PtRegs { .. }) {
                    self.unsupported("a context field outside a classic tracepoint or a probe");
                    return;
                }
                let Some(width) = size_code(*size) else {
                    self.unsupported(format!("a {size}-byte tracepoint field"));
                    return;
                };
                self.push(Insn::load(DW, R1, FP, FRAME_CTX));
                self.push(Insn::load(width, R0, R1, *offset as i16));
                if *signed {
                    sign_extend(self, R0, *size);
                }
                self.set_result(*dst, R0);
            }
            Op::ContextReturn { dst } => self.context_return(*dst),
            Op::BulkArgs { dst, .. } => self.bulk_args(*dst),
            Op::ReadKernel {
                dst,
                addr,
                size,
                signed,
            } => self.read_memory(*dst, *addr, *size, *signed, false),
            Op::ReadUser {
                dst,
                addr,
                size,
                signed,
            } => self.read_memory(*dst, *addr, *size, *signed, true),
            Op::Printf { format, args } => self.printf(format.0, args),
            Op::Sprintf { dst, format, args } => {
                let offset = self
                    .maps
                    .formats
                    .as_ref()
                    .and_then(|f| f.offsets.get(&format.0).copied());
                let parts = self
                    .maps
                    .formats
                    .as_ref()
                    .and_then(|f| f.segments.get(&format.0).cloned());
                match (offset, parts) {
                    (Some(offset), _) => self.snprintf(*dst, offset, args),
                    (None, Some(parts)) => self.sprintf_parts(*dst, &parts, args),
                    (None, None) => self.unsupported("this sprintf format in kernel probes"),
                }
            }
            Op::Exit => self.exit_record(),
            Op::Tick if self.in_callback => self.callback_tick(),
            Op::Tick => self.tick(),
        }
    }

    fn binary(&mut self, op: BinOp, lhs: Reg, rhs: Reg) {
        self.load_to(lhs, R0);
        let r = self.operand(rhs, R2);
        let alu = |code| Insn::alu64_reg(code, R0, r);
        match op {
            BinOp::Add => self.push(alu(insn::ADD)),
            BinOp::Sub => self.push(alu(insn::SUB)),
            BinOp::Mul => self.push(alu(insn::MUL)),
            BinOp::And => self.push(alu(insn::AND)),
            BinOp::Or => self.push(alu(insn::OR)),
            BinOp::Xor => self.push(alu(insn::XOR)),
            BinOp::Shl | BinOp::Shr => {
                // Shift counts past 63 are undefined in BPF: mask like x86.
                self.push(Insn::mov_reg(R2, r));
                self.push(Insn::alu64_imm(insn::AND, R2, 63));
                let code = if op == BinOp::Shl {
                    insn::LSH
                } else {
                    insn::ARSH
                };
                self.push(Insn::alu64_reg(code, R0, R2));
            }
            BinOp::Div | BinOp::Mod => {
                // Signed division from unsigned (sdiv/smod need cpu v4,
                // kernel 6.6): divide magnitudes, then fix the sign. The
                // quotient is negative when the signs differ; the remainder
                // takes the dividend's sign, as in C.
                let is_div = op == BinOp::Div;
                self.push(Insn::mov_reg(R1, R0));
                self.push(Insn::mov_reg(R2, r));
                self.push(Insn::mov_imm(R3, 0));
                self.push(Insn::jump_imm(insn::JSGE, R1, 0, 2));
                self.push(Insn::neg(R1));
                self.push(Insn::alu64_imm(insn::XOR, R3, 1));
                if is_div {
                    self.push(Insn::jump_imm(insn::JSGE, R2, 0, 2));
                    self.push(Insn::neg(R2));
                    self.push(Insn::alu64_imm(insn::XOR, R3, 1));
                } else {
                    self.push(Insn::jump_imm(insn::JSGE, R2, 0, 1));
                    self.push(Insn::neg(R2));
                }
                self.push(Insn::mov_reg(R0, R1));
                let code = if is_div { insn::DIV } else { insn::MOD };
                self.push(Insn::alu64_reg(code, R0, R2));
                self.push(Insn::jump_imm(insn::JEQ, R3, 0, 1));
                self.push(Insn::neg(R0));
            }
        }
    }
}

/// The comparison that holds exactly when `op` does not.
fn negated(op: CmpOp) -> CmpOp {
    match op {
        CmpOp::Eq => CmpOp::Ne,
        CmpOp::Ne => CmpOp::Eq,
        CmpOp::Lt => CmpOp::Ge,
        CmpOp::Le => CmpOp::Gt,
        CmpOp::Gt => CmpOp::Le,
        CmpOp::Ge => CmpOp::Lt,
    }
}

/// Per block: whether it ends in `Compare` into a register that only its
/// `Branch` reads, so the two are emitted as one conditional jump.
fn fused_compares(function: &Function) -> Vec<bool> {
    let mut reads = vec![0u32; function.regs.len()];
    for block in &function.blocks {
        let uses = (block.insts.iter())
            .flat_map(|inst| regalloc::op_uses(&inst.op))
            .chain(regalloc::term_uses(&block.term));
        for reg in uses {
            reads[reg.0 as usize] += 1;
        }
    }
    (function.blocks.iter())
        .map(
            |block| match (block.insts.last().map(|inst| &inst.op), &block.term) {
                (Some(Op::Compare { dst, .. }), Term::Branch { cond, .. }) => {
                    dst == cond && reads[dst.0 as usize] == 1
                }
                _ => false,
            },
        )
        .collect()
}

fn jump_op(op: CmpOp) -> u8 {
    match op {
        CmpOp::Eq => insn::JEQ,
        CmpOp::Ne => insn::JNE,
        CmpOp::Lt => insn::JSLT,
        CmpOp::Le => insn::JSLE,
        CmpOp::Gt => insn::JSGT,
        CmpOp::Ge => insn::JSGE,
    }
}

fn size_code(size: u32) -> Option<u8> {
    Some(match size {
        1 => B,
        2 => H,
        4 => W,
        8 => DW,
        _ => return None,
    })
}

fn sign_extend(emitter: &mut Emitter, reg: u8, size: u32) {
    if size < 8 {
        let shift = 64 - 8 * size as i32;
        emitter.push(Insn::alu64_imm(insn::LSH, reg, shift));
        emitter.push(Insn::alu64_imm(insn::ARSH, reg, shift));
    }
}
