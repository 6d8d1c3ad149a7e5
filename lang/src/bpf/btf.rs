//! The one BTF writer: the layout of `include/uapi/linux/btf.h` encoded
//! once. Program BTF uses a handful of its records (`long`, `void *`, two
//! function prototypes, one FUNC per BPF function) with the
//! `bpf_func_info` / `bpf_line_info` records that refer into it: the
//! verifier needs func_info before it accepts a callback
//! (`bpf_for_each_map_elem`), and line_info makes its log quote script
//! lines. The runtime's BTF reader tests build their vmlinux and module
//! (split) blobs with the same writer.
//!
//! Pure encoding: the runtime loads the blob with `BPF_BTF_LOAD` and
//! passes the records to `BPF_PROG_LOAD`.

use std::fmt::Write;

use hashbrown::HashMap;

const MAGIC: u16 = 0xeb9f;
const VERSION: u8 = 1;
const HEADER_BYTES: u32 = 24;

// `BTF_KIND_*`.
pub const KIND_INT: u32 = 1;
pub const KIND_PTR: u32 = 2;
pub const KIND_ARRAY: u32 = 3;
pub const KIND_STRUCT: u32 = 4;
pub const KIND_UNION: u32 = 5;
pub const KIND_ENUM: u32 = 6;
pub const KIND_FWD: u32 = 7;
pub const KIND_TYPEDEF: u32 = 8;
pub const KIND_CONST: u32 = 10;
pub const KIND_FUNC: u32 = 12;
pub const KIND_FUNC_PROTO: u32 = 13;
pub const KIND_ENUM64: u32 = 19;

// `BTF_INT_*` encoding bits of an INT record.
pub const INT_SIGNED: u32 = 1;
pub const INT_CHAR: u32 = 2;

/// FUNC linkage, in the FUNC record's `vlen` bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Linkage {
    /// Callbacks: the verifier requires them static.
    Static = 0,
    Global = 1,
}

/// `struct bpf_func_info`: the BPF function starting at `insn_off` has
/// FUNC type `type_id`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FuncInfo {
    pub insn_off: u32,
    pub type_id: u32,
}

/// `struct bpf_line_info`: the instruction at `insn_off` comes from this
/// file (string offset), line text (string offset), line and column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LineInfo {
    pub insn_off: u32,
    pub file_name_off: u32,
    pub line_off: u32,
    pub line: u32,
    pub column: u32,
}

pub const FUNC_INFO_BYTES: u32 = 8;
pub const LINE_INFO_BYTES: u32 = 16;

impl FuncInfo {
    pub fn encode_all(records: &[FuncInfo]) -> Vec<u8> {
        let mut out = Vec::with_capacity(records.len() * FUNC_INFO_BYTES as usize);
        for r in records {
            out.extend_from_slice(&r.insn_off.to_le_bytes());
            out.extend_from_slice(&r.type_id.to_le_bytes());
        }
        out
    }
}

impl LineInfo {
    /// `line_col` packs the line above the low 10 column bits.
    pub fn line_col(&self) -> u32 {
        (self.line << 10) | self.column.min(0x3ff)
    }

    pub fn encode_all(records: &[LineInfo]) -> Vec<u8> {
        let mut out = Vec::with_capacity(records.len() * LINE_INFO_BYTES as usize);
        for r in records {
            for word in [r.insn_off, r.file_name_off, r.line_off, r.line_col()] {
                out.extend_from_slice(&word.to_le_bytes());
            }
        }
        out
    }
}

/// Builds one BTF blob, record by record. Type ids are handed out in
/// order from 1 (0 is `void`), or after the base's last id for split BTF;
/// strings are stored once each.
#[derive(Debug, Clone)]
pub struct BtfWriter {
    types: Vec<u8>,
    strings: Vec<u8>,
    offsets: HashMap<String, u32>,
    /// String offsets continue from the base's table in split BTF.
    string_base: u32,
    next_id: u32,
}

impl Default for BtfWriter {
    fn default() -> Self {
        BtfWriter::new()
    }
}

impl BtfWriter {
    pub fn new() -> BtfWriter {
        let mut offsets = HashMap::new();
        offsets.insert(String::new(), 0);
        BtfWriter {
            types: Vec::new(),
            // The string section starts with the empty string.
            strings: vec![0],
            offsets,
            string_base: 0,
            next_id: 1,
        }
    }

    /// Split BTF (a module's) over a base with `base_types` types and a
    /// string table of `base_strings_len` bytes; "" is the base's.
    pub fn split(base_types: u32, base_strings_len: u32) -> BtfWriter {
        let mut offsets = HashMap::new();
        offsets.insert(String::new(), 0);
        BtfWriter {
            types: Vec::new(),
            strings: Vec::new(),
            offsets,
            string_base: base_strings_len,
            next_id: base_types + 1,
        }
    }

