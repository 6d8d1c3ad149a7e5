//! Register allocation for one IR function: liveness over the CFG, then a
//! linear scan (Poletto & Sarkar) of long registers onto the callee-saved
//! r6–r9, which survive helper calls. What does not fit is spilled to an
//! 8-byte stack slot. r0–r5 stay free as scratch within one IR op.
//!
//! String registers never occupy a machine register: each one lives in a
//! `max_string_len` slot of the per-CPU scratch map, so "the value" of a
//! string register is just that slot's address, computed when needed.
//! Registers whose live intervals do not overlap share a slot.

use crate::ir::{Function, Op, PrintArg, Reg, Term, ValType};

/// The machine registers handed out, in preference order.
pub const ALLOCATABLE: [u8; 4] = [6, 7, 8, 9];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Location {
    /// A callee-saved machine register.
    Register(u8),
    /// The Nth 8-byte spill slot.
    Spill(u32),
    /// The Nth scratch-map string slot.
    StrSlot(u32),
    /// Never defined or used.
    Unused,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allocation {
    /// Indexed by register number.
    pub locations: Vec<Location>,
    pub spill_slots: u32,
    pub string_slots: u32,
    /// Registers read before any write on some path from the entry.
    pub entry_live: Vec<Reg>,
    /// Per block, the registers live on entry to it (a kernel `foreach`
    /// hands exactly these to and from its callback).
    pub live_in: Vec<Vec<Reg>>,
}

impl Allocation {
    pub fn location(&self, reg: Reg) -> Location {
        self.locations
            .get(reg.0 as usize)
            .copied()
            .unwrap_or(Location::Unused)
    }
}

/// Registers an op reads.
pub fn op_uses(op: &Op) -> Vec<Reg> {
    match op {
        Op::Const { .. } | Op::ConstStr { .. } | Op::LoadGlobal { .. } => vec![],
        Op::Move { src, .. } | Op::Unary { src, .. } => vec![*src],
        Op::Binary { lhs, rhs, .. }
        | Op::Compare { lhs, rhs, .. }
        | Op::StrCompare { lhs, rhs, .. }
        | Op::Concat { lhs, rhs, .. } => vec![*lhs, *rhs],
        Op::StoreGlobal { src, .. } => vec![*src],
        Op::AddGlobal { delta, .. } => vec![*delta],
        Op::MapGet { keys, .. }
        | Op::MapDelete { keys, .. }
        | Op::MapContains { keys, .. }
        | Op::StatGet { keys, .. }
        | Op::PrintHist { keys, .. } => keys.clone(),
        Op::MapSet { keys, src, .. } | Op::MapInsert { keys, src, .. } => with(keys, *src),
        Op::MapAdd { keys, delta, .. } => with(keys, *delta),
        Op::StatAdd { keys, value, .. } => with(keys, *value),
        Op::Clear { .. } | Op::Exit | Op::Tick => vec![],
        Op::IterStart { limit, .. } => limit.iter().copied().collect(),
        Op::IterNext { .. } => vec![],
        Op::Call { args, .. } | Op::Builtin { args, .. } | Op::Sprintf { args, .. } => args.clone(),
        Op::ContextArg { .. }
        | Op::ContextField { .. }
        | Op::ContextReturn { .. }
        | Op::BulkArgs { .. } => vec![],
        Op::ReadKernel { addr, .. } | Op::ReadUser { addr, .. } => vec![*addr],
        Op::Printf { args, .. } => args
            .iter()
            .map(|arg| match arg {
                PrintArg::Value(reg) => *reg,
                PrintArg::Symbol { addr, .. } => *addr,
            })
            .collect(),
    }
}

fn with(keys: &[Reg], last: Reg) -> Vec<Reg> {
    let mut regs = keys.to_vec();
    regs.push(last);
    regs
}

/// Registers an op writes.
pub fn op_defs(op: &Op) -> Vec<Reg> {
    match op {
        Op::Const { dst, .. }
        | Op::ConstStr { dst, .. }
        | Op::Move { dst, .. }
        | Op::Unary { dst, .. }
        | Op::Binary { dst, .. }
        | Op::Compare { dst, .. }
        | Op::StrCompare { dst, .. }
        | Op::Concat { dst, .. }
        | Op::LoadGlobal { dst, .. }
        | Op::MapGet { dst, .. }
        | Op::MapContains { dst, .. }
        | Op::MapInsert { dst, .. }
        | Op::StatGet { dst, .. }
        | Op::Sprintf { dst, .. }
        | Op::ContextArg { dst, .. }
        | Op::ContextField { dst, .. }
        | Op::ContextReturn { dst }
        | Op::BulkArgs { dst, .. }
        | Op::ReadKernel { dst, .. }
        | Op::ReadUser { dst, .. } => vec![*dst],
        Op::Call { dst, .. } | Op::Builtin { dst, .. } => dst.iter().copied().collect(),
        Op::IterNext {
            has, keys, value, ..
        } => {
            let mut regs = vec![*has];
            regs.extend(keys);
            regs.extend(value);
            regs
        }
        _ => vec![],
    }
}

pub fn term_uses(term: &Term) -> Vec<Reg> {
    match term {
        Term::Branch { cond, .. } => vec![*cond],
        Term::Return(value) => value.iter().copied().collect(),
        Term::Fail(crate::ir::Failure::Explicit(reg)) => vec![*reg],
        _ => vec![],
    }
}

pub fn successors(term: &Term) -> Vec<u32> {
    match term {
        Term::Jump(to) => vec![to.0],
        Term::Branch {
            then, otherwise, ..
        } => vec![then.0, otherwise.0],
        _ => vec![],
    }
}

/// A fixed-size set of register numbers.
#[derive(Debug, Clone, PartialEq, Eq)]
struct RegSet(Vec<u64>);

impl RegSet {
    fn new(regs: usize) -> RegSet {
        RegSet(vec![0; regs.div_ceil(64)])
    }
    fn insert(&mut self, reg: Reg) {
        if let Some(word) = self.0.get_mut(reg.0 as usize / 64) {
            *word |= 1 << (reg.0 % 64);
        }
    }
    fn union_with(&mut self, other: &RegSet) -> bool {
        let mut changed = false;
        for (a, b) in self.0.iter_mut().zip(&other.0) {
            let merged = *a | *b;
            changed |= merged != *a;
            *a = merged;
        }
        changed
    }
    fn contains(&self, reg: Reg) -> bool {
        self.0
            .get(reg.0 as usize / 64)
            .is_some_and(|word| word & (1 << (reg.0 % 64)) != 0)
    }
    /// `self = (self & !kill) | add`, word by word: a block's live-in from
    /// its live-out.
    fn transfer(&mut self, kill: &RegSet, add: &RegSet) {
        for ((word, kill), add) in self.0.iter_mut().zip(&kill.0).zip(&add.0) {
            *word = (*word & !kill) | add;
        }
    }
    /// The members in increasing order, one step per member (not per bit):
    /// functions with thousands of registers (an inlined `ctime()` in each
    /// of hundreds of syscall probes) spend their compile time here.
    fn iter(&self) -> impl Iterator<Item = Reg> + '_ {
        self.0.iter().enumerate().flat_map(|(i, &word)| {
            let mut rest = word;
            std::iter::from_fn(move || {
                if rest == 0 {
                    return None;
                }
                let bit = rest.trailing_zeros();
                rest &= rest - 1;
                Some(Reg(i as u32 * 64 + bit))
            })
        })
    }
}

