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
//!   them compare bytewise). Zeroing uses `bpf_probe_read_kernel` from
//!   address 0: the read faults and the helper zero-fills its destination,
//!   a memset in one helper call.
//! - The stack frame (offsets from r10) is fixed: see the `FRAME_*`
//!   constants; spill slots follow it.

use hashbrown::HashMap;

use super::Options;
use super::insn::{self, B, DW, FP, H, Insn, R0, R1, R2, R3, R4, R5, W, helper};
use super::layout::{self, StatLayout};
use super::maps::{self, COUNTER_DEPTH, COUNTER_LOST_EVENTS, COUNTER_MAP_OVERFLOW};
use super::records::{self, HEADER_BYTES};
use super::regalloc::{self, Allocation, Location};
use crate::diag::Diagnostic;
use crate::ir::{
    BinOp, CmpOp, Failure, Function, Module, Op, PrintArg, Reg, StatValue, Storage, Term, UnOp,
    ValType,
};
use crate::kernel::TracepointArgs;
use crate::sema::hir::{FunctionMechanism, GlobalId, ProbeKind};
use crate::source::Span;

/// Saved context pointer.
const FRAME_CTX: i16 = -8;
/// This level's scratch region (a map value pointer).
const FRAME_SCRATCH: i16 = -16;
/// The per-CPU counters value (a map value pointer).
const FRAME_COUNTERS: i16 = -24;
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
}

/// Where each `bpf_snprintf` format sits in the formats map's value.
#[derive(Debug, Clone)]
pub(super) struct FormatsIndex {
    pub map: usize,
    /// `FormatId` → byte offset.
    pub offsets: HashMap<u32, u32>,
    /// `%ps` (symname) and `%pS` (symdata).
    pub symname: u32,
    pub symdata: u32,
}

pub(super) struct Emitted {
    pub insns: Vec<u64>,
    pub map_relocs: Vec<(usize, usize)>,
    pub lines: Vec<(usize, Span)>,
    pub stack_bytes: u32,
    /// Bytes of the scratch region this handler uses (0 = none).
    pub scratch_bytes: u32,
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
    size: u32,
}

/// How the handler reaches its context.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ContextStyle {
    /// `u64 ctx[]`: raw tracepoints, fentry/fexit (`ret_index` = arg count).
    U64Array { ret_index: Option<u32> },
    /// x86_64 `struct pt_regs`: kprobes, uprobes.
    PtRegs,
    /// A classic tracepoint's record.
    Record,
    /// Perf events: no arguments.
    None,
}

/// x86_64 `struct pt_regs` offsets of the argument registers di, si, dx,
/// cx, r8, r9, and of ax (the return value).
const PT_REGS_ARGS: [i16; 6] = [112, 104, 96, 88, 72, 64];
const PT_REGS_AX: i16 = 80;

