//! Global arrays and scalars: key tuples, lookups, inserts, and stap's
//! array overflow error when an insert finds the map full.

use super::*;

impl Emitter<'_> {
    /// Writes the key tuple and leaves r1 = map, r2 = &key.
    pub(super) fn lookup_setup(&mut self, global: GlobalId, keys: &[Reg]) {
        self.write_key(global, keys);
        self.key_args(global, keys.is_empty());
    }

    /// Where a global's key is built: the stack for one-entry maps and
    /// small all-long tuples, else the scratch key buffer.
    pub(super) fn key_on_stack(&self, global: GlobalId, keyless: bool) -> bool {
        keyless || self.key_fits_stack(global)
    }

    pub(super) fn write_key(&mut self, global: GlobalId, keys: &[Reg]) {
        if keys.is_empty() {
            self.push(Insn::store_imm(W, FP, FRAME_SMALL, 0));
            return;
        }
        let types: Vec<ValType> = self.global_keys(global).to_vec();
        let key_text = self.key_text(global);
        let offsets = layout::key_offsets(&types, key_text);
        if self.key_on_stack(global, false) {
            for ((key, offset), ty) in keys.iter().zip(&offsets).zip(&types) {
                let at = FRAME_SMALL + *offset as i16;
                match ty {
                    ValType::Long => {
                        let k = self.operand(*key, R1);
                        self.push(Insn::store(DW, FP, at, k));
                    }
                    // Only with the string registers on the stack
                    // (`plan_stack_strings`): `key_text` bytes, in words.
                    ValType::Str => {
                        self.str_addr(*key, R3);
                        for word in (0..key_text as i16).step_by(8) {
                            self.push(Insn::load(DW, R0, R3, word));
                            self.push(Insn::store(DW, FP, at + word, R0));
                        }
                    }
                }
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
                // The text, NUL and padding fit in `key_text` bytes: no
                // longer text reaches this key (`key_text.rs`). A short key
                // is copied with loads and stores, not a helper call.
                ValType::Str if key_text <= SMALL_BYTES => {
                    self.scratch_addr(R1, base + offset);
                    self.str_addr(*key, R3);
                    for at in (0..key_text as i16).step_by(8) {
                        self.push(Insn::load(DW, R0, R3, at));
                        self.push(Insn::store(DW, R1, at, R0));
                    }
                }
                ValType::Str => {
                    self.scratch_addr(R1, base + offset);
                    self.str_addr(*key, R3);
                    self.call_memcpy(key_text);
                }
            }
        }
    }

    /// r1 = the global's map, r2 = the key `write_key` built.
    pub(super) fn key_args(&mut self, global: GlobalId, keyless: bool) {
        let map = self.global_map(global);
        self.ld_map(R1, map);
        if self.key_on_stack(global, keyless) {
            self.frame_ptr(R2, FRAME_SMALL);
        } else {
            self.scratch_addr(R2, self.scratch.key);
        }
    }

    pub(super) fn map_get(&mut self, dst: Reg, global: GlobalId, keys: &[Reg]) {
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

    pub(super) fn map_set(&mut self, global: GlobalId, keys: &[Reg], src: Reg) {
        self.lookup_setup(global, keys);
        self.value_arg(src);
        self.push(Insn::mov_imm(R4, 0)); // BPF_ANY
        self.call(helper::MAP_UPDATE_ELEM);
        self.overflow_if_failed();
    }

    /// r3 = the address of `src`'s value, as a map update takes it: a long
    /// goes through the frame's scratch slot, a string is addressed where
    /// it lives.
    fn value_arg(&mut self, src: Reg) {
        match self.function.reg_type(src) {
            ValType::Long => {
                let s = self.operand(src, R3);
                self.push(Insn::store(DW, FP, FRAME_TMP, s));
                self.frame_ptr(R3, FRAME_TMP);
            }
            ValType::Str => self.str_addr(src, R3),
        }
    }

    /// After an insert returning 0 or -errno in r0: a failure means the
    /// map is full, stap's "Array overflow" error, which ends the handler.
    fn overflow_if_failed(&mut self) {
        let ok = self.new_label();
        self.jump(Insn::jump_imm(insn::JEQ, R0, 0, 0), ok);
        self.overflow();
        self.bind(ok);
    }

    fn overflow(&mut self) {
        self.fail(records::ERROR_ARRAY_OVERFLOW, None);
    }

    /// Test-and-set: a present key needs no insert (a plain lookup, the
    /// common case once the key exists); a missing one gets one
    /// `BPF_NOEXIST` update, atomic under the map's bucket lock, so of
    /// concurrent hits exactly one sees it missing. r0 = 1 when this hit
    /// inserted it. A full map is stap's array overflow error.
    pub(super) fn map_insert(&mut self, dst: Reg, global: GlobalId, keys: &[Reg], src: Reg) {
        let present = self.new_label();
        let inserted = self.new_label();
        let done = self.new_label();
        self.lookup_setup(global, keys);
        self.call(helper::MAP_LOOKUP_ELEM);
        self.jump(Insn::jump_imm(insn::JNE, R0, 0, 0), present);
        self.key_args(global, keys.is_empty());
        self.value_arg(src);
        self.push(Insn::mov_imm(R4, 1)); // BPF_NOEXIST
        self.call(helper::MAP_UPDATE_ELEM);
        self.jump(Insn::jump_imm(insn::JEQ, R0, 0, 0), inserted);
        self.jump(Insn::jump_imm(insn::JEQ, R0, -17, 0), present); // -EEXIST
        self.overflow();
        self.bind(inserted);
        self.push(Insn::mov_imm(R1, 1));
        self.goto(done);
        self.bind(present);
        self.push(Insn::mov_imm(R1, 0));
        self.bind(done);
        self.set_result(dst, R1);
    }

    /// After a helper returning 0 or -errno in r0: bump a counter on error.
    pub(super) fn count_if_failed(&mut self, counter: u32) {
        let ok = self.new_label();
        self.jump(Insn::jump_imm(insn::JEQ, R0, 0, 0), ok);
        self.bump_counter(counter);
        self.bind(ok);
    }

    pub(super) fn bump_counter(&mut self, counter: u32) {
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
    /// it) first if missing. A full map is stap's array overflow error,
    /// which ends the handler; `missing` is taken if the element vanished
    /// again (another CPU deleted it); else r0 = the value.
    pub(super) fn lookup_or_insert(
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
        self.overflow();
        self.bind(inserted);
        self.key_args(global, keys.is_empty());
        self.call(helper::MAP_LOOKUP_ELEM);
        self.jump(Insn::jump_imm(insn::JEQ, R0, 0, 0), missing);
        self.bind(found);
    }

    pub(super) fn map_add(&mut self, global: GlobalId, keys: &[Reg], delta: Reg) {
        let done = self.new_label();
        self.lookup_or_insert(global, keys, 8, done);
        let d = self.operand(delta, R1);
        self.push(Insn::atomic_add64(R0, 0, d));
        self.bind(done);
    }

    pub(super) fn clear(&mut self, global: GlobalId) {
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
            Storage::Stats { keys, needs, .. } if keys.is_empty() => {
                self.clear_percpu_stat(global, StatLayout::new(&needs).value_size())
            }
            // Every element goes, through a callback of
            // `bpf_for_each_map_elem` that deletes the key it is given
            // (allowed for hash, LRU hash and per-CPU hash maps).
            Storage::Array { .. } | Storage::Stats { .. } => {
                let map = self.global_map(global);
                let callback = match self.clear_callback {
                    Some((label, _)) => label,
                    None => {
                        let label = self.new_label();
                        self.clear_callback = Some((label, self.span));
                        label
                    }
                };
                self.ld_map(R1, map);
                self.func_fixups.push((self.insns.len(), callback));
                self.push2(Insn::ld_func(R2, 0));
                self.push(Insn::mov_imm(R3, 0));
                self.push(Insn::mov_imm(R4, 0));
                self.call(helper::FOR_EACH_MAP_ELEM);
            }
        }
    }

    /// `delete s` of a scalar statistic: zero its value on every CPU
    /// (`bpf_map_lookup_percpu_elem`, bounded as in `stat_get`).
    fn clear_percpu_stat(&mut self, global: GlobalId, value_bytes: u32) {
        let cpu = FRAME_SMALL_VALUE;
        let top = self.new_label();
        let done = self.new_label();
        let too_many = self.new_label();
        self.push(Insn::store_imm(DW, FP, cpu, 0));
        self.bind(top);
        self.write_key(global, &[]);
        self.push(Insn::load(DW, R3, FP, cpu));
        self.key_args(global, true);
        self.call(helper::MAP_LOOKUP_PERCPU_ELEM);
        self.jump(Insn::jump_imm(insn::JEQ, R0, 0, 0), done);
        self.push(Insn::load(DW, R3, FP, cpu));
        self.jump(Insn::jump_imm(insn::JGE, R3, self.cpus, 0), too_many);
        self.push(Insn::mov_reg(R1, R0));
        self.call_memset(value_bytes);
        self.next_cpu(cpu, top, too_many, done);
    }

    /// The callback `delete ARRAY` hands to `bpf_for_each_map_elem`:
    /// `long cb(map, key, value, ctx) { bpf_map_delete_elem(map, key); return 0; }`.
    /// One per program, shared by every whole-array delete in it.
    pub(super) fn emit_clear_callback(&mut self) {
        let Some((label, span)) = self.clear_callback else {
            return;
        };
        self.bind(label);
        self.callback_starts.push((self.insns.len(), usize::MAX));
        self.force_span(span);
        // r1 = the map, r2 = the key, as the helper passed them.
        self.call(helper::MAP_DELETE_ELEM);
        self.push(Insn::mov_imm(R0, 0));
        self.push(Insn::exit());
    }
}
