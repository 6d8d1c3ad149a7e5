//! A lazy reader for BTF, the kernel's BPF Type Format
//! (`/sys/kernel/btf/vmlinux`, and split BTF for modules).
//!
//! The format (the kernel's Documentation/bpf/btf.rst): a header, then a type
//! section of variable-length records (type id N is the N-th record, id 0 is
//! `void`), then a string table of NUL-terminated names.
//!
//! vmlinux holds about 150,000 types and a script asks about a handful, so the
//! reader does the least work it can:
//! - [`Btf::open`] maps the file, validates the header and makes one pass
//!   over the record headers to learn where each record starts (the record
//!   size follows from its kind and `vlen`). Nothing else is decoded.
//! - A by-name lookup searches the string table for the name, then the
//!   record headers for that string offset. After a few lookups of one kind
//!   the kind's names are indexed instead.
//! - Members, parameters and enum values are decoded only when asked for.
//!
//! Every read is bounds-checked: a truncated or corrupt file gives a
//! [`BtfError`], never a panic.

use std::collections::HashMap;
use std::fmt;
use std::hash::BuildHasher;
use std::ops::{Deref, Range};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use hashbrown::{DefaultHashBuilder, HashTable};

const MAGIC: u16 = 0xeb9f;
const VERSION: u8 = 1;
/// The header as version 1 defines it; a newer, longer header is accepted.
const HEADER_LEN: usize = 24;
/// name_off, info, size/type.
const RECORD_HEADER_LEN: usize = 12;

/// Why BTF could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BtfError {
    /// The file could not be opened or read.
    Io { path: PathBuf, message: String },
    /// The bytes are not valid BTF.
    Corrupt(String),
}

impl fmt::Display for BtfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BtfError::Io { path, message } => {
                write!(f, "cannot read BTF at {}: {message}", path.display())
            }
            BtfError::Corrupt(message) => write!(f, "corrupt BTF: {message}"),
        }
    }
}

impl std::error::Error for BtfError {}

fn corrupt<T>(message: impl Into<String>) -> Result<T, BtfError> {
    Err(BtfError::Corrupt(message.into()))
}

/// The kinds of BTF type records (`BTF_KIND_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Int = 1,
    Ptr = 2,
    Array = 3,
    Struct = 4,
    Union = 5,
    Enum = 6,
    Fwd = 7,
    Typedef = 8,
    Volatile = 9,
    Const = 10,
    Restrict = 11,
    Func = 12,
    FuncProto = 13,
    Var = 14,
    Datasec = 15,
    Float = 16,
    DeclTag = 17,
    TypeTag = 18,
    Enum64 = 19,
}

/// One more than the largest kind number, to size per-kind tables.
const KIND_SLOTS: usize = 20;

impl Kind {
    fn from_raw(raw: u32) -> Option<Kind> {
        use Kind::*;
        Some(match raw {
            1 => Int,
            2 => Ptr,
            3 => Array,
            4 => Struct,
            5 => Union,
            6 => Enum,
            7 => Fwd,
            8 => Typedef,
            9 => Volatile,
            10 => Const,
            11 => Restrict,
            12 => Func,
            13 => FuncProto,
            14 => Var,
            15 => Datasec,
            16 => Float,
            17 => DeclTag,
            18 => TypeTag,
            19 => Enum64,
            _ => return None,
        })
    }

    /// Bytes that follow the 12-byte record header.
    fn trailing_len(self, vlen: usize) -> usize {
        use Kind::*;
        match self {
            Int | Var | DeclTag => 4,
            Array => 12,
            Struct | Union | Datasec | Enum64 => 12 * vlen,
            Enum | FuncProto => 8 * vlen,
            Ptr | Fwd | Typedef | Volatile | Const | Restrict | Func | Float | TypeTag => 0,
        }
    }

    /// Kinds whose `size_or_type` field names another type.
    fn refers_to_type(self) -> bool {
        use Kind::*;
        matches!(
            self,
            Ptr | Typedef
                | Volatile
                | Const
                | Restrict
                | Func
                | FuncProto
                | Var
                | DeclTag
                | TypeTag
        )
    }
}

/// A type record, undecoded beyond its header.
#[derive(Debug, Clone, Copy)]
pub struct BtfType<'a> {
    pub id: u32,
    pub kind: Kind,
    /// Empty for anonymous types.
    pub name: &'a str,
    pub kind_flag: bool,
    pub vlen: u16,
    size_or_type: u32,
    /// The kind-specific bytes after the record header.
    trailing: &'a [u8],
}

