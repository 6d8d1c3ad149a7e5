//! Sorted `foreach` in kernel probes, by rounds of selection.
//!
//! A kernel map cannot be sorted in place, and the verifier will not let a
//! handler gather it into a buffer of unknown length. So the loop runs as
//! `bpf_loop` rounds (`round`): each round walks the whole map
//! (`bpf_for_each_map_elem`, `select`) for the element that comes first in
//! the loop's order among those after the previous round's, copies its
//! key into scratch, and calls the loop body (the callback of an unsorted
//! loop, `foreach.rs`) on it, exactly as the unsorted walk would. A round
//! that finds nothing, a `break`, `limit` or anything that ends the probe
//! stops the rounds. N elements cost N + 1 walks of N.
//!
//! The order is total: the sort criterion in its direction, then every key
//! in ascending order, so each element comes exactly once even with equal
//! values. The criterion of the last and best elements is copied with
//! their keys, so a body that changes values does not reorder the rounds.
//!
//! State per loop, in the scratch region after the unsorted loop's part
//! (`Region::loop_bytes`): found flag, have-last flag, best key, last key,
//! best criterion, last criterion. `round` and `select` are written by
//! hand and keep everything in r6-r9 (kept across helper calls), so their
//! frames are empty.

use super::*;
use crate::bpf::insn::{R6, R7, R8};
use crate::ir::{Sort, SortBy};

const FOUND: i16 = 0;
const HAVE_LAST: i16 = 8;
const BEST_KEY: i16 = 16;

/// What a sorted loop keeps: sizes fixed at planning.
#[derive(Debug, Clone, Copy)]
pub(super) struct SortedLoop {
    pub(super) sort: Sort,
    /// The map's key size (the packed tuple).
    key_bytes: u32,
    /// Bytes of the criterion when it is the value (0 when it is a key).
    criterion_bytes: u32,
    pub(super) round: Label,
    select: Label,
}

impl SortedLoop {
    fn last_key(&self) -> i16 {
        BEST_KEY + Self::padded(self.key_bytes)
    }
    fn best_criterion(&self) -> i16 {
        self.last_key() + Self::padded(self.key_bytes)
    }
    fn last_criterion(&self) -> i16 {
        self.best_criterion() + Self::padded(self.criterion_bytes)
    }
    /// Bytes of the state.
    pub(super) fn bytes(&self) -> u32 {
        (self.last_criterion() + Self::padded(self.criterion_bytes)) as u32
    }
    fn padded(bytes: u32) -> i16 {
        (bytes.div_ceil(8) * 8) as i16
    }
}

/// The stored element (best or last) a candidate is compared with: its
/// key and criterion at r8 + these offsets. The candidate's key is at r6,
/// its value at r7.
#[derive(Clone, Copy)]
struct Stored {
    key: i16,
    criterion: i16,
}

