//! User-space SDT markers (`<sys/sdt.h>`, `process("PATH").mark("NAME")`):
//! what one marker site is, and its argument specs decoded. Each argument
//! of a site is written in its ELF note as `SIZE@OPERAND`, the operand in
//! the assembler's AT&T syntax as the compiler chose it: `-4@%edi`,
//! `8@-16(%rbp)`, `8@8(%rsp,%rax,8)`, `-4@$5`, `8@counter(%rip)`. A negative
//! size means a signed value. The runtime reads the notes; this module
//! turns the text into where a uprobe finds each value (x86_64 `pt_regs`).

use std::fmt;

/// One marker site: a `.note.stapsdt` note, its addresses made file
/// offsets (what the uprobe PMU takes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SdtMarker {
    pub provider: String,
    pub name: String,
    /// File offset of the marker's `nop`.
    pub offset: u64,
    /// File offset of the marker's semaphore (a `u16` the probe increments
    /// so the program evaluates guarded arguments); 0 without one.
    pub semaphore: u64,
    /// The argument specs, decoded; in order, `$arg1` first.
    pub args: Vec<SdtArg>,
}

/// One argument: its size and signedness, and where its value is.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SdtArg {
    /// 1, 2, 4 or 8.
    pub bytes: u32,
    pub signed: bool,
    pub location: SdtLocation,
}

/// Where an argument's value is at the marker.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum SdtLocation {
    /// A register: its byte offset in `struct pt_regs`, and `high_byte`
    /// for `%ah`..`%dh` (bits 8-15).
    Register { pt_regs: u32, high_byte: bool },
    /// In user memory at `disp + base + index * scale`.
    Memory {
        disp: i64,
        /// `pt_regs` offsets.
        base: Option<u32>,
        index: Option<(u32, u8)>,
    },
    /// In user memory at the marker's run-time address plus `delta`: a
    /// `symbol(%rip)` operand (a global), whose link-time distance from
    /// the marker the runtime computed from the symbol table.
    IpRelative { delta: i64 },
    /// `$N`: a constant the compiler put in the note.
    Constant(i64),
    /// An operand stap-rs cannot decode, with the reason; an error only
    /// where a script reads that argument.
    Unsupported(String),
}

impl fmt::Display for SdtArg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sign = if self.signed { "-" } else { "" };
        write!(f, "{sign}{}@", self.bytes)?;
        match &self.location {
            SdtLocation::Register { pt_regs, high_byte } => write!(
                f,
                "reg+{pt_regs}{}",
                if *high_byte { " bits 8-15" } else { "" }
            ),
            SdtLocation::Memory { disp, base, index } => {
                write!(f, "mem[{disp}")?;
                if let Some(base) = base {
                    write!(f, " + reg+{base}")?;
                }
                if let Some((index, scale)) = index {
                    write!(f, " + reg+{index}*{scale}")?;
                }
                write!(f, "]")
            }
            SdtLocation::IpRelative { delta } => write!(f, "mem[ip{delta:+}]"),
            SdtLocation::Constant(n) => write!(f, "${n}"),
            SdtLocation::Unsupported(why) => write!(f, "? ({why})"),
        }
    }
}

/// `struct pt_regs` (x86_64) offset of the register an AT&T name
/// designates, whatever its width (`%rdi`, `%edi`, `%di`, `%dil`), and
/// whether it is a high byte register.
fn register(name: &str) -> Option<(u32, bool)> {
    // Numbered registers: r8, r8d, r8w, r8b (and r8l).
    if let Some(rest) = name.strip_prefix('r')
        && let Some(digits) = rest.strip_suffix(['d', 'w', 'b', 'l']).or(Some(rest))
        && let Ok(n) = digits.parse::<u32>()
    {
        let offset = match n {
            8 => 72,
            9 => 64,
            10 => 56,
            11 => 48,
            12 => 24,
            13 => 16,
            14 => 8,
            15 => 0,
            _ => return None,
        };
        return Some((offset, false));
    }
    let (offset, high) = match name {
        "rax" | "eax" | "ax" | "al" => (80, false),
        "rbx" | "ebx" | "bx" | "bl" => (40, false),
        "rcx" | "ecx" | "cx" | "cl" => (88, false),
        "rdx" | "edx" | "dx" | "dl" => (96, false),
        "rsi" | "esi" | "si" | "sil" => (104, false),
        "rdi" | "edi" | "di" | "dil" => (112, false),
        "rbp" | "ebp" | "bp" | "bpl" => (32, false),
        "rsp" | "esp" | "sp" | "spl" => (152, false),
        "rip" | "eip" => (128, false),
        "ah" => (80, true),
        "bh" => (40, true),
        "ch" => (88, true),
        "dh" => (96, true),
        _ => return None,
    };
    Some((offset, high))
}

