//! [`BtfKernel`]: the compiler's [`KernelFacts`], answered from BTF, tracefs
//! and uname(2), each read only when first needed.
//!
//! Type ids: vmlinux's BTF ids are used as they are. Module BTF ids overlap
//! between modules (each continues from vmlinux's last id), so each opened
//! module gets its own range above vmlinux's. Types BTF has no record for
//! (`char *` of a tracefs field, say) are minted from [`SYNTHETIC_BASE`] up.

use std::collections::HashMap;
use std::ffi::CStr;
use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use stap_lang::kernel::{
    ClassicField, FactsError, FunctionProto, KernelFacts, KernelVersion, Mechanism, Mechanisms,
    Member, Param, Tracepoint, TracepointArgs, TypeId, TypeKind,
};

use crate::btf::{Btf, BtfError, BtfType, Kind};
use crate::dwarf::{CType, DwarfCache, DwarfError};
use crate::features::{Availability, Features};
use crate::tracefs::{FormatField, Tracefs, TracefsError};

/// Where the running kernel publishes its BTF; modules' BTF sits beside it.
pub const DEFAULT_VMLINUX: &str = "/sys/kernel/btf/vmlinux";

/// Ids from here up are types minted by [`BtfKernel`], not BTF records.
pub const SYNTHETIC_BASE: u32 = 0x8000_0000;

/// Typedefs and qualifiers nest at most this deep in real BTF; a deeper
/// chain is a loop in corrupt input.
const MAX_TYPE_DEPTH: usize = 64;

/// A vmlinux function present on every kernel with fentry, for its probe.
const FENTRY_PROBE_FUNCTION: &str = "tcp_v4_connect";

/// Why [`BtfKernel`] could not open the kernel's BTF.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpenError {
    /// No BTF file (or it cannot be read).
    Missing { path: PathBuf, reason: String },
    /// The file is there but is not valid BTF.
    Corrupt { path: PathBuf, error: BtfError },
}

impl fmt::Display for OpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OpenError::Missing { path, reason } => f.write_str(&missing_btf_message(path, reason)),
            OpenError::Corrupt { path, error } => write!(
                f,
                "{} is not usable BTF ({error}). {}",
                path.display(),
                WITHOUT_BTF_HINT
            ),
        }
    }
}

impl std::error::Error for OpenError {}

const WITHOUT_BTF_HINT: &str = "kernel.trace, kernel.function, @cast and $var->field need \
     kernel BTF (a kernel built with CONFIG_DEBUG_INFO_BTF=y, or --btf FILE); \
     begin, end and timer probes and process(...) probes still work without it.";

fn missing_btf_message(path: &Path, reason: &str) -> String {
    format!(
        "kernel BTF is missing at {} ({reason}). {WITHOUT_BTF_HINT}",
        path.display()
    )
}

/// One module's split BTF and the range of global ids given to its types.
struct ModuleBtf {
    name: String,
    btf: Btf,
    /// The global id of the module's first own type.
    first_global: u32,
}

/// A type [`BtfKernel`] made up because BTF has no record for it.
#[derive(Debug, Clone, PartialEq)]
enum Synthetic {
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
struct Scope<'a> {
    btf: &'a Btf,
    module: Option<&'a ModuleBtf>,
}

impl Scope<'_> {
    fn global(&self, local: u32) -> TypeId {
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
enum Resolved<'a> {
    Void,
    Record(Scope<'a>, BtfType<'a>),
    Synthetic(Synthetic),
    Bad(String),
}

/// Kernel facts from BTF, tracefs and uname.
pub struct BtfKernel {
    btf: Option<Arc<Btf>>,
    btf_path: PathBuf,
    /// Where module BTF lives; only meaningful for the running kernel's BTF.
    module_dir: Option<PathBuf>,
    modules: OnceLock<Vec<ModuleBtf>>,
    synthetic: Mutex<Vec<Synthetic>>,
    /// User binaries' DWARF, for process probes.
    dwarf: DwarfCache,
    tracefs: Option<Tracefs>,
    version: KernelVersion,
    arch: String,
    config: OnceLock<HashMap<String, String>>,
    features: Features,
}

impl fmt::Debug for BtfKernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BtfKernel")
            .field("btf_path", &self.btf_path)
            .field("btf", &self.btf)
            .field("tracefs", &self.tracefs)
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

impl BtfKernel {
    /// The running kernel: /sys/kernel/btf/vmlinux, module BTF beside it.
    pub fn open_default() -> Result<BtfKernel, OpenError> {
        let vmlinux = Path::new(DEFAULT_VMLINUX);
        BtfKernel::open_with_modules(vmlinux, vmlinux.parent())
    }

    /// BTF from `path` (the CLI's `--btf FILE`). Module BTF is used only
    /// when `path` is the running kernel's own.
    pub fn open(path: &Path) -> Result<BtfKernel, OpenError> {
        if path == Path::new(DEFAULT_VMLINUX) {
            return BtfKernel::open_default();
        }
        BtfKernel::open_with_modules(path, None)
    }

    /// BTF from `vmlinux`, with split module BTF from the files in
    /// `module_dir` (every file there except `vmlinux`).
    pub fn open_with_modules(
        vmlinux: &Path,
        module_dir: Option<&Path>,
    ) -> Result<BtfKernel, OpenError> {
        let btf = Btf::open(vmlinux).map_err(|error| match error {
            BtfError::Io { path, message } => OpenError::Missing {
                path,
                reason: message,
            },
            error => OpenError::Corrupt {
                path: vmlinux.to_path_buf(),
                error,
            },
        })?;
        Ok(BtfKernel::assemble(
            Some(Arc::new(btf)),
            vmlinux,
            module_dir,
        ))
    }

