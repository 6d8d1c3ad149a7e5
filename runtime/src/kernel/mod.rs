//! [`BtfKernel`]: the compiler's [`KernelFacts`], answered from BTF, tracefs
//! and uname(2), each read only when first needed.
//!
//! Type ids: vmlinux's BTF ids are used as they are. Module BTF ids overlap
//! between modules (each continues from vmlinux's last id), so each opened
//! module gets its own range above vmlinux's. Types BTF has no record for
//! (`char *` of a tracefs field, say) are minted from [`SYNTHETIC_BASE`] up.
//!
//! `types` holds that id space, `tracepoints` the argument decoding and
//! `system` uname and the build config; this file is the facade and the
//! [`KernelFacts`] answers built on them.

mod system;
#[cfg(test)]
mod tests;
mod tracepoints;
mod types;

pub use system::{parse_config, parse_release};
pub use types::SYNTHETIC_BASE;

use system::uname;
use types::{DiskModules, ModuleBtf, Resolved, Synthetic, is_char_name};

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use stap_lang::kernel::{
    ClassicField, FactsError, FunctionProto, KernelFacts, KernelLine, KernelVersion, LineSelector,
    Mechanism, Mechanisms, Member, Param, SourceFunction, TraceableFunctions, Tracepoint,
    TracepointArgs, TypeId, TypeKind,
};

use crate::btf::{Btf, BtfError, Kind};
use crate::dwarf::{DwarfCache, DwarfError};
use crate::features::{Availability, Features};
use crate::kdwarf::KernelDwarf;
use crate::tracefs::{FormatField, Tracefs, TracefsError};

/// Where the running kernel publishes its BTF; modules' BTF sits beside it.
pub const DEFAULT_VMLINUX: &str = "/sys/kernel/btf/vmlinux";

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