impl BtfType<'_> {
    /// Byte size, for kinds that have one (int, struct, union, enum, float, datasec).
    pub fn size(&self) -> Option<u32> {
        (!self.kind.refers_to_type() && self.kind != Kind::Array && self.kind != Kind::Fwd)
            .then_some(self.size_or_type)
    }

    /// The type this one refers to: a pointer's target, a typedef's or
    /// qualifier's base, a function's prototype, a prototype's return type.
    pub fn referenced(&self) -> Option<u32> {
        self.kind.refers_to_type().then_some(self.size_or_type)
    }

    /// An `Int`'s encoding.
    pub fn int(&self) -> Option<IntInfo> {
        if self.kind != Kind::Int {
            return None;
        }
        let raw = read_u32(self.trailing, 0)?;
        let encoding = (raw >> 24) & 0x0f;
        Some(IntInfo {
            bytes: self.size_or_type,
            bits: raw & 0xff,
            bit_offset: (raw >> 16) & 0xff,
            signed: encoding & 1 != 0,
            is_char: encoding & 2 != 0,
            is_bool: encoding & 4 != 0,
        })
    }

    /// An `Array`'s element type and length.
    pub fn array(&self) -> Option<ArrayInfo> {
        if self.kind != Kind::Array {
            return None;
        }
        Some(ArrayInfo {
            elem: read_u32(self.trailing, 0)?,
            index: read_u32(self.trailing, 4)?,
            len: read_u32(self.trailing, 8)?,
        })
    }

    /// A `Fwd`'s flavour: true for `union x;`, false for `struct x;`.
    pub fn fwd_is_union(&self) -> bool {
        self.kind == Kind::Fwd && self.kind_flag
    }

    /// The `n`-th 4-byte word of the trailing data's `entry`-th entry.
    fn entry_word(&self, entry: usize, entry_len: usize, word: usize) -> u32 {
        // The record index checked that `trailing` holds vlen entries.
        read_u32(self.trailing, entry * entry_len + word * 4).unwrap_or(0)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IntInfo {
    pub bytes: u32,
    pub bits: u32,
    pub bit_offset: u32,
    pub signed: bool,
    pub is_char: bool,
    pub is_bool: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArrayInfo {
    pub elem: u32,
    pub index: u32,
    pub len: u32,
}

/// A struct or union member as recorded (see [`Btf::members`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BtfMember<'a> {
    pub name: &'a str,
    pub ty: u32,
    pub bit_offset: u32,
    /// Set only when the record says so (`kind_flag`); see [`Btf::members`].
    pub bitfield_bits: Option<u32>,
}

/// A function prototype parameter. `name` is empty in `btf_trace_*` typedefs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BtfParam<'a> {
    pub name: &'a str,
    pub ty: u32,
}

/// The file's bytes: mapped when the file allows it, else read.
enum Bytes {
    Mapped(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Bytes::Mapped(map) => map,
            Bytes::Owned(vec) => vec,
        }
    }
}

/// A parsed BTF blob. For split BTF (a module's), type ids and string
/// offsets continue from the base's, and lookups by id fall through to it.
pub struct Btf {
    bytes: Bytes,
    types: Range<usize>,
    strings: Range<usize>,
    /// Byte offset (into `bytes`) of each record, index 0 = `first_id`.
    record_offsets: Vec<u32>,
    first_id: u32,
    base: Option<Arc<Btf>>,
    name_indexes: [OnceLock<NameIndex>; KIND_SLOTS],
    /// By-name lookups answered so far without an index, per kind.
    direct_lookups: [AtomicU32; KIND_SLOTS],
    /// Every own type (of any kind) named `name`, for the names a direct
    /// lookup searched: a bare C name (`"task_struct"` in a `@cast`) is
    /// asked for as an int, a typedef, a float, then a struct, and one
    /// search answers all four.
    searched_names: Mutex<HashMap<Box<str>, Box<[u32]>>>,
    /// Each own record's name offset (index 0 = `first_id`), made by the
    /// first direct lookup. Finding a name's records is then a tight scan
    /// of 4-byte words; reading each record's header from the blob instead
    /// cost about 2.4 M instructions a lookup in vmlinux (callgrind,
    /// `kernel.trace("sched:*")`: 18 lookups, a third of pass 2).
    name_offsets: OnceLock<Vec<u32>>,
}

/// A kind's first lookups search the string table instead of building an
/// index: one search costs less than indexing every name of the kind, and
/// most scripts ask only a few questions per kind.
const DIRECT_LOOKUPS_BEFORE_INDEX: u32 = 4;

/// Type ids of one kind, findable by name.
struct NameIndex {
    ids: HashTable<u32>,
    hasher: DefaultHashBuilder,
}

impl fmt::Debug for Btf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Btf")
            .field("first_id", &self.first_id)
            .field("types", &self.record_offsets.len())
            .field("split", &self.base.is_some())
            .finish()
    }
}

impl Btf {
    /// Opens base BTF (vmlinux's, or a standalone file).
    pub fn open(path: &Path) -> Result<Btf, BtfError> {
        Btf::parse(load(path)?, None)
    }

    /// Opens split BTF (a module's) on top of `base`.
    pub fn open_split(path: &Path, base: Arc<Btf>) -> Result<Btf, BtfError> {
        Btf::parse(load(path)?, Some(base))
    }

