//! The merged type-id space behind [`BtfKernel`]'s [`TypeId`]s: vmlinux
//! BTF ids as they are, each opened module's split BTF in its own range
//! above them, and synthetic types (tracefs spellings, DWARF types) from
//! [`SYNTHETIC_BASE`] up; lookup by C spelling, and C spelling back.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use stap_lang::kernel::{FactsError, TypeId, TypeKind};

use super::{BtfKernel, facts_error};
use crate::btf::{Btf, BtfType, Kind};
use crate::dwarf::CType;

/// Ids from here up are types minted by [`BtfKernel`], not BTF records.
pub const SYNTHETIC_BASE: u32 = 0x8000_0000;

/// Typedefs and qualifiers nest at most this deep in real BTF; a deeper
/// chain is a loop in corrupt input.
pub(super) const MAX_TYPE_DEPTH: usize = 64;

/// One module's split BTF and the range of global ids given to its types.
pub(super) struct ModuleBtf {
    pub(super) name: String,
    pub(super) btf: Btf,
    /// The global id of the module's first own type.
    pub(super) first_global: u32,
}

/// How many modules one run may read from their files (not loaded): the
/// slots are fixed so that references into them stay valid as more open.
pub(super) const MAX_DISK_MODULES: usize = 64;

/// Modules read from their files on disk because they are not loaded.
/// Append-only: `slots` fill in order, under the `index` lock.
pub(super) struct DiskModules {
    /// `/lib/modules/RELEASE` (the running kernel's only).
    pub(super) release_dir: Option<PathBuf>,
    pub(super) slots: Box<[OnceLock<ModuleBtf>]>,
    /// Each module asked for: its slot, or why it could not be read.
    pub(super) index: std::sync::Mutex<HashMap<String, Result<usize, String>>>,
}

impl DiskModules {
    pub(super) fn new(release_dir: Option<PathBuf>) -> DiskModules {
        DiskModules {
            release_dir,
            slots: (0..MAX_DISK_MODULES).map(|_| OnceLock::new()).collect(),
            index: Default::default(),
        }
    }

    pub(super) fn opened(&self) -> impl Iterator<Item = &ModuleBtf> {
        self.slots.iter().map_while(OnceLock::get)
    }
}

/// A type [`BtfKernel`] made up because BTF has no record for it.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Synthetic {
    Pointer(TypeId),
    Array {
        elem: TypeId,
        len: u32,
    },
    /// An integer known only by its C spelling and size (tracefs fields,
    /// DWARF base types).
    Int {
        name: String,
        bytes: u32,
        signed: bool,
    },
    // The rest describe user-space types read from a binary's DWARF.
    Typedef {
        name: String,
        target: TypeId,
    },
    Qualified {
        qualifier: &'static str,
        target: TypeId,
    },
    Enum {
        name: String,
        bytes: u32,
        signed: bool,
    },
    Float {
        name: String,
        bytes: u32,
    },
    /// A struct/union/class by name and size: never expanded.
    Aggregate {
        keyword: &'static str,
        name: String,
        bytes: u32,
    },
    Function {
        ret: TypeId,
        params: Vec<TypeId>,
    },
    Unknown(String),
}

/// Which BTF blob a local type id belongs to, to turn its references into
/// global ids.
#[derive(Clone, Copy)]
pub(super) struct Scope<'a> {
    pub(super) btf: &'a Btf,
    pub(super) module: Option<&'a ModuleBtf>,
}

impl Scope<'_> {
    pub(super) fn global(&self, local: u32) -> TypeId {
        match self.module {
            // A reference past the module's last type (corrupt BTF) gets
            // an id that resolves to nothing.
            Some(m) if local > m.btf.last_id() => TypeId(u32::MAX),
            Some(m) if local >= m.btf.first_id() => {
                TypeId(m.first_global + (local - m.btf.first_id()))
            }
            _ => TypeId(local),
        }
    }
}

/// What a global [`TypeId`] stands for.
pub(super) enum Resolved<'a> {
    Void,
    Record(Scope<'a>, BtfType<'a>),
    Synthetic(Synthetic),
    Bad(String),
}

impl BtfKernel {
    // ---- modules -------------------------------------------------------

    pub(super) fn modules(&self) -> &[ModuleBtf] {
        self.modules.get_or_init(|| self.open_modules())
    }