    /// The offset of `text` in the string section, added once. A NUL
    /// inside would cut the string short, so it is replaced.
    pub fn string(&mut self, text: &str) -> u32 {
        let text = text.replace('\0', " ");
        if let Some(offset) = self.offsets.get(&text) {
            return *offset;
        }
        let offset = self.string_base + self.strings.len() as u32;
        self.strings.extend_from_slice(text.as_bytes());
        self.strings.push(0);
        self.offsets.insert(text, offset);
        offset
    }

    fn word(&mut self, word: u32) {
        self.types.extend_from_slice(&word.to_le_bytes());
    }

    /// A record header; returns the new type's id. The caller appends
    /// the kind's trailing data.
    pub fn record(
        &mut self,
        name: &str,
        kind: u32,
        vlen: u32,
        kind_flag: bool,
        size_or_type: u32,
    ) -> u32 {
        let name = self.string(name);
        self.record_named_at(name, kind, vlen, kind_flag, size_or_type)
    }

    /// A record header whose name is at string offset `name` (in split
    /// BTF, possibly the base's).
    pub fn record_named_at(
        &mut self,
        name: u32,
        kind: u32,
        vlen: u32,
        kind_flag: bool,
        size_or_type: u32,
    ) -> u32 {
        self.word(name);
        self.word((u32::from(kind_flag) << 31) | (kind << 24) | (vlen & 0xffff));
        self.word(size_or_type);
        self.next_id += 1;
        self.next_id - 1
    }

    /// An integer of `bytes` bytes; `encoding` is `INT_SIGNED`/`INT_CHAR` bits.
    pub fn int(&mut self, name: &str, bytes: u32, encoding: u32) -> u32 {
        let id = self.record(name, KIND_INT, 0, false, bytes);
        self.word((encoding << 24) | (bytes * 8));
        id
    }

    /// An old-style bitfield int: `bits` wide at `bit_offset` within `bytes`.
    pub fn bitfield_int(&mut self, name: &str, bytes: u32, bit_offset: u32, bits: u32) -> u32 {
        let id = self.record(name, KIND_INT, 0, false, bytes);
        self.word((bit_offset << 16) | bits);
        id
    }

    /// A pointer to type `target` (0: `void *`).
    pub fn ptr(&mut self, target: u32) -> u32 {
        self.record("", KIND_PTR, 0, false, target)
    }

    pub fn array(&mut self, elem: u32, index: u32, len: u32) -> u32 {
        let id = self.record("", KIND_ARRAY, 0, false, 0);
        self.word(elem);
        self.word(index);
        self.word(len);
        id
    }

    /// A struct or union; `members`: (name, type, offset word as stored).
    pub fn composite(
        &mut self,
        kind: u32,
        name: &str,
        size: u32,
        kind_flag: bool,
        members: &[(&str, u32, u32)],
    ) -> u32 {
        let id = self.record(name, kind, members.len() as u32, kind_flag, size);
        for &(member, ty, offset) in members {
            let member = self.string(member);
            self.word(member);
            self.word(ty);
            self.word(offset);
        }
        id
    }

    pub fn enumeration(&mut self, name: &str, signed: bool, values: &[(&str, i32)]) -> u32 {
        let id = self.record(name, KIND_ENUM, values.len() as u32, signed, 4);
        for &(value_name, value) in values {
            let value_name = self.string(value_name);
            self.word(value_name);
            self.word(value as u32);
        }
        id
    }

    pub fn enum64(&mut self, name: &str, signed: bool, values: &[(&str, u64)]) -> u32 {
        let id = self.record(name, KIND_ENUM64, values.len() as u32, signed, 8);
        for &(value_name, value) in values {
            let value_name = self.string(value_name);
            self.word(value_name);
            self.word(value as u32);
            self.word((value >> 32) as u32);
        }
        id
    }

    pub fn func_proto(&mut self, ret: u32, params: &[(&str, u32)]) -> u32 {
        let id = self.record("", KIND_FUNC_PROTO, params.len() as u32, false, ret);
        for &(param, ty) in params {
            let param = self.string(param);
            self.word(param);
            self.word(ty);
        }
        id
    }

    pub fn func(&mut self, name: &str, proto: u32, linkage: Linkage) -> u32 {
        self.record(name, KIND_FUNC, linkage as u32, false, proto)
    }

    /// The blob: header, type section, string section.
    pub fn finish(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(24 + self.types.len() + self.strings.len());
        out.extend_from_slice(&MAGIC.to_le_bytes());
        out.push(VERSION);
        out.push(0); // flags
        let type_len = self.types.len() as u32;
        for word in [
            HEADER_BYTES,
            0,
            type_len,
            type_len,
            self.strings.len() as u32,
        ] {
            out.extend_from_slice(&word.to_le_bytes());
        }
        out.extend_from_slice(&self.types);
        out.extend_from_slice(&self.strings);
        out
    }
}

