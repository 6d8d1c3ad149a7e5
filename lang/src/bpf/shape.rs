//! Structural checks of an emitted [`Object`], the invariants the loader
//! and the verifier take for granted: jumps and calls land on instructions
//! of the program, `ld_imm64` pairs are whole, registers exist, every path
//! can end, and the side tables (map relocations, lines, function info)
//! point inside the program. The fuzz targets run every object through
//! this; a failure is an emitter bug, never a user error.

use super::insn::{self, Insn};
use super::{Object, Program};

/// The most instructions the kernel accepts in one program.
const MAX_INSNS: usize = 1_000_000;
/// `BPF_PSEUDO_CALL`: a call to a BPF function of the same program.
const PSEUDO_CALL: u8 = 1;

/// Checks every program of `object`; the first problem found, named with
/// its program and instruction.
pub fn check_shape(object: &Object) -> Result<(), String> {
    for program in &object.programs {
        check_program(object, program).map_err(|e| format!("{}: {e}", program.name))?;
    }
    Ok(())
}

fn check_program(object: &Object, program: &Program) -> Result<(), String> {
    let insns: Vec<Insn> = program.insns.iter().map(|w| Insn::decode(*w)).collect();
    let n = insns.len();
    if n == 0 || n > MAX_INSNS {
        return Err(format!("{n} instructions"));
    }
    if program.stack_bytes > 512 {
        return Err(format!("{} bytes of stack", program.stack_bytes));
    }
    // Which slots are the second half of an `ld_imm64`.
    let mut tail = vec![false; n];
    let mut i = 0;
    while i < n {
        if insns[i].is_wide() {
            if i + 1 >= n {
                return Err(format!("insn {i}: ld_imm64 without its second half"));
            }
            tail[i + 1] = true;
            i += 2;
        } else {
            i += 1;
        }
    }
    let target_ok = |from: usize, delta: i64| -> Result<(), String> {
        let to = from as i64 + 1 + delta;
        if to < 0 || to >= n as i64 || tail[to as usize] {
            return Err(format!("insn {from}: jumps to {to}, not an instruction"));
        }
        Ok(())
    };
    for (at, insn) in insns.iter().enumerate() {
        if tail[at] {
            continue;
        }
        let class = insn.class();
        let op = insn.code & 0xf0;
        if insn.dst > insn::FP || (insn.src > insn::FP && !insn.is_wide() && op != insn::CALL) {
            return Err(format!("insn {at}: register out of range"));
        }
        if insn.is_jump() {
            let delta = if class == insn::JMP32 && op == insn::JA {
                i64::from(insn.imm)
            } else {
                i64::from(insn.off)
            };
            target_ok(at, delta)?;
        } else if (class == insn::JMP && op == insn::CALL && insn.src == PSEUDO_CALL)
            || (insn.is_wide() && insn.src == insn::PSEUDO_FUNC)
        {
            // A call to, or the address of, a BPF function of this program.
            target_ok(at, i64::from(insn.imm))?;
        }
    }
    // Execution must not run off the end.
    let last = insns[n - 1];
    let falls_through = if tail[n - 1] {
        true
    } else {
        let op = last.code & 0xf0;
        !(last.class() == insn::JMP && (op == insn::EXIT || op == insn::JA))
    };
    if falls_through {
        return Err(format!("insn {}: the program can run past its end", n - 1));
    }
    for &(at, map) in &program.map_relocs {
        if at >= n || !insns[at].is_wide() {
            return Err(format!("map relocation at {at}: not an ld_imm64"));
        }
        if map >= object.maps.len() {
            return Err(format!("map relocation at {at}: no map {map}"));
        }
    }
    if program.lines.windows(2).any(|w| w[0].0 > w[1].0)
        || program.lines.last().is_some_and(|(at, _)| *at >= n)
    {
        return Err("line table out of order or past the end".into());
    }
    if program
        .func_info
        .iter()
        .any(|f| f.insn_off as usize >= n || tail[f.insn_off as usize])
    {
        return Err("function info past the end".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bpf::{Options, compile};
    use crate::testing::{FakeKernel, lower_script};

    #[test]
    fn emitted_programs_have_a_sound_shape() {
        let kernel = FakeKernel::new();
        let script = r#"
            global counts, last
            probe kernel.trace("kfree_skb") {
                counts[execname()] <<< 1
                last = sprintf("%s/%d", execname(), pid())
                foreach (k in counts) { if (@count(counts[k]) > 3) break }
                printf("%s %d\n", last, @count(counts[execname()]))
            }
        "#;
        let (module, _) = lower_script(script, &kernel);
        let options = Options::from_limits(&module.limits);
        let object = compile(&module, &options).expect("compiles");
        assert!(!object.programs.is_empty());
        check_shape(&object).expect("sound shape");
    }

    #[test]
    fn a_jump_out_of_the_program_is_caught() {
        let kernel = FakeKernel::new();
        let (module, _) = lower_script(
            r#"probe kernel.trace("kfree_skb") { println("x") }"#,
            &kernel,
        );
        let mut object = compile(&module, &Options::from_limits(&module.limits)).unwrap();
        let program = &mut object.programs[0];
        program.insns.insert(0, Insn::ja(30_000).encode());
        let err = check_shape(&object).unwrap_err();
        assert!(err.contains("jumps to"), "{err}");
    }
}
