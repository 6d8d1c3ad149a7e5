//! Function prototypes of user-space binaries from their DWARF, for the
//! context variables of `process("...").function("f")` probes: each formal
//! parameter's name and C type, and the return type.
//!
//! Types are kept only as deep as a probe can use them: base types,
//! pointers, qualifiers, typedefs, enums and arrays are followed; structs,
//! unions and classes are named with their size, never expanded. Each
//! binary is read once and its functions kept ([`DwarfCache`]).

use std::collections::HashMap;
use std::fmt;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use gimli::{AttributeValue, DwAt, EndianSlice, RunTimeEndian, Unit, UnitOffset, constants};
use object::{Object, ObjectSection};

/// A C type as DWARF describes it, at the depth probes need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CType {
    Void,
    /// An integer, `char`, `_Bool`: named as DWARF names it (`long int`).
    Int {
        name: String,
        bytes: u32,
        signed: bool,
    },
    Float {
        name: String,
        bytes: u32,
    },
    Pointer(Box<CType>),
    /// `const`, `volatile`, `restrict` or `_Atomic` applied to a type.
    Qualified {
        qualifier: &'static str,
        target: Box<CType>,
    },
    Typedef {
        name: String,
        target: Box<CType>,
    },
    Enum {
        name: String,
        bytes: u32,
        signed: bool,
    },
    Array {
        elem: Box<CType>,
        len: u32,
    },
    /// A struct, union or class, by name only (empty for an anonymous one).
    Aggregate {
        keyword: &'static str,
        name: String,
        bytes: u32,
    },
    /// A function type (seen behind a pointer).
    Function {
        ret: Box<CType>,
        params: Vec<CType>,
    },
    /// A type the reader does not follow (too deep, or in another unit).
    Unknown(String),
}

impl CType {
    /// The C spelling, as in a declaration without a name: `const char *`.
    pub fn spelling(&self) -> String {
        self.spell(String::new())
    }

    /// C declarator syntax: `declarator` already wraps the name.
    fn spell(&self, declarator: String) -> String {
        let with = |base: &str| {
            if declarator.is_empty() {
                base.to_string()
            } else if declarator.starts_with('[') {
                format!("{base}{declarator}")
            } else {
                format!("{base} {declarator}")
            }
        };
        match self {
            CType::Void => with("void"),
            CType::Int { name, .. } | CType::Float { name, .. } | CType::Typedef { name, .. } => {
                with(name)
            }
            CType::Enum { name, .. } => with(&format!("enum {}", or_anonymous(name))),
            CType::Aggregate { keyword, name, .. } => {
                with(&format!("{keyword} {}", or_anonymous(name)))
            }
            CType::Unknown(why) => with(&format!("<{why}>")),
            CType::Pointer(target) => {
                let inner = if matches!(**target, CType::Array { .. } | CType::Function { .. }) {
                    format!("(*{declarator})")
                } else {
                    format!("*{declarator}")
                };
                target.spell(inner)
            }
            CType::Qualified { qualifier, target } => {
                if matches!(**target, CType::Pointer(_)) {
                    target.spell(with(qualifier))
                } else {
                    format!("{qualifier} {}", target.spell(declarator))
                }
            }
            CType::Array { elem, len } => elem.spell(format!("{declarator}[{len}]")),
            CType::Function { ret, params } => {
                let params: Vec<String> = params.iter().map(CType::spelling).collect();
                let params = if params.is_empty() {
                    "void".to_string()
                } else {
                    params.join(", ")
                };
                ret.spell(format!("{declarator}({params})"))
            }
        }
    }
}

fn or_anonymous(name: &str) -> &str {
    if name.is_empty() { "{...}" } else { name }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserParam {
    pub name: String,
    pub ty: CType,
}

/// A function's prototype from DWARF.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserFunction {
    pub name: String,
    /// Formal parameters in declaration order.
    pub params: Vec<UserParam>,
    /// `None` for `void`.
    pub ret: Option<CType>,
}

/// Why a binary's DWARF could not answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DwarfError {
    Read {
        path: PathBuf,
        reason: String,
    },
    NotElf {
        path: PathBuf,
        reason: String,
    },
    /// The binary has no `.debug_info` (not built with `-g`, or stripped).
    NoDebugInfo {
        path: PathBuf,
    },
    /// The DWARF is there but does not parse.
    Corrupt {
        path: PathBuf,
        reason: String,
    },
}

