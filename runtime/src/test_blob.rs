//! Hand-built BTF blobs for unit tests.

/// Builds a BTF blob record by record. Type ids are handed out in order,
/// starting at 1 (or after a base's last id for split BTF).
pub struct BlobBuilder {
    types: Vec<u8>,
    strings: Vec<u8>,
    /// String offsets continue from the base's table in split BTF.
    string_base: u32,
    next_id: u32,
}

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

pub const INT_SIGNED: u32 = 1;
pub const INT_CHAR: u32 = 2;

impl BlobBuilder {
    pub fn new() -> BlobBuilder {
        BlobBuilder {
            types: Vec::new(),
            strings: vec![0],
            string_base: 0,
            next_id: 1,
        }
    }

    /// Split BTF over a base with `base_types` types and a string table of
    /// `base_strings_len` bytes.
    pub fn split(base_types: u32, base_strings_len: u32) -> BlobBuilder {
        BlobBuilder {
            types: Vec::new(),
            strings: Vec::new(),
            string_base: base_strings_len,
            next_id: base_types + 1,
        }
    }

    /// Interns a string; the empty string is offset 0.
    pub fn name(&mut self, s: &str) -> u32 {
        if s.is_empty() {
            return 0;
        }
        let offset = self.string_base + self.strings.len() as u32;
        self.strings.extend_from_slice(s.as_bytes());
        self.strings.push(0);
        offset
    }

    fn word(&mut self, w: u32) {
        self.types.extend_from_slice(&w.to_le_bytes());
    }

    /// A record header; returns the new type's id.
    pub fn record(
        &mut self,
        name: &str,
        kind: u32,
        vlen: u32,
        kind_flag: bool,
        size_or_type: u32,
    ) -> u32 {
        let name = self.name(name);
        self.record_named_at(name, kind, vlen, kind_flag, size_or_type)
    }

    /// A record header whose name is at string offset `name`.
    pub fn record_named_at(
        &mut self,
        name: u32,
        kind: u32,
        vlen: u32,
        kind_flag: bool,
        size_or_type: u32,
    ) -> u32 {
        self.word(name);
        self.word((u32::from(kind_flag) << 31) | (kind << 24) | vlen);
        self.word(size_or_type);
        self.next_id += 1;
        self.next_id - 1
    }

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

    /// `members`: (name, type, offset word as stored).
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
            let member = self.name(member);
            self.word(member);
            self.word(ty);
            self.word(offset);
        }
        id
    }

    pub fn enumeration(&mut self, name: &str, signed: bool, values: &[(&str, i32)]) -> u32 {
        let id = self.record(name, KIND_ENUM, values.len() as u32, signed, 4);
        for &(value_name, value) in values {
            let value_name = self.name(value_name);
            self.word(value_name);
            self.word(value as u32);
        }
        id
    }

    pub fn enum64(&mut self, name: &str, signed: bool, values: &[(&str, u64)]) -> u32 {
        let id = self.record(name, KIND_ENUM64, values.len() as u32, signed, 8);
        for &(value_name, value) in values {
            let value_name = self.name(value_name);
            self.word(value_name);
            self.word(value as u32);
            self.word((value >> 32) as u32);
        }
        id
    }

    pub fn func_proto(&mut self, ret: u32, params: &[(&str, u32)]) -> u32 {
        let id = self.record("", KIND_FUNC_PROTO, params.len() as u32, false, ret);
        for &(param, ty) in params {
            let param = self.name(param);
            self.word(param);
            self.word(ty);
        }
        id
    }

    pub fn func(&mut self, name: &str, proto: u32) -> u32 {
        self.record(name, KIND_FUNC, 1, false, proto)
    }

    /// Header, types, strings.
    pub fn build(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let header = [
            0x0001_eb9f_u32, // magic 0xeb9f, version 1, flags 0
            24,
            0,
            self.types.len() as u32,
            self.types.len() as u32,
            self.strings.len() as u32,
        ];
        for w in header {
            out.extend_from_slice(&w.to_le_bytes());
        }
        out.extend_from_slice(&self.types);
        out.extend_from_slice(&self.strings);
        out
    }
}