/// A readable listing of a blob written by [`BtfWriter`] (tests and
/// `--dump=bpf`): one line per type, then nothing else. Unknown kinds end
/// the listing instead of panicking.
pub fn dump(blob: &[u8]) -> String {
    let mut out = String::new();
    let word = |at: usize| -> Option<u32> {
        blob.get(at..at + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    let (Some(hdr), Some(type_len), Some(str_off), Some(str_len)) =
        (word(4), word(12), word(16), word(20))
    else {
        return "truncated BTF header\n".into();
    };
    let (hdr, type_len) = (hdr as usize, type_len as usize);
    let strings_at = hdr + str_off as usize;
    let string = |off: u32| -> String {
        let start = strings_at + off as usize;
        let end = (strings_at + str_len as usize).min(blob.len());
        if start >= end {
            return "?".into();
        }
        let text = &blob[start..end];
        let len = text.iter().position(|b| *b == 0).unwrap_or(text.len());
        String::from_utf8_lossy(&text[..len]).into_owned()
    };
    let _ = writeln!(
        out,
        "BTF: {type_len} bytes of types, {str_len} bytes of strings"
    );
    let mut at = hdr;
    let mut id = 1;
    while at < hdr + type_len {
        let (Some(name), Some(info), Some(size)) = (word(at), word(at + 4), word(at + 8)) else {
            break;
        };
        at += 12;
        let kind = info >> 24;
        let vlen = info & 0xffff;
        let name = string(name);
        match kind {
            KIND_INT => {
                let bits = word(at).unwrap_or(0);
                at += 4;
                let _ = writeln!(
                    out,
                    "[{id}] INT '{name}' size={size} bits={} signed={}",
                    bits & 0xff,
                    (bits >> 24) & INT_SIGNED
                );
            }
            KIND_PTR => {
                let _ = writeln!(out, "[{id}] PTR -> [{size}]");
            }
            KIND_FUNC_PROTO => {
                let mut params = Vec::new();
                for _ in 0..vlen {
                    let (Some(pname), Some(ty)) = (word(at), word(at + 4)) else {
                        break;
                    };
                    params.push(format!("{}: [{ty}]", string(pname)));
                    at += 8;
                }
                let _ = writeln!(
                    out,
                    "[{id}] FUNC_PROTO ret [{size}] ({})",
                    params.join(", ")
                );
            }
            KIND_FUNC => {
                let linkage = if vlen == Linkage::Static as u32 {
                    "static"
                } else {
                    "global"
                };
                let _ = writeln!(out, "[{id}] FUNC '{name}' proto [{size}] {linkage}");
            }
            other => {
                let _ = writeln!(out, "[{id}] kind {other} (not written by stap-rs)");
                break;
            }
        }
        id += 1;
    }
    out
}

/// The string at `offset` of a blob's string section ("" if out of range).
pub fn string_at(blob: &[u8], offset: u32) -> String {
    let word = |at: usize| -> Option<u32> {
        blob.get(at..at + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    let (Some(hdr), Some(str_off), Some(str_len)) = (word(4), word(16), word(20)) else {
        return String::new();
    };
    let base = (hdr + str_off) as usize;
    let end = (base + str_len as usize).min(blob.len());
    let start = base + offset as usize;
    if start >= end {
        return String::new();
    }
    let text = &blob[start..end];
    let len = text.iter().position(|b| *b == 0).unwrap_or(text.len());
    String::from_utf8_lossy(&text[..len]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_and_sections_line_up() {
        let mut w = BtfWriter::new();
        let long = w.int("long", 8, INT_SIGNED);
        let ptr = w.ptr(0);
        let proto = w.func_proto(long, &[("ctx", ptr)]);
        let func = w.func("stap_p0", proto, Linkage::Global);
        assert_eq!((long, ptr, proto, func), (1, 2, 3, 4));
        let blob = w.finish();
        assert_eq!(&blob[..4], &[0x9f, 0xeb, 1, 0]);
        // int 16 + ptr 12 + proto 12+8 + func 12
        assert_eq!(u32::from_le_bytes(blob[12..16].try_into().unwrap()), 60);
        assert_eq!(blob[24 + 60], 0, "the string section starts with \"\"");
        assert_eq!(*blob.last().unwrap(), 0);
        let text = dump(&blob);
        assert!(
            text.contains("[4] FUNC 'stap_p0' proto [3] global"),
            "{text}"
        );
        assert!(text.contains("[3] FUNC_PROTO ret [1] (ctx: [2])"), "{text}");
    }

    #[test]
    fn strings_are_shared_and_nul_free() {
        let mut w = BtfWriter::new();
        let a = w.string("x.stp");
        assert_eq!(w.string("x.stp"), a);
        let b = w.string("a\0b");
        let blob = w.finish();
        assert_eq!(string_at(&blob, a), "x.stp");
        assert_eq!(string_at(&blob, b), "a b");
        assert_eq!(string_at(&blob, 0), "");
    }

    #[test]
    fn line_col_packs_ten_column_bits() {
        let info = LineInfo {
            insn_off: 3,
            file_name_off: 1,
            line_off: 7,
            line: 12,
            column: 5,
        };
        assert_eq!(info.line_col(), (12 << 10) | 5);
        let bytes = LineInfo::encode_all(&[info]);
        assert_eq!(bytes.len(), 16);
        assert_eq!(&bytes[..4], &3u32.to_le_bytes());
    }
}