impl fmt::Display for DwarfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DwarfError::Read { path, reason } => {
                write!(f, "cannot read {}: {reason}", path.display())
            }
            DwarfError::NotElf { path, reason } => {
                write!(f, "{} is not an ELF binary: {reason}", path.display())
            }
            DwarfError::NoDebugInfo { path } => write!(
                f,
                "{} has no DWARF debug info (build with -g, or install its separate debug file)",
                path.display()
            ),
            DwarfError::Corrupt { path, reason } => {
                write!(f, "the DWARF of {} is unreadable: {reason}", path.display())
            }
        }
    }
}

impl std::error::Error for DwarfError {}

/// Every function defined in one binary's DWARF, by name.
#[derive(Debug, Default)]
pub struct DwarfFunctions {
    functions: HashMap<String, UserFunction>,
}

impl DwarfFunctions {
    /// Reads the DWARF of the ELF binary at `path`, or of its separate
    /// debug file when the binary has none (see [`crate::debugfile`]).
    pub fn read(path: &Path) -> Result<DwarfFunctions, DwarfError> {
        let data = map(path)?;
        let elf = object::File::parse(&*data).map_err(|e| DwarfError::NotElf {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        if elf.section_by_name(".debug_info").is_some() {
            return DwarfFunctions::parse(&data).map_err(|e| e.at(path));
        }
        let root = Path::new(crate::debugfile::DEBUG_ROOT);
        let debug =
            crate::debugfile::find(path, &elf, root).ok_or_else(|| DwarfError::NoDebugInfo {
                path: path.to_path_buf(),
            })?;
        DwarfFunctions::parse(&map(&debug)?).map_err(|e| e.at(&debug))
    }

    /// Reads the DWARF of an ELF image in memory.
    fn parse(data: &[u8]) -> Result<DwarfFunctions, ParseError> {
        let elf = object::File::parse(data).map_err(|e| ParseError::NotElf(e.to_string()))?;
        if elf.section_by_name(".debug_info").is_none() {
            return Err(ParseError::NoDebugInfo);
        }
        let endian = if elf.is_little_endian() {
            RunTimeEndian::Little
        } else {
            RunTimeEndian::Big
        };
        // Sections may be compressed (SHF_COMPRESSED): keep decompressed
        // copies alive while the DWARF borrows them.
        let sections = gimli::DwarfSections::load(|id| -> Result<_, ParseError> {
            let Some(section) = elf.section_by_name(id.name()) else {
                return Ok(std::borrow::Cow::Borrowed(&[][..]));
            };
            section
                .uncompressed_data()
                .map_err(|e| ParseError::Corrupt(format!("section {}: {e}", id.name())))
        })?;
        let dwarf = sections.borrow(|section| EndianSlice::new(section, endian));
        let mut functions = HashMap::new();
        let mut units = dwarf.units();
        while let Some(header) = units.next().map_err(corrupt)? {
            let unit = dwarf.unit(header).map_err(corrupt)?;
            let reader = UnitReader {
                dwarf: &dwarf,
                unit: &unit,
            };
            reader.collect_functions(&mut functions)?;
        }
        Ok(DwarfFunctions { functions })
    }

    pub fn function(&self, name: &str) -> Option<&UserFunction> {
        self.functions.get(name)
    }

    /// Names of every function defined in the binary, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.functions.keys().cloned().collect();
        names.sort();
        names
    }
}

/// The functions of each binary read so far, by path.
#[derive(Debug, Default)]
pub struct DwarfCache {
    binaries: Mutex<HashMap<PathBuf, Result<Arc<DwarfFunctions>, DwarfError>>>,
}

impl DwarfCache {
    /// The functions of the binary at `path`, read on first use.
    pub fn functions(&self, path: &Path) -> Result<Arc<DwarfFunctions>, DwarfError> {
        let mut binaries = self.binaries.lock().unwrap_or_else(|p| p.into_inner());
        binaries
            .entry(path.to_path_buf())
            .or_insert_with(|| DwarfFunctions::read(path).map(Arc::new))
            .clone()
    }
}

enum ParseError {
    NotElf(String),
    NoDebugInfo,
    Corrupt(String),
}

impl ParseError {
    fn at(self, path: &Path) -> DwarfError {
        let path = path.to_path_buf();
        match self {
            ParseError::NotElf(reason) => DwarfError::NotElf { path, reason },
            ParseError::NoDebugInfo => DwarfError::NoDebugInfo { path },
            ParseError::Corrupt(reason) => DwarfError::Corrupt { path, reason },
        }
    }
}

/// The whole file at `path`, mapped read-only.
fn map(path: &Path) -> Result<memmap2::Mmap, DwarfError> {
    let read_error = |e: std::io::Error| DwarfError::Read {
        path: path.to_path_buf(),
        reason: e.to_string(),
    };
    let file = File::open(path).map_err(read_error)?;
    // SAFETY: a private read-only mapping; a binary rewritten while we
    // read it gives wrong answers at worst (every access is checked).
    unsafe { memmap2::Mmap::map(&file) }.map_err(read_error)
}

impl From<gimli::Error> for ParseError {
    fn from(e: gimli::Error) -> Self {
        corrupt(e)
    }
}

fn corrupt(e: gimli::Error) -> ParseError {
    ParseError::Corrupt(e.to_string())
}

type Reader<'d> = EndianSlice<'d, RunTimeEndian>;

/// Typedef and pointer chains nest at most this deep in real programs;
/// deeper is a loop in corrupt input.
const MAX_TYPE_DEPTH: usize = 32;

/// Reads DIEs of one compilation unit.
struct UnitReader<'a, 'd> {
    dwarf: &'a gimli::Dwarf<Reader<'d>>,
    unit: &'a Unit<Reader<'d>>,
}

type Entry<'d> = gimli::DebuggingInformationEntry<Reader<'d>>;

impl<'d> UnitReader<'_, 'd> {
    /// Adds every function *defined* in this unit (it has code: a low pc or
    /// address ranges); the first definition of a name wins.
    fn collect_functions(&self, out: &mut HashMap<String, UserFunction>) -> Result<(), ParseError> {
        let mut cursor = self.unit.entries();
        let mut definitions = Vec::new();
        while let Some(entry) = cursor.next_dfs()? {
            if entry.tag() == constants::DW_TAG_subprogram
                && (entry.has_attr(constants::DW_AT_low_pc)
                    || entry.has_attr(constants::DW_AT_ranges))
            {
                definitions.push(entry.offset());
            }
        }
        for offset in definitions {
            let function = self.function(offset)?;
            if let Some(function) = function
                && !out.contains_key(&function.name)
            {
                out.insert(function.name.clone(), function);
            }
        }
        Ok(())
    }