/// Kernel facts from BTF, tracefs and uname.
pub struct BtfKernel {
    btf: Option<Arc<Btf>>,
    btf_path: PathBuf,
    /// Where module BTF lives; only meaningful for the running kernel's BTF.
    module_dir: Option<PathBuf>,
    modules: OnceLock<Vec<ModuleBtf>>,
    /// Modules that are not loaded, read from their files when a probe
    /// names them.
    disk: DiskModules,
    synthetic: Mutex<Vec<Synthetic>>,
    /// [`BtfKernel::lookup_c_type`]'s answers by C spelling, each with the
    /// number of modules known when it was found.
    c_types: Mutex<HashMap<String, (Option<TypeId>, usize)>>,
    /// User binaries' DWARF, for process probes.
    dwarf: DwarfCache,
    tracefs: Option<Tracefs>,
    version: KernelVersion,
    arch: String,
    config: OnceLock<HashMap<String, String>>,
    features: Features,
    /// ftrace's hookable functions, read on first use.
    traceable: OnceLock<Option<TraceableFunctions>>,
    /// The running kernel's DWARF, found and indexed on first use.
    kernel_dwarf: OnceLock<Result<Arc<KernelDwarf>, String>>,
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
        // Module files match only the running kernel's own BTF.
        let release_dir = (module_dir.is_some() && path == Path::new(DEFAULT_VMLINUX))
            .then(|| Path::new(crate::modfile::MODULES_ROOT).join(&version.release));
        BtfKernel {
            btf,
            btf_path: path.to_path_buf(),
            module_dir: module_dir.map(Path::to_path_buf),
            modules: OnceLock::new(),
            disk: DiskModules::new(release_dir),
            synthetic: Mutex::new(Vec::new()),
            c_types: Mutex::new(HashMap::new()),
            dwarf: DwarfCache::default(),
            tracefs,
            version,
            arch,
            config: OnceLock::new(),
            features,
            traceable: OnceLock::new(),
            kernel_dwarf: OnceLock::new(),
        }
    }

    /// The running kernel's DWARF (see [`crate::kdwarf`]), found, checked
    /// against the running build and indexed on first use.
    pub fn kernel_dwarf(&self) -> Result<&Arc<KernelDwarf>, &str> {
        self.kernel_dwarf
            .get_or_init(|| KernelDwarf::running().map(Arc::new))
            .as_ref()
            .map_err(String::as_str)
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
        self.tracefs.as_ref().ok_or_else(|| {
            // Not mounted, or mounted but unreadable: find() says which.
            let why = Tracefs::find().err().unwrap_or(TracefsError::NotMounted);
            FactsError(why.to_string())
        })
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

    fn syscalls(&self) -> Vec<(u32, String)> {
        crate::syscalls::all()
    }

    fn syscall_number(&self, name: &str) -> Option<u32> {
        crate::syscalls::number(name)
    }

    fn syscall_name(&self, nr: u32) -> Option<String> {
        crate::syscalls::name(nr).map(str::to_string)
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

    fn classic_fields(
        &self,
        system: &str,
        name: &str,
    ) -> Result<Option<Vec<ClassicField>>, FactsError> {
        let Some(fs) = &self.tracefs else {
            return Ok(None);
        };
        let Some(format) = fs.format(system, name).map_err(facts_error)? else {
            return Ok(None);
        };
        let own: Vec<&FormatField> = format.own_fields().collect();
        Ok(Some(self.classic_fields(&own)))
    }

    fn function_names(&self) -> Result<Vec<String>, FactsError> {
        let btf = self.require_btf()?;
        let mut names = Vec::new();
        let blobs = std::iter::once(btf).chain(self.all_modules().map(|m| &m.btf));
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

    /// Only for the running kernel's own BTF: another kernel's (`--btf`)
    /// functions are not this tracefs's.
    fn traceable_functions(&self) -> Option<&TraceableFunctions> {
        self.traceable
            .get_or_init(|| {
                if self.btf_path != Path::new(DEFAULT_VMLINUX) {
                    return None;
                }
                let text = std::fs::read_to_string(
                    self.tracefs
                        .as_ref()?
                        .root()
                        .join("available_filter_functions"),
                )
                .ok()?;
                Some(TraceableFunctions::from_lines(text.lines()))
            })
            .as_ref()
    }

    fn function(&self, name: &str) -> Result<Option<FunctionProto>, FactsError> {
        let Some((scope, func_id)) = self.find_named(Kind::Func, name)? else {
            return Ok(None);
        };
        self.prototype(scope, func_id, name).map(Some)
    }

    fn open_module(&self, name: &str) -> Result<bool, FactsError> {
        BtfKernel::open_module(self, name).map_err(FactsError)
    }

    fn module_function(
        &self,
        module: &str,
        name: &str,
    ) -> Result<Option<FunctionProto>, FactsError> {
        let module = crate::modfile::canonical_name(module);
        let Some(found) = self.all_modules().find(|m| m.name == module) else {
            return Ok(None);
        };
        let Some(func_id) = found
            .btf
            .find_by_name(Kind::Func, name)
            .map_err(facts_error)?
        else {
            return Ok(None);
        };
        // A module's own records only: split BTF also finds vmlinux's.
        if func_id < found.btf.first_id() {
            return Ok(None);
        }
        let scope = types::Scope {
            btf: &found.btf,
            module: Some(found),
        };
        self.prototype(scope, func_id, name).map(Some)
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

    fn sdt_markers(&self, path: &str) -> Result<Vec<stap_lang::sdt::SdtMarker>, FactsError> {
        crate::sdt::markers(Path::new(path)).map_err(FactsError)
    }

    fn library_path(&self, name: &str) -> Option<String> {
        crate::ldso::resolve(name)
    }

    fn needed_libraries(&self, program: &str) -> Vec<String> {
        crate::ldso::needed(program)
    }

    fn plt_entries(&self, path: &str) -> Result<Vec<(String, u64)>, FactsError> {
        crate::uprobe::plt_entries(Path::new(path)).map_err(|e| FactsError(e.to_string()))
    }

    fn kfunc(&self, name: &str) -> Option<u32> {
        // Module kfuncs would need the module's BTF fd in the program's
        // fd_array; the ones stap-rs calls are all in vmlinux.
        let btf = self.btf.as_deref()?;
        btf.find_by_name(Kind::Func, name).ok().flatten()
    }

    fn user_paths(&self, pattern: &str) -> Vec<String> {
        crate::sdt::user_paths(pattern)
    }

    fn kernel_source_functions(
        &self,
        function: &str,
        file: &str,
    ) -> Result<Vec<SourceFunction>, FactsError> {
        let dwarf = self.kernel_dwarf().map_err(|e| FactsError(e.to_string()))?;
        dwarf.source_functions(function, file).map_err(FactsError)
    }

    fn kernel_lines(
        &self,
        function: &str,
        file: &str,
        lines: LineSelector,
    ) -> Result<Vec<KernelLine>, FactsError> {
        let dwarf = self.kernel_dwarf().map_err(|e| FactsError(e.to_string()))?;
        dwarf.lines(function, file, lines).map_err(FactsError)
    }

    fn user_statement(&self, path: &str, spec: &str) -> Result<Option<u64>, FactsError> {
        crate::lines::statement_offset(Path::new(path), spec)
            .map(Some)
            .map_err(FactsError)
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
        let blobs = std::iter::once(btf).chain(self.all_modules().map(|m| &m.btf));
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

impl BtfKernel {
    /// The prototype of function record `func_id` of `scope`.
    fn prototype(
        &self,
        scope: types::Scope<'_>,
        func_id: u32,
        name: &str,
    ) -> Result<FunctionProto, FactsError> {
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
        Ok(FunctionProto {
            name: name.to_string(),
            params,
            ret,
            module: scope.module.map(|m| m.name.clone()),
        })
    }
}

fn facts_error(error: impl fmt::Display) -> FactsError {
    FactsError(error.to_string())
}