    /// Parses base BTF from bytes in memory.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Btf, BtfError> {
        Btf::parse(Bytes::Owned(bytes), None)
    }

    /// Parses split BTF from bytes in memory.
    pub fn split_from_bytes(bytes: Vec<u8>, base: Arc<Btf>) -> Result<Btf, BtfError> {
        Btf::parse(Bytes::Owned(bytes), Some(base))
    }

    fn parse(bytes: Bytes, base: Option<Arc<Btf>>) -> Result<Btf, BtfError> {
        let (types, strings) = parse_header(&bytes)?;
        check_string_table(&bytes[strings.clone()], base.is_some())?;
        let record_offsets = index_records(&bytes, types.clone())?;
        let first_id = match &base {
            Some(base) => base.last_id() + 1,
            None => 1,
        };
        if u32::try_from(record_offsets.len())
            .ok()
            .and_then(|n| first_id.checked_add(n))
            .is_none()
        {
            return corrupt("too many types");
        }
        Ok(Btf {
            bytes,
            types,
            strings,
            record_offsets,
            first_id,
            base,
            name_indexes: Default::default(),
            direct_lookups: Default::default(),
            searched_names: Default::default(),
            name_offsets: OnceLock::new(),
        })
    }

    /// The first type id this blob defines (1, or the base's last id + 1).
    pub fn first_id(&self) -> u32 {
        self.first_id
    }

    /// The last type id this blob defines (`first_id - 1` when it has none).
    pub fn last_id(&self) -> u32 {
        // parse() checked that this does not overflow.
        self.first_id + self.record_offsets.len() as u32 - 1
    }

    /// How many types this blob itself defines.
    pub fn type_count(&self) -> usize {
        self.record_offsets.len()
    }

    pub fn base(&self) -> Option<&Arc<Btf>> {
        self.base.as_ref()
    }

    /// The size of the type and string sections, in bytes.
    pub fn section_sizes(&self) -> (usize, usize) {
        (self.types.len(), self.strings.len())
    }

    /// The record for type `id` (ids below `first_id` come from the base).
    /// Id 0 (`void`) has no record: callers handle it.
    pub fn ty(&self, id: u32) -> Result<BtfType<'_>, BtfError> {
        if id < self.first_id {
            return match &self.base {
                Some(base) if id > 0 => base.ty(id),
                _ => corrupt(format!("type id {id} has no record")),
            };
        }
        let Some(&offset) = self.record_offsets.get((id - self.first_id) as usize) else {
            return corrupt(format!(
                "type id {id} is out of range (last is {})",
                self.last_id()
            ));
        };
        self.record_at(id, offset as usize)
    }

    fn record_at(&self, id: u32, offset: usize) -> Result<BtfType<'_>, BtfError> {
        // index_records() checked every record lies inside the type section.
        let bytes: &[u8] = &self.bytes;
        let word = |i: usize| read_u32(bytes, offset + 4 * i).unwrap_or(0);
        let (name_off, info, size_or_type) = (word(0), word(1), word(2));
        let (kind, vlen) = decode_info(info)?;
        let start = offset + RECORD_HEADER_LEN;
        let trailing = &bytes[start..start + kind.trailing_len(vlen as usize)];
        Ok(BtfType {
            id,
            kind,
            name: self.name(name_off)?,
            kind_flag: info >> 31 != 0,
            vlen,
            size_or_type,
            trailing,
        })
    }

    /// A string from the string table; offsets past the base's table refer
    /// to this blob's own table.
    pub fn name(&self, offset: u32) -> Result<&str, BtfError> {
        let raw = self.name_bytes(offset)?;
        std::str::from_utf8(raw)
            .or_else(|_| corrupt(format!("string at offset {offset} is not UTF-8")))
    }

    fn name_bytes(&self, offset: u32) -> Result<&[u8], BtfError> {
        let mut offset = offset as usize;
        if let Some(base) = &self.base {
            let base_len = base.strings.len();
            if offset < base_len {
                return base.name_bytes(offset as u32);
            }
            offset -= base_len;
        }
        let table = &self.bytes[self.strings.clone()];
        let Some(tail) = table.get(offset..) else {
            return corrupt(format!(
                "string offset {offset} is past the string table ({} bytes)",
                table.len()
            ));
        };
        // check_string_table() made sure the table ends with a NUL.
        let end = memchr::memchr(0, tail).unwrap_or(tail.len());
        Ok(&tail[..end])
    }

    /// Finds a type of `kind` named `name` among this blob's own types (not
    /// the base's). The first few lookups of a kind search for the name
    /// directly; after that the kind's names are indexed.
    pub fn find_by_name(&self, kind: Kind, name: &str) -> Result<Option<u32>, BtfError> {
        if name.is_empty() {
            return Ok(None);
        }
        let slot = kind as usize;
        if self.name_indexes[slot].get().is_none() {
            if let Some(named) = self.searched_names().get(name) {
                return Ok(self.first_of_kind(named, kind));
            }
            if self.direct_lookups[slot].fetch_add(1, Ordering::Relaxed)
                < DIRECT_LOOKUPS_BEFORE_INDEX
            {
                let named = self.records_named(name);
                let found = self.first_of_kind(&named, kind);
                self.searched_names().insert(name.into(), named.into());
                return Ok(found);
            }
        }
        let index = self.name_index(kind)?;
        let hash = index.hasher.hash_one(name.as_bytes());
        Ok(index
            .ids
            .find(hash, |&id| {
                self.name_bytes_of(id).is_ok_and(|n| n == name.as_bytes())
            })
            .copied())
    }

    fn searched_names(&self) -> std::sync::MutexGuard<'_, HashMap<Box<str>, Box<[u32]>>> {
        self.searched_names
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The first of `named` (ids from [`Btf::records_named`]) of `kind`.
    fn first_of_kind(&self, named: &[u32], kind: Kind) -> Option<u32> {
        named.iter().copied().find(|&id| {
            let offset = self.record_offsets[(id - self.first_id) as usize] as usize;
            read_u32(&self.bytes, offset + 4).is_some_and(|info| (info >> 24) & 0x1f == kind as u32)
        })
    }

    /// Finds `name` in the string tables, then every own record that names
    /// it by one of those offsets, in the order the offsets were found and
    /// then by id: no string but the one wanted is compared, and the
    /// records are read once whatever kinds are asked for afterwards.
    fn records_named(&self, name: &str) -> Vec<u32> {
        let mut needle = Vec::with_capacity(name.len() + 2);
        needle.push(0);
        needle.extend_from_slice(name.as_bytes());
        needle.push(0);
        let finder = memchr::memmem::Finder::new(&needle);
        // A split blob's records may name strings of its base's table.
        let base_strings = self.base.as_ref().map_or(0, |b| b.strings.len());
        let tables = self
            .base
            .as_ref()
            .map(|base| (&base.bytes[base.strings.clone()], 0))
            .into_iter()
            .chain([(&self.bytes[self.strings.clone()], base_strings)]);
        // `at` is the NUL before the name.
        let name_offs: Vec<u32> = tables
            .flat_map(|(table, table_start)| {
                finder
                    .find_iter(table)
                    .map(move |at| (table_start + at + 1) as u32)
            })
            .collect();
        if name_offs.is_empty() {
            return Vec::new();
        }
        let column = self.name_offsets.get_or_init(|| {
            self.record_offsets
                .iter()
                .map(|&offset| read_u32(&self.bytes, offset as usize).unwrap_or(u32::MAX))
                .collect()
        });
        let mut named = Vec::new();
        for name_off in name_offs {
            positions_of(column, name_off, |i| named.push(self.first_id + i as u32));
        }
        named
    }

    fn name_index(&self, kind: Kind) -> Result<&NameIndex, BtfError> {
        let slot = &self.name_indexes[kind as usize];
        if let Some(index) = slot.get() {
            return Ok(index);
        }
        let built = self.build_name_index(kind)?;
        Ok(slot.get_or_init(|| built))
    }

    fn build_name_index(&self, kind: Kind) -> Result<NameIndex, BtfError> {
        let hasher = DefaultHashBuilder::default();
        let of_kind: Vec<u32> = self.ids_of_kind(kind).collect();
        let mut ids = HashTable::with_capacity(of_kind.len());
        for id in of_kind {
            let name = self.name_bytes_of(id)?;
            if name.is_empty() {
                continue;
            }
            let hash = hasher.hash_one(name);
            ids.insert_unique(hash, id, |&other| {
                hasher.hash_one(self.name_bytes_of(other).unwrap_or_default())
            });
        }
        Ok(NameIndex { ids, hasher })
    }

    /// The raw name of one of this blob's own types, without decoding the rest.
    fn name_bytes_of(&self, id: u32) -> Result<&[u8], BtfError> {
        let index = id.wrapping_sub(self.first_id) as usize;
        let Some(&offset) = self.record_offsets.get(index) else {
            return corrupt(format!("type id {id} is not one of this blob's own"));
        };
        self.name_bytes(read_u32(&self.bytes, offset as usize).unwrap_or(0))
    }

    /// Ids of this blob's own types of `kind`, in id order.
    pub fn ids_of_kind(&self, kind: Kind) -> impl Iterator<Item = u32> + '_ {
        self.record_offsets
            .iter()
            .enumerate()
            .filter(move |&(_, &offset)| {
                let info = read_u32(&self.bytes, offset as usize + 4).unwrap_or(0);
                (info >> 24) & 0x1f == kind as u32
            })
            .map(|(i, _)| self.first_id + i as u32)
    }

    /// Members of a struct or union. Bit offsets and bitfield widths follow
    /// the record's `kind_flag`: when set, each offset packs the bitfield
    /// width in its top 8 bits. When clear, offsets are plain bit offsets
    /// and an old-style bitfield shows up as an `Int` member type with fewer
    /// bits than its size, which [`Btf::member_bitfield`] resolves.
    pub fn members<'a>(&'a self, ty: &BtfType<'a>) -> Result<Vec<BtfMember<'a>>, BtfError> {
        if !matches!(ty.kind, Kind::Struct | Kind::Union) {
            return Ok(Vec::new());
        }
        (0..ty.vlen as usize)
            .map(|i| {
                let name = self.name(ty.entry_word(i, 12, 0))?;
                let member_ty = ty.entry_word(i, 12, 1);
                let offset = ty.entry_word(i, 12, 2);
                let (bit_offset, bitfield_bits) = if ty.kind_flag {
                    let bits = offset >> 24;
                    (offset & 0x00ff_ffff, (bits != 0).then_some(bits))
                } else {
                    (offset, None)
                };
                Ok(BtfMember {
                    name,
                    ty: member_ty,
                    bit_offset,
                    bitfield_bits,
                })
            })
            .collect()
    }

    /// For a member of a struct without `kind_flag`: whether its type is an
    /// old-style bitfield `Int`, as (extra bit offset, width).
    pub fn member_bitfield(&self, member_ty: u32) -> Option<(u32, u32)> {
        let int = self.ty(member_ty).ok()?.int()?;
        (int.bit_offset != 0 || int.bits != int.bytes * 8).then_some((int.bit_offset, int.bits))
    }

    /// Parameters of a function prototype. A trailing unnamed `void`
    /// parameter (C's `...`) is dropped.
    pub fn params<'a>(&'a self, proto: &BtfType<'a>) -> Result<Vec<BtfParam<'a>>, BtfError> {
        if proto.kind != Kind::FuncProto {
            return Ok(Vec::new());
        }
        let mut params = (0..proto.vlen as usize)
            .map(|i| {
                Ok(BtfParam {
                    name: self.name(proto.entry_word(i, 8, 0))?,
                    ty: proto.entry_word(i, 8, 1),
                })
            })
            .collect::<Result<Vec<_>, BtfError>>()?;
        if params
            .last()
            .is_some_and(|p| p.name.is_empty() && p.ty == 0)
        {
            params.pop();
        }
        Ok(params)
    }

    /// Values of an `Enum` or `Enum64`, signed or not as `kind_flag` says.
    pub fn enum_values<'a>(&'a self, ty: &BtfType<'a>) -> Result<Vec<(&'a str, i64)>, BtfError> {
        let signed = ty.kind_flag;
        if !matches!(ty.kind, Kind::Enum | Kind::Enum64) {
            return Ok(Vec::new());
        }
        let is_64 = ty.kind == Kind::Enum64;
        (0..ty.vlen as usize)
            .map(|i| {
                let value = if is_64 {
                    let lo = u64::from(ty.entry_word(i, 12, 1));
                    let hi = u64::from(ty.entry_word(i, 12, 2));
                    // Unsigned values above i64::MAX wrap, as stap's longs do.
                    ((hi << 32) | lo) as i64
                } else if signed {
                    i64::from(ty.entry_word(i, 8, 1) as i32)
                } else {
                    i64::from(ty.entry_word(i, 8, 1))
                };
                let name_off = ty.entry_word(i, if is_64 { 12 } else { 8 }, 0);
                Ok((self.name(name_off)?, value))
            })
            .collect()
    }

    /// Decodes every type completely: each name, member, parameter and
    /// enum value. Nothing in stap-rs needs this; it is the yardstick the
    /// lazy paths are measured against (`examples/btf_cost.rs`).
    pub fn decode_all(&self) -> Result<usize, BtfError> {
        let mut decoded = 0usize;
        for id in self.first_id..=self.last_id() {
            let ty = self.ty(id)?;
            decoded += ty.name.len();
            decoded += match ty.kind {
                Kind::Struct | Kind::Union => self.members(&ty)?.len(),
                Kind::FuncProto => self.params(&ty)?.len(),
                Kind::Enum | Kind::Enum64 => self.enum_values(&ty)?.len(),
                Kind::Int => ty.int().map_or(0, |i| i.bits as usize),
                Kind::Array => ty.array().map_or(0, |a| a.len as usize),
                _ => 1,
            };
        }
        Ok(decoded)
    }
}