/// Live-in and live-out sets per block (backward dataflow to a fixpoint).
fn liveness(function: &Function) -> (Vec<RegSet>, Vec<RegSet>) {
    let n = function.blocks.len();
    let regs = function.regs.len();
    let mut gen_sets = Vec::with_capacity(n);
    let mut kill_sets = Vec::with_capacity(n);
    for block in &function.blocks {
        let mut gen_set = RegSet::new(regs);
        let mut kill = RegSet::new(regs);
        let mut note_uses = |uses: Vec<Reg>, kill: &RegSet| {
            for reg in uses {
                if !kill.contains(reg) {
                    gen_set.insert(reg);
                }
            }
        };
        for inst in &block.insts {
            note_uses(op_uses(&inst.op), &kill);
            for reg in op_defs(&inst.op) {
                kill.insert(reg);
            }
        }
        note_uses(term_uses(&block.term), &kill);
        gen_sets.push(gen_set);
        kill_sets.push(kill);
    }
    let mut live_in = vec![RegSet::new(regs); n];
    let mut live_out = vec![RegSet::new(regs); n];
    let mut changed = true;
    while changed {
        changed = false;
        for b in (0..n).rev() {
            for succ in successors(&function.blocks[b].term) {
                if let Some(succ_in) = live_in.get(succ as usize).cloned() {
                    live_out[b].union_with(&succ_in);
                }
            }
            let mut new_in = live_out[b].clone();
            new_in.transfer(&kill_sets[b], &gen_sets[b]);
            // Inside `try`, any instruction may go to the handler: what the
            // handler needs is live through the whole block.
            if let Some(catch) = function.blocks[b].catch
                && let Some(handler_in) = live_in.get(catch.handler.0 as usize).cloned()
            {
                live_out[b].union_with(&handler_in);
                new_in.union_with(&handler_in);
            }
            changed |= live_in[b].union_with(&new_in);
        }
    }
    (live_in, live_out)
}

/// `[start, end]` in the linear order of instructions (one position per
/// instruction and per terminator), hulls over every live point.
type Intervals = (Vec<Option<(u32, u32)>>, Vec<Reg>, Vec<Vec<Reg>>);

