//! Unsorted `foreach` in kernel probes, through `bpf_for_each_map_elem`.
//!
//! The loop body becomes a callback: a BPF function `long cb(void *map,
//! void *key, void *value, void *ctx)` that the helper calls once per
//! element. Its frame has the same layout as the handler's (same spill
//! offsets), so the body's ops are emitted exactly as in the handler. What
//! crosses the call: the caller's frame pointers (probe context, scratch,
//! counters) and a stop code in a context struct on the caller's stack;
//! every long register live across the loop, the MAXACTION tick count and
//! the `limit` countdown in the scratch region (`ScratchLayout::loops`).
//! String registers already live in the scratch region.
//!
//! Why scratch and not the stack: the verifier tracks stack values
//! exactly, so a counter there (`n++`, later compared) would make it walk
//! the callback once per possible iteration; a value read from a map is
//! an unknown scalar to it, and the callback's states converge.
//!
//! Exits from the body: the latch (`continue`, end of body) returns 0,
//! `break` returns 1, anything that ends the probe (`next`, an error,
//! MAXACTION) returns 1 with code `CODE_ABORT` (the caller then goes to its
//! own exit path), and a jump elsewhere out of the loop (`return` of an
//! inlined function) returns 1 with that target's code, where the caller
//! goes on.
//!
//! The IR shape (ir/lower/stmt.rs): `IterStart; jump header`, `header:
//! IterNext; branch has, body, exit`, body blocks, `latch: Tick; jump
//! header`.

use super::sorted::SortedLoop;
use super::*;
use crate::ir::Sort;

/// Ran to the end or `break`: go on after the loop.
const CODE_DONE: i32 = 0;
/// The probe ends (`next`, an error, MAXACTION).
const CODE_ABORT: i32 = 1;
/// The body left the loop for `Region::escapes[code - CODE_ESCAPE]`.
const CODE_ESCAPE: i32 = 2;

/// The context struct sits in `FRAME_SMALL_VALUE`, which no op needs
/// while the helper runs.
const CTX_BASE: i16 = FRAME_SMALL_VALUE;

/// One kernel `foreach` loop.
#[derive(Debug)]
pub(super) struct Region {
    /// The block whose `IterStart` (its last op) starts the loop.
    start_block: usize,
    pub(super) global: GlobalId,
    header: usize,
    body: usize,
    exit: usize,
    /// Blocks of the body (nested loops' blocks included).
    members: Vec<bool>,
    member_count: usize,
    keys: Vec<Reg>,
    value: Option<Reg>,
    /// Long registers handed to and from the callback.
    transfer: Vec<Reg>,
    /// The callback's first instruction.
    entry: Label,
    limited: bool,
    queued: bool,
    /// 1 for a loop in the handler, 2 inside another loop, ...
    pub(super) depth: u32,
    /// A sorted loop's order (`sorted.rs`), and its state when the sort
    /// can run in a kernel probe.
    sort: Option<Sort>,
    pub(super) sorted: Option<SortedLoop>,
    pub(super) span: Span,
    /// Blocks outside the loop, other than its exit, that the body jumps
    /// to (`return` from an inlined function, to the caller's code): the
    /// callback stops with code `CODE_ESCAPE + i` and the caller goes on
    /// at the i-th.
    escapes: Vec<usize>,
}

/// Blocks reachable from `from` without entering any of `stop`.
fn reach(function: &Function, from: usize, stop: &[usize]) -> Vec<bool> {
    let n = function.blocks.len();
    let mut seen = vec![false; n];
    let mut stack = vec![from];
    while let Some(b) = stack.pop() {
        if b >= n || seen[b] || stop.contains(&b) {
            continue;
        }
        seen[b] = true;
        stack.extend(
            regalloc::successors(&function.blocks[b].term)
                .into_iter()
                .map(|s| s as usize),
        );
    }
    seen
}