    fn entry(&self, offset: UnitOffset) -> Result<Entry<'d>, ParseError> {
        Ok(self.unit.entry(offset)?)
    }

    /// The DIE that `entry` completes (`DW_AT_abstract_origin` of an
    /// out-of-line copy of an inlined function, `DW_AT_specification` of
    /// a definition whose declaration came first).
    fn origin(&self, entry: &Entry<'d>) -> Result<Option<Entry<'d>>, ParseError> {
        for at in [
            constants::DW_AT_abstract_origin,
            constants::DW_AT_specification,
        ] {
            if let Some(offset) = self.unit_ref(entry, at) {
                return Ok(Some(self.entry(offset)?));
            }
        }
        Ok(None)
    }

    /// An attribute of `entry`, else of the DIE it completes.
    fn attr_or_origin(
        &self,
        entry: &Entry<'d>,
        at: DwAt,
    ) -> Result<Option<(AttributeValue<Reader<'d>>, Entry<'d>)>, ParseError> {
        let mut current = entry.clone();
        for _ in 0..MAX_TYPE_DEPTH {
            if let Some(value) = current.attr_value(at) {
                return Ok(Some((value, current)));
            }
            match self.origin(&current)? {
                Some(next) => current = next,
                None => return Ok(None),
            }
        }
        Ok(None)
    }

    fn unit_ref(&self, entry: &Entry<'d>, at: DwAt) -> Option<UnitOffset> {
        match entry.attr_value(at)? {
            AttributeValue::UnitRef(offset) => Some(offset),
            AttributeValue::DebugInfoRef(offset) => offset.to_unit_offset(&self.unit.header),
            _ => None,
        }
    }

    fn name(&self, entry: &Entry<'d>) -> Result<Option<String>, ParseError> {
        let Some((value, _)) = self.attr_or_origin(entry, constants::DW_AT_name)? else {
            return Ok(None);
        };
        let text = self.dwarf.attr_string(self.unit, value)?;
        Ok(Some(text.to_string_lossy().into_owned()))
    }

    fn function(&self, offset: UnitOffset) -> Result<Option<UserFunction>, ParseError> {
        let entry = self.entry(offset)?;
        let Some(name) = self.name(&entry)? else {
            return Ok(None);
        };
        // An out-of-line copy may list no parameters of its own: the
        // abstract instance it comes from has them all, in order.
        let mut params = self.formal_parameters(offset)?;
        if params.is_empty()
            && let Some(origin) = self.origin(&entry)?
        {
            params = self.formal_parameters(origin.offset())?;
        }
        let ret = match self.attr_or_origin(&entry, constants::DW_AT_type)? {
            Some((_, holder)) => Some(self.type_of(&holder, 0)?),
            None => None,
        };
        Ok(Some(UserFunction { name, params, ret }))
    }

    fn formal_parameters(&self, function: UnitOffset) -> Result<Vec<UserParam>, ParseError> {
        let mut tree = self.unit.entries_tree(Some(function))?;
        let root = tree.root()?;
        let mut children = root.children();
        let mut params = Vec::new();
        while let Some(child) = children.next()? {
            let entry = child.entry();
            if entry.tag() != constants::DW_TAG_formal_parameter {
                continue;
            }
            let name = self
                .name(entry)?
                .unwrap_or_else(|| format!("arg{}", params.len() + 1));
            let ty = match self.attr_or_origin(entry, constants::DW_AT_type)? {
                Some((_, holder)) => self.type_of(&holder, 0)?,
                None => CType::Unknown("untyped parameter".into()),
            };
            params.push(UserParam { name, ty });
        }
        Ok(params)
    }

    /// The type `entry`'s `DW_AT_type` names (`void` when it has none).
    fn type_of(&self, entry: &Entry<'d>, depth: usize) -> Result<CType, ParseError> {
        if entry.attr_value(constants::DW_AT_type).is_none() {
            return Ok(CType::Void);
        }
        match self.unit_ref(entry, constants::DW_AT_type) {
            Some(offset) => self.type_at(offset, depth),
            None => Ok(CType::Unknown("type in another unit".into())),
        }
    }

    fn type_at(&self, offset: UnitOffset, depth: usize) -> Result<CType, ParseError> {
        if depth > MAX_TYPE_DEPTH {
            return Ok(CType::Unknown("type loop".into()));
        }
        let entry = self.entry(offset)?;
        let name = || -> Result<String, ParseError> { Ok(self.name(&entry)?.unwrap_or_default()) };
        let bytes = udata(&entry, constants::DW_AT_byte_size).unwrap_or(0);
        let target = || self.type_of(&entry, depth + 1).map(Box::new);
        let qualified = |qualifier| -> Result<CType, ParseError> {
            Ok(CType::Qualified {
                qualifier,
                target: target()?,
            })
        };
        let ty = match entry.tag() {
            constants::DW_TAG_base_type => {
                let encoding = match entry.attr_value(constants::DW_AT_encoding) {
                    Some(AttributeValue::Encoding(e)) => e,
                    _ => constants::DW_ATE_signed,
                };
                match encoding {
                    constants::DW_ATE_float | constants::DW_ATE_complex_float => CType::Float {
                        name: name()?,
                        bytes,
                    },
                    constants::DW_ATE_signed | constants::DW_ATE_signed_char => CType::Int {
                        name: name()?,
                        bytes,
                        signed: true,
                    },
                    _ => CType::Int {
                        name: name()?,
                        bytes,
                        signed: false,
                    },
                }
            }
            constants::DW_TAG_pointer_type
            | constants::DW_TAG_reference_type
            | constants::DW_TAG_rvalue_reference_type => CType::Pointer(target()?),
            constants::DW_TAG_const_type => qualified("const")?,
            constants::DW_TAG_volatile_type => qualified("volatile")?,
            constants::DW_TAG_restrict_type => qualified("restrict")?,
            constants::DW_TAG_atomic_type => qualified("_Atomic")?,
            constants::DW_TAG_typedef => CType::Typedef {
                name: name()?,
                target: target()?,
            },
            constants::DW_TAG_enumeration_type => {
                let signed = match *target()? {
                    CType::Int { signed, .. } => signed,
                    CType::Typedef { ref target, .. } => {
                        matches!(**target, CType::Int { signed: true, .. })
                    }
                    _ => false,
                };
                CType::Enum {
                    name: name()?,
                    bytes,
                    signed,
                }
            }
            constants::DW_TAG_structure_type => aggregate("struct", name()?, bytes),
            constants::DW_TAG_union_type => aggregate("union", name()?, bytes),
            constants::DW_TAG_class_type => aggregate("class", name()?, bytes),
            constants::DW_TAG_array_type => CType::Array {
                elem: target()?,
                len: self.array_len(offset)?,
            },
            constants::DW_TAG_subroutine_type => CType::Function {
                ret: target()?,
                params: self.subroutine_params(offset, depth)?,
            },
            constants::DW_TAG_unspecified_type => CType::Void,
            other => CType::Unknown(format!("DWARF {other}")),
        };
        Ok(ty)
    }

    /// The element count of an array type's first dimension (0 when
    /// unknown, as for `int a[]`).
    fn array_len(&self, array: UnitOffset) -> Result<u32, ParseError> {
        let mut tree = self.unit.entries_tree(Some(array))?;
        let root = tree.root()?;
        let mut children = root.children();
        while let Some(child) = children.next()? {
            let entry = child.entry();
            if entry.tag() != constants::DW_TAG_subrange_type {
                continue;
            }
            let len = match udata(entry, constants::DW_AT_count) {
                Some(count) => count,
                None => udata(entry, constants::DW_AT_upper_bound).map_or(0, |u| u + 1),
            };
            return Ok(len);
        }
        Ok(0)
    }

    fn subroutine_params(
        &self,
        function: UnitOffset,
        depth: usize,
    ) -> Result<Vec<CType>, ParseError> {
        let mut tree = self.unit.entries_tree(Some(function))?;
        let root = tree.root()?;
        let mut children = root.children();
        let mut params = Vec::new();
        while let Some(child) = children.next()? {
            let entry = child.entry();
            if entry.tag() == constants::DW_TAG_formal_parameter {
                params.push(self.type_of(entry, depth + 1)?);
            }
        }
        Ok(params)
    }
}