fn load(path: &Path) -> Result<Bytes, BtfError> {
    let io_error = |e: std::io::Error| BtfError::Io {
        path: path.to_path_buf(),
        message: e.to_string(),
    };
    let file = std::fs::File::open(path).map_err(io_error)?;
    // A private read-only map: sysfs refuses shared maps of vmlinux BTF
    // (EACCES), and maps it without copying (6.16+).
    // SAFETY: the map is read-only and BTF files are not rewritten while
    // mapped (sysfs BTF is immutable; a user's --btf file is theirs to keep
    // still). Every read from the map is bounds-checked.
    if let Ok(map) = unsafe { memmap2::MmapOptions::new().map_copy_read_only(&file) }
        && !map.is_empty()
    {
        return Ok(Bytes::Mapped(map));
    }
    // sysfs may refuse mmap (module BTF, older kernels): read it instead.
    std::fs::read(path).map(Bytes::Owned).map_err(io_error)
}

/// Calls `found` with each index of `column` that holds `wanted`, in
/// order. A chunk is tested with no branch per word, which the compiler
/// turns into vector compares; only a chunk with a match is walked.
fn positions_of(column: &[u32], wanted: u32, mut found: impl FnMut(usize)) {
    const LANES: usize = 16;
    for (chunk_index, chunk) in column.chunks(LANES).enumerate() {
        if chunk
            .iter()
            .fold(false, |any, &word| any | (word == wanted))
        {
            for (i, &word) in chunk.iter().enumerate() {
                if word == wanted {
                    found(chunk_index * LANES + i);
                }
            }
        }
    }
}