    /// No BTF: answers from tracefs and uname only. Questions that need
    /// types get an error that says so.
    pub fn without_btf() -> BtfKernel {
        BtfKernel::assemble(None, Path::new(DEFAULT_VMLINUX), None)
    }

    fn assemble(btf: Option<Arc<Btf>>, path: &Path, module_dir: Option<&Path>) -> BtfKernel {
        let (version, arch) = uname();
        let tracefs = Tracefs::find().ok();
        let features = Features::probe(tracefs.as_ref(), btf.is_some(), &version);
        BtfKernel {
            btf,
            btf_path: path.to_path_buf(),
            module_dir: module_dir.map(Path::to_path_buf),
            modules: OnceLock::new(),
            synthetic: Mutex::new(Vec::new()),
            dwarf: DwarfCache::default(),
            tracefs,
            version,
            arch,
            config: OnceLock::new(),
            features,
        }
    }

    /// The vmlinux BTF, if any.
    pub fn btf(&self) -> Option<&Arc<Btf>> {
        self.btf.as_ref()
    }

    pub fn tracefs(&self) -> Option<&Tracefs> {
        self.tracefs.as_ref()
    }

    /// Each mechanism with its reason when absent (fentry excluded: see
    /// [`BtfKernel::fentry`]).
    pub fn features(&self) -> &Features {
        &self.features
    }

    /// Whether fentry/fexit programs load here, probed with a real
    /// BPF_PROG_LOAD on first call; the reason says why not.
    pub fn fentry(&self) -> &Availability {
        self.features.fentry(|| {
            let btf = self.btf.as_ref()?;
            let id = btf.find_by_name(Kind::Func, FENTRY_PROBE_FUNCTION).ok()??;
            Some((id, FENTRY_PROBE_FUNCTION.to_string()))
        })
    }

    /// Names of the modules whose BTF was opened (opening them if needed).
    pub fn module_names(&self) -> Vec<String> {
        self.modules().iter().map(|m| m.name.clone()).collect()
    }

    fn require_btf(&self) -> Result<&Btf, FactsError> {
        self.btf
            .as_deref()
            .ok_or_else(|| FactsError(missing_btf_message(&self.btf_path, "running without BTF")))
    }

    fn tracefs_or_error(&self) -> Result<&Tracefs, FactsError> {
        self.tracefs
            .as_ref()
            .ok_or_else(|| FactsError(TracefsError::NotMounted.to_string()))
    }

    // ---- modules -------------------------------------------------------

    fn modules(&self) -> &[ModuleBtf] {
        self.modules.get_or_init(|| self.open_modules())
    }