/// stap's `register("NAME")`/`u_register("NAME")` (x86_64): the `pt_regs`
/// offset of the register and its width in bytes: `rax`/`ax`, `rip`/`ip`,
/// `r8`..`r15`, `orig_rax`, `flags`, `cs`, `ss` are 8 bytes; `eax`..`edi`,
/// `eip`, `esp`, `ebp` and `r8d`..`r15d` are their low 4.
pub fn named_register(name: &str) -> Option<(u32, u32)> {
    let full = match name {
        "ax" | "bx" | "cx" | "dx" | "si" | "di" | "bp" | "sp" | "ip" => format!("r{name}"),
        "orig_rax" | "orig_ax" => return Some((120, 8)),
        "flags" | "eflags" => return Some((144, 8)),
        "cs" => return Some((136, 8)),
        "ss" => return Some((160, 8)),
        _ => name.to_string(),
    };
    let four = full.starts_with('e') || (full.starts_with('r') && full.ends_with('d'));
    let eight = (full.starts_with('r') && !full.ends_with(['w', 'b', 'l', 'd'])) || four;
    if !eight {
        return None;
    }
    let (offset, high) = register(&full)?;
    (!high).then_some((offset, if four { 4 } else { 8 }))
}

/// `pt_regs` offset of `%rip`: a memory operand based on it is relative to
/// the next instruction, unknown here, unless it names a symbol.
const RIP: u32 = 128;

/// Splits a note's argument text (`-4@%edi 8@-16(%rbp)`) into specs.
/// Operands never contain spaces, except after the commas of a memory
/// operand on some assemblers, which are joined back.
pub fn split_args(text: &str) -> Vec<String> {
    let mut args: Vec<String> = Vec::new();
    for word in text.split_whitespace() {
        match args.last_mut() {
            Some(last) if last.ends_with(',') || word.starts_with(',') => last.push_str(word),
            _ => args.push(word.to_string()),
        }
    }
    args
}

/// Decodes one argument spec. `symbol` gives the link-time address of a
/// symbol named in a `symbol(%rip)` operand, and `pc` is the marker's
/// link-time address (so such an operand becomes an offset from the
/// marker's run-time address).
pub fn parse_arg(spec: &str, pc: u64, symbol: &dyn Fn(&str) -> Option<u64>) -> SdtArg {
    let (bytes, signed, operand) = match spec.split_once('@') {
        Some((size, operand)) => {
            let (signed, digits) = match size.strip_prefix('-') {
                Some(d) => (true, d),
                None => (false, size),
            };
            match digits.parse::<u32>() {
                Ok(n @ (1 | 2 | 4 | 8)) => (n, signed, operand),
                _ => {
                    return SdtArg {
                        bytes: 8,
                        signed: true,
                        location: SdtLocation::Unsupported(format!(
                            "`{spec}` has an argument size other than 1, 2, 4 or 8 bytes"
                        )),
                    };
                }
            }
        }
        // Old notes without a size: a long.
        None => (8, true, spec),
    };
    let location = match operand_location(operand, pc, symbol) {
        // The assembler writes a constant as the compiler's immediate:
        // `2@$-1` is an unsigned short 65535.
        Ok(SdtLocation::Constant(n)) => SdtLocation::Constant(extend(n, bytes, signed)),
        Ok(location) => location,
        Err(why) => SdtLocation::Unsupported(format!("`{spec}`: {why}")),
    };
    SdtArg {
        bytes,
        signed,
        location,
    }
}