    /// The loaded modules, then those read from their files.
    pub(super) fn all_modules(&self) -> impl Iterator<Item = &ModuleBtf> {
        self.modules().iter().chain(self.disk.opened())
    }

    /// Makes module `name` known: `Ok(true)` if it is loaded, `Ok(false)`
    /// if its BTF was read from its file under `/lib/modules/RELEASE`.
    pub(super) fn open_module(&self, name: &str) -> Result<bool, String> {
        let name = crate::modfile::canonical_name(name);
        if self.modules().iter().any(|m| m.name == name) {
            return Ok(true);
        }
        let mut index = self.disk.index.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(known) = index.get(&name) {
            return known.clone().map(|_| false);
        }
        let slot = index.values().filter(|known| known.is_ok()).count();
        let opened = self.read_module_file(&name, slot);
        index.insert(name, opened.clone());
        opened.map(|_| false)
    }

    /// Reads module `name`'s file into slot `slot`.
    fn read_module_file(&self, name: &str, slot: usize) -> Result<usize, String> {
        let base = self
            .btf
            .as_ref()
            .ok_or_else(|| format!("module `{name}` is not loaded, and there is no kernel BTF"))?;
        let Some(release_dir) = &self.disk.release_dir else {
            return Err(format!(
                "module `{name}` is not loaded (module files are read only for the \
                 running kernel, not with --btf)"
            ));
        };
        if !release_dir.is_dir() {
            return Err(format!(
                "module `{name}` is not loaded, and this kernel has no module files \
                 ({} does not exist)",
                release_dir.display()
            ));
        }
        let path = crate::modfile::find(release_dir, name).ok_or_else(|| {
            format!(
                "module `{name}` is not loaded, and {} has no file for it",
                release_dir.display()
            )
        })?;
        let bytes = crate::modfile::module_btf(&path)?;
        let btf = Btf::split_from_bytes(bytes, Arc::clone(base))
            .map_err(|e| format!("the BTF of {} is not usable: {e}", path.display()))?;
        let first_global = self.all_modules().last().map_or(base.last_id() + 1, |m| {
            m.first_global + m.btf.type_count() as u32
        });
        let fits = first_global
            .checked_add(btf.type_count() as u32)
            .is_some_and(|end| end < SYNTHETIC_BASE);
        let cell = self.disk.slots.get(slot).filter(|_| fits).ok_or_else(|| {
            format!("module `{name}`: too many modules read from disk in one run")
        })?;
        cell.set(ModuleBtf {
            name: name.to_string(),
            btf,
            first_global,
        })
        .map_err(|_| format!("module `{name}`: slot {slot} was taken"))?;
        Ok(slot)
    }

