//! eBPF instruction encoding (the kernel's `struct bpf_insn`) and a
//! disassembler for `--dump=bpf`, in the kernel verifier's own notation
//! (`r1 = *(u64 *)(r6 +8)`), so listings and verifier logs read alike.

/// Instruction classes (the low 3 bits of the opcode).
pub const LD: u8 = 0x00;
pub const LDX: u8 = 0x01;
pub const ST: u8 = 0x02;
pub const STX: u8 = 0x03;
pub const ALU32: u8 = 0x04;
pub const JMP: u8 = 0x05;
pub const JMP32: u8 = 0x06;
pub const ALU64: u8 = 0x07;

/// Load/store sizes.
pub const W: u8 = 0x00;
pub const H: u8 = 0x08;
pub const B: u8 = 0x10;
pub const DW: u8 = 0x18;

/// Load/store modes.
pub const IMM: u8 = 0x00;
pub const MEM: u8 = 0x60;
pub const ATOMIC: u8 = 0xc0;
/// With an atomic operation: the old value goes to the source register.
pub const FETCH: i32 = 0x01;

/// Operand source: immediate or register.
pub const K: u8 = 0x00;
pub const X: u8 = 0x08;

/// ALU operations.
pub const ADD: u8 = 0x00;
pub const SUB: u8 = 0x10;
pub const MUL: u8 = 0x20;
pub const DIV: u8 = 0x30;
pub const OR: u8 = 0x40;
pub const AND: u8 = 0x50;
pub const LSH: u8 = 0x60;
pub const RSH: u8 = 0x70;
pub const NEG: u8 = 0x80;
pub const MOD: u8 = 0x90;
pub const XOR: u8 = 0xa0;
pub const MOV: u8 = 0xb0;
pub const ARSH: u8 = 0xc0;

/// Jump operations.
pub const JA: u8 = 0x00;
pub const JEQ: u8 = 0x10;
pub const JGT: u8 = 0x20;
pub const JGE: u8 = 0x30;
pub const JSET: u8 = 0x40;
pub const JNE: u8 = 0x50;
pub const JSGT: u8 = 0x60;
pub const JSGE: u8 = 0x70;
pub const CALL: u8 = 0x80;
pub const EXIT: u8 = 0x90;
pub const JLT: u8 = 0xa0;
pub const JLE: u8 = 0xb0;
pub const JSLT: u8 = 0xc0;
pub const JSLE: u8 = 0xd0;

/// `ld_imm64` source-register markers.
pub const PSEUDO_MAP_FD: u8 = 1;
pub const PSEUDO_MAP_VALUE: u8 = 2;
/// `ld_imm64` of a BPF function's address (a callback); `imm` is the
/// target's offset from the next instruction, as for a pseudo call.
pub const PSEUDO_FUNC: u8 = 4;
/// `src_reg` of a call to a function in the same program.
pub const PSEUDO_CALL: u8 = 1;
/// A call to a kernel function (`BPF_PSEUDO_KFUNC_CALL`): imm is its
/// vmlinux BTF id.
pub const PSEUDO_KFUNC_CALL: u8 = 2;

/// Registers.
pub const R0: u8 = 0;
pub const R1: u8 = 1;
pub const R2: u8 = 2;
pub const R3: u8 = 3;
pub const R4: u8 = 4;
pub const R5: u8 = 5;
pub const R6: u8 = 6;
pub const R7: u8 = 7;
pub const R8: u8 = 8;
pub const R9: u8 = 9;
/// The read-only frame pointer.
pub const FP: u8 = 10;

