//! Reading the verifier's log: the failing instruction and the
//! verifier's reason, without the register-state dumps around them.

/// What a verifier log says went wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifierFailure {
    /// The instruction being verified when it failed.
    pub insn: Option<usize>,
    /// The verifier's message, one line.
    pub reason: String,
}

/// Finds the failing instruction (the last `N: (op) ...` line) and the
/// reason (the first message after it that is not a register-state dump
/// or a statistics line). `None` when the log holds no message.
pub fn parse_verifier_log(log: &str) -> Option<VerifierFailure> {
    let lines: Vec<&str> = log.lines().collect();
    let last_insn = lines
        .iter()
        .rposition(|line| instruction_index(line).is_some());
    let tail = match last_insn {
        Some(at) => &lines[at + 1..],
        None => &lines[..],
    };
    let mut messages = tail
        .iter()
        .filter(|line| is_message(line))
        .map(|l| l.trim());
    let reason = messages.next().or_else(|| {
        // Nothing after the last instruction: the message may precede it
        // (rare) or there is none; take the last message in the log.
        lines
            .iter()
            .rev()
            .find(|line| is_message(line) && instruction_index(line).is_none())
            .map(|l| l.trim())
    })?;
    let insn = last_insn
        .and_then(|at| instruction_index(lines[at]))
        .or_else(|| insn_mentioned(reason));
    Some(VerifierFailure {
        insn,
        reason: clean_reason(reason),
    })
}

/// `12: (85) call bpf_map_lookup_elem#1` → 12.
fn instruction_index(line: &str) -> Option<usize> {
    let (index, rest) = line.split_once(": (")?;
    let opcode = rest.get(..3)?;
    let is_opcode =
        opcode.as_bytes()[..2].iter().all(u8::is_ascii_hexdigit) && opcode.ends_with(')');
    (is_opcode && !index.is_empty() && index.bytes().all(|b| b.is_ascii_digit()))
        .then(|| index.parse().ok())
        .flatten()
}

/// Lines of the log that are not state dumps, source comments or
/// statistics.
fn is_message(line: &&str) -> bool {
    let text = line.trim();
    if text.is_empty() || line.starts_with(char::is_whitespace) {
        return false;
    }
    const NOISE: [&str; 9] = [
        "processed ",
        "verification time",
        "stack depth",
        "; ",
        "from ",
        "func#",
        "mark_precise",
        "last_idx",
        "Live regs",
    ];
    if NOISE.iter().any(|prefix| text.starts_with(prefix)) {
        return false;
    }
    // `5: R0=... R10=fp0`: the state at instruction 5.
    if let Some((index, rest)) = text.split_once(": ")
        && index.bytes().all(|b| b.is_ascii_digit())
        && (rest.starts_with('R') && rest.contains('=') || rest.starts_with("frame"))
    {
        return false;
    }
    true
}

/// "unreachable insn 7", "jump out of range from insn 3 to 9" → 7, 3.
fn insn_mentioned(reason: &str) -> Option<usize> {
    let after = reason.split("insn ").nth(1)?;
    let digits: String = after.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

fn clean_reason(reason: &str) -> String {
    reason.trim().trim_end_matches(['.', ':']).to_string()
}

/// A real log of a map-value overrun, for the tests here and in `load`.
#[cfg(test)]
pub(super) const MAP_VALUE_OOB: &str = "\
func#0 @0
0: R1=ctx() R10=fp0
0: (b7) r1 = 0                        ; R1_w=0
1: (63) *(u32 *)(r10 -4) = r1         ; R1_w=0 R10=fp0 fp-8=0000????
2: (bf) r2 = r10                      ; R2_w=fp0 R10=fp0
3: (07) r2 += -4                      ; R2_w=fp-4
4: (18) r1 = 0xffff8881047fd000       ; R1_w=map_ptr(ks=4,vs=8)
6: (85) call bpf_map_lookup_elem#1    ; R0_w=map_value_or_null(id=1,ks=4,vs=8)
7: (15) if r0 == 0x0 goto pc+1        ; R0_w=map_value(ks=4,vs=8)
8: (79) r0 = *(u64 *)(r0 +8)
invalid access to map value, value_size=8 off=8 size=8
R0 min value is outside of the allowed memory range
processed 9 insns (limit 1000000) max_states_per_insn 0 total_states 0 peak_states 0 mark_read 0
";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn map_value_overrun_names_the_instruction_and_reason() {
        let failure = parse_verifier_log(MAP_VALUE_OOB).unwrap();
        assert_eq!(failure.insn, Some(8));
        assert_eq!(
            failure.reason,
            "invalid access to map value, value_size=8 off=8 size=8"
        );
    }

    #[test]
    fn structural_errors_without_instruction_lines() {
        let log = "unreachable insn 3\nverification time 5 usec\n";
        let failure = parse_verifier_log(log).unwrap();
        assert_eq!(failure.insn, Some(3));
        assert_eq!(failure.reason, "unreachable insn 3");

        let log = "last insn is not an exit or jmp\nprocessed 0 insns (limit 1000000)\n";
        let failure = parse_verifier_log(log).unwrap();
        assert_eq!(failure.insn, None);
        assert_eq!(failure.reason, "last insn is not an exit or jmp");
    }

    #[test]
    fn register_state_after_the_failing_insn_is_skipped() {
        let log = "\
0: R1=ctx() R10=fp0
0: (79) r2 = *(u64 *)(r1 +0)
1: R1=ctx() R2_w=scalar() R10=fp0
1: (71) r0 = *(u8 *)(r2 +0)
R2 invalid mem access 'scalar'
processed 2 insns (limit 1000000) max_states_per_insn 0 total_states 0 peak_states 0 mark_read 0
";
        let failure = parse_verifier_log(log).unwrap();
        assert_eq!(failure.insn, Some(1));
        assert_eq!(failure.reason, "R2 invalid mem access 'scalar'");
    }

    #[test]
    fn empty_logs_have_no_failure() {
        assert_eq!(parse_verifier_log(""), None);
        assert_eq!(parse_verifier_log("processed 2 insns\n"), None);
    }
}