fn operand_location(
    operand: &str,
    pc: u64,
    symbol: &dyn Fn(&str) -> Option<u64>,
) -> Result<SdtLocation, String> {
    if let Some(constant) = operand.strip_prefix('$') {
        return parse_number(constant)
            .map(SdtLocation::Constant)
            .ok_or_else(|| format!("the constant `{constant}` is not a number"));
    }
    if let Some(name) = operand.strip_prefix('%') {
        let (pt_regs, high_byte) =
            register(name).ok_or_else(|| format!("unknown register `%{name}`"))?;
        return Ok(SdtLocation::Register { pt_regs, high_byte });
    }
    // DISP(BASE,INDEX,SCALE), each part optional; or a bare address.
    let (disp_text, regs) = match operand.find('(') {
        Some(open) => {
            let inner = operand[open + 1..]
                .strip_suffix(')')
                .ok_or_else(|| "an unclosed memory operand".to_string())?;
            (&operand[..open], Some(inner))
        }
        None => (operand, None),
    };
    let mut parts = regs.map(|r| r.split(',').map(str::trim).collect::<Vec<_>>());
    let reg = |text: &str| -> Result<Option<u32>, String> {
        if text.is_empty() {
            return Ok(None);
        }
        let name = text
            .strip_prefix('%')
            .ok_or_else(|| format!("`{text}` is not a register"))?;
        register(name)
            .filter(|(_, high)| !high)
            .map(|(offset, _)| Some(offset))
            .ok_or_else(|| format!("unknown register `{text}`"))
    };
    let (base, index) = match parts.as_deref_mut() {
        None => (None, None),
        Some([b]) => (reg(b)?, None),
        Some([b, i]) => (reg(b)?, reg(i)?.map(|i| (i, 1))),
        Some([b, i, s]) => {
            let scale = match *s {
                "1" => 1,
                "2" => 2,
                "4" => 4,
                "8" => 8,
                _ => return Err(format!("the scale `{s}` is not 1, 2, 4 or 8")),
            };
            (reg(b)?, reg(i)?.map(|i| (i, scale)))
        }
        Some(_) => return Err("a memory operand with more than three parts".into()),
    };
    if base == Some(RIP) {
        if index.is_some() {
            return Err("an index on a %rip-relative operand".into());
        }
        // `sym(%rip)`, `sym+8(%rip)`: the symbol's address, whose
        // distance from the marker is the same at run time.
        let (name, addend) = split_symbol(disp_text)?;
        let address = symbol(name)
            .ok_or_else(|| format!("no symbol `{name}` in the binary's symbol table"))?;
        let delta = (address as i64)
            .wrapping_add(addend)
            .wrapping_sub(pc as i64);
        return Ok(SdtLocation::IpRelative { delta });
    }
    let disp = if disp_text.is_empty() {
        0
    } else {
        parse_number(disp_text)
            .ok_or_else(|| format!("the displacement `{disp_text}` is not a number"))?
    };
    if base.is_none() && index.is_none() {
        return Err("an absolute address, which moves with the load address".into());
    }
    Ok(SdtLocation::Memory { disp, base, index })
}

/// `n` cut to `bytes` and sign- or zero-extended back to 64 bits.
fn extend(n: i64, bytes: u32, signed: bool) -> i64 {
    if bytes >= 8 {
        return n;
    }
    let shift = 64 - 8 * bytes;
    if signed {
        (n << shift) >> shift
    } else {
        ((n as u64) << shift >> shift) as i64
    }
}

/// `sym`, `sym+8`, `sym-8`: the name and its addend.
fn split_symbol(text: &str) -> Result<(&str, i64), String> {
    if text.is_empty() || text.starts_with(|c: char| c.is_ascii_digit() || c == '-') {
        return Err(format!(
            "`{text}(%rip)` is relative to the next instruction, whose address the note does not give"
        ));
    }
    match text.find(['+', '-']) {
        Some(at) => {
            let addend = parse_number(&text[at..])
                .ok_or_else(|| format!("the offset in `{text}` is not a number"))?;
            Ok((&text[..at], addend))
        }
        None => Ok((text, 0)),
    }
}