fn aggregate(keyword: &'static str, name: String, bytes: u32) -> CType {
    CType::Aggregate {
        keyword,
        name,
        bytes,
    }
}

fn udata(entry: &Entry<'_>, at: DwAt) -> Option<u32> {
    let value = entry.attr_value(at)?;
    value
        .udata_value()
        .or_else(|| value.sdata_value().and_then(|v| u64::try_from(v).ok()))
        .and_then(|v| u32::try_from(v).ok())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::process::Command;

    const SOURCE: &str = r#"
#include <stddef.h>
typedef unsigned long my_size;
struct point { int x, y; };
enum color { RED, GREEN };
__attribute__((noinline)) int f(int n, const char *s) {
    __asm__ volatile("" : : "r"(n), "r"(s) : "memory");
    return n + (s[0] != 0);
}
__attribute__((noinline)) void g(struct point *p, my_size len, char **argv,
        enum color c, const unsigned char buf[4], int (*cb)(int), double d) {
    __asm__ volatile("" : : "r"(p), "r"(len), "r"(argv), "r"(c), "r"(buf), "r"(cb) : "memory");
    __asm__ volatile("" : : "x"(d) : "memory");
}
static int cb(int x) { return x; }
int main(int argc, char **argv) {
    struct point p = { 1, 2 };
    unsigned char buf[4] = { 0 };
    g(&p, 3, argv, GREEN, buf, cb, 1.5);
    return f(argc, argv[0]);
}
"#;

    /// Compiles SOURCE with `cc -O1` plus `extra` flags into a fresh
    /// directory (tests/setup.sh installs cc), removed when the returned
    /// guard drops.
    pub(crate) fn compile(test: &str, extra: &[&str]) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::Builder::new()
            .prefix(&format!("stap-rs-dwarf-{test}-"))
            .tempdir()
            .expect("creating a temp dir");
        let source = dir.path().join("target.c");
        std::fs::write(&source, SOURCE).expect("writing the test program");
        let binary = dir.path().join("target");
        let status = Command::new("cc")
            .arg("-O1")
            .args(extra)
            .arg("-o")
            .arg(&binary)
            .arg(&source)
            .status()
            .expect("running cc (tests/setup.sh installs it)");
        assert!(status.success(), "cc failed");
        (dir, binary)
    }

    fn spelled(function: &UserFunction) -> Vec<(String, String)> {
        function
            .params
            .iter()
            .map(|p| (p.name.clone(), p.ty.spelling()))
            .collect()
    }

    #[test]
    fn dwarf_parameters_and_return_types_of_a_c_program() {
        let (_dir, binary) = compile("types", &["-g"]);
        let functions = DwarfFunctions::read(&binary).expect("reading DWARF");
        let f = functions.function("f").expect("f is defined");
        assert_eq!(
            spelled(f),
            [
                ("n".to_string(), "int".to_string()),
                ("s".to_string(), "const char *".to_string()),
            ]
        );
        assert_eq!(
            f.params[0].ty,
            CType::Int {
                name: "int".into(),
                bytes: 4,
                signed: true
            }
        );
        assert_eq!(f.ret.as_ref().map(CType::spelling).as_deref(), Some("int"));

        let g = functions.function("g").expect("g is defined");
        let expected = [
            ("p", "struct point *"),
            ("len", "my_size"),
            ("argv", "char **"),
            ("c", "enum color"),
            ("buf", "const unsigned char *"),
            ("cb", "int (*)(int)"),
            ("d", "double"),
        ];
        let expected: Vec<(String, String)> = expected
            .iter()
            .map(|(n, t)| (n.to_string(), t.to_string()))
            .collect();
        assert_eq!(spelled(g), expected);
        assert_eq!(g.ret, None);
        let CType::Pointer(point) = &g.params[0].ty else {
            panic!("p is a pointer: {:?}", g.params[0].ty);
        };
        assert_eq!(
            **point,
            CType::Aggregate {
                keyword: "struct",
                name: "point".into(),
                bytes: 8
            }
        );
        let CType::Typedef { target, .. } = &g.params[1].ty else {
            panic!("len is a typedef: {:?}", g.params[1].ty);
        };
        assert!(matches!(
            **target,
            CType::Int {
                bytes: 8,
                signed: false,
                ..
            }
        ));
        assert!(matches!(g.params[3].ty, CType::Enum { bytes: 4, .. }));

        assert!(functions.function("main").is_some());
        assert!(functions.function("no_such_function").is_none());
        assert!(functions.names().contains(&"g".to_string()));
    }

    #[test]
    fn dwarf_absent_is_an_error_that_says_so() {
        let (_dir, binary) = compile("nodebug", &[]);
        let error = DwarfFunctions::read(&binary).expect_err("no -g, no DWARF");
        assert_eq!(
            error,
            DwarfError::NoDebugInfo {
                path: binary.clone()
            }
        );
        assert!(error.to_string().contains("build with -g"), "{error}");
    }

    #[test]
    fn dwarf_of_a_non_elf_or_missing_file_is_an_error() {
        let error = DwarfFunctions::read(Path::new("/nonexistent/stap-rs-binary")).unwrap_err();
        assert!(matches!(error, DwarfError::Read { .. }), "{error:?}");
        let dir = tempfile::tempdir().expect("creating a temp dir");
        let text = dir.path().join("not-elf");
        std::fs::write(&text, "#!/bin/sh\necho hi\n").expect("writing a script");
        let error = DwarfFunctions::read(&text).unwrap_err();
        assert!(matches!(error, DwarfError::NotElf { .. }), "{error:?}");
    }

    #[test]
    fn dwarf_cache_reads_each_binary_once() {
        let (_dir, binary) = compile("cache", &["-g"]);
        let cache = DwarfCache::default();
        let first = cache.functions(&binary).expect("reading DWARF");
        let second = cache.functions(&binary).expect("cached");
        assert!(Arc::ptr_eq(&first, &second));
    }

    #[test]
    fn dwarf_spells_qualified_pointers_and_arrays() {
        let char_ty = CType::Int {
            name: "char".into(),
            bytes: 1,
            signed: true,
        };
        let const_pointer = CType::Qualified {
            qualifier: "const",
            target: Box::new(CType::Pointer(Box::new(char_ty.clone()))),
        };
        assert_eq!(const_pointer.spelling(), "char *const");
        let pointer_to_array = CType::Pointer(Box::new(CType::Array {
            elem: Box::new(char_ty),
            len: 16,
        }));
        assert_eq!(pointer_to_array.spelling(), "char (*)[16]");
    }
}