fn intervals(function: &Function) -> Intervals {
    let (live_in, live_out) = liveness(function);
    let entry_live = live_in
        .first()
        .map(|set| set.iter().collect())
        .unwrap_or_default();
    let mut spans: Vec<Option<(u32, u32)>> = vec![None; function.regs.len()];
    let mut touch = |reg: Reg, pos: u32| {
        if let Some(span) = spans.get_mut(reg.0 as usize) {
            *span = Some(match *span {
                None => (pos, pos),
                Some((s, e)) => (s.min(pos), e.max(pos)),
            });
        }
    };
    for param in 0..function.param_count {
        touch(Reg(param as u32), 0);
    }
    let mut pos = 0u32;
    for (b, block) in function.blocks.iter().enumerate() {
        let start = pos;
        for reg in live_in[b].iter() {
            touch(reg, start);
        }
        for inst in &block.insts {
            for reg in op_uses(&inst.op).into_iter().chain(op_defs(&inst.op)) {
                touch(reg, pos);
            }
            pos += 1;
        }
        for reg in term_uses(&block.term) {
            touch(reg, pos);
        }
        for reg in live_out[b].iter() {
            touch(reg, pos);
        }
        pos += 1;
    }
    let live_in = live_in.iter().map(|set| set.iter().collect()).collect();
    (spans, entry_live, live_in)
}

/// String registers whose live intervals do not overlap share a scratch
/// slot (strictly: one read and one written by the same op never do, as
/// for machine registers), so a long chain of concatenations needs a few
/// slots rather than one per temporary. Returns the number of slots.
fn allocate_string_slots(
    mut strings: Vec<(u32, u32, usize)>,
    untouched: &[usize],
    locations: &mut [Location],
) -> u32 {
    strings.sort();
    // Per slot, the end of the interval that last took it.
    let mut slot_end: Vec<u32> = Vec::new();
    for (start, end, index) in strings {
        let slot = match slot_end.iter().position(|e| *e < start) {
            Some(free) => free,
            None => {
                slot_end.push(0);
                slot_end.len() - 1
            }
        };
        slot_end[slot] = end;
        locations[index] = Location::StrSlot(slot as u32);
    }
    // Never defined nor read: nothing touches their slot.
    for &index in untouched {
        if slot_end.is_empty() {
            slot_end.push(0);
        }
        locations[index] = Location::StrSlot(0);
    }
    slot_end.len() as u32
}

/// Allocates every register of `function`.
pub fn allocate(function: &Function) -> Allocation {
    let (spans, entry_live, live_in) = intervals(function);
    let mut locations = vec![Location::Unused; function.regs.len()];
    let mut order: Vec<(u32, u32, usize)> = Vec::new();
    let mut strings: Vec<(u32, u32, usize)> = Vec::new();
    let mut untouched_strings = Vec::new();
    for (index, ty) in function.regs.iter().enumerate() {
        match (ty, spans[index]) {
            (ValType::Str, Some((start, end))) => strings.push((start, end, index)),
            (ValType::Str, None) => untouched_strings.push(index),
            (ValType::Long, Some((start, end))) => order.push((start, end, index)),
            (ValType::Long, None) => {}
        }
    }
    let string_slots = allocate_string_slots(strings, &untouched_strings, &mut locations);
    order.sort();
    // Each spill slot with the intervals it holds: a spilled register takes
    // the first slot none of whose intervals overlaps its own, so the stack
    // grows with the registers spilled at once, not with all of them.
    let mut slot_intervals: Vec<Vec<(u32, u32)>> = Vec::new();
    let mut spill = |locations: &mut Vec<Location>, index: usize, (start, end): (u32, u32)| {
        let free = slot_intervals
            .iter()
            .position(|held| held.iter().all(|&(s, e)| e < start || end < s));
        let slot = free.unwrap_or_else(|| {
            slot_intervals.push(Vec::new());
            slot_intervals.len() - 1
        });
        slot_intervals[slot].push((start, end));
        locations[index] = Location::Spill(slot as u32);
    };
    // Active intervals holding a register: (end, reg index, machine reg).
    let mut active: Vec<(u32, usize, u8)> = Vec::new();
    for (start, end, index) in order {
        // Strictly before: a register read and one written by the same op
        // never share a machine register, so an op may write its result
        // before it has read all its operands.
        active.retain(|(active_end, _, _)| *active_end >= start);
        let free = ALLOCATABLE
            .iter()
            .copied()
            .find(|machine| active.iter().all(|(_, _, used)| used != machine));
        if let Some(machine) = free {
            locations[index] = Location::Register(machine);
            active.push((end, index, machine));
            continue;
        }
        // Spill whichever interval ends last.
        let (furthest, _) = active
            .iter()
            .enumerate()
            .max_by_key(|(_, (active_end, _, _))| *active_end)
            .map(|(i, entry)| (i, *entry))
            .expect("no free register means every register is active");
        if active[furthest].0 > end {
            let (_, victim, machine) = active.swap_remove(furthest);
            let held = spans[victim].unwrap_or((0, u32::MAX));
            spill(&mut locations, victim, held);
            locations[index] = Location::Register(machine);
            active.push((end, index, machine));
        } else {
            spill(&mut locations, index, (start, end));
        }
    }
    let spill_slots = slot_intervals.len() as u32;
    Allocation {
        locations,
        spill_slots,
        string_slots,
        entry_live,
        live_in,
    }
}