    /// Opens every module's split BTF. A module whose BTF does not parse is
    /// left out: its functions are then simply not found.
    fn open_modules(&self) -> Vec<ModuleBtf> {
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
    fn find_named(&self, kind: Kind, name: &str) -> Result<Option<(Scope<'_>, u32)>, FactsError> {
        let btf = self.require_btf()?;
        if let Some(id) = btf.find_by_name(kind, name).map_err(facts_error)? {
            return Ok(Some((Scope { btf, module: None }, id)));
        }
        for module in self.modules() {
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

    fn resolve(&self, ty: TypeId) -> Resolved<'_> {
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
            let found = self.modules.get().and_then(|modules| {
                modules.iter().find(|m| {
                    id >= m.first_global && id - m.first_global < m.btf.type_count() as u32
                })
            });
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

    fn mint(&self, synthetic: Synthetic) -> TypeId {
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
    fn peel(&self, ty: TypeId) -> TypeId {
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

    fn lookup_c_type(&self, c_name: &str) -> Result<Option<TypeId>, FactsError> {
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
    fn find_tagged(
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

    // ---- tracepoints ---------------------------------------------------

    /// The BTF-typed arguments of raw tracepoint `name`, if it has them.
    fn raw_tracepoint_args(&self, name: &str) -> Result<Option<Vec<Param>>, FactsError> {
        let Some((scope, iter_id)) = self.find_named(Kind::Func, &format!("__traceiter_{name}"))?
        else {
            return Ok(None);
        };
        let btf = scope.btf;
        let named = self.proto_params(btf, iter_id)?;
        // __traceiter_NAME(void *__data, args...): drop __data.
        let named: Vec<_> = named.into_iter().skip(1).collect();
        // btf_trace_NAME is a pointer to (void *, args...): the types the
        // kernel checks tp_btf programs against.
        let typed = match btf
            .find_by_name(Kind::Typedef, &format!("btf_trace_{name}"))
            .map_err(facts_error)?
        {
            Some(typedef) => self.typedef_proto_types(btf, typedef)?,
            None => None,
        };
        let params = named
            .iter()
            .enumerate()
            .map(|(i, (param_name, iter_ty))| {
                let ty = match &typed {
                    Some(types) if types.len() == named.len() => types[i],
                    _ => *iter_ty,
                };
                Param {
                    name: param_name.clone(),
                    ty: scope.global(ty),
                }
            })
            .collect();
        Ok(Some(params))
    }

    /// A FUNC's parameters as (name, local type id).
    fn proto_params(&self, btf: &Btf, func_id: u32) -> Result<Vec<(String, u32)>, FactsError> {
        let func = btf.ty(func_id).map_err(facts_error)?;
        let proto = btf
            .ty(func.referenced().unwrap_or(0))
            .map_err(facts_error)?;
        let params = btf.params(&proto).map_err(facts_error)?;
        Ok(params
            .into_iter()
            .map(|p| (p.name.to_string(), p.ty))
            .collect())
    }

    /// Types of `btf_trace_NAME`'s prototype after its leading `void *`.
    fn typedef_proto_types(&self, btf: &Btf, typedef: u32) -> Result<Option<Vec<u32>>, FactsError> {
        let mut id = btf
            .ty(typedef)
            .map_err(facts_error)?
            .referenced()
            .unwrap_or(0);
        for _ in 0..MAX_TYPE_DEPTH {
            if id == 0 {
                return Ok(None);
            }
            let record = btf.ty(id).map_err(facts_error)?;
            match record.kind {
                Kind::FuncProto => {
                    let params = btf.params(&record).map_err(facts_error)?;
                    return Ok(Some(params.iter().skip(1).map(|p| p.ty).collect()));
                }
                Kind::Ptr | Kind::Typedef | Kind::Const => {
                    id = record.referenced().unwrap_or(0);
                }
                _ => return Ok(None),
            }
        }
        Ok(None)
    }

    fn classic_fields(&self, fields: &[&FormatField]) -> Vec<ClassicField> {
        fields
            .iter()
            .map(|field| ClassicField {
                name: field.name.clone(),
                ty: self.classic_field_type(field),
                offset: field.offset,
                size: field.size,
            })
            .collect()
    }

    /// The type of a tracefs field: its C type from BTF where BTF has it,
    /// else an integer of the field's size under the field's C spelling.
    fn classic_field_type(&self, field: &FormatField) -> TypeId {
        let fallback = || {
            self.mint(Synthetic::Int {
                name: field.c_type.clone(),
                bytes: field.size,
                signed: field.signed,
            })
        };
        if field.is_data_loc() {
            return fallback();
        }
        if let Some((elem, len)) = split_array(&field.c_type) {
            return match self.lookup_c_type(elem) {
                Ok(Some(elem)) => self.mint(Synthetic::Array { elem, len }),
                _ => fallback(),
            };
        }
        match self.lookup_c_type(&field.c_type) {
            Ok(Some(ty)) => ty,
            _ => fallback(),
        }
    }

    // ---- C spelling ----------------------------------------------------

    /// C declarator syntax: `declarator` is what already wraps the name
    /// (`*`, `[16]`, ...), built from the outside in.
    fn spell(&self, ty: TypeId, declarator: String, depth: usize) -> String {
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

    fn kind_of_record(&self, scope: Scope<'_>, record: &BtfType<'_>) -> TypeKind {
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
    fn mint_user_type(&self, ty: &CType) -> TypeId {
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

    fn config_table(&self) -> &HashMap<String, String> {
        self.config
            .get_or_init(|| parse_config(&read_config(&self.version.release).unwrap_or_default()))
    }
}

impl KernelFacts for BtfKernel {
    fn version(&self) -> KernelVersion {
        self.version.clone()
    }

    fn arch(&self) -> String {
        self.arch.clone()
    }

    fn config(&self, name: &str) -> Option<String> {
        let key = if name.starts_with("CONFIG_") {
            name.to_string()
        } else {
            format!("CONFIG_{name}")
        };
        self.config_table().get(&key).cloned()
    }

    /// Probes fentry on first call (one BPF_PROG_LOAD): call it only when a
    /// probe needs to know, or use [`BtfKernel::features`] for the rest.
    fn mechanisms(&self) -> Mechanisms {
        self.features.mechanisms(self.fentry().is_available())
    }

    fn unavailable_reason(&self, mechanism: Mechanism) -> Option<String> {
        let availability = match mechanism {
            Mechanism::Tracepoints => &self.features.tracepoints,
            Mechanism::RawTracepoints => &self.features.raw_tracepoints,
            Mechanism::TpBtf => &self.features.tp_btf,
            Mechanism::Fentry => self.fentry(),
            Mechanism::Kprobes => &self.features.kprobes,
            Mechanism::Uprobes => &self.features.uprobes,
            Mechanism::PerfEvents => &self.features.perf_events,
        };
        match availability {
            Availability::Available => None,
            Availability::Unavailable(reason) => Some(reason.clone()),
        }
    }

    fn tracepoint_names(&self) -> Result<Vec<(String, String)>, FactsError> {
        self.tracefs_or_error()?.events().map_err(facts_error)
    }

    fn tracepoint(
        &self,
        system: Option<&str>,
        name: &str,
    ) -> Result<Option<Tracepoint>, FactsError> {
        self.require_btf()?;
        let system = match (system, &self.tracefs) {
            (Some(system), Some(fs)) if !fs.has_event(system, name) => return Ok(None),
            (Some(system), _) => system.to_string(),
            // Raw-only tracepoints have no tracefs event, hence no system.
            (None, Some(fs)) => fs
                .systems_with_event(name)
                .map_err(facts_error)?
                .into_iter()
                .next()
                .unwrap_or_default(),
            (None, None) => String::new(),
        };
        if let Some(params) = self.raw_tracepoint_args(name)? {
            return Ok(Some(Tracepoint {
                system,
                name: name.to_string(),
                args: TracepointArgs::Raw(params),
            }));
        }
        // No BTF-typed raw tracepoint (the syscalls: events): classic only.
        if system.is_empty() {
            return Ok(None);
        }
        let Some(format) = self
            .tracefs_or_error()?
            .format(&system, name)
            .map_err(facts_error)?
        else {
            return Ok(None);
        };
        let own: Vec<&FormatField> = format.own_fields().collect();
        Ok(Some(Tracepoint {
            system,
            name: name.to_string(),
            args: TracepointArgs::Classic(self.classic_fields(&own)),
        }))
    }

    fn function_names(&self) -> Result<Vec<String>, FactsError> {
        let btf = self.require_btf()?;
        let mut names = Vec::new();
        let blobs = std::iter::once(btf).chain(self.modules().iter().map(|m| &m.btf));
        for blob in blobs {
            for id in blob.ids_of_kind(Kind::Func) {
                let record = blob.ty(id).map_err(facts_error)?;
                names.push(record.name.to_string());
            }
        }
        names.sort();
        names.dedup();
        Ok(names)
    }

    fn function(&self, name: &str) -> Result<Option<FunctionProto>, FactsError> {
        let Some((scope, func_id)) = self.find_named(Kind::Func, name)? else {
            return Ok(None);
        };
        let btf = scope.btf;
        let func = btf.ty(func_id).map_err(facts_error)?;
        let proto = btf
            .ty(func.referenced().unwrap_or(0))
            .map_err(facts_error)?;
        let params = btf
            .params(&proto)
            .map_err(facts_error)?
            .into_iter()
            .map(|p| Param {
                name: p.name.to_string(),
                ty: scope.global(p.ty),
            })
            .collect();
        let ret = proto
            .referenced()
            .filter(|&r| r != 0)
            .map(|r| scope.global(r));
        Ok(Some(FunctionProto {
            name: name.to_string(),
            params,
            ret,
            module: scope.module.map(|m| m.name.clone()),
        }))
    }

    fn find_type(&self, c_name: &str) -> Result<Option<TypeId>, FactsError> {
        self.lookup_c_type(c_name)
    }

    fn kind(&self, ty: TypeId) -> TypeKind {
        match self.resolve(self.peel(ty)) {
            Resolved::Void => TypeKind::Void,
            Resolved::Record(scope, record) => self.kind_of_record(scope, &record),
            Resolved::Synthetic(Synthetic::Pointer(target)) => TypeKind::Pointer(target),
            Resolved::Synthetic(Synthetic::Array { elem, len }) => TypeKind::Array { elem, len },
            Resolved::Synthetic(Synthetic::Int {
                name,
                bytes,
                signed,
            }) => TypeKind::Int {
                bytes,
                signed,
                is_char: is_char_name(&name),
            },
            Resolved::Synthetic(Synthetic::Enum {
                name,
                bytes,
                signed,
            }) => TypeKind::Enum {
                name,
                bytes,
                signed,
            },
            Resolved::Synthetic(Synthetic::Float { bytes, .. }) => TypeKind::Float { bytes },
            Resolved::Synthetic(Synthetic::Aggregate {
                keyword,
                name,
                bytes,
            }) => TypeKind::Struct {
                name,
                size: bytes,
                is_union: keyword == "union",
            },
            Resolved::Synthetic(Synthetic::Function { .. }) => TypeKind::Function,
            // peel() removed typedefs and qualifiers; one left is a loop.
            Resolved::Synthetic(Synthetic::Typedef { .. } | Synthetic::Qualified { .. }) => {
                TypeKind::Opaque {
                    name: "<type loop>".into(),
                }
            }
            Resolved::Synthetic(Synthetic::Unknown(why)) => TypeKind::Opaque {
                name: format!("<{why}>"),
            },
            Resolved::Bad(why) => TypeKind::Opaque {
                name: format!("<{why}>"),
            },
        }
    }

    fn type_name(&self, ty: TypeId) -> String {
        self.spell(ty, String::new(), 0)
    }

    fn members(&self, ty: TypeId) -> Vec<Member> {
        let Resolved::Record(scope, record) = self.resolve(self.peel(ty)) else {
            return Vec::new();
        };
        let Ok(members) = scope.btf.members(&record) else {
            return Vec::new();
        };
        members
            .into_iter()
            .map(|m| {
                let (bit_offset, bitfield_bits) = match m.bitfield_bits {
                    Some(bits) => (m.bit_offset, Some(bits)),
                    None if !record.kind_flag => match scope.btf.member_bitfield(m.ty) {
                        Some((extra, bits)) => (m.bit_offset + extra, Some(bits)),
                        None => (m.bit_offset, None),
                    },
                    None => (m.bit_offset, None),
                };
                Member {
                    name: m.name.to_string(),
                    ty: scope.global(m.ty),
                    bit_offset,
                    bitfield_bits,
                }
            })
            .collect()
    }

    fn enum_values(&self, name: &str) -> Result<Option<Vec<(String, i64)>>, FactsError> {
        for kind in [Kind::Enum, Kind::Enum64] {
            if let Some((scope, id)) = self.find_named(kind, name)? {
                let record = scope.btf.ty(id).map_err(facts_error)?;
                let values = scope.btf.enum_values(&record).map_err(facts_error)?;
                return Ok(Some(
                    values
                        .into_iter()
                        .map(|(n, v)| (n.to_string(), v))
                        .collect(),
                ));
            }
        }
        Ok(None)
    }

    fn user_function(
        &self,
        path: &str,
        function: &str,
    ) -> Result<Option<FunctionProto>, FactsError> {
        let functions = match self.dwarf.functions(Path::new(path)) {
            Ok(functions) => functions,
            Err(DwarfError::NoDebugInfo { .. }) => return Ok(None),
            Err(e) => return Err(facts_error(e)),
        };
        let Some(found) = functions.function(function) else {
            return Err(FactsError(format!(
                "the DWARF of {path} has no function `{function}`"
            )));
        };
        Ok(Some(FunctionProto {
            name: found.name.clone(),
            params: found
                .params
                .iter()
                .map(|p| Param {
                    name: p.name.clone(),
                    ty: self.mint_user_type(&p.ty),
                })
                .collect(),
            ret: found.ret.as_ref().map(|r| self.mint_user_type(r)),
            module: None,
        }))
    }

    fn struct_names(&self) -> Vec<String> {
        let Some(btf) = self.btf.as_deref() else {
            return Vec::new();
        };
        let mut names = Vec::new();
        let blobs = std::iter::once(btf).chain(self.modules().iter().map(|m| &m.btf));
        for blob in blobs {
            for kind in [Kind::Struct, Kind::Union] {
                for id in blob.ids_of_kind(kind) {
                    if let Ok(record) = blob.ty(id)
                        && !record.name.is_empty()
                    {
                        names.push(record.name.to_string());
                    }
                }
            }
        }
        names.sort();
        names.dedup();
        names
    }
}

fn facts_error(error: impl fmt::Display) -> FactsError {
    FactsError(error.to_string())
}

/// `struct x`, `union x`, `enum x`, or the bare name of an int, typedef...
fn tag_spelling(record: &BtfType<'_>) -> String {
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
fn or_anonymous(name: &str) -> &str {
    if name.is_empty() { "{...}" } else { name }
}

fn is_char_name(name: &str) -> bool {
    matches!(name, "char" | "signed char" | "unsigned char")
}

/// `char[16]` -> (`char`, 16).
fn split_array(c_type: &str) -> Option<(&str, u32)> {
    let (elem, rest) = c_type.split_once('[')?;
    let len = rest.strip_suffix(']')?.trim().parse().ok()?;
    Some((elem.trim(), len))
}

/// A C integer spelling (`unsigned long`, `long unsigned int`, `short`...)
/// as the synthetic int of its size, named as GCC names it in BTF.
fn builtin_int(name: &str) -> Option<Synthetic> {
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

/// Kernel version and machine from uname(2).
fn uname() -> (KernelVersion, String) {
    // SAFETY: utsname is plain bytes; uname fills it or fails.
    let mut uts: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: uts is a valid, writable utsname.
    let ok = unsafe { libc::uname(&mut uts) } == 0;
    let field = |raw: &[libc::c_char]| {
        // SAFETY: c_char and u8 have the same size and alignment.
        let bytes: &[u8] =
            unsafe { std::slice::from_raw_parts(raw.as_ptr().cast::<u8>(), raw.len()) };
        CStr::from_bytes_until_nul(bytes)
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    let (release, machine) = if ok {
        (field(&uts.release), field(&uts.machine))
    } else {
        (String::new(), String::new())
    };
    (parse_release(&release), machine)
}

/// `6.18.44-fc-v669` -> 6.18.44.
pub fn parse_release(release: &str) -> KernelVersion {
    let mut numbers = release
        .split(|c: char| !c.is_ascii_digit())
        .take(3)
        .map(|part| part.parse::<u32>().unwrap_or(0));
    let mut next = || numbers.next().unwrap_or(0);
    let (major, minor, patch) = (next(), next(), next());
    KernelVersion {
        major,
        minor,
        patch,
        release: release.to_string(),
    }
}

/// The kernel's config, from /proc/config.gz or /boot/config-RELEASE.
fn read_config(release: &str) -> Option<String> {
    if let Ok(file) = std::fs::File::open("/proc/config.gz") {
        let mut text = String::new();
        if flate2::read::GzDecoder::new(file)
            .read_to_string(&mut text)
            .is_ok()
        {
            return Some(text);
        }
    }
    std::fs::read_to_string(format!("/boot/config-{release}")).ok()
}

/// `CONFIG_X=y` lines; `# CONFIG_X is not set` lines are left out, so they
/// read as unset. String values lose their quotes.
pub fn parse_config(text: &str) -> HashMap<String, String> {
    text.lines()
        .filter(|line| line.starts_with("CONFIG_"))
        .filter_map(|line| line.split_once('='))
        .map(|(key, value)| {
            let value = value
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .unwrap_or(value);
            (key.to_string(), value.to_string())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_blob::*;
    use stap_lang::kernel::find_member;

    /// A small vmlinux: see the ids in the comments.
    fn vmlinux_blob() -> BlobBuilder {
        let mut b = BlobBuilder::new();
        let int = b.int("int", 4, INT_SIGNED); // 1
        let char_ = b.int("char", 1, INT_SIGNED | INT_CHAR); // 2
        let uint = b.int("unsigned int", 4, 0); // 3
        b.int("long unsigned int", 8, 0); // 4
        let name = b.array(char_, int, 16); // 5
        b.composite(
            KIND_STRUCT,
            "net_device",
            32,
            true,
            &[("name", name, 0), ("flags", uint, (3 << 24) | 128)],
        ); // 6
        let dev_ptr = b.ptr(6); // 7
        b.composite(
            KIND_STRUCT,
            "sk_buff",
            24,
            false,
            &[("dev", dev_ptr, 0), ("len", uint, 64), ("", 9, 128)],
        ); // 8
        b.composite(KIND_UNION, "", 4, false, &[("a", int, 0), ("b", uint, 0)]); // 9
        let reason = b.enumeration(
            "skb_drop_reason",
            false,
            &[("SKB_DROP_REASON_NO_SOCKET", 3)],
        ); // 10
        let skb_ptr = b.ptr(8); // 11
        let void_ptr = b.ptr(0); // 12
        let iter = b.func_proto(
            int,
            &[("__data", void_ptr), ("skb", skb_ptr), ("reason", reason)],
        ); // 13
        b.func("__traceiter_kfree_skb", iter); // 14
        let probe = b.func_proto(0, &[("", void_ptr), ("", skb_ptr), ("", reason)]); // 15
        let probe_ptr = b.ptr(probe); // 16
        b.record("btf_trace_kfree_skb", KIND_TYPEDEF, 0, false, probe_ptr); // 17
        let const_char = b.record("", KIND_CONST, 0, false, char_); // 18
        let string = b.ptr(const_char); // 19
        let send = b.func_proto(int, &[("name", string), ("size", int)]); // 20
        b.func("tcp_sendmsg", send); // 21
        b.record("u32", KIND_TYPEDEF, 0, false, uint); // 22
        b.record("opaque_u", KIND_FWD, 0, true, 0); // 23
        let callback = b.ptr(send); // 24
        let array_ptr = b.ptr(name); // 25
        b.composite(
            KIND_STRUCT,
            "ops",
            16,
            false,
            &[("cb", callback, 0), ("buf", array_ptr, 64)],
        ); // 26
        b
    }

    const VMLINUX_TYPES: u32 = 26;

    /// Writes vmlinux and two modules' split BTF into a fresh directory.
    fn kernel_on_disk(test: &str) -> BtfKernel {
        let dir = std::env::temp_dir().join(format!("stap-rs-btf-{}-{test}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let vmlinux = vmlinux_blob();
        let base_strings = vmlinux.build().len() as u32 - 24 - types_len(&vmlinux);
        std::fs::write(dir.join("vmlinux"), vmlinux.build()).expect("write vmlinux");

        let mut first = BlobBuilder::split(VMLINUX_TYPES, base_strings);
        first.int("amod_int", 2, 0); // 27
        first.int("amod_int2", 2, 0); // 28
        std::fs::write(dir.join("amod"), first.build()).expect("write amod");

        let mut module = BlobBuilder::split(VMLINUX_TYPES, base_strings);
        let local = module.composite(KIND_STRUCT, "mod_state", 8, false, &[("count", 3, 0)]); // 27
        let local_ptr = module.ptr(local); // 28
        let proto = module.func_proto(1, &[("skb", 11), ("state", local_ptr)]); // 29
        module.func("mod_rx", proto); // 30
        std::fs::write(dir.join("mymod"), module.build()).expect("write mymod");

        let kernel = BtfKernel::open_with_modules(&dir.join("vmlinux"), Some(&dir)).expect("opens");
        // Module BTF is opened lazily: open it before the files go.
        kernel.modules();
        std::fs::remove_dir_all(&dir).expect("clean up");
        kernel
    }

    fn types_len(b: &BlobBuilder) -> u32 {
        let bytes = b.build();
        u32::from_le_bytes(bytes[12..16].try_into().expect("4 bytes"))
    }

    fn find(kernel: &BtfKernel, name: &str) -> TypeId {
        kernel
            .find_type(name)
            .expect("no error")
            .unwrap_or_else(|| panic!("{name} not found"))
    }

    #[test]
    fn finds_types_by_c_spelling() {
        let k = kernel_on_disk("find");
        assert_eq!(find(&k, "struct sk_buff"), TypeId(8));
        assert_eq!(find(&k, "struct  net_device"), TypeId(6));
        assert_eq!(find(&k, "unsigned int"), TypeId(3));
        assert_eq!(find(&k, "unsigned long"), TypeId(4));
        assert_eq!(find(&k, "long unsigned int"), TypeId(4));
        assert_eq!(find(&k, "u32"), TypeId(22));
        assert_eq!(find(&k, "union opaque_u"), TypeId(23));
        assert_eq!(find(&k, "enum skb_drop_reason"), TypeId(10));
        assert_eq!(find(&k, "void"), TypeId(0));
        assert_eq!(k.find_type("struct opaque_u"), Ok(None));
        assert_eq!(k.find_type("struct no_such"), Ok(None));
        assert_eq!(k.find_type("no_such_t"), Ok(None));
        // Not in BTF: minted.
        let long_long = find(&k, "long long");
        assert!(long_long.0 >= SYNTHETIC_BASE);
        assert_eq!(
            k.kind(long_long),
            TypeKind::Int {
                bytes: 8,
                signed: true,
                is_char: false
            }
        );
        let char_ptr = find(&k, "char *");
        assert_eq!(k.kind(char_ptr), TypeKind::Pointer(TypeId(2)));
        assert_eq!(k.type_name(char_ptr), "char *");
        assert_eq!(find(&k, "char*"), char_ptr, "minted once");
    }

    #[test]
    fn kinds_peel_typedefs_and_qualifiers() {
        let k = kernel_on_disk("kinds");
        assert_eq!(
            k.kind(TypeId(22)),
            TypeKind::Int {
                bytes: 4,
                signed: false,
                is_char: false
            }
        );
        assert_eq!(
            k.kind(TypeId(18)),
            TypeKind::Int {
                bytes: 1,
                signed: true,
                is_char: true
            }
        );
        assert_eq!(k.kind(TypeId(7)), TypeKind::Pointer(TypeId(6)));
        assert_eq!(
            k.kind(TypeId(5)),
            TypeKind::Array {
                elem: TypeId(2),
                len: 16
            }
        );
        assert_eq!(
            k.kind(TypeId(10)),
            TypeKind::Enum {
                name: "skb_drop_reason".into(),
                bytes: 4,
                signed: false
            }
        );
        assert_eq!(
            k.kind(TypeId(9)),
            TypeKind::Struct {
                name: String::new(),
                size: 4,
                is_union: true
            }
        );
        assert_eq!(
            k.kind(TypeId(23)),
            TypeKind::Opaque {
                name: "union opaque_u".into()
            }
        );
        assert_eq!(k.kind(TypeId(0)), TypeKind::Void);
        assert!(matches!(k.kind(TypeId(9999)), TypeKind::Opaque { .. }));
    }

    #[test]
    fn spells_c_types() {
        let k = kernel_on_disk("spell");
        let spelled: Vec<String> = [7, 5, 19, 24, 25, 22, 23, 9, 12, 16, 0]
            .into_iter()
            .map(|id| k.type_name(TypeId(id)))
            .collect();
        assert_eq!(
            spelled,
            [
                "struct net_device *",
                "char[16]",
                "const char *",
                "int (*)(const char *, int)",
                "char (*)[16]",
                "u32",
                "union opaque_u",
                "union {...}",
                "void *",
                "void (*)(void *, struct sk_buff *, enum skb_drop_reason)",
                "void",
            ]
        );
    }

    #[test]
    fn members_with_bitfields_and_anonymous_unions() {
        let k = kernel_on_disk("members");
        let dev = k.members(TypeId(6));
        assert_eq!(dev[1].name, "flags");
        assert_eq!((dev[1].bit_offset, dev[1].bitfield_bits), (128, Some(3)));
        let skb = TypeId(8);
        let b = find_member(&k, skb, "b").expect("through the anonymous union");
        assert_eq!((b.bit_offset, b.ty), (128, TypeId(3)));
        assert_eq!(find_member(&k, skb, "dev").map(|m| m.ty), Some(TypeId(7)));
        assert!(k.members(TypeId(3)).is_empty());
        assert_eq!(
            k.struct_names(),
            ["mod_state", "net_device", "ops", "sk_buff"]
        );
    }

    #[test]
    fn raw_tracepoint_args_take_names_from_traceiter_and_types_from_typedef() {
        let k = kernel_on_disk("tracepoint");
        let params = k
            .raw_tracepoint_args("kfree_skb")
            .expect("no error")
            .expect("found");
        let got: Vec<_> = params.iter().map(|p| (p.name.as_str(), p.ty)).collect();
        assert_eq!(got, [("skb", TypeId(11)), ("reason", TypeId(10))]);
        assert_eq!(k.raw_tracepoint_args("nope"), Ok(None));
    }

    #[test]
    fn functions_from_vmlinux_and_modules() {
        let k = kernel_on_disk("functions");
        let send = k.function("tcp_sendmsg").expect("no error").expect("found");
        assert_eq!(send.module, None);
        assert_eq!(send.ret, Some(TypeId(1)));
        assert_eq!(send.params[0].name, "name");

        let rx = k
            .function("mod_rx")
            .expect("no error")
            .expect("found in a module");
        assert_eq!(rx.module.as_deref(), Some("mymod"));
        // amod's two types take 27..=28, so mymod's start at 29.
        assert_eq!(rx.params[0].ty, TypeId(11), "a vmlinux type keeps its id");
        let state_ptr = rx.params[1].ty;
        assert_eq!(state_ptr, TypeId(29 + 1));
        assert_eq!(k.type_name(state_ptr), "struct mod_state *");
        let TypeKind::Pointer(state) = k.kind(state_ptr) else {
            panic!("not a pointer")
        };
        assert_eq!(state, TypeId(29));
        assert_eq!(k.members(state)[0].ty, TypeId(3));
        assert_eq!(k.module_names(), ["amod", "mymod"]);
        assert_eq!(
            k.function_names().expect("names"),
            ["__traceiter_kfree_skb", "mod_rx", "tcp_sendmsg"]
        );
        assert_eq!(k.function("nope"), Ok(None));
    }

    #[test]
    fn enum_values_by_name() {
        let k = kernel_on_disk("enums");
        assert_eq!(
            k.enum_values("skb_drop_reason"),
            Ok(Some(vec![("SKB_DROP_REASON_NO_SOCKET".to_string(), 3)]))
        );
        assert_eq!(k.enum_values("nope"), Ok(None));
    }

    #[test]
    fn missing_btf_says_what_still_works() {
        let err = BtfKernel::open(Path::new("/nonexistent/vmlinux")).expect_err("missing");
        let message = err.to_string();
        for needed in [
            "/nonexistent/vmlinux",
            "kernel.trace",
            "kernel.function",
            "@cast",
            "$var->field",
            "begin",
            "timer",
            "process(...)",
        ] {
            assert!(message.contains(needed), "`{message}` lacks `{needed}`");
        }
        let k = BtfKernel::without_btf();
        let facts_error = k.find_type("struct sk_buff").expect_err("needs BTF");
        assert!(facts_error.0.contains("@cast"));
        assert!(k.function("tcp_sendmsg").is_err());
        assert!(k.tracepoint(None, "kfree_skb").is_err());
        assert!(k.struct_names().is_empty());
        // Plain integers need no BTF.
        let int = find(&k, "unsigned int");
        assert_eq!(
            k.kind(int),
            TypeKind::Int {
                bytes: 4,
                signed: false,
                is_char: false
            }
        );
    }

    #[test]
    fn corrupt_btf_file_is_an_open_error() {
        let path = std::env::temp_dir().join(format!("stap-rs-btf-{}-corrupt", std::process::id()));
        std::fs::write(&path, b"not btf at all, just text").expect("write");
        let err = BtfKernel::open(&path).expect_err("corrupt");
        std::fs::remove_file(&path).expect("clean up");
        assert!(matches!(err, OpenError::Corrupt { .. }));
        assert!(err.to_string().contains("bad magic"), "{err}");
    }

    #[test]
    fn classic_field_types() {
        let k = kernel_on_disk("classic");
        let field = |c_type: &str, size: u32, signed: bool| FormatField {
            name: "f".into(),
            c_type: c_type.into(),
            offset: 8,
            size,
            signed,
            is_common: false,
        };
        let name = |c_type: &str, size: u32| {
            k.type_name(k.classic_field_type(&field(c_type, size, false)))
        };
        assert_eq!(name("const char *", 8), "char *");
        assert_eq!(name("char[16]", 16), "char[16]");
        assert_eq!(name("u32", 4), "u32");
        assert_eq!(name("umode_t", 8), "umode_t");
        assert_eq!(name("__data_loc char[]", 4), "__data_loc char[]");
        let unknown = k.classic_field_type(&field("umode_t", 2, false));
        assert_eq!(
            k.kind(unknown),
            TypeKind::Int {
                bytes: 2,
                signed: false,
                is_char: false
            }
        );
    }

    #[test]
    fn user_function_types_from_dwarf() {
        let binary = crate::dwarf::tests::compile("kernel", &["-g"]);
        let path = binary.to_str().expect("utf-8 temp path");
        let kernel = BtfKernel::without_btf();
        let f = kernel
            .user_function(path, "f")
            .expect("reading DWARF")
            .expect("the binary has DWARF");
        let params: Vec<(String, String)> = f
            .params
            .iter()
            .map(|p| (p.name.clone(), kernel.type_name(p.ty)))
            .collect();
        assert_eq!(
            params,
            [
                ("n".to_string(), "int".to_string()),
                ("s".to_string(), "const char *".to_string())
            ]
        );
        assert!(f.params.iter().all(|p| p.ty.0 >= SYNTHETIC_BASE));
        assert_eq!(
            kernel.kind(f.params[0].ty),
            TypeKind::Int {
                bytes: 4,
                signed: true,
                is_char: false
            }
        );
        let TypeKind::Pointer(target) = kernel.kind(f.params[1].ty) else {
            panic!("s is a pointer");
        };
        assert!(matches!(
            kernel.kind(target),
            TypeKind::Int {
                bytes: 1,
                is_char: true,
                ..
            }
        ));
        assert_eq!(f.ret.map(|r| kernel.type_name(r)).as_deref(), Some("int"));

        let g = kernel.user_function(path, "g").unwrap().unwrap();
        let names: Vec<String> = g.params.iter().map(|p| kernel.type_name(p.ty)).collect();
        assert_eq!(
            names,
            [
                "struct point *",
                "my_size",
                "char **",
                "enum color",
                "const unsigned char *",
                "int (*)(int)",
                "double"
            ]
        );
        assert_eq!(g.ret, None);
        let TypeKind::Pointer(point) = kernel.kind(g.params[0].ty) else {
            panic!("p is a pointer");
        };
        assert_eq!(
            kernel.kind(point),
            TypeKind::Struct {
                name: "point".into(),
                size: 8,
                is_union: false
            }
        );
        assert!(kernel.members(point).is_empty());
        assert!(matches!(
            kernel.kind(g.params[1].ty),
            TypeKind::Int {
                bytes: 8,
                signed: false,
                ..
            }
        ));
        assert_eq!(kernel.kind(g.params[6].ty), TypeKind::Float { bytes: 8 });

        let missing = kernel.user_function(path, "nope").unwrap_err();
        assert!(missing.0.contains("no function `nope`"), "{missing}");
        let stripped = crate::dwarf::tests::compile("kernel-nodebug", &[]);
        let stripped = stripped.to_str().expect("utf-8 temp path");
        assert_eq!(kernel.user_function(stripped, "f"), Ok(None));
    }

    #[test]
    fn release_and_config_parsing() {
        let v = parse_release("6.18.44-fc-v669");
        assert_eq!((v.major, v.minor, v.patch), (6, 18, 44));
        assert_eq!(v.to_string(), "6.18.44");
        let v = parse_release("6.1-rc2");
        assert_eq!((v.major, v.minor, v.patch), (6, 1, 0));
        let config = parse_config(
            "# comment\nCONFIG_BPF=y\n# CONFIG_KPROBES is not set\nCONFIG_HZ=250\nCONFIG_LOCALVERSION=\"-x\"\n",
        );
        assert_eq!(config.get("CONFIG_BPF").map(String::as_str), Some("y"));
        assert_eq!(config.get("CONFIG_HZ").map(String::as_str), Some("250"));
        assert_eq!(
            config.get("CONFIG_LOCALVERSION").map(String::as_str),
            Some("-x")
        );
        assert_eq!(config.get("CONFIG_KPROBES"), None);
    }

    #[test]
    fn builtin_int_spellings() {
        let canonical = |s: &str| match builtin_int(s) {
            Some(Synthetic::Int { name, bytes, .. }) => Some((name, bytes)),
            _ => None,
        };
        assert_eq!(
            canonical("unsigned long"),
            Some(("long unsigned int".into(), 8))
        );
        assert_eq!(canonical("short"), Some(("short int".into(), 2)));
        assert_eq!(
            canonical("unsigned char"),
            Some(("unsigned char".into(), 1))
        );
        assert_eq!(
            canonical("long long unsigned int"),
            Some(("long long unsigned int".into(), 8))
        );
        assert_eq!(canonical("unsigned"), Some(("unsigned int".into(), 4)));
        assert_eq!(canonical("u32"), None);
    }
}