impl Emitter<'_> {
    /// Plans the state of a sorted loop over `global` (`None`: the sort
    /// cannot run in a kernel probe; `iter_start` says why).
    pub(super) fn plan_sorted(&mut self, global: GlobalId, sort: Sort) -> Option<SortedLoop> {
        let criterion_bytes = match (sort.by, &self.module.global(global).storage) {
            (SortBy::Key(_), _) => 0,
            (SortBy::Value, Storage::Array { value, .. }) => layout::value_size(*value, self.n),
            _ => return None,
        };
        let key_bytes = self.key_bytes(global);
        Some(SortedLoop {
            sort,
            key_bytes,
            criterion_bytes,
            round: self.new_label(),
            select: self.new_label(),
        })
    }

    /// The rounds, from `iter_start` once the context struct and the loop
    /// area are set: no last element yet, then `bpf_loop` for at most one
    /// round per element the map can hold, plus the round that finds none.
    pub(super) fn start_sorted(&mut self, region: usize, sorted: SortedLoop, ctx: i16) {
        self.sorted_state(R1, region);
        self.push(Insn::store_imm(DW, R1, HAVE_LAST, 0));
        let capacity = match &self.module.global(self.regions[region].global).storage {
            Storage::Array { max_entries, .. } | Storage::Stats { max_entries, .. } => *max_entries,
            Storage::Scalar(_) => 1,
        };
        // bpf_loop takes at most 2^23 rounds.
        let rounds = capacity.saturating_add(1).min(1 << 23) as i32;
        self.push(Insn::mov_imm(R1, rounds));
        self.func_fixups.push((self.insns.len(), sorted.round));
        self.push2(Insn::ld_func(R2, 0));
        self.frame_ptr(R3, ctx);
        self.push(Insn::mov_imm(R4, 0));
        self.call(helper::LOOP);
    }

    /// `into` = the address of the sorted state of loop `region` (through
    /// the scratch pointer in this frame).
    fn sorted_state(&mut self, into: u8, region: usize) {
        self.loop_area(into, Some(region));
        let offset = self.regions[region].unsorted_bytes();
        self.push(Insn::alu64_imm(insn::ADD, into, offset as i32));
    }

    /// As `sorted_state`, from the context struct in `ctx` (a callback
    /// whose frame holds no scratch pointer).
    fn sorted_state_from_ctx(&mut self, into: u8, ctx: u8, region: usize) {
        self.push(Insn::load(DW, into, ctx, CTX_SCRATCH));
        let mut offset = self.scratch.loops + 8;
        offset += self.regions[..region]
            .iter()
            .map(|r| r.loop_bytes())
            .sum::<u32>();
        offset += self.regions[region].unsorted_bytes();
        self.push(Insn::alu64_imm(insn::ADD, into, offset as i32));
    }

    /// `long round(u64 index, void *ctx)`: find the next element, then run
    /// the body callback on it (its return value stops or goes on).
    pub(super) fn emit_round(&mut self, region: usize, sorted: SortedLoop, body: Label) {
        let (global, span) = (self.regions[region].global, self.regions[region].span);
        let map = self.global_map(global);
        let stop = self.new_label();
        let gone = self.new_label();
        self.bind(sorted.round);
        self.callback_starts.push((self.insns.len(), usize::MAX));
        self.force_span(span);
        self.push(Insn::mov_reg(R6, R2));
        self.sorted_state_from_ctx(R7, R6, region);
        self.push(Insn::store_imm(DW, R7, FOUND, 0));
        self.ld_map(R1, map);
        self.func_fixups.push((self.insns.len(), sorted.select));
        self.push2(Insn::ld_func(R2, 0));
        self.push(Insn::mov_reg(R3, R6));
        self.push(Insn::mov_imm(R4, 0));
        self.call(helper::FOR_EACH_MAP_ELEM);
        self.push(Insn::load(DW, R0, R7, FOUND));
        self.jump(Insn::jump_imm(insn::JEQ, R0, 0, 0), stop);
        // The best becomes the last.
        self.copy_state(R7, sorted.last_key(), R7, BEST_KEY, sorted.key_bytes);
        if sorted.criterion_bytes > 0 {
            self.copy_state(
                R7,
                sorted.last_criterion(),
                R7,
                sorted.best_criterion(),
                sorted.criterion_bytes,
            );
        }
        self.push(Insn::store_imm(DW, R7, HAVE_LAST, 1));
        // The value as the body sees it; deleted meanwhile: the next round.
        self.ld_map(R1, map);
        self.push(Insn::mov_reg(R2, R7));
        self.push(Insn::alu64_imm(insn::ADD, R2, sorted.last_key() as i32));
        self.call(helper::MAP_LOOKUP_ELEM);
        self.jump(Insn::jump_imm(insn::JEQ, R0, 0, 0), gone);
        self.ld_map(R1, map);
        self.push(Insn::mov_reg(R2, R7));
        self.push(Insn::alu64_imm(insn::ADD, R2, sorted.last_key() as i32));
        self.push(Insn::mov_reg(R3, R0));
        self.push(Insn::mov_reg(R4, R6));
        self.func_fixups.push((self.insns.len(), body));
        self.push(Insn::call_local(0));
        self.push(Insn::exit());
        self.bind(gone);
        self.push(Insn::mov_imm(R0, 0));
        self.push(Insn::exit());
        self.bind(stop);
        self.push(Insn::mov_imm(R0, 1));
        self.push(Insn::exit());
        self.emit_select(region, sorted);
    }

    /// `long select(map, key, value, ctx)`: keeps the element as the best
    /// if it comes after the last and before the best so far.
    fn emit_select(&mut self, region: usize, sorted: SortedLoop) {
        let skip = self.new_label();
        let check_best = self.new_label();
        let take = self.new_label();
        self.bind(sorted.select);
        self.callback_starts.push((self.insns.len(), usize::MAX));
        self.force_span(self.regions[region].span);
        self.push(Insn::mov_reg(R6, R2));
        self.push(Insn::mov_reg(R7, R3));
        self.sorted_state_from_ctx(R8, R4, region);
        self.push(Insn::load(DW, R0, R8, HAVE_LAST));
        self.jump(Insn::jump_imm(insn::JEQ, R0, 0, 0), check_best);
        let last = Stored {
            key: sorted.last_key(),
            criterion: sorted.last_criterion(),
        };
        // Not after the last (equal is the last itself): already done.
        self.compare(region, sorted, last, skip, check_best);
        self.goto(skip);
        self.bind(check_best);
        self.push(Insn::load(DW, R0, R8, FOUND));
        self.jump(Insn::jump_imm(insn::JEQ, R0, 0, 0), take);
        let best = Stored {
            key: BEST_KEY,
            criterion: sorted.best_criterion(),
        };
        self.compare(region, sorted, best, take, skip);
        self.goto(skip);
        self.bind(take);
        self.copy_state(R8, BEST_KEY, R6, 0, sorted.key_bytes);
        if sorted.criterion_bytes > 0 {
            let at = sorted.best_criterion();
            self.copy_state(R8, at, R7, 0, sorted.criterion_bytes);
        }
        self.push(Insn::store_imm(DW, R8, FOUND, 1));
        self.bind(skip);
        self.push(Insn::mov_imm(R0, 0));
        self.push(Insn::exit());
    }

    /// `memcpy(dst + dst_off, src + src_off, bytes)`; r6-r9 survive.
    fn copy_state(&mut self, dst: u8, dst_off: i16, src: u8, src_off: i16, bytes: u32) {
        self.push(Insn::mov_reg(R1, dst));
        self.push(Insn::alu64_imm(insn::ADD, R1, dst_off as i32));
        self.push(Insn::mov_reg(R3, src));
        if src_off != 0 {
            self.push(Insn::alu64_imm(insn::ADD, R3, src_off as i32));
        }
        self.call_memcpy(bytes);
    }

    /// Compares the candidate with `other` in the loop's order: to
    /// `before` if the candidate comes first, to `after` if it comes
    /// later, falling through if they are the same element.
    fn compare(
        &mut self,
        region: usize,
        sorted: SortedLoop,
        other: Stored,
        before: Label,
        after: Label,
    ) {
        let global = self.regions[region].global;
        let types = self.global_keys(global).to_vec();
        let key_text = self.key_text(global);
        let offsets = layout::key_offsets(&types, key_text);
        let key_field = |i: usize| {
            let bytes = layout::value_size(types[i], key_text);
            (types[i], offsets[i] as i16, bytes, false)
        };
        // (type, offset, bytes, is the value) of each field, in order.
        let mut fields = Vec::new();
        let primary_key = match sorted.sort.by {
            SortBy::Key(i) => {
                fields.push(key_field(i as usize));
                Some(i as usize)
            }
            _ => {
                let ty = match &self.module.global(global).storage {
                    Storage::Array { value, .. } => *value,
                    _ => ValType::Long,
                };
                fields.push((ty, 0, sorted.criterion_bytes, true));
                None
            }
        };
        fields.extend(
            (0..types.len())
                .filter(|i| Some(*i) != primary_key)
                .map(key_field),
        );
        for (index, (ty, offset, bytes, is_value)) in fields.into_iter().enumerate() {
            // Only the criterion has a direction; the keys after it break
            // ties in ascending order.
            let (less, greater) = if index == 0 && sorted.sort.descending {
                (after, before)
            } else {
                (before, after)
            };
            let candidate = if is_value { (R7, offset) } else { (R6, offset) };
            let stored = if is_value {
                (R8, other.criterion + offset)
            } else {
                (R8, other.key + offset)
            };
            match ty {
                ValType::Long => {
                    self.push(Insn::load(DW, R1, candidate.0, candidate.1));
                    self.push(Insn::load(DW, R2, stored.0, stored.1));
                    self.jump(Insn::jump_reg(insn::JSLT, R1, R2, 0), less);
                    self.jump(Insn::jump_reg(insn::JSGT, R1, R2, 0), greater);
                }
                ValType::Str => {
                    // strcmp, unrolled: unsigned bytes up to the first NUL.
                    let equal = self.new_label();
                    for byte in 0..bytes as i16 {
                        self.push(Insn::load(B, R1, candidate.0, candidate.1 + byte));
                        self.push(Insn::load(B, R2, stored.0, stored.1 + byte));
                        self.jump(Insn::jump_reg(insn::JLT, R1, R2, 0), less);
                        self.jump(Insn::jump_reg(insn::JGT, R1, R2, 0), greater);
                        self.jump(Insn::jump_imm(insn::JEQ, R1, 0, 0), equal);
                    }
                    self.bind(equal);
                }
            }
        }
    }
}
