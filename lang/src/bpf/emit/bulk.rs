//! `Op::BulkArgs` (`$$parms`, `$$vars`, `$$return` of a function probe):
//! the `name=value` pieces listed by the program's row of the bulk table
//! (`bpf::bulk`), which sits at a fixed place or, in a program shared by
//! many functions, where the attach cookie says. Each piece is one
//! `bpf_snprintf` at the running position of the sprintf work space
//! (`format.rs`), with the text `%#x` gives: `0` for zero, else `0x...`.
//!
//! Verifier shape: the row offset is checked against the largest row the
//! program has before it is added to the map pointer, and each name offset
//! likewise, so every access is in bounds whatever the cookie holds; the
//! read of a piece's value dispatches on its source over the sources some
//! function of the program has, and all of them join before the print.

use super::format::{POS_AT, VALUE};
use super::*;
use crate::bpf::bulk::{END, ENTRY_BYTES, source_code};
use crate::ir::BulkSource;

/// The offset of the op's part of the row, in the formats map (a stack
/// slot: the helper calls clobber r1-r5).
const ENTRY: i16 = VALUE;

impl Emitter<'_> {
    pub(super) fn bulk_args(&mut self, dst: Reg) {
        let maps = self.maps;
        let formats = maps.formats.as_ref();
        let place = formats.and_then(|f| f.bulk.get(&(self.probe as usize)));
        let (Some(formats), Some(place)) = (formats, place) else {
            self.unsupported("internal: $$parms without its table");
            return;
        };
        let (Some(op), Some(pieces)) = (place.ops.get(&dst.0), formats.bulk_formats) else {
            self.unsupported("internal: $$parms without its table");
            return;
        };
        let map = formats.map;
        let temp = self.scratch.temp;
        self.scratch_addr(R1, temp);
        self.call_memset(self.n);
        self.scratch_addr(R1, self.scratch.sprintf + POS_AT);
        self.push(Insn::store_imm(DW, R1, 0, 0));
        let done = self.new_label();
        match place.row {
            Some(row) => self.push(Insn::mov_imm(R0, row as i32)),
            None => {
                self.push(Insn::load(DW, R1, FP, FRAME_CTX));
                self.call(helper::GET_ATTACH_COOKIE);
                self.jump(
                    Insn::jump_imm(insn::JGT, R0, place.last_row as i32, 0),
                    done,
                );
            }
        }
        if op.at > 0 {
            self.push(Insn::alu64_imm(insn::ADD, R0, op.at as i32));
        }
        self.push(Insn::store(DW, FP, ENTRY, R0));
        let last_entry = (place.last_row + op.at) as i32;
        for slot in 0..op.slots {
            let at = (slot * ENTRY_BYTES) as i16;
            self.push(Insn::load(DW, R1, FP, ENTRY));
            self.jump(Insn::jump_imm(insn::JGT, R1, last_entry, 0), done);
            self.ld_map_value(R2, map, 0);
            self.push(Insn::alu64_reg(insn::ADD, R2, R1));
            self.push(Insn::load(W, R3, R2, at + 4));
            self.jump(Insn::jump_imm(insn::JEQ, R3, END as i32, 0), done);
            // The name's text, by pointer: `%s` copies it.
            self.push(Insn::load(W, R4, R2, at));
            self.jump(
                Insn::jump_imm(insn::JGT, R4, place.last_name as i32, 0),
                done,
            );
            self.ld_map_value(R5, map, 0);
            self.push(Insn::alu64_reg(insn::ADD, R5, R4));
            self.scratch_addr(R1, self.scratch.sprintf);
            self.push(Insn::store(DW, R1, 0, R5));
            let have = self.new_label();
            for source in &op.sources {
                let next = self.new_label();
                self.jump(
                    Insn::jump_imm(insn::JNE, R3, source_code(*source) as i32, 0),
                    next,
                );
                let read = match source {
                    BulkSource::Arg(index) => self.arg_to_r0(*index),
                    BulkSource::Return => self.return_to_r0(),
                };
                if !read {
                    return;
                }
                self.goto(have);
                self.bind(next);
            }
            self.push(Insn::mov_imm(R0, 0));
            self.bind(have);
            // (name, "0x", value): stap's `%#x`, `0x0` for zero too.
            self.scratch_addr(R1, self.scratch.sprintf);
            self.push(Insn::store(DW, R1, 16, R0));
            self.ld_map_value(R2, map, pieces.prefix as i32);
            self.push(Insn::store(DW, R1, 8, R2));
            self.snprintf_at_pos(map, pieces.hex, 3);
        }
        self.bind(done);
        self.str_addr(dst, R1);
        self.scratch_addr(R3, temp);
        self.call_memcpy(self.n);
    }
}
