//! `ctime(secs)` and `tz_ctime(secs)` in kernel probes, as values: the
//! civil date is computed here (Howard Hinnant's days-to-date algorithm,
//! in unsigned arithmetic), `bpf_snprintf` prints the numbers into the
//! string after `XXX XXX` placeholders, and the day and month names are
//! copied over those from tables in the formats map. `tz_ctime` adds the
//! host's offset at compile time and ends with its zone name, as stap's
//! `tz_gmtoff()`/`tz_name()` are fixed when the script is compiled.

use super::*;

/// Seconds added so every time from 1601 on is positive: four 400-year
/// eras, which are whole weeks too (146097 days = 20871 weeks).
const ERA_DAYS: i64 = 146_097;
const SHIFT_DAYS: i64 = 4 * ERA_DAYS;
const SHIFT_SECS: i64 = SHIFT_DAYS * 86_400;
/// Days from 0000-03-01 to 1970-01-01 (the algorithm counts from March).
const EPOCH_FROM_MARCH: i64 = 719_468;

impl Emitter<'_> {
    /// `ctime(secs)` (`local`: `tz_ctime`) into string `dst`: stap's 24
    /// bytes `Thu Jan  1 00:00:00 1970` (then ` ZONE`), or `<invalid
    /// time>` before 1601, as the host says for times it cannot convert.
    pub(super) fn ctime(&mut self, dst: Reg, secs: Reg, local: bool) {
        let Some(place) = self
            .maps
            .formats
            .as_ref()
            .and_then(|f| Some((f.map, f.ctime?)))
        else {
            return;
        };
        let (map, place) = place;
        let args = self.scratch.sprintf;
        let invalid = self.new_label();
        let done = self.new_label();
        // r0 = seconds since 1970 shifted by four eras.
        self.load_to(secs, R0);
        if local {
            self.const_to(R1, place.offset_east);
            self.push(Insn::alu64_reg(insn::ADD, R0, R1));
        }
        self.const_to(R1, SHIFT_SECS);
        self.push(Insn::alu64_reg(insn::ADD, R0, R1));
        self.jump(Insn::jump_imm(insn::JSLT, R0, 0, 0), invalid);
        // r1 = days, r2 = second of the day: hour, minute, second go to
        // the snprintf arguments 1-3.
        self.push(Insn::mov_reg(R1, R0));
        self.push(Insn::alu64_imm(insn::DIV, R1, 86_400));
        self.push(Insn::mov_reg(R2, R0));
        self.push(Insn::alu64_imm(insn::MOD, R2, 86_400));
        self.scratch_addr(R5, args);
        for (slot, divide, modulo) in [(1i16, 3600, 0), (2, 60, 3600), (3, 1, 60)] {
            self.push(Insn::mov_reg(R3, R2));
            if modulo > 0 {
                self.push(Insn::alu64_imm(insn::MOD, R3, modulo));
            }
            if divide > 1 {
                self.push(Insn::alu64_imm(insn::DIV, R3, divide));
            }
            self.push(Insn::store(DW, R5, 8 * slot, R3));
        }
        // The weekday: day 0 of the shifted count is a Thursday too.
        self.push(Insn::mov_reg(R3, R1));
        self.push(Insn::alu64_imm(insn::ADD, R3, 4));
        self.push(Insn::alu64_imm(insn::MOD, R3, 7));
        self.push(Insn::store(DW, FP, FRAME_SMALL, R3));
        // z = days since 0000-03-01 (the shift taken back out); r3 = era,
        // r2 = day of the era.
        self.push(Insn::alu64_imm(
            insn::ADD,
            R1,
            (EPOCH_FROM_MARCH - SHIFT_DAYS) as i32,
        ));
        self.push(Insn::mov_reg(R3, R1));
        self.push(Insn::alu64_imm(insn::DIV, R3, ERA_DAYS as i32));
        self.push(Insn::mov_reg(R2, R3));
        self.push(Insn::alu64_imm(insn::MUL, R2, ERA_DAYS as i32));
        self.push(Insn::alu64_reg(insn::SUB, R1, R2));
        self.push(Insn::mov_reg(R2, R1));
        // r5 = year of the era: (doe - doe/1460 + doe/36524 - doe/146096) / 365.
        self.push(Insn::mov_reg(R5, R2));
        for (divisor, add) in [(1460, false), (36_524, true), (146_096, false)] {
            self.push(Insn::mov_reg(R0, R2));
            self.push(Insn::alu64_imm(insn::DIV, R0, divisor));
            let op = if add { insn::ADD } else { insn::SUB };
            self.push(Insn::alu64_reg(op, R5, R0));
        }
        self.push(Insn::alu64_imm(insn::DIV, R5, 365));
        // r3 = year (March-based) = yoe + 400 * era.
        self.push(Insn::alu64_imm(insn::MUL, R3, 400));
        self.push(Insn::alu64_reg(insn::ADD, R3, R5));
        // r2 = day of the year = doe - (365 yoe + yoe/4 - yoe/100).
        self.push(Insn::mov_reg(R0, R5));
        self.push(Insn::alu64_imm(insn::MUL, R0, 365));
        self.push(Insn::mov_reg(R4, R5));
        self.push(Insn::alu64_imm(insn::DIV, R4, 4));
        self.push(Insn::alu64_reg(insn::ADD, R0, R4));
        self.push(Insn::mov_reg(R4, R5));
        self.push(Insn::alu64_imm(insn::DIV, R4, 100));
        self.push(Insn::alu64_reg(insn::SUB, R0, R4));
        self.push(Insn::alu64_reg(insn::SUB, R2, R0));
        // r4 = month from March, (5 doy + 2) / 153; the day of the month
        // is doy - (153 mp + 2) / 5 + 1 (snprintf argument 0).
        self.push(Insn::mov_reg(R4, R2));
        self.push(Insn::alu64_imm(insn::MUL, R4, 5));
        self.push(Insn::alu64_imm(insn::ADD, R4, 2));
        self.push(Insn::alu64_imm(insn::DIV, R4, 153));
        self.push(Insn::mov_reg(R0, R4));
        self.push(Insn::alu64_imm(insn::MUL, R0, 153));
        self.push(Insn::alu64_imm(insn::ADD, R0, 2));
        self.push(Insn::alu64_imm(insn::DIV, R0, 5));
        self.push(Insn::alu64_reg(insn::SUB, R2, R0));
        self.push(Insn::alu64_imm(insn::ADD, R2, 1));
        self.scratch_addr(R5, args);
        self.push(Insn::store(DW, R5, 0, R2));
        // January and February belong to the next year: r4 = month 0..11.
        let march_on = self.new_label();
        let month_done = self.new_label();
        self.jump(Insn::jump_imm(insn::JLT, R4, 10, 0), march_on);
        self.push(Insn::alu64_imm(insn::SUB, R4, 10));
        self.push(Insn::alu64_imm(insn::ADD, R3, 1));
        self.goto(month_done);
        self.bind(march_on);
        self.push(Insn::alu64_imm(insn::ADD, R4, 2));
        self.bind(month_done);
        self.push(Insn::store(DW, FP, FRAME_SMALL + 8, R4));
        self.push(Insn::store(DW, R5, 32, R3));
        // The numbers, then the names over the placeholders.
        self.str_addr(dst, R1);
        self.call_memset(self.n);
        self.str_addr(dst, R1);
        self.push(Insn::mov_imm(R2, self.n as i32));
        let format = if local { place.local } else { place.utc };
        self.ld_map_value(R3, map, format as i32);
        self.scratch_addr(R4, args);
        self.push(Insn::mov_imm(R5, 40));
        self.call(helper::SNPRINTF);
        for (frame, table, at, count) in [
            (FRAME_SMALL, place.days, 0i16, 7),
            (FRAME_SMALL + 8, place.months, 4, 12),
        ] {
            // Always inside; the verifier needs the bound for the load.
            self.push(Insn::load(DW, R2, FP, frame));
            self.push(Insn::jump_imm(insn::JLT, R2, count, 1));
            self.push(Insn::mov_imm(R2, 0));
            self.push(Insn::alu64_imm(insn::LSH, R2, 2));
            self.ld_map_value(R3, map, table as i32);
            self.push(Insn::alu64_reg(insn::ADD, R3, R2));
            self.str_addr(dst, R1);
            for k in 0..3 {
                self.push(Insn::load(B, R0, R3, k));
                self.push(Insn::store(B, R1, at + k, R0));
            }
        }
        self.goto(done);
        self.bind(invalid);
        self.const_str(dst, "<invalid time>");
        self.bind(done);
    }
}