fn read_u32(bytes: &[u8], at: usize) -> Option<u32> {
    let raw = bytes.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes(raw.try_into().ok()?))
}

fn decode_info(info: u32) -> Result<(Kind, u16), BtfError> {
    let raw_kind = (info >> 24) & 0x1f;
    match Kind::from_raw(raw_kind) {
        Some(kind) => Ok((kind, (info & 0xffff) as u16)),
        None => corrupt(format!("unknown type kind {raw_kind}")),
    }
}

/// Validates the header and returns the type and string sections as byte
/// ranges of the whole blob.
fn parse_header(bytes: &[u8]) -> Result<(Range<usize>, Range<usize>), BtfError> {
    if bytes.len() < HEADER_LEN {
        return corrupt(format!("{} bytes is too short for a header", bytes.len()));
    }
    let magic = u16::from_le_bytes([bytes[0], bytes[1]]);
    if magic == MAGIC.swap_bytes() {
        return corrupt("big-endian BTF is not supported");
    }
    if magic != MAGIC {
        return corrupt(format!("bad magic {magic:#06x}, expected {MAGIC:#06x}"));
    }
    if bytes[2] != VERSION {
        return corrupt(format!("unsupported version {}", bytes[2]));
    }
    let word = |i: usize| read_u32(bytes, 4 * i).unwrap_or(0) as usize;
    let (header_len, type_off, type_len, str_off, str_len) =
        (word(1), word(2), word(3), word(4), word(5));
    if header_len < HEADER_LEN || header_len > bytes.len() {
        return corrupt(format!("bad header length {header_len}"));
    }
    let section = |name: &str, off: usize, len: usize| {
        let start = header_len.checked_add(off);
        let end = start.and_then(|s| s.checked_add(len));
        match (start, end) {
            (Some(start), Some(end)) if end <= bytes.len() => Ok(start..end),
            _ => corrupt(format!(
                "{name} section (offset {off}, length {len}) runs past the end of the {} bytes",
                bytes.len()
            )),
        }
    };
    let types = section("type", type_off, type_len)?;
    let strings = section("string", str_off, str_len)?;
    if types.start % 4 != 0 {
        return corrupt("type section is not 4-byte aligned");
    }
    Ok((types, strings))
}

