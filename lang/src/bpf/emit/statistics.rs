//! Statistics: `<<<` on the per-CPU value (count, sum, min/max, stap's
//! integer variance, log and linear histograms) and the extractors read
//! in kernel probes.

use super::*;

impl Emitter<'_> {
    /// The head of a loop over CPUs whose index is in the frame slot `cpu`
    /// (bound at `top`): R0 = this CPU's value of the element whose key is
    /// written; no element (or no more CPUs) goes to `done`, more CPUs than
    /// `Options::cpus` to `too_many`.
    pub(super) fn this_cpu_value(
        &mut self,
        global: GlobalId,
        no_keys: bool,
        cpu: i16,
        top: Label,
        too_many: Label,
        done: Label,
    ) {
        self.bind(top);
        self.push(Insn::load(DW, R3, FP, cpu));
        self.key_args(global, no_keys);
        self.call(helper::MAP_LOOKUP_PERCPU_ELEM);
        self.jump(Insn::jump_imm(insn::JEQ, R0, 0, 0), done);
        self.push(Insn::load(DW, R3, FP, cpu));
        self.jump(Insn::jump_imm(insn::JGE, R3, self.cpus, 0), too_many);
    }

    /// The end of a loop over CPUs whose index is in the frame slot `cpu`:
    /// on to the next CPU at `top`; past `Options::cpus`, the error record;
    /// the loop's exit is `done`.
    pub(super) fn next_cpu(&mut self, cpu: i16, top: Label, too_many: Label, done: Label) {
        self.push(Insn::load(DW, R3, FP, cpu));
        self.push(Insn::alu64_imm(insn::ADD, R3, 1));
        self.push(Insn::store(DW, FP, cpu, R3));
        self.goto(top);
        self.bind(too_many);
        self.fail(records::ERROR_TOO_MANY_CPUS, None);
        self.bind(done);
    }

    pub(super) fn stat_add(&mut self, global: GlobalId, keys: &[Reg], value: Reg) {
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
    pub(super) fn variance_update(&mut self, count: i16, avg_s: i16, shift: u32) {
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
    pub(super) fn hist_log_bucket(&mut self) {
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
    pub(super) fn hist_linear_bucket(&mut self, hist: &crate::ir::LinearHist) {
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
    pub(super) fn bump_bucket(&mut self, base: u32, last: u32) {
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
    pub(super) fn stat_get(&mut self, dst: Reg, global: GlobalId, keys: &[Reg], what: StatValue) {
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
            StatValue::Variance { .. } if layout.variance.is_none() => {
                self.unsupported("@variance of a statistic without its variance state");
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
        self.this_cpu_value(global, keys.is_empty(), cpu, top, too_many, done);
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
        self.next_cpu(cpu, top, too_many, done);
        match what {
            StatValue::Count => self.push(Insn::load(DW, R0, FP, count)),
            StatValue::Sum => self.push(Insn::load(DW, R0, FP, value)),
            _ => {
                // @avg/@min/@max of no samples is an error, as in stap.
                let ok = self.new_label();
                self.push(Insn::load(DW, R2, FP, count));
                self.jump(Insn::jump_imm(insn::JNE, R2, 0, 0), ok);
                self.fail(records::ERROR_EMPTY_AGGREGATE, None);
                self.bind(ok);
                self.push(Insn::load(DW, R0, FP, value));
                if let (StatValue::Variance { .. }, Some(at)) = (what, layout.variance) {
                    let shift = variance_shift(self.module, global);
                    self.variance_combine(global, keys, layout.count, at, shift);
                }
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
}

impl Emitter<'_> {
    /// `@variance` over every CPU, as the host's `StatShape::aggregate`:
    /// with the total count at `FRAME_SMALL_VALUE + 8` (> 0) and r0 = the
    /// sum, `avg_s = (sum << shift) / count`, then a second pass over the
    /// CPUs adds `count·(cpu_avg_s − avg_s)²` and `(count − 1)·var_s`
    /// (`var_s = m2 / (count − 1)`), divided by `count − 1` and unscaled by
    /// `2^(2·shift)`. Leaves the result in r0. Divisions truncate toward
    /// zero, as Rust's and stap's.
    fn variance_combine(
        &mut self,
        global: GlobalId,
        keys: &[Reg],
        count_slot: u32,
        at: u32,
        shift: u32,
    ) {
        let cpu = FRAME_SMALL_VALUE;
        let count = FRAME_SMALL_VALUE + 8;
        let avg_s = FRAME_SMALL_VALUE + 16;
        let s1 = FRAME_SMALL_VALUE + 24;
        let s2 = FRAME_SMALL_VALUE + 32;
        let slot = |index: u32| (index * 8) as i16;
        if shift > 0 {
            self.push(Insn::alu64_imm(insn::LSH, R0, shift.min(63) as i32));
        }
        self.push(Insn::load(DW, R2, FP, count));
        self.signed_div_r0_by_r2();
        self.push(Insn::store(DW, FP, avg_s, R0));
        for at in [cpu, s1, s2] {
            self.push(Insn::store_imm(DW, FP, at, 0));
        }
        let top = self.new_label();
        let next = self.new_label();
        let done = self.new_label();
        let too_many = self.new_label();
        self.this_cpu_value(global, keys.is_empty(), cpu, top, too_many, done);
        self.push(Insn::load(DW, R4, R0, slot(count_slot)));
        self.jump(Insn::jump_imm(insn::JSLE, R4, 0, 0), next);
        // s1 += count * d * d
        self.push(Insn::load(DW, R1, R0, slot(at)));
        self.push(Insn::load(DW, R2, FP, avg_s));
        self.push(Insn::alu64_reg(insn::SUB, R1, R2));
        self.push(Insn::mov_reg(R2, R1));
        self.push(Insn::alu64_reg(insn::MUL, R1, R2));
        self.push(Insn::alu64_reg(insn::MUL, R1, R4));
        self.push(Insn::load(DW, R2, FP, s1));
        self.push(Insn::alu64_reg(insn::ADD, R2, R1));
        self.push(Insn::store(DW, FP, s1, R2));
        // s2 += (count - 1) * (m2 / (count - 1)) when count >= 2
        self.jump(Insn::jump_imm(insn::JSLT, R4, 2, 0), next);
        self.push(Insn::alu64_imm(insn::SUB, R4, 1));
        self.push(Insn::load(DW, R0, R0, slot(at + 1)));
        self.push(Insn::mov_reg(R2, R4));
        self.signed_div_r0_by_r2();
        self.push(Insn::alu64_reg(insn::MUL, R0, R4));
        self.push(Insn::load(DW, R2, FP, s2));
        self.push(Insn::alu64_reg(insn::ADD, R2, R0));
        self.push(Insn::store(DW, FP, s2, R2));
        self.bind(next);
        self.next_cpu(cpu, top, too_many, done);
        // (s1 + s2) / (count - 1), or 0 for one sample.
        let single = self.new_label();
        let scaled = self.new_label();
        self.push(Insn::load(DW, R2, FP, count));
        self.jump(Insn::jump_imm(insn::JSLE, R2, 1, 0), single);
        self.push(Insn::alu64_imm(insn::SUB, R2, 1));
        self.push(Insn::load(DW, R0, FP, s1));
        self.push(Insn::load(DW, R1, FP, s2));
        self.push(Insn::alu64_reg(insn::ADD, R0, R1));
        self.signed_div_r0_by_r2();
        self.goto(scaled);
        self.bind(single);
        self.push(Insn::mov_imm(R0, 0));
        self.bind(scaled);
        if shift > 0 {
            self.push(Insn::alu64_imm(insn::ARSH, R0, (2 * shift).min(63) as i32));
        }
    }

    /// r0 = r0 / r2 for r2 > 0, truncating toward zero (r1 clobbered).
    fn signed_div_r0_by_r2(&mut self) {
        self.push(Insn::mov_reg(R1, R0));
        self.push(Insn::jump_imm(insn::JSGE, R0, 0, 1));
        self.push(Insn::neg(R0));
        self.push(Insn::alu64_reg(insn::DIV, R0, R2));
        self.push(Insn::jump_imm(insn::JSGE, R1, 0, 1));
        self.push(Insn::neg(R0));
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