/// Helper function ids (`enum bpf_func_id`).
pub mod helper {
    pub const MAP_LOOKUP_ELEM: i32 = 1;
    pub const MAP_UPDATE_ELEM: i32 = 2;
    pub const MAP_DELETE_ELEM: i32 = 3;
    pub const KTIME_GET_NS: i32 = 5;
    pub const GET_PRANDOM_U32: i32 = 7;
    pub const GET_SMP_PROCESSOR_ID: i32 = 8;
    pub const GET_CURRENT_PID_TGID: i32 = 14;
    pub const GET_CURRENT_UID_GID: i32 = 15;
    pub const GET_CURRENT_COMM: i32 = 16;
    pub const TAIL_CALL: i32 = 12;
    pub const GET_CURRENT_TASK: i32 = 35;
    pub const GET_STACK: i32 = 67;
    pub const JIFFIES64: i32 = 118;
    pub const PROBE_READ_USER: i32 = 112;
    pub const PROBE_READ_KERNEL: i32 = 113;
    pub const PROBE_READ_USER_STR: i32 = 114;
    pub const PROBE_READ_KERNEL_STR: i32 = 115;
    pub const RINGBUF_OUTPUT: i32 = 130;
    pub const FOR_EACH_MAP_ELEM: i32 = 164;
    pub const SNPRINTF: i32 = 165;
    pub const GET_FUNC_IP: i32 = 173;
    pub const GET_ATTACH_COOKIE: i32 = 174;
    pub const LOOP: i32 = 181;
    pub const MAP_LOOKUP_PERCPU_ELEM: i32 = 195;

    pub fn name(id: i32) -> Option<&'static str> {
        Some(match id {
            MAP_LOOKUP_ELEM => "map_lookup_elem",
            MAP_UPDATE_ELEM => "map_update_elem",
            MAP_DELETE_ELEM => "map_delete_elem",
            KTIME_GET_NS => "ktime_get_ns",
            GET_SMP_PROCESSOR_ID => "get_smp_processor_id",
            GET_CURRENT_PID_TGID => "get_current_pid_tgid",
            GET_CURRENT_UID_GID => "get_current_uid_gid",
            GET_CURRENT_COMM => "get_current_comm",
            TAIL_CALL => "tail_call",
            GET_CURRENT_TASK => "get_current_task",
            GET_STACK => "get_stack",
            JIFFIES64 => "jiffies64",
            PROBE_READ_USER => "probe_read_user",
            PROBE_READ_KERNEL => "probe_read_kernel",
            PROBE_READ_USER_STR => "probe_read_user_str",
            PROBE_READ_KERNEL_STR => "probe_read_kernel_str",
            RINGBUF_OUTPUT => "ringbuf_output",
            FOR_EACH_MAP_ELEM => "for_each_map_elem",
            SNPRINTF => "snprintf",
            GET_FUNC_IP => "get_func_ip",
            GET_ATTACH_COOKIE => "get_attach_cookie",
            LOOP => "loop",
            MAP_LOOKUP_PERCPU_ELEM => "map_lookup_percpu_elem",
            _ => return None,
        })
    }
}

/// One 8-byte instruction slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Insn {
    pub code: u8,
    pub dst: u8,
    pub src: u8,
    pub off: i16,
    pub imm: i32,
}

impl Insn {
    pub const fn new(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
        Insn {
            code,
            dst,
            src,
            off,
            imm,
        }
    }

    /// The kernel's little-endian layout, as one `u64` (byte 0 = opcode).
    pub fn encode(self) -> u64 {
        let mut bytes = [0u8; 8];
        bytes[0] = self.code;
        bytes[1] = (self.src << 4) | (self.dst & 0x0f);
        bytes[2..4].copy_from_slice(&self.off.to_le_bytes());
        bytes[4..8].copy_from_slice(&self.imm.to_le_bytes());
        u64::from_le_bytes(bytes)
    }