/// Base BTF's table starts with the empty string; every table must end in a
/// NUL so no string can run off its end.
fn check_string_table(table: &[u8], split: bool) -> Result<(), BtfError> {
    if table.is_empty() {
        return if split {
            Ok(())
        } else {
            corrupt("empty string table")
        };
    }
    if !split && table[0] != 0 {
        return corrupt("string table does not start with an empty string");
    }
    if table.last() != Some(&0) {
        return corrupt("string table does not end with a NUL");
    }
    Ok(())
}

/// The one pass done at open: where each record starts, checking that each
/// has a known kind and fits inside the type section.
fn index_records(bytes: &[u8], types: Range<usize>) -> Result<Vec<u32>, BtfError> {
    // vmlinux averages ~21 bytes a record; reserving avoids regrowth.
    let mut offsets = Vec::with_capacity(types.len() / 20);
    let mut at = types.start;
    while at < types.end {
        if types.end - at < RECORD_HEADER_LEN {
            return corrupt(format!("type record {} is truncated", offsets.len() + 1));
        }
        let info = read_u32(bytes, at + 4).unwrap_or(0);
        let (kind, vlen) = decode_info(info)
            .map_err(|e| BtfError::Corrupt(format!("type record {}: {e}", offsets.len() + 1)))?;
        let next = at + RECORD_HEADER_LEN + kind.trailing_len(vlen as usize);
        if next > types.end {
            return corrupt(format!(
                "type record {} ({kind:?}) runs past the type section",
                offsets.len() + 1
            ));
        }
        let Ok(offset) = u32::try_from(at) else {
            return corrupt("type section is larger than 4 GiB");
        };
        offsets.push(offset);
        at = next;
    }
    Ok(offsets)
}

#[cfg(test)]
mod tests {
    use super::*;
    use stap_lang::bpf::btf::*;

    /// int, char, unsigned int:4 bitfields, struct, pointer, enum, func.
    fn sample() -> (Vec<u8>, u32) {
        let mut b = BtfWriter::new();
        let int = b.int("int", 4, INT_SIGNED); // 1
        let char_ = b.int("char", 1, INT_SIGNED | INT_CHAR); // 2
        let uint = b.int("unsigned int", 4, 0); // 3
        let name_array = b.array(char_, int, 16); // 4
        let device = b.composite(
            KIND_STRUCT,
            "net_device",
            64,
            true,
            &[
                ("name", name_array, 0),
                ("flags", uint, (3 << 24) | 128),
                ("mtu", uint, 160),
            ],
        ); // 5
        let device_ptr = b.ptr(device); // 6
        let skb = b.composite(
            KIND_STRUCT,
            "sk_buff",
            16,
            false,
            &[("dev", device_ptr, 0), ("len", uint, 64)],
        ); // 7
        let reason = b.enumeration("skb_drop_reason", false, &[("A", 2), ("B", 3)]); // 8
        let skb_ptr = b.ptr(skb); // 9
        let proto = b.func_proto(int, &[("skb", skb_ptr), ("reason", reason)]); // 10
        b.func("consume", proto, Linkage::Global); // 11
        (b.finish(), skb)
    }