/// A decimal or `0x` hexadecimal number, maybe signed.
fn parse_number(text: &str) -> Option<i64> {
    let (negative, digits) = match text.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let value = match digits
        .strip_prefix("0x")
        .or_else(|| digits.strip_prefix("0X"))
    {
        Some(hex) => u64::from_str_radix(hex, 16).ok()? as i64,
        None => digits.parse::<u64>().ok()? as i64,
    };
    Some(if negative {
        value.wrapping_neg()
    } else {
        value
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arg(spec: &str) -> SdtArg {
        parse_arg(spec, 0x1000, &|name| (name == "counter").then_some(0x4010))
    }

    fn located(bytes: u32, signed: bool, location: SdtLocation) -> SdtArg {
        SdtArg {
            bytes,
            signed,
            location,
        }
    }

    #[test]
    fn registers_of_every_width() {
        let di = SdtLocation::Register {
            pt_regs: 112,
            high_byte: false,
        };
        assert_eq!(arg("-4@%edi"), located(4, true, di.clone()));
        assert_eq!(arg("8@%rdi"), located(8, false, di.clone()));
        assert_eq!(arg("1@%dil"), located(1, false, di));
        let r12 = SdtLocation::Register {
            pt_regs: 24,
            high_byte: false,
        };
        assert_eq!(arg("-8@%r12"), located(8, true, r12.clone()));
        assert_eq!(arg("2@%r12w"), located(2, false, r12));
        assert_eq!(
            arg("1@%ah").location,
            SdtLocation::Register {
                pt_regs: 80,
                high_byte: true
            }
        );
    }

    #[test]
    fn registers_by_stap_name() {
        assert_eq!(named_register("rdi"), Some((112, 8)));
        assert_eq!(named_register("di"), Some((112, 8)));
        assert_eq!(named_register("edi"), Some((112, 4)));
        assert_eq!(named_register("r9"), Some((64, 8)));
        assert_eq!(named_register("r9d"), Some((64, 4)));
        assert_eq!(named_register("ip"), Some((128, 8)));
        assert_eq!(named_register("orig_rax"), Some((120, 8)));
        assert_eq!(named_register("al"), None);
        assert_eq!(named_register("r9w"), None);
        assert_eq!(named_register("xmm0"), None);
    }

    #[test]
    fn memory_operands() {
        assert_eq!(
            arg("8@-16(%rbp)").location,
            SdtLocation::Memory {
                disp: -16,
                base: Some(32),
                index: None
            }
        );
        assert_eq!(
            arg("-4@112(%rsp)").location,
            SdtLocation::Memory {
                disp: 112,
                base: Some(152),
                index: None
            }
        );
        assert_eq!(
            arg("8@8(%rsp,%rax,8)").location,
            SdtLocation::Memory {
                disp: 8,
                base: Some(152),
                index: Some((80, 8))
            }
        );
        assert_eq!(
            arg("4@(%rax)").location,
            SdtLocation::Memory {
                disp: 0,
                base: Some(80),
                index: None
            }
        );
    }

    #[test]
    fn constants_and_globals() {
        assert_eq!(arg("-4@$5"), located(4, true, SdtLocation::Constant(5)));
        assert_eq!(arg("-4@$-1").location, SdtLocation::Constant(-1));
        assert_eq!(arg("2@$-1").location, SdtLocation::Constant(65535));
        assert_eq!(arg("-1@$253").location, SdtLocation::Constant(-3));
        assert_eq!(arg("8@$0x10").location, SdtLocation::Constant(16));
        assert_eq!(
            arg("4@counter(%rip)").location,
            SdtLocation::IpRelative { delta: 0x3010 }
        );
        assert_eq!(
            arg("4@counter+4(%rip)").location,
            SdtLocation::IpRelative { delta: 0x3014 }
        );
    }

    #[test]
    fn undecodable_operands_say_why() {
        for (spec, why) in [
            ("4@missing(%rip)", "no symbol `missing`"),
            ("4@16(%rip)", "relative to the next instruction"),
            ("3@%eax", "other than 1, 2, 4 or 8"),
            ("4@%xmm0", "unknown register `%xmm0`"),
            ("8@0x601040", "absolute address"),
        ] {
            match arg(spec).location {
                SdtLocation::Unsupported(reason) => {
                    assert!(reason.contains(why), "{spec}: {reason}")
                }
                other => panic!("{spec}: decoded as {other:?}"),
            }
        }
    }

    #[test]
    fn splitting_the_note_text() {
        assert_eq!(
            split_args("-4@%edi 8@8(%rsp,%rax,8)  -4@$5"),
            ["-4@%edi", "8@8(%rsp,%rax,8)", "-4@$5"]
        );
        assert_eq!(split_args("8@8(%rsp, %rax, 8)"), ["8@8(%rsp,%rax,8)"]);
        assert!(split_args("").is_empty());
    }
}