    pub fn decode(word: u64) -> Insn {
        let bytes = word.to_le_bytes();
        Insn {
            code: bytes[0],
            dst: bytes[1] & 0x0f,
            src: bytes[1] >> 4,
            off: i16::from_le_bytes([bytes[2], bytes[3]]),
            imm: i32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]),
        }
    }

    pub fn class(self) -> u8 {
        self.code & 0x07
    }

    /// True for the first half of an `ld_imm64` (the next slot is its tail).
    pub fn is_wide(self) -> bool {
        self.code == LD | IMM | DW
    }

    pub fn is_jump(self) -> bool {
        let op = self.code & 0xf0;
        matches!(self.class(), JMP | JMP32) && op != CALL && op != EXIT
    }

    // Constructors, named after what they do.

    pub fn alu64_imm(op: u8, dst: u8, imm: i32) -> Insn {
        Insn::new(ALU64 | op | K, dst, 0, 0, imm)
    }

    pub fn alu64_reg(op: u8, dst: u8, src: u8) -> Insn {
        Insn::new(ALU64 | op | X, dst, src, 0, 0)
    }

    pub fn alu32_imm(op: u8, dst: u8, imm: i32) -> Insn {
        Insn::new(ALU32 | op | K, dst, 0, 0, imm)
    }

    pub fn mov_imm(dst: u8, imm: i32) -> Insn {
        Insn::alu64_imm(MOV, dst, imm)
    }

    pub fn mov_reg(dst: u8, src: u8) -> Insn {
        Insn::alu64_reg(MOV, dst, src)
    }

    pub fn neg(dst: u8) -> Insn {
        Insn::new(ALU64 | NEG | K, dst, 0, 0, 0)
    }

    /// `dst = *(size *)(src + off)`
    pub fn load(size: u8, dst: u8, src: u8, off: i16) -> Insn {
        Insn::new(LDX | MEM | size, dst, src, off, 0)
    }

    /// `*(size *)(dst + off) = src`
    pub fn store(size: u8, dst: u8, off: i16, src: u8) -> Insn {
        Insn::new(STX | MEM | size, dst, src, off, 0)
    }

    /// `*(size *)(dst + off) = imm`
    pub fn store_imm(size: u8, dst: u8, off: i16, imm: i32) -> Insn {
        Insn::new(ST | MEM | size, dst, 0, off, imm)
    }

    /// `lock *(u64 *)(dst + off) += src`
    pub fn atomic_add64(dst: u8, off: i16, src: u8) -> Insn {
        Insn::new(STX | ATOMIC | DW, dst, src, off, ADD as i32)
    }

    /// `src = atomic_fetch_add(*(u64 *)(dst + off), src)`: the old value.
    pub fn atomic_fetch_add64(dst: u8, off: i16, src: u8) -> Insn {
        Insn::new(STX | ATOMIC | DW, dst, src, off, ADD as i32 | FETCH)
    }

    pub fn jump_imm(op: u8, dst: u8, imm: i32, off: i16) -> Insn {
        Insn::new(JMP | op | K, dst, 0, off, imm)
    }

    pub fn jump_reg(op: u8, dst: u8, src: u8, off: i16) -> Insn {
        Insn::new(JMP | op | X, dst, src, off, 0)
    }

    pub fn ja(off: i16) -> Insn {
        Insn::new(JMP | JA, 0, 0, off, 0)
    }

    pub fn call(helper: i32) -> Insn {
        Insn::new(JMP | CALL, 0, 0, 0, helper)
    }

    /// A BPF-to-BPF call (`BPF_PSEUDO_CALL`): `offset` instructions past
    /// the next one.
    pub fn call_local(offset: i32) -> Insn {
        Insn::new(JMP | CALL, 0, PSEUDO_CALL, 0, offset)
    }

    /// A kfunc call: `btf_id` is the function's id in vmlinux BTF.
    pub fn call_kfunc(btf_id: u32) -> Insn {
        Insn::new(JMP | CALL, 0, PSEUDO_KFUNC_CALL, 0, btf_id as i32)
    }

    pub fn exit() -> Insn {
        Insn::new(JMP | EXIT, 0, 0, 0, 0)
    }

    /// `dst = imm64`: two slots.
    pub fn ld_imm64(dst: u8, value: i64) -> [Insn; 2] {
        [
            Insn::new(LD | IMM | DW, dst, 0, 0, value as i32),
            Insn::new(0, 0, 0, 0, (value >> 32) as i32),
        ]
    }

    /// `dst = map` (the loader writes the fd into the first imm).
    pub fn ld_map_fd(dst: u8) -> [Insn; 2] {
        [
            Insn::new(LD | IMM | DW, dst, PSEUDO_MAP_FD, 0, 0),
            Insn::new(0, 0, 0, 0, 0),
        ]
    }

    /// `dst = &map.value[0] + offset` for a one-entry array map (the loader
    /// writes the fd into the first imm; the offset is in the second).
    /// The address of the BPF function `offset` instructions after this
    /// pair's first slot + 1 (patched once the callback is placed).
    pub fn ld_func(dst: u8, offset: i32) -> [Insn; 2] {
        [
            Insn::new(LD | IMM | DW, dst, PSEUDO_FUNC, 0, offset),
            Insn::new(0, 0, 0, 0, 0),
        ]
    }

    pub fn ld_map_value(dst: u8, offset: i32) -> [Insn; 2] {
        [
            Insn::new(LD | IMM | DW, dst, PSEUDO_MAP_VALUE, 0, 0),
            Insn::new(0, 0, 0, 0, offset),
        ]
    }
}