    /// Opens every module's split BTF. A module whose BTF does not parse is
    /// left out: its functions are then simply not found.
    pub(super) fn open_modules(&self) -> Vec<ModuleBtf> {
        let (Some(base), Some(dir)) = (&self.btf, &self.module_dir) else {
            return Vec::new();
        };
        let Ok(entries) = std::fs::read_dir(dir) else {
            return Vec::new();
        };
        let mut names: Vec<String> = entries
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|name| name != "vmlinux")
            .collect();
        names.sort();
        let mut modules = Vec::new();
        let mut next_global = base.last_id() + 1;
        for name in names {
            let Ok(btf) = Btf::open_split(&dir.join(&name), Arc::clone(base)) else {
                continue;
            };
            let Some(end) = next_global
                .checked_add(btf.type_count() as u32)
                .filter(|&end| end < SYNTHETIC_BASE)
            else {
                break;
            };
            modules.push(ModuleBtf {
                name,
                btf,
                first_global: next_global,
            });
            next_global = end;
        }
        modules
    }

    /// Finds a type by kind and name in vmlinux, then in modules.
    pub(super) fn find_named(
        &self,
        kind: Kind,
        name: &str,
    ) -> Result<Option<(Scope<'_>, u32)>, FactsError> {
        let btf = self.require_btf()?;
        if let Some(id) = btf.find_by_name(kind, name).map_err(facts_error)? {
            return Ok(Some((Scope { btf, module: None }, id)));
        }
        for module in self.all_modules() {
            if let Some(id) = module.btf.find_by_name(kind, name).map_err(facts_error)? {
                let scope = Scope {
                    btf: &module.btf,
                    module: Some(module),
                };
                return Ok(Some((scope, id)));
            }
        }
        Ok(None)
    }

    // ---- ids -----------------------------------------------------------

    pub(super) fn resolve(&self, ty: TypeId) -> Resolved<'_> {
        let id = ty.0;
        if id == 0 {
            return Resolved::Void;
        }
        if id >= SYNTHETIC_BASE {
            let synthetic = self.synthetic.lock().unwrap_or_else(|p| p.into_inner());
            return match synthetic.get((id - SYNTHETIC_BASE) as usize) {
                Some(s) => Resolved::Synthetic(s.clone()),
                None => Resolved::Bad(format!("unknown type id {id}")),
            };
        }
        let Some(btf) = self.btf.as_deref() else {
            return Resolved::Bad(format!("type id {id} without BTF"));
        };
        let (scope, local) = if id <= btf.last_id() {
            (Scope { btf, module: None }, id)
        } else {
            let found = self
                .modules
                .get()
                .into_iter()
                .flatten()
                .chain(self.disk.opened())
                .find(|m| id >= m.first_global && id - m.first_global < m.btf.type_count() as u32);
            let Some(module) = found else {
                return Resolved::Bad(format!("unknown type id {id}"));
            };
            let scope = Scope {
                btf: &module.btf,
                module: Some(module),
            };
            (scope, module.btf.first_id() + (id - module.first_global))
        };
        match scope.btf.ty(local) {
            Ok(record) => Resolved::Record(scope, record),
            Err(e) => Resolved::Bad(e.to_string()),
        }
    }

    pub(super) fn mint(&self, synthetic: Synthetic) -> TypeId {
        let mut all = self.synthetic.lock().unwrap_or_else(|p| p.into_inner());
        let index = match all.iter().position(|s| *s == synthetic) {
            Some(index) => index,
            None => {
                all.push(synthetic);
                all.len() - 1
            }
        };
        TypeId(SYNTHETIC_BASE + index as u32)
    }

    /// Follows typedefs and qualifiers to the type underneath.
    pub(super) fn peel(&self, ty: TypeId) -> TypeId {
        let mut current = ty;
        for _ in 0..MAX_TYPE_DEPTH {
            match self.resolve(current) {
                Resolved::Record(scope, record) => match record.kind {
                    Kind::Typedef
                    | Kind::Const
                    | Kind::Volatile
                    | Kind::Restrict
                    | Kind::TypeTag => {
                        current = scope.global(record.referenced().unwrap_or(0));
                    }
                    _ => return current,
                },
                Resolved::Synthetic(
                    Synthetic::Typedef { target, .. } | Synthetic::Qualified { target, .. },
                ) => current = target,
                _ => return current,
            }
        }
        current
    }

    // ---- type lookup by C spelling -------------------------------------

    /// The type a C spelling names, remembered per spelling: a wildcard's
    /// tracepoints spell the same few field types hundreds of times
    /// (`syscalls:sys_enter_*`: 362 events, ~1,500 fields), and each miss
    /// of a kind searches the BTF string table. A miss is remembered only
    /// for as many modules as were known when it was looked up: a module
    /// opened later may define the type.
    pub(super) fn lookup_c_type(&self, c_name: &str) -> Result<Option<TypeId>, FactsError> {
        let modules = || self.all_modules().count();
        if let Some(&(found, known_modules)) = lock(&self.c_types).get(c_name)
            && (found.is_some() || known_modules == modules())
        {
            return Ok(found);
        }
        let found = self.lookup_c_type_uncached(c_name)?;
        lock(&self.c_types).insert(c_name.to_string(), (found, modules()));
        Ok(found)
    }

    fn lookup_c_type_uncached(&self, c_name: &str) -> Result<Option<TypeId>, FactsError> {
        let name = c_name.split_whitespace().collect::<Vec<_>>().join(" ");
        let name = name.as_str();
        if let Some(target) = name.strip_suffix('*') {
            return Ok(self
                .lookup_c_type(target)?
                .map(|t| self.mint(Synthetic::Pointer(t))));
        }
        for qualifier in ["const ", "volatile "] {
            if let Some(rest) = name.strip_prefix(qualifier) {
                return self.lookup_c_type(rest);
            }
        }
        if name == "void" {
            return Ok(Some(TypeId(0)));
        }
        if let Some(tag) = name.strip_prefix("struct ") {
            return self.find_tagged(&[Kind::Struct], tag, Some(false));
        }
        if let Some(tag) = name.strip_prefix("union ") {
            return self.find_tagged(&[Kind::Union], tag, Some(true));
        }
        if let Some(tag) = name.strip_prefix("enum ") {
            return self.find_tagged(&[Kind::Enum, Kind::Enum64], tag, None);
        }
        let builtin = builtin_int(name);
        if self.btf.is_none() {
            // Plain integers need no BTF; anything else does.
            return match builtin {
                Some(int) => Ok(Some(self.mint(int))),
                None => self.require_btf().map(|_| None),
            };
        }
        let btf_name = match &builtin {
            Some(Synthetic::Int { name, .. }) => name.as_str(),
            _ => name,
        };
        for (kind, wanted) in [
            (Kind::Int, btf_name),
            (Kind::Typedef, name),
            (Kind::Float, name),
        ] {
            if let Some((scope, id)) = self.find_named(kind, wanted)? {
                return Ok(Some(scope.global(id)));
            }
        }
        Ok(builtin.map(|int| self.mint(int)))
    }

    /// `struct x` / `union x` / `enum x`: the full type, else a forward
    /// declaration of the right flavour (`fwd_union`; `None` for enums,
    /// whose forward declarations are empty enums).
    pub(super) fn find_tagged(
        &self,
        kinds: &[Kind],
        tag: &str,
        fwd_union: Option<bool>,
    ) -> Result<Option<TypeId>, FactsError> {
        for &kind in kinds {
            if let Some((scope, id)) = self.find_named(kind, tag)? {
                return Ok(Some(scope.global(id)));
            }
        }
        let Some(want_union) = fwd_union else {
            return Ok(None);
        };
        let Some((scope, id)) = self.find_named(Kind::Fwd, tag)? else {
            return Ok(None);
        };
        let is_union = scope.btf.ty(id).is_ok_and(|t| t.fwd_is_union());
        Ok((is_union == want_union).then(|| scope.global(id)))
    }

    // ---- C spelling ----------------------------------------------------

    /// C declarator syntax: `declarator` is what already wraps the name
    /// (`*`, `[16]`, ...), built from the outside in.
    pub(super) fn spell(&self, ty: TypeId, declarator: String, depth: usize) -> String {
        if depth > MAX_TYPE_DEPTH {
            return "<type loop>".into();
        }
        let with = |base: &str, declarator: &str| {
            if declarator.is_empty() {
                base.to_string()
            } else if declarator.starts_with('[') {
                format!("{base}{declarator}")
            } else {
                format!("{base} {declarator}")
            }
        };
        let pointer = |target: TypeId| {
            // `*x[3]` is an array of pointers: a pointer to an array or to
            // a function needs parentheses.
            let needs_parens = match self.resolve(self.peel(target)) {
                Resolved::Record(_, r) => matches!(r.kind, Kind::Array | Kind::FuncProto),
                Resolved::Synthetic(Synthetic::Array { .. } | Synthetic::Function { .. }) => true,
                _ => false,
            };
            let inner = if needs_parens {
                format!("(*{declarator})")
            } else {
                format!("*{declarator}")
            };
            self.spell(target, inner, depth + 1)
        };
        match self.resolve(ty) {
            Resolved::Void => with("void", &declarator),
            Resolved::Bad(why) => with(&format!("<{why}>"), &declarator),
            Resolved::Synthetic(Synthetic::Int { name, .. }) => with(&name, &declarator),
            Resolved::Synthetic(Synthetic::Pointer(target)) => pointer(target),
            Resolved::Synthetic(Synthetic::Array { elem, len }) => {
                self.spell(elem, format!("{declarator}[{len}]"), depth + 1)
            }
            Resolved::Synthetic(
                Synthetic::Typedef { name, .. }
                | Synthetic::Enum { name, .. }
                | Synthetic::Float { name, .. },
            ) => with(&name, &declarator),
            Resolved::Synthetic(Synthetic::Aggregate { keyword, name, .. }) => {
                with(&format!("{keyword} {name}"), &declarator)
            }
            Resolved::Synthetic(Synthetic::Unknown(why)) => with(&format!("<{why}>"), &declarator),
            Resolved::Synthetic(Synthetic::Qualified { qualifier, target }) => {
                let is_pointer = matches!(
                    self.resolve(target),
                    Resolved::Synthetic(Synthetic::Pointer(_))
                );
                if is_pointer {
                    self.spell(target, with(qualifier, &declarator), depth + 1)
                } else {
                    format!("{qualifier} {}", self.spell(target, declarator, depth + 1))
                }
            }
            Resolved::Synthetic(Synthetic::Function { ret, params }) => {
                let params: Vec<String> = params
                    .iter()
                    .map(|p| self.spell(*p, String::new(), depth + 1))
                    .collect();
                let params = if params.is_empty() {
                    "void".to_string()
                } else {
                    params.join(", ")
                };
                self.spell(ret, format!("{declarator}({params})"), depth + 1)
            }
            Resolved::Record(scope, record) => {
                let refers = |r: &BtfType<'_>| scope.global(r.referenced().unwrap_or(0));
                match record.kind {
                    Kind::Ptr => pointer(refers(&record)),
                    Kind::Array => {
                        let array = record.array();
                        let (elem, len) = array.map_or((0, 0), |a| (a.elem, a.len));
                        self.spell(
                            scope.global(elem),
                            format!("{declarator}[{len}]"),
                            depth + 1,
                        )
                    }
                    Kind::Const | Kind::Volatile | Kind::Restrict => {
                        let word = match record.kind {
                            Kind::Const => "const",
                            Kind::Volatile => "volatile",
                            _ => "restrict",
                        };
                        let target = refers(&record);
                        if matches!(self.resolve(target), Resolved::Record(_, r) if r.kind == Kind::Ptr)
                        {
                            self.spell(target, with(word, &declarator), depth + 1)
                        } else {
                            format!("{word} {}", self.spell(target, declarator, depth + 1))
                        }
                    }
                    Kind::TypeTag => self.spell(refers(&record), declarator, depth + 1),
                    Kind::FuncProto => {
                        let params = scope
                            .btf
                            .params(&record)
                            .map(|ps| {
                                ps.iter()
                                    .map(|p| {
                                        self.spell(scope.global(p.ty), String::new(), depth + 1)
                                    })
                                    .collect::<Vec<_>>()
                            })
                            .unwrap_or_default();
                        let params = if params.is_empty() {
                            "void".to_string()
                        } else {
                            params.join(", ")
                        };
                        self.spell(
                            refers(&record),
                            format!("{declarator}({params})"),
                            depth + 1,
                        )
                    }
                    _ => with(&tag_spelling(&record), &declarator),
                }
            }
        }
    }

    pub(super) fn kind_of_record(&self, scope: Scope<'_>, record: &BtfType<'_>) -> TypeKind {
        let name = record.name.to_string();
        let size = record.size().unwrap_or(0);
        match record.kind {
            Kind::Int => {
                let info = record.int();
                TypeKind::Int {
                    bytes: size,
                    signed: info.is_some_and(|i| i.signed),
                    is_char: info.is_some_and(|i| i.is_char) || is_char_name(&name),
                }
            }
            Kind::Enum | Kind::Enum64 => TypeKind::Enum {
                name,
                bytes: size,
                signed: record.kind_flag,
            },
            Kind::Ptr => TypeKind::Pointer(scope.global(record.referenced().unwrap_or(0))),
            Kind::Array => {
                let (elem, len) = record.array().map_or((0, 0), |a| (a.elem, a.len));
                TypeKind::Array {
                    elem: scope.global(elem),
                    len,
                }
            }
            Kind::Struct | Kind::Union => TypeKind::Struct {
                name,
                size,
                is_union: record.kind == Kind::Union,
            },
            Kind::Func | Kind::FuncProto => TypeKind::Function,
            Kind::Float => TypeKind::Float { bytes: size },
            Kind::Fwd | Kind::Var | Kind::Datasec | Kind::DeclTag => TypeKind::Opaque {
                name: tag_spelling(record),
            },
            // peel() removed these; reaching one means a qualifier loop.
            Kind::Typedef | Kind::Const | Kind::Volatile | Kind::Restrict | Kind::TypeTag => {
                TypeKind::Opaque {
                    name: "<type loop>".into(),
                }
            }
        }
    }

    // ---- user-space types (DWARF) -------------------------------------

    /// A synthetic id for a type read from a binary's DWARF.
    pub(super) fn mint_user_type(&self, ty: &CType) -> TypeId {
        let synthetic = match ty {
            CType::Void => return TypeId(0),
            CType::Int {
                name,
                bytes,
                signed,
            } => Synthetic::Int {
                name: name.clone(),
                bytes: *bytes,
                signed: *signed,
            },
            CType::Float { name, bytes } => Synthetic::Float {
                name: name.clone(),
                bytes: *bytes,
            },
            CType::Pointer(target) => Synthetic::Pointer(self.mint_user_type(target)),
            CType::Qualified { qualifier, target } => Synthetic::Qualified {
                qualifier,
                target: self.mint_user_type(target),
            },
            CType::Typedef { name, target } => Synthetic::Typedef {
                name: name.clone(),
                target: self.mint_user_type(target),
            },
            CType::Enum {
                name,
                bytes,
                signed,
            } => Synthetic::Enum {
                name: format!("enum {}", or_anonymous(name)),
                bytes: *bytes,
                signed: *signed,
            },
            CType::Array { elem, len } => Synthetic::Array {
                elem: self.mint_user_type(elem),
                len: *len,
            },
            CType::Aggregate {
                keyword,
                name,
                bytes,
            } => Synthetic::Aggregate {
                keyword,
                name: or_anonymous(name).to_string(),
                bytes: *bytes,
            },
            CType::Function { ret, params } => Synthetic::Function {
                ret: self.mint_user_type(ret),
                params: params.iter().map(|p| self.mint_user_type(p)).collect(),
            },
            CType::Unknown(why) => Synthetic::Unknown(why.clone()),
        };
        self.mint(synthetic)
    }
}