    #[test]
    fn reads_records_lazily_by_id_and_name() {
        let (bytes, skb) = sample();
        let btf = Btf::from_bytes(bytes).expect("valid");
        assert_eq!((btf.first_id(), btf.last_id()), (1, 11));
        let skb_ty = btf.ty(skb).expect("record");
        assert_eq!(
            (skb_ty.kind, skb_ty.name, skb_ty.size()),
            (Kind::Struct, "sk_buff", Some(16))
        );
        let members = btf.members(&skb_ty).expect("members");
        assert_eq!(members[1].name, "len");
        assert_eq!(members[1].bit_offset, 64);
        // Direct lookups first: same answers each time.
        for _ in 0..2 * DIRECT_LOOKUPS_BEFORE_INDEX {
            assert_eq!(btf.find_by_name(Kind::Struct, "sk_buff"), Ok(Some(skb)));
            assert_eq!(btf.find_by_name(Kind::Struct, "net_device"), Ok(Some(5)));
            assert_eq!(btf.find_by_name(Kind::Struct, "consume"), Ok(None));
            assert_eq!(btf.find_by_name(Kind::Func, "consume"), Ok(Some(11)));
            assert_eq!(btf.find_by_name(Kind::Struct, "sk_buf"), Ok(None));
        }
        // Names already searched are answered again without a search; new
        // names past the first few build the index, with the same answers.
        assert!(btf.name_indexes[Kind::Struct as usize].get().is_none());
        for n in 0..DIRECT_LOOKUPS_BEFORE_INDEX {
            assert_eq!(btf.find_by_name(Kind::Struct, &format!("s{n}")), Ok(None));
        }
        assert!(btf.name_indexes[Kind::Struct as usize].get().is_some());
        assert_eq!(btf.find_by_name(Kind::Struct, "sk_buff"), Ok(Some(skb)));
        assert_eq!(btf.find_by_name(Kind::Struct, "consume"), Ok(None));
        // A name searched once answers its other kinds without searching
        // again (the string table is not read), until their index exists.
        let fresh = Btf::from_bytes(sample().0).expect("valid");
        assert_eq!(fresh.find_by_name(Kind::Struct, "consume"), Ok(None));
        assert_eq!(fresh.searched_names().len(), 1);
        assert_eq!(fresh.find_by_name(Kind::Func, "consume"), Ok(Some(11)));
        assert_eq!(fresh.find_by_name(Kind::Typedef, "consume"), Ok(None));
        assert_eq!(
            fresh.direct_lookups[Kind::Func as usize].load(Ordering::Relaxed),
            0
        );
        assert_eq!(fresh.find_by_name(Kind::Struct, "sk_buff"), Ok(Some(skb)));
        assert_eq!(fresh.searched_names().len(), 2);
        assert_eq!(btf.ids_of_kind(Kind::Ptr).collect::<Vec<_>>(), [6, 9]);
        assert!(btf.decode_all().is_ok());
    }

    #[test]
    fn decodes_bitfields_arrays_enums_and_prototypes() {
        let (bytes, _) = sample();
        let btf = Btf::from_bytes(bytes).expect("valid");
        let device = btf.ty(5).expect("record");
        let members = btf.members(&device).expect("members");
        let flags = &members[1];
        assert_eq!((flags.bit_offset, flags.bitfield_bits), (128, Some(3)));
        assert_eq!(members[2].bitfield_bits, None);
        let array = btf.ty(4).expect("record").array().expect("array");
        assert_eq!((array.elem, array.len), (2, 16));
        let char_ = btf.ty(2).expect("record").int().expect("int");
        assert!(char_.is_char && char_.signed && char_.bytes == 1);
        let reason = btf.ty(8).expect("record");
        assert_eq!(btf.enum_values(&reason), Ok(vec![("A", 2), ("B", 3)]));
        let func = btf.ty(11).expect("record");
        let proto = btf.ty(func.referenced().expect("proto")).expect("record");
        let params = btf.params(&proto).expect("params");
        let names: Vec<_> = params.iter().map(|p| (p.name, p.ty)).collect();
        assert_eq!(names, [("skb", 9), ("reason", 8)]);
        assert_eq!(proto.referenced(), Some(1));
    }

    #[test]
    fn signed_enums_and_enum64() {
        let mut b = BtfWriter::new();
        let signed = b.enumeration("s", true, &[("NEG", -1)]);
        let unsigned = b.enumeration("u", false, &[("BIG", -1)]);
        let wide = b.enum64("w", false, &[("HUGE", 1 << 40)]);
        let btf = Btf::from_bytes(b.finish()).expect("valid");
        let values = |id| {
            btf.enum_values(&btf.ty(id).expect("record"))
                .expect("values")
        };
        assert_eq!(values(signed), [("NEG", -1)]);
        assert_eq!(values(unsigned), [("BIG", 0xffff_ffff)]);
        assert_eq!(values(wide), [("HUGE", 1 << 40)]);
    }

    #[test]
    fn old_style_bitfields_come_from_the_int() {
        let mut b = BtfWriter::new();
        let field = b.bitfield_int("unsigned int", 4, 2, 5);
        let plain = b.int("int", 4, INT_SIGNED);
        let btf = Btf::from_bytes(b.finish()).expect("valid");
        assert_eq!(btf.member_bitfield(field), Some((2, 5)));
        assert_eq!(btf.member_bitfield(plain), None);
    }