fn size_name(code: u8) -> &'static str {
    match code & 0x18 {
        W => "u32",
        H => "u16",
        B => "u8",
        _ => "u64",
    }
}

fn alu_symbol(op: u8) -> Option<&'static str> {
    Some(match op {
        ADD => "+=",
        SUB => "-=",
        MUL => "*=",
        DIV => "/=",
        OR => "|=",
        AND => "&=",
        LSH => "<<=",
        RSH => ">>=",
        MOD => "%=",
        XOR => "^=",
        MOV => "=",
        ARSH => "s>>=",
        _ => return None,
    })
}

fn jump_symbol(op: u8) -> Option<&'static str> {
    Some(match op {
        JEQ => "==",
        JGT => ">",
        JGE => ">=",
        JSET => "&",
        JNE => "!=",
        JSGT => "s>",
        JSGE => "s>=",
        JLT => "<",
        JLE => "<=",
        JSLT => "s<",
        JSLE => "s<=",
        _ => return None,
    })
}

fn signed_off(off: i16) -> String {
    if off < 0 {
        format!("- {}", -(off as i32))
    } else {
        format!("+ {off}")
    }
}

/// Disassembles the instruction at `index` (with its tail for an
/// `ld_imm64`), in the verifier's notation. Jump targets are absolute.
pub fn disassemble(insns: &[u64], index: usize) -> String {
    let insn = Insn::decode(insns[index]);
    let (d, s) = (insn.dst, insn.src);
    let op = insn.code & 0xf0;
    match insn.class() {
        ALU64 | ALU32 => {
            let w = if insn.class() == ALU32 { "w" } else { "r" };
            if op == NEG {
                return format!("{w}{d} = -{w}{d}");
            }
            let Some(sym) = alu_symbol(op) else {
                return format!("(unknown alu {:#04x})", insn.code);
            };
            if insn.code & X != 0 {
                format!("{w}{d} {sym} {w}{s}")
            } else {
                format!("{w}{d} {sym} {}", insn.imm)
            }
        }
        LDX => format!(
            "r{d} = *({} *)(r{s} {})",
            size_name(insn.code),
            signed_off(insn.off)
        ),
        STX if insn.code & 0xe0 == ATOMIC && insn.imm & FETCH != 0 => format!(
            "r{s} = atomic_fetch_add(({} *)(r{d} {}), r{s})",
            size_name(insn.code),
            signed_off(insn.off)
        ),
        STX if insn.code & 0xe0 == ATOMIC => format!(
            "lock *({} *)(r{d} {}) += r{s}",
            size_name(insn.code),
            signed_off(insn.off)
        ),
        STX => format!(
            "*({} *)(r{d} {}) = r{s}",
            size_name(insn.code),
            signed_off(insn.off)
        ),
        ST => format!(
            "*({} *)(r{d} {}) = {}",
            size_name(insn.code),
            signed_off(insn.off),
            insn.imm
        ),
        LD if insn.is_wide() => {
            let tail = insns.get(index + 1).map(|w| Insn::decode(*w));
            let high = tail.map(|t| t.imm).unwrap_or(0);
            match s {
                PSEUDO_MAP_FD => format!("r{d} = map[fd {}]", insn.imm),
                PSEUDO_MAP_VALUE => format!("r{d} = map_value[fd {}] + {high}", insn.imm),
                PSEUDO_FUNC => format!("r{d} = func[{}]", index as i64 + 1 + insn.imm as i64),
                _ => {
                    let value = (insn.imm as u32 as u64) | ((high as u32 as u64) << 32);
                    format!("r{d} = {:#x} ll", value)
                }
            }
        }
        JMP | JMP32 => {
            let target = index as i64 + 1 + insn.off as i64;
            match op {
                JA => format!("goto {target}"),
                CALL if insn.src == PSEUDO_CALL => {
                    format!(
                        "call pc{:+} ({target_fn})",
                        insn.imm,
                        target_fn = index as i64 + 1 + insn.imm as i64
                    )
                }
                CALL if insn.src == PSEUDO_KFUNC_CALL => {
                    format!("call kfunc[btf {}]", insn.imm)
                }
                CALL => match helper::name(insn.imm) {
                    Some(name) => format!("call {name}#{}", insn.imm),
                    None => format!("call #{}", insn.imm),
                },
                EXIT => "exit".to_string(),
                _ => {
                    let w = if insn.class() == JMP32 { "w" } else { "r" };
                    let sym = jump_symbol(op).unwrap_or("?");
                    let rhs = if insn.code & X != 0 {
                        format!("{w}{s}")
                    } else {
                        insn.imm.to_string()
                    };
                    format!("if {w}{d} {sym} {rhs} goto {target}")
                }
            }
        }
        _ => format!("(unknown {:#018x})", insns[index]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(insn: Insn) -> [u8; 8] {
        insn.encode().to_le_bytes()
    }

    #[test]
    fn known_encodings() {
        // r0 = 0 (b7 00 00 00 00 00 00 00), exit (95 ...).
        assert_eq!(bytes(Insn::mov_imm(R0, 0)), [0xb7, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(bytes(Insn::exit()), [0x95, 0, 0, 0, 0, 0, 0, 0]);
        // r6 = r1: bf 16
        assert_eq!(bytes(Insn::mov_reg(R6, R1)), [0xbf, 0x16, 0, 0, 0, 0, 0, 0]);
        // r1 = *(u64 *)(r6 + 8): 79 61 08 00
        assert_eq!(
            bytes(Insn::load(DW, R1, R6, 8)),
            [0x79, 0x61, 8, 0, 0, 0, 0, 0]
        );
        // *(u64 *)(r10 - 8) = r1: 7b 1a f8 ff
        assert_eq!(
            bytes(Insn::store(DW, FP, -8, R1)),
            [0x7b, 0x1a, 0xf8, 0xff, 0, 0, 0, 0]
        );
        // lock *(u64 *)(r0 + 0) += r1: db 10 00 00 00 00 00 00
        assert_eq!(
            bytes(Insn::atomic_add64(R0, 0, R1)),
            [0xdb, 0x10, 0, 0, 0, 0, 0, 0]
        );
        // call 1: 85 00 00 00 01 00 00 00
        assert_eq!(
            bytes(Insn::call(helper::MAP_LOOKUP_ELEM)),
            [0x85, 0, 0, 0, 1, 0, 0, 0]
        );
        // if r0 == 0 goto +3: 15 00 03 00 00 00 00 00
        assert_eq!(
            bytes(Insn::jump_imm(JEQ, R0, 0, 3)),
            [0x15, 0, 3, 0, 0, 0, 0, 0]
        );
        // ld_imm64 r1, map fd: 18 11 ... (src = 1)
        let [first, tail] = Insn::ld_map_fd(R1);
        assert_eq!(bytes(first), [0x18, 0x11, 0, 0, 0, 0, 0, 0]);
        assert_eq!(bytes(tail), [0; 8]);
        // r1 s>>= 3: c7 01 00 00 03 00 00 00
        assert_eq!(
            bytes(Insn::alu64_imm(ARSH, R1, 3)),
            [0xc7, 1, 0, 0, 3, 0, 0, 0]
        );
    }

    #[test]
    fn decode_inverts_encode() {
        let insn = Insn::new(JMP | JSGT | X, R3, R7, -12, 0x1234_5678);
        assert_eq!(Insn::decode(insn.encode()), insn);
    }

    #[test]
    fn disassembly_reads_like_the_verifier() {
        let [a, b] = Insn::ld_imm64(R2, 0x1_0000_0002);
        let code: Vec<u64> = [
            Insn::load(DW, R1, R6, 8),
            Insn::store_imm(W, FP, -4, 0),
            a,
            b,
            Insn::jump_imm(JSLT, R1, 5, -4),
            Insn::call(helper::RINGBUF_OUTPUT),
        ]
        .iter()
        .map(|i| i.encode())
        .collect();
        assert_eq!(disassemble(&code, 0), "r1 = *(u64 *)(r6 + 8)");
        assert_eq!(disassemble(&code, 1), "*(u32 *)(r10 - 4) = 0");
        assert_eq!(disassemble(&code, 2), "r2 = 0x100000002 ll");
        assert_eq!(disassemble(&code, 4), "if r1 s< 5 goto 1");
        assert_eq!(disassemble(&code, 5), "call ringbuf_output#130");
    }
}