/// `struct x`, `union x`, `enum x`, or the bare name of an int, typedef...
pub(super) fn tag_spelling(record: &BtfType<'_>) -> String {
    let name = if record.name.is_empty() {
        "{...}"
    } else {
        record.name
    };
    match record.kind {
        Kind::Struct => format!("struct {name}"),
        Kind::Union => format!("union {name}"),
        Kind::Enum | Kind::Enum64 => format!("enum {name}"),
        Kind::Fwd if record.fwd_is_union() => format!("union {name}"),
        Kind::Fwd => format!("struct {name}"),
        _ => name.to_string(),
    }
}

/// `{...}` for an anonymous struct, union or enum.
pub(super) fn or_anonymous(name: &str) -> &str {
    if name.is_empty() { "{...}" } else { name }
}

pub(super) fn is_char_name(name: &str) -> bool {
    matches!(name, "char" | "signed char" | "unsigned char")
}

/// `char[16]` -> (`char`, 16).
pub(super) fn split_array(c_type: &str) -> Option<(&str, u32)> {
    let (elem, rest) = c_type.split_once('[')?;
    let len = rest.strip_suffix(']')?.trim().parse().ok()?;
    Some((elem.trim(), len))
}

/// A C integer spelling (`unsigned long`, `long unsigned int`, `short`...)
/// as the synthetic int of its size, named as GCC names it in BTF.
pub(super) fn builtin_int(name: &str) -> Option<Synthetic> {
    let words: Vec<&str> = name.split(' ').collect();
    if words.is_empty()
        || !words.iter().all(|w| {
            matches!(
                *w,
                "unsigned" | "signed" | "char" | "short" | "int" | "long"
            )
        })
    {
        return None;
    }
    let count = |word: &str| words.iter().filter(|w| **w == word).count();
    let unsigned = count("unsigned") > 0;
    let sign = if unsigned { "unsigned " } else { "" };
    let long_bytes = std::mem::size_of::<libc::c_long>() as u32;
    let (canonical, bytes) = if count("char") > 0 {
        let name = match (unsigned, count("signed") > 0) {
            (true, _) => "unsigned char",
            (false, true) => "signed char",
            (false, false) => "char",
        };
        (name.to_string(), 1)
    } else if count("short") > 0 {
        (format!("short {sign}int"), 2)
    } else if count("long") >= 2 {
        (format!("long long {sign}int"), 8)
    } else if count("long") == 1 {
        (format!("long {sign}int"), long_bytes)
    } else {
        (format!("{sign}int"), 4)
    };
    Some(Synthetic::Int {
        name: canonical,
        bytes,
        // Kernel `char` is signed on x86 only in name; tracefs says so per field.
        signed: !unsigned,
    })
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