    #[test]
    fn split_btf_continues_ids_and_strings() {
        let (bytes, skb) = sample();
        let base = Arc::new(Btf::from_bytes(bytes).expect("valid"));
        let mut b = BtfWriter::split(base.last_id(), base.strings.len() as u32);
        let skb_ptr = b.ptr(skb); // 12
        let proto = b.func_proto(0, &[("skb", skb_ptr)]); // 13
        let func = b.func("mod_xmit", proto, Linkage::Global); // 14
        // A record may name a string of the base's table.
        let base_table = &base.bytes[base.strings.clone()];
        let sk_buff_at = memchr::memmem::find(base_table, b"\0sk_buff\0").expect("in base") + 1;
        let alias = b.record_named_at(sk_buff_at as u32, KIND_TYPEDEF, 0, false, skb); // 15
        let split = Btf::split_from_bytes(b.finish(), Arc::clone(&base)).expect("valid split");
        assert_eq!((split.first_id(), split.last_id(), func), (12, 15, 14));
        for _ in 0..2 * DIRECT_LOOKUPS_BEFORE_INDEX {
            assert_eq!(split.find_by_name(Kind::Func, "mod_xmit"), Ok(Some(14)));
            assert_eq!(
                split.find_by_name(Kind::Typedef, "sk_buff"),
                Ok(Some(alias))
            );
        }
        // The base's types are reachable by id but not found by name here.
        assert_eq!(split.ty(skb).expect("base record").name, "sk_buff");
        assert_eq!(split.find_by_name(Kind::Struct, "sk_buff"), Ok(None));
        let proto = split.ty(13).expect("record");
        assert_eq!(split.params(&proto).expect("params")[0].name, "skb");
        assert!(split.ty(16).is_err());
        assert!(split.ty(0).is_err());
    }

    fn expect_corrupt(bytes: Vec<u8>, wanted: &str) {
        match Btf::from_bytes(bytes) {
            Err(BtfError::Corrupt(message)) => {
                assert!(message.contains(wanted), "`{message}` lacks `{wanted}`")
            }
            other => panic!("expected a corrupt-BTF error with `{wanted}`, got {other:?}"),
        }
    }

    #[test]
    fn every_truncation_is_an_error() {
        let (bytes, _) = sample();
        for len in 0..bytes.len() {
            assert!(
                Btf::from_bytes(bytes[..len].to_vec()).is_err(),
                "a blob cut at {len} of {} bytes parsed",
                bytes.len()
            );
        }
    }

    #[test]
    fn bad_headers_are_errors() {
        let (bytes, _) = sample();
        let with = |at: usize, value: u32| {
            let mut copy = bytes.clone();
            copy[at..at + 4].copy_from_slice(&value.to_le_bytes());
            copy
        };
        expect_corrupt(with(0, 0x0001_1234), "bad magic");
        expect_corrupt(with(0, 0x0001_9feb), "big-endian");
        expect_corrupt(with(0, 0x0002_eb9f), "version");
        expect_corrupt(with(4, 4), "header length");
        expect_corrupt(with(4, 1 << 30), "header length");
        expect_corrupt(with(8, 1 << 30), "type section");
        expect_corrupt(with(12, u32::MAX), "type section");
        expect_corrupt(with(16, u32::MAX - 2), "string section");
        expect_corrupt(with(20, 1 << 20), "string section");
        expect_corrupt(with(8, 2), "aligned");
    }

    #[test]
    fn bad_records_are_errors() {
        let (bytes, _) = sample();
        // First record's info word: kind 31 does not exist.
        let mut unknown = bytes.clone();
        unknown[24 + 4..24 + 8].copy_from_slice(&(31u32 << 24).to_le_bytes());
        expect_corrupt(unknown, "unknown type kind");
        // A struct claiming 1000 members runs past the section.
        let mut long = BtfWriter::new();
        long.record("s", KIND_STRUCT, 1000, false, 4);
        expect_corrupt(long.finish(), "runs past");
        // A string table without its final NUL.
        let mut unterminated = bytes.clone();
        let last = unterminated.len() - 1;
        unterminated[last] = b'x';
        expect_corrupt(unterminated, "NUL");
    }

    #[test]
    fn out_of_range_names_and_ids_are_errors() {
        let mut b = BtfWriter::new();
        let int = b.int("int", 4, INT_SIGNED);
        let bad_name = b.record("x", KIND_TYPEDEF, 0, false, int);
        let dangling = b.ptr(999);
        let mut bytes = b.finish();
        // Point the typedef's name past the string table.
        let record = 24 + 16; // after the 16-byte int record
        bytes[record..record + 4].copy_from_slice(&5000u32.to_le_bytes());
        let btf = Btf::from_bytes(bytes).expect("header and records are fine");
        assert!(
            matches!(btf.ty(bad_name), Err(BtfError::Corrupt(m)) if m.contains("string offset"))
        );
        let ptr = btf.ty(dangling).expect("record");
        assert!(btf.ty(ptr.referenced().expect("target")).is_err());
        assert!(btf.ty(0).is_err());
        assert!(btf.ty(u32::MAX).is_err());
        assert!(btf.decode_all().is_err());
    }

    /// Every single-byte corruption either fails to parse or parses into
    /// something every accessor handles without panicking.
    #[test]
    fn corrupted_bytes_never_panic() {
        let (bytes, _) = sample();
        for at in 0..bytes.len() {
            for value in [0x00, 0x7f, 0xff] {
                let mut copy = bytes.clone();
                copy[at] = value;
                let Ok(btf) = Btf::from_bytes(copy) else {
                    continue;
                };
                let _ = btf.decode_all();
                for id in 0..=btf.last_id() + 1 {
                    if let Ok(ty) = btf.ty(id) {
                        let _ = btf.members(&ty);
                        let _ = btf.params(&ty);
                        let _ = btf.enum_values(&ty);
                        let _ = (ty.int(), ty.array(), ty.referenced());
                    }
                }
                for _ in 0..=DIRECT_LOOKUPS_BEFORE_INDEX {
                    let _ = btf.find_by_name(Kind::Struct, "sk_buff");
                }
            }
        }
    }
}