impl Region {
    /// Its part of `ScratchLayout::loops`: the `limit` countdown, the
    /// transferred registers, then a sorted loop's state.
    pub(super) fn loop_bytes(&self) -> u32 {
        self.unsorted_bytes() + self.sorted.map_or(0, |s| s.bytes())
    }

    /// The `limit` countdown and the transferred registers.
    pub(super) fn unsorted_bytes(&self) -> u32 {
        8 + 8 * self.transfer.len() as u32
    }
}

/// Bytes of `ScratchLayout::loops`: the tick count, then each loop's part.
pub(super) fn loops_bytes(regions: &[Region]) -> u32 {
    match regions {
        [] => 0,
        _ => 8 + regions.iter().map(Region::loop_bytes).sum::<u32>(),
    }
}

impl Emitter<'_> {
    /// Finds every `foreach` loop of the function (sorted ones run by
    /// rounds, `sorted.rs`).
    pub(super) fn plan_regions(&mut self) {
        let function = self.function;
        let n = function.blocks.len();
        let mut regions = Vec::new();
        for (start_block, block) in function.blocks.iter().enumerate() {
            for inst in &block.insts {
                let Op::IterStart {
                    iter,
                    global,
                    sort,
                    limit,
                } = &inst.op
                else {
                    continue;
                };
                // By the CFG, not by iterator id: a script function inlined
                // twice repeats its ids.
                let Term::Jump(header) = block.term else {
                    continue;
                };
                let header = header.0 as usize;
                let first = function.blocks.get(header).and_then(|b| b.insts.first());
                if !matches!(first.map(|i| &i.op), Some(Op::IterNext { iter: it, .. }) if it == iter)
                {
                    continue;
                }
                let head = &function.blocks[header];
                let (
                    Op::IterNext { keys, value, .. },
                    Term::Branch {
                        then, otherwise, ..
                    },
                ) = (&head.insts[0].op, &head.term)
                else {
                    continue;
                };
                let (body, exit) = (then.0 as usize, otherwise.0 as usize);
                // The body: what the body block reaches without passing the
                // header or the exit, and only through it (a `return` of an
                // inlined function jumps to the caller's code, which the
                // body reaches but does not own).
                let outside = reach(function, 0, &[body]);
                let mut members = reach(function, body, &[header, exit]);
                for (b, member) in members.iter_mut().enumerate() {
                    *member &= !outside[b];
                }
                let mut escapes: Vec<usize> = (0..n)
                    .filter(|b| members[*b])
                    .flat_map(|b| regalloc::successors(&function.blocks[b].term))
                    .map(|s| s as usize)
                    .filter(|s| *s != header && *s != exit && !members[*s])
                    .collect();
                escapes.sort();
                escapes.dedup();
                let long = |r: &Reg| function.reg_type(*r) == ValType::Long;
                let mut transfer: Vec<Reg> = self.alloc.live_in[header]
                    .iter()
                    .chain(&self.alloc.live_in[exit])
                    .chain(escapes.iter().flat_map(|e| &self.alloc.live_in[*e]))
                    .copied()
                    .filter(long)
                    .collect();
                transfer.sort();
                transfer.dedup();
                let entry = self.new_label();
                let sorted = sort.and_then(|sort| self.plan_sorted(*global, sort));
                regions.push(Region {
                    start_block,
                    global: *global,
                    header,
                    body,
                    exit,
                    member_count: members.iter().filter(|m| **m).count(),
                    members,
                    keys: keys.clone(),
                    value: *value,
                    transfer,
                    entry,
                    limited: limit.is_some(),
                    queued: false,
                    depth: 1,
                    sort: *sort,
                    sorted,
                    span: inst.span,
                    escapes,
                });
            }
        }
        let depths: Vec<u32> = regions
            .iter()
            .map(|r| 1 + regions.iter().filter(|o| o.members[r.header]).count() as u32)
            .collect();
        for (region, depth) in regions.iter_mut().zip(depths) {
            region.depth = depth;
        }
        self.block_owner = (0..n)
            .map(|b| {
                regions
                    .iter()
                    .enumerate()
                    .filter(|(_, r)| r.members[b])
                    .min_by_key(|(_, r)| r.member_count)
                    .map(|(i, _)| i)
            })
            .collect();
        self.regions = regions;
    }

    /// Where a callback keeps its context pointer: the slot after the
    /// spill slots.
    fn ctx_pointer_slot(&self) -> i16 {
        Self::spill_offset(self.alloc.spill_slots)
    }

    /// `into` = the address of loop `region`'s part of the scratch loop
    /// area (`None`: the tick count).
    pub(super) fn loop_area(&mut self, into: u8, region: Option<usize>) {
        let mut offset = self.scratch.loops;
        if let Some(region) = region {
            offset += 8 + self.regions[..region]
                .iter()
                .map(Region::loop_bytes)
                .sum::<u32>();
        }
        self.scratch_addr(into, offset);
    }

    /// The header of a kernel loop is not emitted: its frame goes on at
    /// the loop's exit once the helper returns.
    pub(super) fn loop_exit_of_header(&self, block: usize) -> Option<usize> {
        self.regions
            .iter()
            .find(|r| r.header == block)
            .map(|r| r.exit)
    }

    /// `IterStart`: fill the context struct, call the helper, take the
    /// results back.
    pub(super) fn iter_start(&mut self, global: GlobalId, limit: Option<Reg>) {
        let block = self.current_block;
        let Some(region) = self.regions.iter().position(|r| r.start_block == block) else {
            self.unsupported("this foreach shape in a kernel probe");
            return;
        };
        let sorted = self.regions[region].sorted;
        if self.regions[region].sort.is_some() && sorted.is_none() {
            self.unsupported(
                "a foreach over a statistics array sorted by its values in a kernel probe \
                 (sort by a key, or move it to a host probe)",
            );
            return;
        }
        if matches!(
            self.module.global(global).storage,
            Storage::Scalar(_) | Storage::Stats { .. }
        ) && self.global_keys(global).is_empty()
        {
            self.unsupported("foreach over a scalar in a kernel probe");
            return;
        }
        let map = self.global_map(global);
        let base = CTX_BASE;
        let at = |field: i16| base + field;
        self.push(Insn::load(DW, R1, FP, FRAME_CTX));
        self.push(Insn::store(DW, FP, at(CTX_PROBE_CTX), R1));
        // A loop always has a scratch region (`ScratchLayout::loops`).
        self.push(Insn::load(DW, R1, FP, FRAME_SCRATCH));
        self.push(Insn::store(DW, FP, at(CTX_SCRATCH), R1));
        self.push(Insn::load(DW, R1, FP, FRAME_COUNTERS));
        self.push(Insn::store(DW, FP, at(CTX_COUNTERS), R1));
        if !self.in_callback {
            // The handler's count goes on in the scratch slot.
            self.loop_area(R1, None);
            self.push(Insn::load(DW, R2, FP, FRAME_TICKS));
            self.push(Insn::store(DW, R1, 0, R2));
        }
        self.push(Insn::store_imm(DW, FP, at(CTX_CODE), CODE_DONE));
        self.loop_area(R1, Some(region));
        if let Some(limit) = limit {
            let l = self.operand(limit, R2);
            self.push(Insn::store(DW, R1, 0, l));
        }
        let transfer = self.regions[region].transfer.clone();
        for (i, reg) in transfer.iter().enumerate() {
            let r = self.operand(*reg, R2);
            self.push(Insn::store(DW, R1, 8 + 8 * i as i16, r));
        }
        if let Some(sorted) = sorted {
            self.start_sorted(region, sorted, base);
        } else {
            self.ld_map(R1, map);
            let entry = self.regions[region].entry;
            self.func_fixups.push((self.insns.len(), entry));
            self.push2(Insn::ld_func(R2, 0));
            self.frame_ptr(R3, base);
            self.push(Insn::mov_imm(R4, 0));
            self.call(helper::FOR_EACH_MAP_ELEM);
        }
        // Back: the ticks, the verdict, then what the code at the verdict's
        // destination reads.
        if !self.in_callback {
            self.loop_area(R1, None);
            self.push(Insn::load(DW, R1, R1, 0));
            self.push(Insn::store(DW, FP, FRAME_TICKS, R1));
        }
        self.push(Insn::load(DW, R1, FP, at(CTX_CODE)));
        self.jump(Insn::jump_imm(insn::JEQ, R1, CODE_ABORT, 0), self.epilogue);
        let escapes = self.regions[region].escapes.clone();
        let escape_labels: Vec<Label> = escapes.iter().map(|_| self.new_label()).collect();
        for (i, label) in escape_labels.iter().enumerate() {
            self.jump(
                Insn::jump_imm(insn::JEQ, R1, CODE_ESCAPE + i as i32, 0),
                *label,
            );
        }
        let exit = self.regions[region].exit;
        self.reload(region, &transfer, exit);
        if !escapes.is_empty() {
            let done = self.new_label();
            self.goto(done);
            for (label, target) in escape_labels.into_iter().zip(escapes) {
                self.bind(label);
                self.reload(region, &transfer, target);
                let to = self.frame_labels[target];
                self.goto(to);
            }
            self.bind(done);
        }
        if !self.regions[region].queued {
            self.regions[region].queued = true;
            self.pending_callbacks.push(region);
        }
    }

    /// The transferred registers live into `block`, from the scratch loop
    /// area (only those: another register may share a location).
    fn reload(&mut self, region: usize, transfer: &[Reg], block: usize) {
        let live: Vec<Reg> = self.alloc.live_in[block].clone();
        if transfer.iter().any(|reg| live.contains(reg)) {
            self.loop_area(R1, Some(region));
            for (i, reg) in transfer.iter().enumerate() {
                if live.contains(reg) {
                    self.push(Insn::load(DW, R0, R1, 8 + 8 * i as i16));
                    self.set_result(*reg, R0);
                }
            }
        }
    }

    /// Emits the callbacks of every loop met so far, and of loops met while
    /// emitting those (nested loops).
    pub(super) fn emit_callbacks(&mut self, block_labels: &[Label]) {
        while let Some(region) = self.pending_callbacks.pop() {
            self.emit_callback(region, block_labels);
        }
    }

    fn emit_callback(&mut self, region: usize, block_labels: &[Label]) {
        let function = self.function;
        let (entry, header, body, exit, span) = {
            let r = &self.regions[region];
            (r.entry, r.header, r.body, r.exit, r.span)
        };
        self.bind(entry);
        self.callback_starts.push((self.insns.len(), region));
        self.force_span(span);
        let saved_epilogue = self.epilogue;
        let saved_in_callback = std::mem::replace(&mut self.in_callback, true);
        let abort = self.new_label();
        let next_iteration = self.new_label();
        let stop = self.new_label();
        let tail = self.new_label();
        self.epilogue = abort;
        let ctx_slot = self.ctx_pointer_slot();
        let key_slot = FRAME_TMP;
        let value_slot = FRAME_RECORD_OFFSET;
        // r2 = key, r3 = value, r4 = our context struct.
        self.push(Insn::store(DW, FP, ctx_slot, R4));
        self.push(Insn::store(DW, FP, key_slot, R2));
        self.push(Insn::store(DW, FP, value_slot, R3));
        self.push(Insn::load(DW, R1, R4, CTX_PROBE_CTX));
        self.push(Insn::store(DW, FP, FRAME_CTX, R1));
        self.push(Insn::load(DW, R1, R4, CTX_SCRATCH));
        self.push(Insn::store(DW, FP, FRAME_SCRATCH, R1));
        self.push(Insn::load(DW, R2, R4, CTX_COUNTERS));
        self.push(Insn::store(DW, FP, FRAME_COUNTERS, R2));
        let limit_reached = self.new_label();
        if self.regions[region].limited {
            self.loop_area(R1, Some(region));
            self.push(Insn::load(DW, R2, R1, 0));
            self.jump(Insn::jump_imm(insn::JSLE, R2, 0, 0), limit_reached);
            self.push(Insn::alu64_imm(insn::SUB, R2, 1));
            self.push(Insn::store(DW, R1, 0, R2));
        }
        // A fresh frame, as a handler's.
        self.zero_registers_and_spills();
        self.decode_element(region, key_slot, value_slot);
        // The caller's values live into the body.
        let transfer = self.regions[region].transfer.clone();
        let decoded: Vec<Reg> = {
            let r = &self.regions[region];
            r.keys.iter().copied().chain(r.value).collect()
        };
        let live = self.alloc.live_in[body].clone();
        let needed: Vec<(usize, Reg)> = transfer
            .iter()
            .copied()
            .enumerate()
            .filter(|(_, reg)| live.contains(reg) && !decoded.contains(reg))
            .collect();
        if !needed.is_empty() {
            self.loop_area(R1, Some(region));
            for (i, reg) in needed {
                self.push(Insn::load(DW, R0, R1, 8 + 8 * i as i16));
                self.set_result(reg, R0);
            }
        }
        // The body, with the loop's header as "next element" and its exit
        // as "stop".
        let mut labels = block_labels.to_vec();
        labels[header] = next_iteration;
        labels[exit] = stop;
        let escapes = self.regions[region].escapes.clone();
        let escape_labels: Vec<Label> = escapes.iter().map(|_| self.new_label()).collect();
        for (target, label) in escapes.iter().zip(&escape_labels) {
            labels[*target] = *label;
        }
        let mut order: Vec<usize> = vec![body];
        order.extend(
            (0..function.blocks.len()).filter(|b| {
                *b != body && self.block_owner[*b] == Some(region) && self.reachable[*b]
            }),
        );
        let saved_labels = std::mem::replace(&mut self.frame_labels, labels.clone());
        self.emit_blocks(&order, &labels, false);
        self.frame_labels = saved_labels;
        // The verifier rejects unreachable instructions: each exit path is
        // emitted only if something reaches it.
        // Ends the probe: set the abort flag and stop the iteration.
        self.note_span(span);
        if self.falls_through() || self.referenced(abort) {
            self.bind(abort);
            self.push(Insn::load(DW, R1, FP, ctx_slot));
            self.push(Insn::store_imm(DW, R1, CTX_CODE, CODE_ABORT));
            self.push(Insn::mov_imm(R0, 1));
            self.push(Insn::exit());
        }
        // Leaving for another block outside: say which, hand values back.
        for (i, label) in escape_labels.into_iter().enumerate() {
            if self.referenced(label) {
                self.bind(label);
                self.push(Insn::load(DW, R1, FP, ctx_slot));
                self.push(Insn::store_imm(DW, R1, CTX_CODE, CODE_ESCAPE + i as i32));
                self.push(Insn::mov_imm(R0, 1));
                self.goto(tail);
            }
        }
        // A body that always breaks never asks for the next element, and
        // one that never breaks never stops: each path only if reached.
        let stopped = self.referenced(stop);
        let continues = self.falls_through() || self.referenced(next_iteration);
        if continues {
            self.bind(next_iteration);
            self.push(Insn::mov_imm(R0, 0));
            if stopped {
                self.goto(tail);
            }
        }
        if stopped {
            self.bind(stop);
            self.push(Insn::mov_imm(R0, 1));
        }
        if continues || stopped || self.referenced(tail) {
            self.bind(tail);
            if !transfer.is_empty() {
                self.loop_area(R1, Some(region));
                for (i, reg) in transfer.iter().enumerate() {
                    let r = self.operand(*reg, R2);
                    self.push(Insn::store(DW, R1, 8 + 8 * i as i16, r));
                }
            }
            self.push(Insn::exit());
        }
        // `limit N` used up: nothing was loaded, nothing to hand back.
        if self.regions[region].limited {
            self.bind(limit_reached);
            self.push(Insn::mov_imm(R0, 1));
            self.push(Insn::exit());
        }
        self.epilogue = saved_epilogue;
        self.in_callback = saved_in_callback;
        if let Some(sorted) = self.regions[region].sorted {
            self.emit_round(region, sorted, entry);
        }
    }

    /// `Tick` inside a callback: the count in the scratch region.
    pub(super) fn callback_tick(&mut self) {
        let ok = self.new_label();
        self.loop_area(R1, None);
        self.push(Insn::load(DW, R0, R1, 0));
        self.push(Insn::alu64_imm(insn::ADD, R0, 1));
        self.push(Insn::store(DW, R1, 0, R0));
        let limit = i32::try_from(self.max_action).unwrap_or(i32::MAX);
        self.jump(Insn::jump_imm(insn::JLE, R0, limit, 0), ok);
        self.fail(records::ERROR_MAXACTION, None);
        self.bind(ok);
    }

    fn referenced(&self, label: Label) -> bool {
        self.fixups.iter().any(|(_, l)| *l == label)
    }

    /// Whether the last instruction can fall into the next one.
    fn falls_through(&self) -> bool {
        self.insns.last().is_some_and(|last| {
            let op = last.code & 0xf0;
            !(last.class() == insn::JMP && (op == insn::JA || op == insn::EXIT))
        })
    }

    /// The element's keys (packed tuple, `layout.rs`) and value into the
    /// loop variables.
    fn decode_element(&mut self, region: usize, key_slot: i16, value_slot: i16) {
        let (global, keys, value) = {
            let r = &self.regions[region];
            (r.global, r.keys.clone(), r.value)
        };
        let types = self.global_keys(global).to_vec();
        let key_text = self.key_text(global);
        let offsets = layout::key_offsets(&types, key_text);
        for ((reg, ty), offset) in keys.iter().zip(&types).zip(offsets) {
            self.load_field(*reg, *ty, key_slot, offset, key_text);
        }
        if let (Some(reg), Storage::Array { value: ty, .. }) =
            (value, &self.module.global(global).storage)
        {
            self.load_field(reg, *ty, value_slot, 0, self.n);
        }
    }

    /// Register `reg` from `offset` bytes into the memory the pointer in
    /// frame slot `slot` points at; a string field is `text_bytes` long
    /// and the rest of the string register is zeroed.
    fn load_field(&mut self, reg: Reg, ty: ValType, slot: i16, offset: u32, text_bytes: u32) {
        if self.alloc.location(reg) == Location::Unused {
            return;
        }
        match ty {
            ValType::Long => {
                self.push(Insn::load(DW, R1, FP, slot));
                match i16::try_from(offset) {
                    Ok(off) => self.push(Insn::load(DW, R0, R1, off)),
                    Err(_) => {
                        self.push(Insn::alu64_imm(insn::ADD, R1, offset as i32));
                        self.push(Insn::load(DW, R0, R1, 0));
                    }
                }
                self.set_result(reg, R0);
            }
            ValType::Str => {
                self.str_addr(reg, R1);
                self.push(Insn::load(DW, R3, FP, slot));
                if offset != 0 {
                    self.push(Insn::alu64_imm(insn::ADD, R3, offset as i32));
                }
                self.call_memcpy(text_bytes);
                self.zero_str_bytes(reg, text_bytes, self.str_width(reg));
            }
        }
    }
}

/// How many sorted loops the deepest sorted loop sits in, itself
/// included: each adds its round's frame to the call chain (`sorted.rs`).
pub(super) fn sorted_depth(regions: &[Region]) -> u32 {
    regions
        .iter()
        .filter(|r| r.sorted.is_some())
        .map(|r| {
            let outer = regions
                .iter()
                .filter(|o| o.sorted.is_some() && o.members[r.header])
                .count();
            1 + outer as u32
        })
        .max()
        .unwrap_or(0)
}
