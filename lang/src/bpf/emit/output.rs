//! Ring-buffer records (`records.rs` documents the format): printf,
//! exit and run-time errors; and the MAXACTION guard.

use super::*;
use crate::printf;

impl Emitter<'_> {
    /// Sends the 16-byte header (+ payload already at `FRAME_SMALL + 16`)
    /// from the stack.
    pub(super) fn send_small_record(&mut self, kind: u32, id: u32, len: u32) {
        let framed = self.framed();
        // Unframed handlers send only small records, each on its own.
        let kind = match framed {
            true => kind,
            false => kind | records::STANDALONE_STREAM << records::STREAM_SHIFT,
        };
        let header = [kind, id, self.probe, len];
        for (i, word) in header.iter().enumerate() {
            self.push(Insn::store_imm(
                W,
                FP,
                FRAME_SMALL + 4 * i as i16,
                *word as i32,
            ));
        }
        if framed {
            // The held record goes first; this one is not the run's last
            // (the epilogue ends the unit).
            self.flush_held();
            self.framing_bits(records::FLAG_MORE);
            self.push(Insn::load(W, R1, FP, FRAME_SMALL));
            self.push(Insn::alu64_reg(insn::OR, R1, R0));
            self.push(Insn::store(W, FP, FRAME_SMALL, R1));
            self.scratch_addr(R1, self.scratch.out);
            self.push(Insn::store_imm(DW, R1, 0, HELD_SENT));
        }
        self.ld_map(R1, self.maps.events);
        self.frame_ptr(R2, FRAME_SMALL);
        self.push(Insn::mov_imm(R3, len as i32));
        self.push(Insn::mov_imm(R4, 0));
        self.call(helper::RINGBUF_OUTPUT);
        if framed {
            self.count_lost_framed();
        } else {
            self.count_if_failed(COUNTER_LOST_EVENTS);
        }
    }

    /// After `ringbuf_output` in a framed handler: counts a lost record
    /// through the counters pointer the frame keeps (a framed handler has
    /// its scratch level, so the pointer is set).
    fn count_lost_framed(&mut self) {
        let ok = self.new_label();
        self.jump(Insn::jump_imm(insn::JEQ, R0, 0, 0), ok);
        self.push(Insn::load(DW, R1, FP, FRAME_COUNTERS));
        self.push(Insn::mov_imm(R2, 1));
        self.push(Insn::atomic_add64(R1, (COUNTER_LOST_EVENTS * 8) as i16, R2));
        self.bind(ok);
    }

    /// `exit()`: clears the run flag first, so that no new handler starts
    /// (stap stops starting probes once the session is stopping), then
    /// tells the host. The current handler goes on to its end.
    pub(super) fn exit_record(&mut self) {
        self.ld_map_value(R1, self.maps.control, (maps::CONTROL_RUN * 8) as i32);
        self.push(Insn::store_imm(DW, R1, 0, 0));
        self.send_small_record(records::KIND_EXIT, 0, HEADER_BYTES);
    }

    /// Inside `try` (and not in a callback, a BPF function of its own):
    /// the handler's label and the register for its `catch (msg)`.
    /// Asking means an error jumps there: the handler is then emitted.
    fn catch_target(&mut self) -> Option<(Label, Option<Reg>)> {
        if self.in_callback {
            return None;
        }
        let catch = self.function.blocks.get(self.current_block)?.catch?;
        let label = *self.frame_labels.get(catch.handler.0 as usize)?;
        self.used_catches.insert(catch.handler.0);
        Some((label, catch.message))
    }

    /// A run-time error of `kind`: inside `try`, its text goes to the
    /// `catch` variable and the handler runs; otherwise an error record
    /// goes to the host and the handler ends.
    pub(super) fn fail(&mut self, kind: u32, address: Option<Reg>) {
        if let Some((handler, message)) = self.catch_target() {
            if let Some(message) = message {
                // The address of a fault is not in the text here.
                self.const_str(message, records::error_text(kind));
            }
            self.goto(handler);
            return;
        }
        if !self.framed() && address.is_none() && !self.in_callback {
            // Only the span differs between such records: it is stored
            // here, and one tail per error kind sends the record
            // ([`emit_error_tails`](Self::emit_error_tails)).
            self.store_error_span();
            let tail = self.error_tail(kind);
            self.goto(tail);
            return;
        }
        self.error_record(kind, address);
        self.goto(self.epilogue);
    }

    /// The label of the shared tail that sends an unframed error record
    /// of `kind` whose span is already stored, and ends the run.
    fn error_tail(&mut self, kind: u32) -> Label {
        if let Some(&(_, label)) = self.error_tails.iter().find(|(k, _)| *k == kind) {
            return label;
        }
        let label = self.new_label();
        self.error_tails.push((kind, label));
        label
    }

    /// The handler's error tails, after its exit (each ends by going to
    /// the epilogue). An error site is then four stores and a jump, not
    /// the ~25 instructions of a record sent in place: `a[k]++` has one
    /// (the map may be full), and the verifier walks one shared tail once,
    /// where it walked every site's copy.
    pub(super) fn emit_error_tails(&mut self) {
        let span = self.module.probes[self.probe as usize].span;
        for (kind, label) in std::mem::take(&mut self.error_tails) {
            self.bind(label);
            self.note_span(span);
            let len = HEADER_BYTES + records::ERROR_SPAN_BYTES;
            self.send_small_record(records::KIND_ERROR, kind, len);
            self.goto(self.epilogue);
        }
    }

    /// The current span's words of an unframed error record, in place.
    fn store_error_span(&mut self) {
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
    }

    /// `error(msg)`, as [`fail`](Self::fail). The jump is conditional (and
    /// always taken) so that code after it stays reachable for the
    /// verifier's CFG check.
    pub(super) fn fail_explicit(&mut self, text: Reg) {
        let target = match self.catch_target() {
            Some((handler, message)) => {
                if let Some(message) = message {
                    self.copy_str(message, text);
                }
                handler
            }
            None => {
                self.explicit_error(text);
                self.epilogue
            }
        };
        self.push(Insn::mov_imm(R0, 1));
        self.jump(Insn::jump_imm(insn::JNE, R0, 0, 0), target);
    }

    /// An error record for the current span, with an optional address.
    /// Every caller then ends the run (goes to the epilogue).
    pub(super) fn error_record(&mut self, kind: u32, address: Option<Reg>) {
        let span = self.span;
        let words = [span.file.0, span.start, span.end, 0];
        if self.framed() {
            // Built in scratch and held like a printf: the epilogue sends
            // it as the unit's last record.
            self.flush_held();
            let len = HEADER_BYTES + records::ERROR_SPAN_BYTES + 8 * address.is_some() as u32;
            let header = [records::KIND_ERROR, kind, self.probe, len];
            self.scratch_addr(R1, self.scratch.record);
            for (i, word) in header.iter().chain(&words).enumerate() {
                self.push(Insn::store_imm(W, R1, 4 * i as i16, *word as i32));
            }
            if let Some(address) = address {
                let a = self.operand(address, R2);
                self.push(Insn::store(DW, R1, 32, a));
            }
            self.send_record(RecordOffset::Fixed(len));
            return;
        }
        self.store_error_span();
        let mut len = HEADER_BYTES + records::ERROR_SPAN_BYTES;
        if let Some(address) = address {
            let a = self.operand(address, R1);
            self.push(Insn::store(DW, FP, FRAME_SMALL + 32, a));
            len += 8;
        }
        self.send_small_record(records::KIND_ERROR, kind, len);
    }

    /// `error(msg)`: an error record carrying the message, built in scratch.
    pub(super) fn explicit_error(&mut self, message: Reg) {
        self.message_record(records::ERROR_EXPLICIT, message);
    }

    /// `abort()`: the run flag cleared as by `exit()`, then the record
    /// that ends the session without end probes.
    pub(super) fn abort_record(&mut self) {
        self.ld_map_value(R1, self.maps.control, (maps::CONTROL_RUN * 8) as i32);
        self.push(Insn::store_imm(DW, R1, 0, 0));
        self.send_small_record(records::KIND_ABORT, 0, HEADER_BYTES);
    }

    /// An error-kind record (`error`, `warn`) carrying a message.
    pub(super) fn message_record(&mut self, kind: u32, message: Reg) {
        self.flush_held();
        let span = self.span;
        let base = self.scratch.record;
        self.scratch_addr(R1, base);
        let words = [
            records::KIND_ERROR,
            kind,
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

    /// `system(cmd)`: the command goes up for the host to run.
    pub(super) fn system_record(&mut self, command: Reg) {
        self.flush_held();
        self.scratch_addr(R1, self.scratch.record);
        let header = [records::KIND_SYSTEM, 0, self.probe, 0];
        for (i, word) in header.iter().enumerate() {
            self.push(Insn::store_imm(W, R1, 4 * i as i16, *word as i32));
        }
        let offset = self.text_arg(RecordOffset::Fixed(HEADER_BYTES), command);
        self.send_record(offset);
    }

    /// `speculate(id, text)`: the text goes up to the host's buffer for `id`.
    pub(super) fn speculate_record(&mut self, id: Reg, text: Reg) {
        self.flush_held();
        self.scratch_addr(R1, self.scratch.record);
        let header = [
            records::KIND_SPECULATION,
            records::SPECULATE_ADD,
            self.probe,
            0,
        ];
        for (i, word) in header.iter().enumerate() {
            self.push(Insn::store_imm(W, R1, 4 * i as i16, *word as i32));
        }
        let id = self.operand(id, R2);
        self.push(Insn::store(DW, R1, HEADER_BYTES as i16, id));
        let offset = self.text_arg(RecordOffset::Fixed(HEADER_BYTES + 8), text);
        self.send_record(offset);
    }

    /// `commit(id)` or `discard(id)`: the host prints or drops the buffer.
    pub(super) fn speculation_end_record(&mut self, op: u32, id: Reg) {
        let id = self.operand(id, R1);
        self.push(Insn::store(DW, FP, FRAME_SMALL + HEADER_BYTES as i16, id));
        self.send_small_record(records::KIND_SPECULATION, op, HEADER_BYTES + 8);
    }

    /// r1 = where the next record argument goes (r5 is clobbered); returns
    /// the constant displacement to add.
    pub(super) fn record_cursor(&mut self, offset: RecordOffset) -> i16 {
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

    pub(super) fn advance(&mut self, offset: RecordOffset, by: u32) -> RecordOffset {
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
    pub(super) fn text_arg(&mut self, offset: RecordOffset, text: Reg) -> RecordOffset {
        let at = self.record_cursor(offset);
        self.push(Insn::store_imm(W, R1, at, records::TAG_TEXT as i32));
        self.push(Insn::alu64_imm(insn::ADD, R1, at as i32 + 8));
        self.push(Insn::mov_imm(R2, self.n as i32));
        self.str_addr(text, R3);
        self.call(helper::PROBE_READ_KERNEL_STR);
        self.clamp_str_result();
        let at = self.record_cursor(offset);
        self.push(Insn::store(W, R1, at + 4, R0));
        let pmax = self.padded_max();
        self.advance_past_bytes(offset, pmax)
    }

    /// Moves the running offset past an argument of `u32 tag, u32 len`
    /// and r0 bytes padded to 8, at most `pmax` of them.
    fn advance_past_bytes(&mut self, offset: RecordOffset, pmax: u32) -> RecordOffset {
        // Padded length, bounded so the verifier sees the record fit.
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

    /// Writes the length into the header of the scratch record and holds
    /// it there: it goes out when the next record is built or at the
    /// epilogue, which then knows whether it was the run's last.
    pub(super) fn send_record(&mut self, offset: RecordOffset) {
        self.scratch_addr(R2, self.scratch.record);
        match offset {
            RecordOffset::Fixed(len) => self.push(Insn::mov_imm(R3, len as i32)),
            RecordOffset::Running => self.push(Insn::load(DW, R3, FP, FRAME_RECORD_OFFSET)),
        }
        self.push(Insn::store(W, R2, 12, R3));
        // state = (state & HELD_SENT) | len
        self.scratch_addr(R1, self.scratch.out);
        self.push(Insn::load(DW, R2, R1, 0));
        self.push(Insn::alu64_imm(insn::AND, R2, HELD_SENT));
        self.push(Insn::alu64_reg(insn::OR, R2, R3));
        self.push(Insn::store(DW, R1, 0, R2));
    }

    /// Whether this handler builds records in scratch, and so frames its
    /// output into one unit per run (records.rs). Handlers without scratch
    /// records send small ones only, each standalone.
    fn framed(&self) -> bool {
        self.scratch.record_bytes > 0
    }

    /// r0 = `stream << STREAM_SHIFT | seq << SEQ_SHIFT | flags` for this
    /// run (clobbers r1-r5).
    fn framing_bits(&mut self, flags: u32) {
        self.call(helper::GET_SMP_PROCESSOR_ID);
        self.push(Insn::alu64_imm(insn::MUL, R0, maps::NESTING_LEVELS as i32));
        self.scratch_addr(R2, self.scratch.out);
        self.push(Insn::load(W, R1, R2, 8));
        self.push(Insn::alu64_reg(insn::ADD, R0, R1));
        // Stream 0xffff is reserved for standalone records.
        self.push(Insn::alu64_imm(insn::AND, R0, 0x7fff));
        self.push(Insn::alu64_imm(insn::LSH, R0, records::STREAM_SHIFT as i32));
        self.push(Insn::load(W, R1, R2, 12));
        self.push(Insn::alu64_imm(insn::AND, R1, records::SEQ_MASK as i32));
        self.push(Insn::alu64_imm(insn::LSH, R1, records::SEQ_SHIFT as i32));
        self.push(Insn::alu64_reg(insn::OR, R0, R1));
        if flags != 0 {
            self.push(Insn::alu64_imm(insn::OR, R0, flags as i32));
        }
    }

    /// Sends the held scratch record with the framing bits in r0 ORed into
    /// its kind word; the state becomes `after`.
    fn send_held(&mut self, after: i32) {
        let skip = self.new_label();
        self.scratch_addr(R1, self.scratch.record);
        self.push(Insn::load(W, R2, R1, 0));
        self.push(Insn::alu64_reg(insn::OR, R2, R0));
        self.push(Insn::store(W, R1, 0, R2));
        self.scratch_addr(R1, self.scratch.out);
        self.push(Insn::load(DW, R3, R1, 0));
        self.push(Insn::store_imm(DW, R1, 0, after));
        // Bounds the length for the verifier (a map value is unknown to it).
        self.push(Insn::alu64_imm(insn::AND, R3, HELD_LEN_MASK));
        self.jump(Insn::jump_imm(insn::JEQ, R3, 0, 0), skip);
        self.jump(
            Insn::jump_imm(insn::JGT, R3, self.scratch.record_bytes as i32, 0),
            skip,
        );
        self.scratch_addr(R2, self.scratch.record);
        self.ld_map(R1, self.maps.events);
        // The kernel's adaptive wakeup (flags 0): it wakes the host only
        // for a record written into an empty ring, and the host, once
        // woken, leaves the ring a millisecond to fill before it waits on
        // it again (session.rs, RING_BATCH_MS), so a busy handler pays one
        // irq_work per batch, and a quiet one's record is read at once.
        self.push(Insn::mov_imm(R4, 0));
        self.call(helper::RINGBUF_OUTPUT);
        self.count_lost_framed();
        self.bind(skip);
    }

    /// Before a record is built in scratch (or a small one sent): the held
    /// record goes out, now known not to be the run's last. In the handler,
    /// one call of a shared subprogram, so each output site costs three
    /// instructions; inline in `foreach` callbacks, whose frames already
    /// sit deeper on the 512-byte stack.
    pub(super) fn flush_held(&mut self) {
        if !self.framed() {
            return;
        }
        if self.in_callback {
            self.flush_held_body();
            return;
        }
        let sub = match self.flush_sub {
            Some(label) => label,
            None => {
                let label = self.new_label();
                self.flush_sub = Some(label);
                label
            }
        };
        self.push(Insn::load(DW, R1, FP, FRAME_SCRATCH));
        self.push(Insn::load(DW, R2, FP, FRAME_COUNTERS));
        self.func_fixups.push((self.insns.len(), sub));
        self.push(Insn::call_local(0));
    }

    /// `void flush(scratch, counters)`: sends the held record, if any,
    /// with `FLAG_MORE`. Its frame keeps the two pointers where the
    /// handler's does, so the code is the handler's own.
    pub(super) fn emit_flush_sub(&mut self) {
        let Some(label) = self.flush_sub else {
            return;
        };
        self.bind(label);
        self.callback_starts.push((self.insns.len(), usize::MAX));
        self.force_span(self.function.span);
        self.push(Insn::store(DW, FP, FRAME_SCRATCH, R1));
        self.push(Insn::store(DW, FP, FRAME_COUNTERS, R2));
        self.flush_held_body();
        self.push(Insn::mov_imm(R0, 0));
        self.push(Insn::exit());
    }

    fn flush_held_body(&mut self) {
        let none = self.new_label();
        self.scratch_addr(R1, self.scratch.out);
        self.push(Insn::load(DW, R1, R1, 0));
        self.push(Insn::alu64_imm(insn::AND, R1, HELD_LEN_MASK));
        self.jump(Insn::jump_imm(insn::JEQ, R1, 0, 0), none);
        self.framing_bits(records::FLAG_MORE);
        self.send_held(HELD_SENT);
        self.bind(none);
    }

    /// The epilogue: ends this run's output unit. A run that held one
    /// record and sent nothing before sends it standalone (no CPU lookup:
    /// the common one-printf handler pays nothing for the framing); one
    /// that sent `FLAG_MORE` records sends the held one as their last, or
    /// a `KIND_END` marker when nothing is held.
    pub(super) fn flush_output_unit(&mut self) {
        if !self.framed() {
            return;
        }
        let done = self.new_label();
        let grouped = self.new_label();
        let marker = self.new_label();
        self.scratch_addr(R1, self.scratch.out);
        self.push(Insn::load(DW, R1, R1, 0));
        self.jump(Insn::jump_imm(insn::JEQ, R1, 0, 0), done);
        self.jump(Insn::jump_imm(insn::JSET, R1, HELD_SENT, 0), grouped);
        self.push(Insn::mov_imm(R0, records::STANDALONE_STREAM as i32));
        self.push(Insn::alu64_imm(insn::LSH, R0, records::STREAM_SHIFT as i32));
        self.send_held(0);
        self.goto(done);
        self.bind(grouped);
        self.push(Insn::alu64_imm(insn::AND, R1, HELD_LEN_MASK));
        self.jump(Insn::jump_imm(insn::JEQ, R1, 0, 0), marker);
        self.framing_bits(0);
        self.send_held(0);
        self.goto(done);
        self.bind(marker);
        let header = [records::KIND_END, 0, self.probe, HEADER_BYTES];
        for (i, word) in header.iter().enumerate() {
            self.push(Insn::store_imm(
                W,
                FP,
                FRAME_SMALL + 4 * i as i16,
                *word as i32,
            ));
        }
        self.framing_bits(0);
        self.push(Insn::load(W, R1, FP, FRAME_SMALL));
        self.push(Insn::alu64_reg(insn::OR, R1, R0));
        self.push(Insn::store(W, FP, FRAME_SMALL, R1));
        self.ld_map(R1, self.maps.events);
        self.frame_ptr(R2, FRAME_SMALL);
        self.push(Insn::mov_imm(R3, HEADER_BYTES as i32));
        self.push(Insn::mov_imm(R4, 0));
        self.call(helper::RINGBUF_OUTPUT);
        self.count_lost_framed();
        self.bind(done);
    }

    pub(super) fn printf(&mut self, format: u32, args: &[PrintArg]) {
        self.flush_held();
        self.scratch_addr(R1, self.scratch.record);
        let header = [records::KIND_PRINTF, format, self.probe];
        for (i, word) in header.iter().enumerate() {
            self.push(Insn::store_imm(W, R1, 4 * i as i16, *word as i32));
        }
        let memory = self.memory_args(format);
        let mut offset = RecordOffset::Fixed(HEADER_BYTES);
        for (i, arg) in args.iter().enumerate() {
            let memory = memory.get(i).copied().flatten();
            offset = match (*arg, memory) {
                (PrintArg::Value(reg), Some(memory)) => {
                    match self.memory_arg(offset, reg, memory, args) {
                        Some(offset) => offset,
                        None => return,
                    }
                }
                (PrintArg::Value(reg), None) if self.function.reg_type(reg) == ValType::Str => {
                    self.text_arg(offset, reg)
                }
                (PrintArg::Value(reg), None) => {
                    let at = self.record_cursor(offset);
                    let v = self.operand(reg, R2);
                    self.push(Insn::store(DW, R1, at, v));
                    self.advance(offset, 8)
                }
                (
                    PrintArg::Symbol {
                        how: crate::ir::SymbolText::Stack { user, full },
                        ..
                    },
                    _,
                ) => self.stack_arg(offset, user, full),
                (PrintArg::Symbol { addr, how }, _) => {
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

    /// For each argument of printf format `format`, what its `%m`/`%M`
    /// reads (`None` when it is not an address for one).
    pub(super) fn memory_args(&self, format: u32) -> Vec<Option<printf::MemoryArg>> {
        let text = self.module.formats.get(format as usize).map(|f| &f.text);
        text.and_then(|t| printf::parse(t).ok())
            .map(|pieces| printf::memory_args(&pieces))
            .unwrap_or_default()
    }

    /// The record bytes of a `%m`/`%M` argument, at most.
    pub(super) fn memory_arg_bytes(&self, memory: printf::MemoryArg) -> u32 {
        let len = match memory.len {
            printf::MemoryLen::Fixed(p) => p.min(self.n),
            printf::MemoryLen::Star(_) => self.n,
        };
        8 + len.div_ceil(8) * 8
    }

    /// A `%m`/`%M` argument: `u32 TAG_MEMORY, u32 len`, then the `len`
    /// bytes at `address` padded to 8, copied now because the host cannot
    /// read kernel memory later. A fault ends the handler with a read error,
    /// as a fault in the kernel `sprintf` does. `None` after an
    /// `unsupported` diagnostic.
    fn memory_arg(
        &mut self,
        offset: RecordOffset,
        address: Reg,
        memory: printf::MemoryArg,
        args: &[PrintArg],
    ) -> Option<RecordOffset> {
        let n = self.n;
        // r2 = the bytes to copy: the precision clamped to [0, n].
        match memory.len {
            printf::MemoryLen::Fixed(p) => self.push(Insn::mov_imm(R2, p.min(n) as i32)),
            printf::MemoryLen::Star(at) => {
                let Some(&PrintArg::Value(count)) = args.get(at) else {
                    self.unsupported("this %m/%M precision argument in kernel probes");
                    return None;
                };
                self.load_to(count, R2);
                // Negative: no precision, so stap's default of one byte.
                self.push(Insn::jump_imm(insn::JSGE, R2, 0, 1));
                self.push(Insn::mov_imm(R2, 1));
                self.push(Insn::jump_imm(insn::JLE, R2, n as i32, 1));
                self.push(Insn::mov_imm(R2, n as i32));
            }
        }
        let at = self.record_cursor(offset);
        self.push(Insn::store_imm(W, R1, at, records::TAG_MEMORY as i32));
        self.push(Insn::store(W, R1, at + 4, R2));
        self.push(Insn::alu64_imm(insn::ADD, R1, at as i32 + 8));
        self.load_to(address, R3);
        let (read, fault) = if memory.user {
            (helper::PROBE_READ_USER, records::ERROR_USER_READ)
        } else {
            (helper::PROBE_READ_KERNEL, records::ERROR_KERNEL_READ)
        };
        self.call(read);
        let ok = self.new_label();
        self.jump(Insn::jump_imm(insn::JEQ, R0, 0, 0), ok);
        self.fail(fault, Some(address));
        self.bind(ok);
        let most = self.memory_arg_bytes(memory) - 8;
        Some(match memory.len {
            printf::MemoryLen::Fixed(_) => self.advance(offset, 8 + most),
            printf::MemoryLen::Star(_) => {
                let at = self.record_cursor(offset);
                self.push(Insn::load(W, R0, R1, at + 4));
                self.advance_past_bytes(offset, most)
            }
        })
    }

    /// `print(@hist_*(s[k]))`: a record naming the statistic and carrying
    /// the key's bytes; the host prints that element's histogram with its
    /// own printer, in order with the other records.
    pub(super) fn print_hist(&mut self, global: GlobalId, keys: &[Reg], kind: crate::ir::HistKind) {
        let linear = match kind {
            crate::ir::HistKind::Log => records::HIST_LOG,
            crate::ir::HistKind::Linear(_) => records::HIST_LINEAR,
        };
        let key_bytes = if keys.is_empty() {
            0
        } else {
            self.key_bytes(global)
        };
        let len = HEADER_BYTES + 8 + key_bytes.div_ceil(8) * 8;
        self.flush_held();
        if !keys.is_empty() {
            self.write_key(global, keys);
        }
        self.scratch_addr(R1, self.scratch.record);
        let words = [records::KIND_HIST, global.0, self.probe, len, linear, 0];
        for (i, word) in words.iter().enumerate() {
            self.push(Insn::store_imm(W, R1, 4 * i as i16, *word as i32));
        }
        if key_bytes > 0 {
            // Padding bytes are unspecified: the key is copied as built.
            self.push(Insn::alu64_imm(insn::ADD, R1, (HEADER_BYTES + 8) as i32));
            if self.key_on_stack(global, false) {
                self.frame_ptr(R3, FRAME_SMALL);
            } else {
                self.scratch_addr(R3, self.scratch.key);
            }
            self.call_memcpy(key_bytes);
        }
        self.send_record(RecordOffset::Fixed(len));
    }

    pub(super) fn tick(&mut self) {
        let ok = self.new_label();
        self.push(Insn::load(DW, R0, FP, FRAME_TICKS));
        self.push(Insn::alu64_imm(insn::ADD, R0, 1));
        self.push(Insn::store(DW, FP, FRAME_TICKS, R0));
        let limit = i32::try_from(self.max_action).unwrap_or(i32::MAX);
        self.jump(Insn::jump_imm(insn::JLE, R0, limit, 0), ok);
        self.fail(records::ERROR_MAXACTION, None);
        self.bind(ok);
    }
}