pub(super) fn emit_probe(
    module: &Module,
    probe_index: usize,
    function: &Function,
    options: &Options,
    maps: &MapIndex,
    out_of_bounds: bool,
) -> Result<Emitted, Vec<Diagnostic>> {
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
        maps,
        context: context_style(&probe.kind),
        max_action: module.limits.max_action,
        cpus: options.cpus.clamp(1, MAX_CPUS) as i32,
        insns: Vec::new(),
        relocs: Vec::new(),
        lines: Vec::new(),
        labels: Vec::new(),
        fixups: Vec::new(),
        span: probe.span,
        diags: Vec::new(),
        scratch: ScratchLayout::default(),
        epilogue: Label(0),
        out_of_bounds,
    };
    emitter.scratch = emitter.plan_scratch();
    emitter.function_body();
    let stack_bytes = FRAME_FIXED_BYTES + 8 * emitter.alloc.spill_slots;
    if stack_bytes > MAX_STACK {
        emitter.diags.push(
            Diagnostic::error(format!(
                "probe {} needs {stack_bytes} bytes of BPF stack (the limit is {MAX_STACK})",
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
    Ok(Emitted {
        insns,
        map_relocs: emitter.relocs,
        lines: emitter.lines,
        stack_bytes,
        scratch_bytes: emitter.scratch.size,
    })
}

fn context_style(kind: &ProbeKind) -> ContextStyle {
    match kind {
        ProbeKind::Tracepoint {
            args: TracepointArgs::Raw(_),
            ..
        } => ContextStyle::U64Array { ret_index: None },
        ProbeKind::Tracepoint { .. } => ContextStyle::Record,
        ProbeKind::KernelFunction {
            mechanism: FunctionMechanism::Fentry,
            is_return,
            proto,
            ..
        } => ContextStyle::U64Array {
            ret_index: is_return.then_some(proto.params.len() as u32),
        },
        ProbeKind::KernelFunction { .. } | ProbeKind::Process { .. } => ContextStyle::PtRegs,
        _ => ContextStyle::None,
    }
}

/// Blocks reachable from the entry, in order (the verifier rejects
/// unreachable instructions).
fn reachable_blocks(function: &Function) -> Vec<bool> {
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
        stack.extend(regalloc::successors(&function.blocks[b as usize].term));
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
    maps: &'a MapIndex,
    context: ContextStyle,
    max_action: u64,
    /// CPUs a statistic extraction visits.
    cpus: i32,
    insns: Vec<Insn>,
    relocs: Vec<(usize, usize)>,
    lines: Vec<(usize, Span)>,
    labels: Vec<Option<usize>>,
    fixups: Vec<(usize, Label)>,
    /// The span of the op being emitted.
    span: Span,
    diags: Vec<Diagnostic>,
    scratch: ScratchLayout,
    epilogue: Label,
    out_of_bounds: bool,
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
        Ok(self.insns.iter().map(|i| i.encode()).collect())
    }

    fn note_span(&mut self, span: Span) {
        self.span = span;
        if self.lines.last().map(|(_, s)| *s) != Some(span) {
            self.lines.push((self.insns.len(), span));
        }
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
        self.scratch_addr(into, slot * self.stride);
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

    fn plan_scratch(&self) -> ScratchLayout {
        let stride = self.stride;
        let mut layout = ScratchLayout::default();
        let mut next = self.alloc.string_slots * stride;
        if self.alloc.string_slots > 0 {
            layout.temp = next;
            next += 2 * stride;
        }
        let pmax = self.padded_max();
        let mut key = 0;
        let mut value = 0;
        let mut record = 0;
        let mut sprintf = 0;
        for block in &self.function.blocks {
            for inst in &block.insts {
                match &inst.op {
                    Op::MapGet { global, keys, .. }
                    | Op::MapSet { global, keys, .. }
                    | Op::MapAdd { global, keys, .. }
                    | Op::MapDelete { global, keys, .. }
                    | Op::MapContains { global, keys, .. }
                    | Op::StatGet { global, keys, .. }
                    | Op::StatAdd { global, keys, .. } => {
                        if !keys.is_empty() && !self.key_fits_stack(*global) {
                            key = key.max(self.key_bytes(*global));
                        }
                        if let Storage::Stats { needs, .. } = &self.module.global(*global).storage {
                            let size = StatLayout::new(needs).value_size();
                            if size > SMALL_BYTES {
                                value = value.max(size);
                            }
                        }
                    }
                    Op::Printf { args, .. } => {
                        let mut size = HEADER_BYTES;
                        for arg in args {
                            size += match arg {
                                PrintArg::Value(reg)
                                    if self.function.reg_type(*reg) == ValType::Str =>
                                {
                                    8 + pmax
                                }
                                PrintArg::Value(_) => 8,
                                PrintArg::Symbol { .. } => 16,
                            };
                        }
                        record = record.max(size + stride);
                    }
                    Op::Builtin { name, .. } if name == "error" => {
                        record = record.max(HEADER_BYTES + 16 + 8 + pmax + stride)
                    }
                    Op::Builtin { name, .. } if name == "symname" || name == "symdata" => {
                        sprintf = sprintf.max(8)
                    }
                    Op::Sprintf { args, .. } => sprintf = sprintf.max(8 * args.len() as u32),
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
        layout.record = take(record);
        layout.sprintf = take(sprintf);
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

    fn key_bytes(&self, global: GlobalId) -> u32 {
        layout::key_size(self.global_keys(global), self.n)
    }

    fn key_fits_stack(&self, global: GlobalId) -> bool {
        let keys = self.global_keys(global);
        keys.iter().all(|k| *k == ValType::Long) && self.key_bytes(global) <= SMALL_BYTES
    }

    // ----- the function -----

    fn function_body(&mut self) {
        self.epilogue = self.new_label();
        let bail = self.new_label();
        let function = self.function;
        let block_labels: Vec<Label> = function.blocks.iter().map(|_| self.new_label()).collect();
        self.prologue(bail);
        let reachable = reachable_blocks(function);
        let order: Vec<usize> = (0..function.blocks.len())
            .filter(|b| reachable[*b])
            .collect();
        let mut out_of_bounds = self.out_of_bounds;
        for (position, &b) in order.iter().enumerate() {
            self.bind(block_labels[b]);
            let block = &function.blocks[b];
            for inst in &block.insts {
                self.note_span(inst.span);
                if out_of_bounds && !matches!(inst.op, Op::ReadKernel { .. }) {
                    // Test-only: a stack read past the 512-byte frame, which
                    // the verifier must reject at this statement's line.
                    out_of_bounds = false;
                    self.push(Insn::load(DW, R0, FP, -520));
                }
                self.op(&inst.op);
            }
            self.note_span(block.term_span);
            let next = order.get(position + 1).map(|nb| block_labels[*nb]);
            self.term(&block.term, &block_labels, next);
        }
        // Shared exit: give the nesting level back.
        self.bind(self.epilogue);
        if self.scratch.size > 0 {
            self.push(Insn::load(DW, R1, FP, FRAME_COUNTERS));
            self.push(Insn::load(DW, R2, R1, (COUNTER_DEPTH * 8) as i16));
            self.push(Insn::alu64_imm(insn::SUB, R2, 1));
            self.push(Insn::store(DW, R1, (COUNTER_DEPTH * 8) as i16, R2));
        }
        self.bind(bail);
        self.push(Insn::mov_imm(R0, 0));
        self.push(Insn::exit());
    }

    fn prologue(&mut self, bail: Label) {
        self.note_span(self.function.span);
        self.push(Insn::store(DW, FP, FRAME_CTX, R1));
        // Do nothing unless the host set the run flag.
        self.ld_map_value(R1, self.maps.control, (maps::CONTROL_RUN * 8) as i32);
        self.push(Insn::load(DW, R1, R1, 0));
        self.jump(Insn::jump_imm(insn::JNE, R1, 1, 0), bail);
        self.push(Insn::store_imm(DW, FP, FRAME_TICKS, 0));
        // Registers and spill slots start at 0, so no path reads garbage.
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
        self.jump(Insn::jump_imm(insn::JEQ, R0, 0, 0), self.epilogue);
        self.push(Insn::store(DW, FP, FRAME_SCRATCH, R0));
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
                self.error_record(records::ERROR_DIVISION_BY_ZERO, None);
                self.goto(self.epilogue);
            }
            Term::Fail(Failure::Explicit(message)) => {
                self.explicit_error(*message);
                self.goto(self.epilogue);
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
            Op::PrintHist { .. } => self.unsupported("printing a histogram in a kernel probe"),
            Op::IterStart { sort, .. } => {
                if sort.is_some() {
                    self.unsupported("foreach in a kernel probe (move it to a host probe)")
                } else {
                    self.unsupported(
                        "foreach in a kernel probe, even unsorted (move it to a host probe)",
                    )
                }
            }
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
            } => {
                if self.context != ContextStyle::Record {
                    self.unsupported("a tracepoint record field outside a classic tracepoint");
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
            Op::ContextReturn { dst } => {
                self.push(Insn::load(DW, R1, FP, FRAME_CTX));
                match self.context {
                    ContextStyle::U64Array {
                        ret_index: Some(index),
                    } => self.push(Insn::load(DW, R0, R1, (index * 8) as i16)),
                    ContextStyle::PtRegs => self.push(Insn::load(DW, R0, R1, PT_REGS_AX)),
                    _ => {
                        self.unsupported("$return outside a .return probe");
                        return;
                    }
                }
                self.set_result(*dst, R0);
            }
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
                match offset {
                    Some(offset) => self.snprintf(*dst, offset, args),
                    None => self.unsupported("this sprintf format in kernel probes"),
                }
            }
            Op::Exit => self.exit_record(),
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

    fn const_str(&mut self, dst: Reg, text: &str) {
        self.str_addr(dst, R1);
        self.call_memset(self.n);
        let bytes = text.as_bytes();
        let bytes = &bytes[..bytes.len().min(self.n as usize - 1)];
        if bytes.is_empty() {
            return;
        }
        self.str_addr(dst, R1);
        for (i, chunk) in bytes.chunks(8).enumerate() {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.push2(Insn::ld_imm64(R2, i64::from_le_bytes(word)));
            self.push(Insn::store(DW, R1, (i * 8) as i16, R2));
        }
    }

    /// strcmp over at most MAXSTRINGLEN bytes (a loop the verifier can
    /// bound), then `op` against 0; the result is left in r0.
    fn str_compare(&mut self, op: CmpOp, lhs: Reg, rhs: Reg) {
        let top = self.new_label();
        let differ = self.new_label();
        let done = self.new_label();
        self.str_addr(lhs, R1);
        self.str_addr(rhs, R2);
        self.push(Insn::mov_imm(R3, 0));
        self.push(Insn::mov_imm(R0, 0));
        self.bind(top);
        self.jump(Insn::jump_imm(insn::JGE, R3, self.n as i32, 0), done);
        self.push(Insn::mov_reg(R4, R1));
        self.push(Insn::alu64_reg(insn::ADD, R4, R3));
        self.push(Insn::load(B, R4, R4, 0));
        self.push(Insn::mov_reg(R5, R2));
        self.push(Insn::alu64_reg(insn::ADD, R5, R3));
        self.push(Insn::load(B, R5, R5, 0));
        self.jump(Insn::jump_reg(insn::JNE, R4, R5, 0), differ);
        self.jump(Insn::jump_imm(insn::JEQ, R4, 0, 0), done);
        self.push(Insn::alu64_imm(insn::ADD, R3, 1));
        self.goto(top);
        self.bind(differ);
        self.push(Insn::mov_reg(R0, R4));
        self.push(Insn::alu64_reg(insn::SUB, R0, R5));
        self.bind(done);
        self.push(Insn::mov_reg(R4, R0));
        self.push(Insn::mov_imm(R0, 1));
        self.push(Insn::jump_imm(jump_op(op), R4, 0, 1));
        self.push(Insn::mov_imm(R0, 0));
    }

    /// Clamps a `probe_read_*_str` result in r0 to a text length in
    /// `[0, max_string_len - 1]` (the helper counts the NUL).
    fn clamp_str_result(&mut self) {
        self.push(Insn::jump_imm(insn::JSGT, R0, 0, 1));
        self.push(Insn::mov_imm(R0, 1));
        self.push(Insn::jump_imm(insn::JLE, R0, self.n as i32, 1));
        self.push(Insn::mov_imm(R0, self.n as i32));
        self.push(Insn::alu64_imm(insn::SUB, R0, 1));
    }

    fn concat(&mut self, dst: Reg, lhs: Reg, rhs: Reg) {
        // Built in the work space (2 × MAXSTRINGLEN, so the verifier can
        // see the second copy stays inside), then copied to `dst`: either
        // operand may be `dst` itself.
        let temp = self.scratch.temp;
        self.scratch_addr(R1, temp);
        self.call_memset(self.n);
        self.scratch_addr(R1, temp);
        self.push(Insn::mov_imm(R2, self.n as i32));
        self.str_addr(lhs, R3);
        self.call(helper::PROBE_READ_KERNEL_STR);
        self.clamp_str_result();
        self.scratch_addr(R1, temp);
        self.push(Insn::alu64_reg(insn::ADD, R1, R0));
        self.push(Insn::mov_imm(R2, self.n as i32));
        self.push(Insn::alu64_reg(insn::SUB, R2, R0));
        self.str_addr(rhs, R3);
        self.call(helper::PROBE_READ_KERNEL_STR);
        self.str_addr(dst, R1);
        self.scratch_addr(R3, temp);
        self.call_memcpy(self.n);
    }

    // ----- maps -----

    /// Writes the key tuple and leaves r1 = map, r2 = &key.
    fn lookup_setup(&mut self, global: GlobalId, keys: &[Reg]) {
        self.write_key(global, keys);
        self.key_args(global, keys.is_empty());
    }

    /// Where a global's key is built: the stack for one-entry maps and
    /// small all-long tuples, else the scratch key buffer.
    fn key_on_stack(&self, global: GlobalId, keyless: bool) -> bool {
        keyless || self.key_fits_stack(global)
    }

    fn write_key(&mut self, global: GlobalId, keys: &[Reg]) {
        if keys.is_empty() {
            self.push(Insn::store_imm(W, FP, FRAME_SMALL, 0));
            return;
        }
        let types: Vec<ValType> = self.global_keys(global).to_vec();
        let offsets = layout::key_offsets(&types, self.n);
        if self.key_on_stack(global, false) {
            for (key, offset) in keys.iter().zip(&offsets) {
                let k = self.operand(*key, R1);
                self.push(Insn::store(DW, FP, FRAME_SMALL + *offset as i16, k));
            }
            return;
        }
        let base = self.scratch.key;
        for ((key, offset), ty) in keys.iter().zip(&offsets).zip(&types) {
            match ty {
                ValType::Long => {
                    self.scratch_addr(R1, base + offset);
                    let k = self.operand(*key, R2);
                    self.push(Insn::store(DW, R1, 0, k));
                }
                ValType::Str => {
                    self.scratch_addr(R1, base + offset);
                    self.str_addr(*key, R3);
                    self.call_memcpy(self.n);
                }
            }
        }
    }

    /// r1 = the global's map, r2 = the key `write_key` built.
    fn key_args(&mut self, global: GlobalId, keyless: bool) {
        let map = self.global_map(global);
        self.ld_map(R1, map);
        if self.key_on_stack(global, keyless) {
            self.frame_ptr(R2, FRAME_SMALL);
        } else {
            self.scratch_addr(R2, self.scratch.key);
        }
    }

    fn map_get(&mut self, dst: Reg, global: GlobalId, keys: &[Reg]) {
        self.lookup_setup(global, keys);
        self.call(helper::MAP_LOOKUP_ELEM);
        match self.function.reg_type(dst) {
            ValType::Long => {
                // A missing element reads as 0: r0 is already 0 then.
                self.push(Insn::jump_imm(insn::JEQ, R0, 0, 1));
                self.push(Insn::load(DW, R0, R0, 0));
                self.set_result(dst, R0);
            }
            ValType::Str => {
                let missing = self.new_label();
                let done = self.new_label();
                self.jump(Insn::jump_imm(insn::JEQ, R0, 0, 0), missing);
                self.push(Insn::mov_reg(R3, R0));
                self.str_addr(dst, R1);
                self.call_memcpy(self.n);
                self.goto(done);
                self.bind(missing);
                self.str_addr(dst, R1);
                self.call_memset(self.n);
                self.bind(done);
            }
        }
    }

    fn map_set(&mut self, global: GlobalId, keys: &[Reg], src: Reg) {
        self.lookup_setup(global, keys);
        match self.function.reg_type(src) {
            ValType::Long => {
                let s = self.operand(src, R3);
                self.push(Insn::store(DW, FP, FRAME_TMP, s));
                self.frame_ptr(R3, FRAME_TMP);
            }
            ValType::Str => self.str_addr(src, R3),
        }
        self.push(Insn::mov_imm(R4, 0)); // BPF_ANY
        self.call(helper::MAP_UPDATE_ELEM);
        self.count_if_failed(COUNTER_MAP_OVERFLOW);
    }

    /// After a helper returning 0 or -errno in r0: bump a counter on error.
    fn count_if_failed(&mut self, counter: u32) {
        let ok = self.new_label();
        self.jump(Insn::jump_imm(insn::JEQ, R0, 0, 0), ok);
        self.bump_counter(counter);
        self.bind(ok);
    }

    fn bump_counter(&mut self, counter: u32) {
        let skip = self.new_label();
        self.push(Insn::store_imm(W, FP, FRAME_TMP, 0));
        self.ld_map(R1, self.maps.counters);
        self.frame_ptr(R2, FRAME_TMP);
        self.call(helper::MAP_LOOKUP_ELEM);
        self.jump(Insn::jump_imm(insn::JEQ, R0, 0, 0), skip);
        self.push(Insn::mov_imm(R1, 1));
        self.push(Insn::atomic_add64(R0, (counter * 8) as i16, R1));
        self.bind(skip);
    }

    /// Looks the element up, inserting a zeroed value (`zero_at` sets r3 to
    /// it) first if missing. Jumps to `missing` when it cannot be created
    /// (a full map: counted as overflow); else r0 = the value.
    fn lookup_or_insert(
        &mut self,
        global: GlobalId,
        keys: &[Reg],
        value_bytes: u32,
        missing: Label,
    ) {
        let found = self.new_label();
        let inserted = self.new_label();
        self.lookup_setup(global, keys);
        self.call(helper::MAP_LOOKUP_ELEM);
        self.jump(Insn::jump_imm(insn::JNE, R0, 0, 0), found);
        // Zero value: on the stack when small, else in scratch.
        let on_stack = value_bytes <= SMALL_BYTES;
        if on_stack {
            for i in 0..value_bytes.div_ceil(8) {
                self.push(Insn::store_imm(DW, FP, FRAME_SMALL_VALUE + 8 * i as i16, 0));
            }
        } else {
            self.scratch_addr(R1, self.scratch.value);
            self.call_memset(value_bytes);
        }
        self.key_args(global, keys.is_empty());
        if on_stack {
            self.frame_ptr(R3, FRAME_SMALL_VALUE);
        } else {
            self.scratch_addr(R3, self.scratch.value);
        }
        self.push(Insn::mov_imm(R4, 1)); // BPF_NOEXIST
        self.call(helper::MAP_UPDATE_ELEM);
        self.jump(Insn::jump_imm(insn::JEQ, R0, 0, 0), inserted);
        // -EEXIST: another CPU inserted it first; anything else: full.
        self.jump(Insn::jump_imm(insn::JEQ, R0, -17, 0), inserted);
        self.bump_counter(COUNTER_MAP_OVERFLOW);
        self.goto(missing);
        self.bind(inserted);
        self.key_args(global, keys.is_empty());
        self.call(helper::MAP_LOOKUP_ELEM);
        self.jump(Insn::jump_imm(insn::JEQ, R0, 0, 0), missing);
        self.bind(found);
    }

    fn map_add(&mut self, global: GlobalId, keys: &[Reg], delta: Reg) {
        let done = self.new_label();
        self.lookup_or_insert(global, keys, 8, done);
        let d = self.operand(delta, R1);
        self.push(Insn::atomic_add64(R0, 0, d));
        self.bind(done);
    }

    fn clear(&mut self, global: GlobalId) {
        let storage = self.module.global(global).storage.clone();
        match storage {
            Storage::Scalar(ty) => {
                let map = self.global_map(global);
                self.ld_map_value(R1, map, 0);
                match ty {
                    ValType::Long => self.push(Insn::store_imm(DW, R1, 0, 0)),
                    ValType::Str => self.call_memset(self.n),
                }
            }
            _ => self.unsupported(
                "deleting a whole array or statistic in a kernel probe (do it in a host probe)",
            ),
        }
    }

    fn stat_add(&mut self, global: GlobalId, keys: &[Reg], value: Reg) {
        let Storage::Stats { needs, .. } = self.module.global(global).storage.clone() else {
            self.unsupported("<<< on a global that is not a statistic");
            return;
        };
        let layout = StatLayout::new(&needs);
        let done = self.new_label();
        self.lookup_or_insert(global, keys, layout.value_size(), done);
        // Per-CPU value: plain loads and stores are enough.
        self.push(Insn::mov_reg(R1, R0));
        self.load_to(value, R2);
        let slot = |index: u32| (index * 8) as i16;
        if let Some(min) = layout.min_max {
            let first = self.new_label();
            let after = self.new_label();
            self.push(Insn::load(DW, R3, R1, slot(layout.count)));
            self.jump(Insn::jump_imm(insn::JEQ, R3, 0, 0), first);
            self.push(Insn::load(DW, R4, R1, slot(min)));
            self.push(Insn::jump_reg(insn::JSGE, R2, R4, 1));
            self.push(Insn::store(DW, R1, slot(min), R2));
            self.push(Insn::load(DW, R4, R1, slot(min + 1)));
            self.push(Insn::jump_reg(insn::JSLE, R2, R4, 1));
            self.push(Insn::store(DW, R1, slot(min + 1), R2));
            self.goto(after);
            self.bind(first);
            self.push(Insn::store(DW, R1, slot(min), R2));
            self.push(Insn::store(DW, R1, slot(min + 1), R2));
            self.bind(after);
        }
        self.push(Insn::load(DW, R3, R1, slot(layout.count)));
        self.push(Insn::alu64_imm(insn::ADD, R3, 1));
        self.push(Insn::store(DW, R1, slot(layout.count), R3));
        self.push(Insn::load(DW, R3, R1, slot(layout.sum)));
        self.push(Insn::alu64_reg(insn::ADD, R3, R2));
        self.push(Insn::store(DW, R1, slot(layout.sum), R3));
        if let Some(base) = layout.hist_log {
            self.hist_log_bucket();
            self.bump_bucket(base, layout::HIST_LOG_BUCKETS - 1);
        }
        if let Some((base, hist)) = layout.hist_linear {
            self.hist_linear_bucket(&hist);
            self.bump_bucket(base, layout::linear_buckets(&hist) + 1);
        }
        if let Some(at) = layout.variance {
            let shift = variance_shift(self.module, global);
            self.variance_update(slot(layout.count), slot(at), shift);
        }
        self.bind(done);
    }

    /// stap's integer Welford step on values scaled by `2^shift` (as the
    /// host's `StatShape::add`), with r1 = the value and r2 = the sample:
    /// `avg_s += (v_s - avg_s) / count; m2 += (v_s - old) * (v_s - avg_s)`.
    fn variance_update(&mut self, count: i16, avg_s: i16, shift: u32) {
        let m2 = avg_s + 8;
        let update = self.new_label();
        let done = self.new_label();
        self.push(Insn::load(DW, R3, R1, count));
        self.push(Insn::mov_reg(R4, R2));
        if shift > 0 {
            self.push(Insn::alu64_imm(insn::LSH, R4, shift.min(63) as i32));
        }
        self.jump(Insn::jump_imm(insn::JNE, R3, 1, 0), update);
        self.push(Insn::store(DW, R1, avg_s, R4));
        self.push(Insn::store_imm(DW, R1, m2, 0));
        self.goto(done);
        self.bind(update);
        self.push(Insn::load(DW, R5, R1, avg_s));
        self.push(Insn::mov_reg(R2, R4));
        self.push(Insn::alu64_reg(insn::SUB, R2, R5));
        // delta / count, truncating toward zero (count > 0).
        self.push(Insn::mov_reg(R0, R2));
        self.push(Insn::jump_imm(insn::JSGE, R0, 0, 1));
        self.push(Insn::neg(R0));
        self.push(Insn::alu64_reg(insn::DIV, R0, R3));
        self.push(Insn::jump_imm(insn::JSGE, R2, 0, 1));
        self.push(Insn::neg(R0));
        self.push(Insn::alu64_reg(insn::ADD, R5, R0));
        self.push(Insn::store(DW, R1, avg_s, R5));
        self.push(Insn::alu64_reg(insn::SUB, R4, R5));
        self.push(Insn::alu64_reg(insn::MUL, R2, R4));
        self.push(Insn::load(DW, R0, R1, m2));
        self.push(Insn::alu64_reg(insn::ADD, R0, R2));
        self.push(Insn::store(DW, R1, m2, R0));
        self.bind(done);
    }

    /// r3 = the `@hist_log` bucket of r2, as `layout::hist_log_bucket`:
    /// `BUCKET0 ± (1 + floor(log2(|v|)))`, clamped to the bucket range.
    fn hist_log_bucket(&mut self) {
        let magnitude = self.new_label();
        let positive = self.new_label();
        let done = self.new_label();
        self.push(Insn::mov_imm(R3, layout::HIST_LOG_BUCKET0 as i32));
        self.jump(Insn::jump_imm(insn::JEQ, R2, 0, 0), done);
        self.push(Insn::mov_reg(R4, R2));
        self.jump(Insn::jump_imm(insn::JSGT, R2, 0, 0), magnitude);
        self.push(Insn::neg(R4));
        self.bind(magnitude);
        // r0 = 1 + floor(log2(r4)), unrolled, on unsigned shifts (so the
        // magnitude of i64::MIN, 2^63, works too).
        self.push(Insn::mov_imm(R0, 1));
        for shift in [32, 16, 8, 4, 2, 1] {
            self.push(Insn::mov_reg(R5, R4));
            self.push(Insn::alu64_imm(insn::RSH, R5, shift));
            self.push(Insn::jump_imm(insn::JEQ, R5, 0, 2));
            self.push(Insn::mov_reg(R4, R5));
            self.push(Insn::alu64_imm(insn::ADD, R0, shift));
        }
        self.jump(Insn::jump_imm(insn::JSGT, R2, 0, 0), positive);
        self.push(Insn::alu64_reg(insn::SUB, R3, R0));
        self.goto(done);
        self.bind(positive);
        self.push(Insn::alu64_reg(insn::ADD, R3, R0));
        self.bind(done);
    }

    /// r3 = the linear bucket of r2: 0 below `lo`, the last slot above `hi`.
    fn hist_linear_bucket(&mut self, hist: &crate::ir::LinearHist) {
        let buckets = layout::linear_buckets(hist);
        let done = self.new_label();
        self.const_to(R4, hist.lo);
        self.push(Insn::mov_imm(R3, 0));
        self.jump(Insn::jump_reg(insn::JSLT, R2, R4, 0), done);
        self.push(Insn::mov_reg(R3, R2));
        self.push(Insn::alu64_reg(insn::SUB, R3, R4));
        match i32::try_from(hist.width.max(1)) {
            Ok(width) => self.push(Insn::alu64_imm(insn::DIV, R3, width)),
            Err(_) => {
                self.const_to(R4, hist.width);
                self.push(Insn::alu64_reg(insn::DIV, R3, R4));
            }
        }
        self.push(Insn::alu64_imm(insn::ADD, R3, 1));
        self.push(Insn::jump_imm(insn::JLE, R3, buckets as i32, 1));
        self.push(Insn::mov_imm(R3, buckets as i32 + 1));
        self.bind(done);
    }

    /// `value[base + r3] += 1` with r1 = the value, `r3 <= last`.
    fn bump_bucket(&mut self, base: u32, last: u32) {
        self.push(Insn::jump_imm(insn::JLE, R3, last as i32, 1));
        self.push(Insn::mov_imm(R3, last as i32));
        self.push(Insn::alu64_imm(insn::LSH, R3, 3));
        self.push(Insn::mov_reg(R4, R1));
        self.push(Insn::alu64_reg(insn::ADD, R4, R3));
        let at = (base * 8) as i16;
        self.push(Insn::load(DW, R5, R4, at));
        self.push(Insn::alu64_imm(insn::ADD, R5, 1));
        self.push(Insn::store(DW, R4, at, R5));
    }

    /// `@count(s)` etc. in a kernel probe: combines every CPU's value with
    /// `bpf_map_lookup_percpu_elem` (kernel 6.0+) in a loop the verifier
    /// can bound (`Options::cpus`); it ends at the first CPU past
    /// `nr_cpu_ids` (the helper returns NULL there). Finding the element
    /// on the CPU just past the bound is an error, not a wrong value.
    fn stat_get(&mut self, dst: Reg, global: GlobalId, keys: &[Reg], what: StatValue) {
        let Storage::Stats { needs, .. } = self.module.global(global).storage.clone() else {
            self.unsupported("a statistic extractor on a global that is not a statistic");
            return;
        };
        let layout = StatLayout::new(&needs);
        let extreme = match what {
            StatValue::Min | StatValue::Max => layout.min_max.map(|at| {
                if what == StatValue::Min {
                    (at, insn::JSLT)
                } else {
                    (at + 1, insn::JSGT)
                }
            }),
            StatValue::Variance { .. } => {
                self.unsupported("@variance in a kernel probe (extract it in a host probe)");
                return;
            }
            _ => None,
        };
        // Accumulators live on the stack across the helper calls.
        let cpu = FRAME_SMALL_VALUE;
        let count = FRAME_SMALL_VALUE + 8;
        let value = FRAME_SMALL_VALUE + 16;
        let top = self.new_label();
        let next = self.new_label();
        let done = self.new_label();
        self.write_key(global, keys);
        for slot in [cpu, count, value] {
            self.push(Insn::store_imm(DW, FP, slot, 0));
        }
        let too_many = self.new_label();
        self.bind(top);
        self.push(Insn::load(DW, R3, FP, cpu));
        self.key_args(global, keys.is_empty());
        self.call(helper::MAP_LOOKUP_PERCPU_ELEM);
        self.jump(Insn::jump_imm(insn::JEQ, R0, 0, 0), done);
        self.push(Insn::load(DW, R3, FP, cpu));
        self.jump(Insn::jump_imm(insn::JGE, R3, self.cpus, 0), too_many);
        let slot = |index: u32| (index * 8) as i16;
        self.push(Insn::load(DW, R1, R0, slot(layout.count)));
        self.jump(Insn::jump_imm(insn::JEQ, R1, 0, 0), next);
        self.push(Insn::load(DW, R2, FP, count));
        if let Some((at, better)) = extreme {
            // The first CPU with samples sets it; later ones improve it.
            let take = self.new_label();
            let keep = self.new_label();
            self.push(Insn::load(DW, R3, R0, slot(at)));
            self.jump(Insn::jump_imm(insn::JEQ, R2, 0, 0), take);
            self.push(Insn::load(DW, R4, FP, value));
            self.jump(Insn::jump_reg(better, R3, R4, 0), take);
            self.goto(keep);
            self.bind(take);
            self.push(Insn::store(DW, FP, value, R3));
            self.bind(keep);
        } else {
            self.push(Insn::load(DW, R3, R0, slot(layout.sum)));
            self.push(Insn::load(DW, R4, FP, value));
            self.push(Insn::alu64_reg(insn::ADD, R4, R3));
            self.push(Insn::store(DW, FP, value, R4));
        }
        self.push(Insn::alu64_reg(insn::ADD, R2, R1));
        self.push(Insn::store(DW, FP, count, R2));
        self.bind(next);
        self.push(Insn::load(DW, R3, FP, cpu));
        self.push(Insn::alu64_imm(insn::ADD, R3, 1));
        self.push(Insn::store(DW, FP, cpu, R3));
        self.goto(top);
        self.bind(too_many);
        self.error_record(records::ERROR_TOO_MANY_CPUS, None);
        self.goto(self.epilogue);
        self.bind(done);
        match what {
            StatValue::Count => self.push(Insn::load(DW, R0, FP, count)),
            StatValue::Sum => self.push(Insn::load(DW, R0, FP, value)),
            _ => {
                // @avg/@min/@max of no samples is an error, as in stap.
                let ok = self.new_label();
                self.push(Insn::load(DW, R2, FP, count));
                self.jump(Insn::jump_imm(insn::JNE, R2, 0, 0), ok);
                self.error_record(records::ERROR_EMPTY_AGGREGATE, None);
                self.goto(self.epilogue);
                self.bind(ok);
                self.push(Insn::load(DW, R0, FP, value));
                if what == StatValue::Avg {
                    // Signed sum / positive count, truncating toward zero.
                    self.push(Insn::mov_reg(R1, R0));
                    self.push(Insn::jump_imm(insn::JSGE, R0, 0, 1));
                    self.push(Insn::neg(R0));
                    self.push(Insn::alu64_reg(insn::DIV, R0, R2));
                    self.push(Insn::jump_imm(insn::JSGE, R1, 0, 1));
                    self.push(Insn::neg(R0));
                }
            }
        }
        self.set_result(dst, R0);
    }

    // ----- context and memory -----

    fn context_arg(&mut self, dst: Reg, index: u32) {
        self.push(Insn::load(DW, R1, FP, FRAME_CTX));
        match self.context {
            ContextStyle::U64Array { .. } if index < 12 => {
                self.push(Insn::load(DW, R0, R1, (index * 8) as i16))
            }
            ContextStyle::PtRegs if (index as usize) < PT_REGS_ARGS.len() => {
                self.push(Insn::load(DW, R0, R1, PT_REGS_ARGS[index as usize]))
            }
            _ => {
                self.unsupported(format!(
                    "argument {index} of this probe point in a kernel probe"
                ));
                return;
            }
        }
        self.set_result(dst, R0);
    }

    fn read_memory(&mut self, dst: Reg, addr: Reg, size: u32, signed: bool, user: bool) {
        let Some(width) = size_code(size) else {
            self.unsupported(format!("a {size}-byte memory read"));
            return;
        };
        let ok = self.new_label();
        self.frame_ptr(R1, FRAME_TMP);
        self.push(Insn::mov_imm(R2, size as i32));
        self.load_to(addr, R3);
        self.call(if user {
            helper::PROBE_READ_USER
        } else {
            helper::PROBE_READ_KERNEL
        });
        self.jump(Insn::jump_imm(insn::JEQ, R0, 0, 0), ok);
        let kind = if user {
            records::ERROR_USER_READ
        } else {
            records::ERROR_KERNEL_READ
        };
        self.error_record(kind, Some(addr));
        self.goto(self.epilogue);
        self.bind(ok);
        self.push(Insn::load(width, R0, FP, FRAME_TMP));
        if signed {
            sign_extend(self, R0, size);
        }
        self.set_result(dst, R0);
    }

    // ----- builtins -----

    fn builtin(&mut self, dst: Option<Reg>, name: &str, args: &[Reg]) {
        let long_result = |this: &mut Self| {
            if let Some(dst) = dst {
                this.set_result(dst, R0);
            }
        };
        match name {
            "pid" | "tid" => {
                self.call(helper::GET_CURRENT_PID_TGID);
                if name == "pid" {
                    self.push(Insn::alu64_imm(insn::RSH, R0, 32));
                } else {
                    self.push(Insn::alu64_imm(insn::LSH, R0, 32));
                    self.push(Insn::alu64_imm(insn::RSH, R0, 32));
                }
                long_result(self);
            }
            "uid" | "gid" => {
                self.call(helper::GET_CURRENT_UID_GID);
                if name == "gid" {
                    self.push(Insn::alu64_imm(insn::RSH, R0, 32));
                } else {
                    self.push(Insn::alu64_imm(insn::LSH, R0, 32));
                    self.push(Insn::alu64_imm(insn::RSH, R0, 32));
                }
                long_result(self);
            }
            "cpu" => {
                self.call(helper::GET_SMP_PROCESSOR_ID);
                long_result(self);
            }
            "ktime_get_ns" | "local_clock_ns" => {
                self.call(helper::KTIME_GET_NS);
                long_result(self);
            }
            "jiffies" => {
                self.call(helper::JIFFIES64);
                long_result(self);
            }
            "gettimeofday_s" | "gettimeofday_ms" | "gettimeofday_us" | "gettimeofday_ns" => {
                self.call(helper::KTIME_GET_NS);
                self.ld_map_value(
                    R1,
                    self.maps.control,
                    (maps::CONTROL_TIME_OFFSET * 8) as i32,
                );
                self.push(Insn::load(DW, R1, R1, 0));
                self.push(Insn::alu64_reg(insn::ADD, R0, R1));
                let divisor = match name {
                    "gettimeofday_s" => 1_000_000_000,
                    "gettimeofday_ms" => 1_000_000,
                    "gettimeofday_us" => 1_000,
                    _ => 1,
                };
                if divisor != 1 {
                    self.push(Insn::alu64_imm(insn::DIV, R0, divisor));
                }
                long_result(self);
            }
            "execname" => {
                let Some(dst) = dst else { return };
                self.str_addr(dst, R1);
                self.call_memset(self.n);
                self.str_addr(dst, R1);
                self.push(Insn::mov_imm(R2, self.n.min(16) as i32));
                self.call(helper::GET_CURRENT_COMM);
            }
            "kernel_string" | "kernel_string2" | "kernel_string_n" | "user_string"
            | "user_string_n" => {
                let Some(dst) = dst else { return };
                let user = name.starts_with("user");
                let with_n = name.ends_with("_n");
                let addr = args.first().copied();
                let limit = if with_n { args.get(1).copied() } else { None };
                let fallback = args.get(if with_n { 2 } else { 1 }).copied();
                if let Some(addr) = addr {
                    self.read_string(dst, addr, limit, fallback, user);
                }
            }
            "kernel_long" | "kernel_int" | "kernel_short" | "kernel_char" | "kernel_pointer"
            | "user_long" | "user_int" => {
                let (Some(dst), Some(addr)) = (dst, args.first().copied()) else {
                    return;
                };
                let (size, signed) = match name {
                    "kernel_long" | "user_long" => (8, true),
                    "kernel_pointer" => (8, false),
                    "kernel_int" | "user_int" => (4, true),
                    "kernel_short" => (2, true),
                    _ => (1, true),
                };
                self.read_memory(dst, addr, size, signed, name.starts_with("user"));
            }
            "strlen" => {
                let (Some(dst), Some(s)) = (dst, args.first().copied()) else {
                    return;
                };
                self.scratch_addr(R1, self.scratch.temp);
                self.push(Insn::mov_imm(R2, self.n as i32));
                self.str_addr(s, R3);
                self.call(helper::PROBE_READ_KERNEL_STR);
                self.clamp_str_result();
                self.set_result(dst, R0);
            }
            "symname" | "symdata" => {
                let (Some(dst), Some(addr), Some(formats)) =
                    (dst, args.first().copied(), self.maps.formats.as_ref())
                else {
                    return;
                };
                let offset = if name == "symname" {
                    formats.symname
                } else {
                    formats.symdata
                };
                self.snprintf(dst, offset, &[addr]);
            }
            "error" => {
                let Some(message) = args.first().copied() else {
                    return;
                };
                self.explicit_error(message);
                // A conditional jump keeps the rest of the block reachable
                // in the verifier's CFG check; it is always taken.
                self.push(Insn::mov_imm(R0, 1));
                self.jump(Insn::jump_imm(insn::JNE, R0, 0, 0), self.epilogue);
            }
            _ => self.unsupported(format!("{name}() in kernel probes")),
        }
    }

    /// `kernel_string(addr [, fallback])` and friends.
    fn read_string(
        &mut self,
        dst: Reg,
        addr: Reg,
        limit: Option<Reg>,
        fallback: Option<Reg>,
        user: bool,
    ) {
        let done = self.new_label();
        let fault = self.new_label();
        // Into the work space first: `fallback` or `addr` may live in `dst`.
        let temp = self.scratch.temp;
        self.scratch_addr(R1, temp);
        self.call_memset(self.n);
        match limit {
            Some(limit) => {
                // n bytes and the NUL, clamped to [1, MAXSTRINGLEN].
                self.load_to(limit, R2);
                self.push(Insn::alu64_imm(insn::ADD, R2, 1));
                self.push(Insn::jump_imm(insn::JSGT, R2, 0, 1));
                self.push(Insn::mov_imm(R2, 1));
                self.push(Insn::jump_imm(insn::JLE, R2, self.n as i32, 1));
                self.push(Insn::mov_imm(R2, self.n as i32));
            }
            None => self.push(Insn::mov_imm(R2, self.n as i32)),
        }
        self.scratch_addr(R1, temp);
        self.load_to(addr, R3);
        self.call(if user {
            helper::PROBE_READ_USER_STR
        } else {
            helper::PROBE_READ_KERNEL_STR
        });
        self.jump(Insn::jump_imm(insn::JSLT, R0, 0, 0), fault);
        self.str_addr(dst, R1);
        self.scratch_addr(R3, temp);
        self.call_memcpy(self.n);
        self.goto(done);
        self.bind(fault);
        match fallback {
            Some(fallback) => self.copy_str(dst, fallback),
            None => {
                let kind = if user {
                    records::ERROR_USER_STRING
                } else {
                    records::ERROR_KERNEL_STRING
                };
                self.error_record(kind, Some(addr));
                self.goto(self.epilogue);
            }
        }
        self.bind(done);
    }

    /// `dst = bpf_snprintf(format at `offset` of the formats map, args)`,
    /// written to the work space first (an argument may be `dst`), then
    /// copied with its NUL padding.
    fn snprintf(&mut self, dst: Reg, offset: u32, args: &[Reg]) {
        let Some(map) = self.maps.formats.as_ref().map(|f| f.map) else {
            return;
        };
        let data = self.scratch.sprintf;
        for (index, arg) in args.iter().enumerate() {
            let at = (index * 8) as i16;
            self.scratch_addr(R1, data);
            match self.function.reg_type(*arg) {
                ValType::Str => self.str_addr(*arg, R2),
                ValType::Long => self.load_to(*arg, R2),
            }
            self.push(Insn::store(DW, R1, at, R2));
        }
        let temp = self.scratch.temp;
        self.scratch_addr(R1, temp);
        self.call_memset(self.n);
        self.scratch_addr(R1, temp);
        self.push(Insn::mov_imm(R2, self.n as i32));
        self.ld_map_value(R3, map, offset as i32);
        if args.is_empty() {
            self.push(Insn::mov_imm(R4, 0));
        } else {
            self.scratch_addr(R4, data);
        }
        self.push(Insn::mov_imm(R5, 8 * args.len() as i32));
        self.call(helper::SNPRINTF);
        self.str_addr(dst, R1);
        self.scratch_addr(R3, temp);
        self.call_memcpy(self.n);
    }

    // ----- records -----

    /// Sends the 16-byte header (+ payload already at `FRAME_SMALL + 16`)
    /// from the stack.
    fn send_small_record(&mut self, kind: u32, id: u32, len: u32) {
        let header = [kind, id, self.probe, len];
        for (i, word) in header.iter().enumerate() {
            self.push(Insn::store_imm(
                W,
                FP,
                FRAME_SMALL + 4 * i as i16,
                *word as i32,
            ));
        }
        self.ld_map(R1, self.maps.events);
        self.frame_ptr(R2, FRAME_SMALL);
        self.push(Insn::mov_imm(R3, len as i32));
        self.push(Insn::mov_imm(R4, 0));
        self.call(helper::RINGBUF_OUTPUT);
        self.count_if_failed(COUNTER_LOST_EVENTS);
    }

    fn exit_record(&mut self) {
        self.send_small_record(records::KIND_EXIT, 0, HEADER_BYTES);
    }

    /// An error record for the current span, with an optional address.
    fn error_record(&mut self, kind: u32, address: Option<Reg>) {
        let span = self.span;
        let words = [span.file.0, span.start, span.end, 0];
        for (i, word) in words.iter().enumerate() {
            self.push(Insn::store_imm(
                W,
                FP,
                FRAME_SMALL + 16 + 4 * i as i16,
                *word as i32,
            ));
        }
        let mut len = HEADER_BYTES + records::ERROR_SPAN_BYTES;
        if let Some(address) = address {
            let a = self.operand(address, R1);
            self.push(Insn::store(DW, FP, FRAME_SMALL + 32, a));
            len += 8;
        }
        self.send_small_record(records::KIND_ERROR, kind, len);
    }

    /// `error(msg)`: an error record carrying the message, built in scratch.
    fn explicit_error(&mut self, message: Reg) {
        let span = self.span;
        let base = self.scratch.record;
        self.scratch_addr(R1, base);
        let words = [
            records::KIND_ERROR,
            records::ERROR_EXPLICIT,
            self.probe,
            0,
            span.file.0,
            span.start,
            span.end,
            0,
        ];
        for (i, word) in words.iter().enumerate() {
            self.push(Insn::store_imm(W, R1, 4 * i as i16, *word as i32));
        }
        let offset = self.text_arg(RecordOffset::Fixed(32), message);
        self.send_record(offset);
    }

    /// r1 = where the next record argument goes (r5 is clobbered); returns
    /// the constant displacement to add.
    fn record_cursor(&mut self, offset: RecordOffset) -> i16 {
        self.scratch_addr(R1, self.scratch.record);
        match offset {
            RecordOffset::Fixed(at) => at as i16,
            RecordOffset::Running => {
                self.push(Insn::load(DW, R5, FP, FRAME_RECORD_OFFSET));
                self.push(Insn::alu64_reg(insn::ADD, R1, R5));
                0
            }
        }
    }

    fn advance(&mut self, offset: RecordOffset, by: u32) -> RecordOffset {
        match offset {
            RecordOffset::Fixed(at) => RecordOffset::Fixed(at + by),
            RecordOffset::Running => {
                self.push(Insn::load(DW, R5, FP, FRAME_RECORD_OFFSET));
                self.push(Insn::alu64_imm(insn::ADD, R5, by as i32));
                self.push(Insn::store(DW, FP, FRAME_RECORD_OFFSET, R5));
                RecordOffset::Running
            }
        }
    }

    /// A text argument (`u32 tag, u32 len, text padded to 8`).
    fn text_arg(&mut self, offset: RecordOffset, text: Reg) -> RecordOffset {
        let at = self.record_cursor(offset);
        self.push(Insn::store_imm(W, R1, at, records::TAG_TEXT as i32));
        self.push(Insn::alu64_imm(insn::ADD, R1, at as i32 + 8));
        self.push(Insn::mov_imm(R2, self.n as i32));
        self.str_addr(text, R3);
        self.call(helper::PROBE_READ_KERNEL_STR);
        self.clamp_str_result();
        let at = self.record_cursor(offset);
        self.push(Insn::store(W, R1, at + 4, R0));
        // Padded length, bounded so the verifier sees the record fit.
        let pmax = self.padded_max();
        self.push(Insn::alu64_imm(insn::ADD, R0, 7));
        self.push(Insn::alu64_imm(insn::AND, R0, -8));
        self.push(Insn::jump_imm(insn::JLE, R0, pmax as i32, 1));
        self.push(Insn::mov_imm(R0, pmax as i32));
        match offset {
            RecordOffset::Fixed(at) => self.push(Insn::mov_imm(R5, at as i32 + 8)),
            RecordOffset::Running => {
                self.push(Insn::load(DW, R5, FP, FRAME_RECORD_OFFSET));
                self.push(Insn::alu64_imm(insn::ADD, R5, 8));
            }
        }
        self.push(Insn::alu64_reg(insn::ADD, R5, R0));
        self.push(Insn::store(DW, FP, FRAME_RECORD_OFFSET, R5));
        RecordOffset::Running
    }

    /// Writes the length into the header and outputs the scratch record.
    fn send_record(&mut self, offset: RecordOffset) {
        self.scratch_addr(R2, self.scratch.record);
        match offset {
            RecordOffset::Fixed(len) => self.push(Insn::mov_imm(R3, len as i32)),
            RecordOffset::Running => self.push(Insn::load(DW, R3, FP, FRAME_RECORD_OFFSET)),
        }
        self.push(Insn::store(W, R2, 12, R3));
        self.ld_map(R1, self.maps.events);
        self.push(Insn::mov_imm(R4, 0));
        self.call(helper::RINGBUF_OUTPUT);
        self.count_if_failed(COUNTER_LOST_EVENTS);
    }

    fn printf(&mut self, format: u32, args: &[PrintArg]) {
        self.scratch_addr(R1, self.scratch.record);
        let header = [records::KIND_PRINTF, format, self.probe];
        for (i, word) in header.iter().enumerate() {
            self.push(Insn::store_imm(W, R1, 4 * i as i16, *word as i32));
        }
        let mut offset = RecordOffset::Fixed(HEADER_BYTES);
        for arg in args {
            offset = match *arg {
                PrintArg::Value(reg) if self.function.reg_type(reg) == ValType::Str => {
                    self.text_arg(offset, reg)
                }
                PrintArg::Value(reg) => {
                    let at = self.record_cursor(offset);
                    let v = self.operand(reg, R2);
                    self.push(Insn::store(DW, R1, at, v));
                    self.advance(offset, 8)
                }
                PrintArg::Symbol { addr, how } => {
                    let at = self.record_cursor(offset);
                    self.push(Insn::store_imm(W, R1, at, records::symbol_tag(how) as i32));
                    self.push(Insn::store_imm(W, R1, at + 4, 8));
                    let a = self.operand(addr, R2);
                    self.push(Insn::store(DW, R1, at + 8, a));
                    self.advance(offset, 16)
                }
            };
        }
        self.send_record(offset);
    }

    fn tick(&mut self) {
        let ok = self.new_label();
        self.push(Insn::load(DW, R0, FP, FRAME_TICKS));
        self.push(Insn::alu64_imm(insn::ADD, R0, 1));
        self.push(Insn::store(DW, FP, FRAME_TICKS, R0));
        let limit = i32::try_from(self.max_action).unwrap_or(i32::MAX);
        self.jump(Insn::jump_imm(insn::JLE, R0, limit, 0), ok);
        self.error_record(records::ERROR_MAXACTION, None);
        self.goto(self.epilogue);
        self.bind(ok);
    }
}

/// The `@variance` scale of a statistic: the largest shift any extraction
/// asks for (the host's `variance_shifts` picks the same).
fn variance_shift(module: &Module, global: GlobalId) -> u32 {
    module
        .functions
        .iter()
        .flat_map(|f| &f.blocks)
        .flat_map(|b| &b.insts)
        .filter_map(|inst| match &inst.op {
            Op::StatGet {
                global: g,
                what: crate::ir::StatValue::Variance { shift },
                ..
            } if *g == global => Some(*shift),
            Op::IterStart {
                global: g,
                sort:
                    Some(crate::ir::Sort {
                        by: crate::ir::SortBy::Aggregate(crate::ir::StatValue::Variance { shift }),
                        ..
                    }),
                ..
            } if *g == global => Some(*shift),
            _ => None,
        })
        .max()
        .unwrap_or(0)
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
