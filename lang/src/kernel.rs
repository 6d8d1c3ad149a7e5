//! What the compiler needs to know about the kernel it compiles for.
//!
//! **lang/ makes no syscalls and reads no kernel files.** Everything it learns
//! about the running kernel comes through [`KernelFacts`]: runtime/ implements
//! it from BTF and tracefs, and tests implement it with a fake.

use std::fmt;

/// The prefix of the kernel's BPF LSM stubs: a `kernel.lsm("HOOK")`
/// program attaches to `bpf_lsm_HOOK`, whose BTF prototype is the hook's.
pub const LSM_STUB_PREFIX: &str = "bpf_lsm_";

/// An opaque handle for a kernel type. Only meaningful to the provider that
/// returned it (BTF type ids for the BTF provider; a provider may also mint
/// ids for types it synthesizes, such as `char *` for a tracefs field).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TypeId(pub u32);

/// A kernel type with typedefs and `const`/`volatile`/`restrict` peeled off.
#[derive(Debug, Clone, PartialEq)]
pub enum TypeKind {
    Void,
    /// Integers, `_Bool`, `char` and enums' underlying representation.
    Int {
        bytes: u32,
        signed: bool,
        /// True for `char`/`signed char`/`unsigned char`: a `char *` or
        /// `char[N]` reads as a string with `kernel_string`.
        is_char: bool,
    },
    Enum {
        name: String,
        bytes: u32,
        signed: bool,
    },
    Pointer(TypeId),
    Array {
        elem: TypeId,
        len: u32,
    },
    /// A struct or union. `size` is in bytes.
    Struct {
        name: String,
        size: u32,
        is_union: bool,
    },
    /// A function type (only ever seen behind a pointer).
    Function,
    Float {
        bytes: u32,
    },
    /// A forward declaration whose body this kernel does not have.
    Opaque {
        name: String,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct Member {
    /// Empty for an anonymous struct/union member; lookups descend into those.
    pub name: String,
    pub ty: TypeId,
    /// Offset from the start of the containing struct, in bits.
    pub bit_offset: u32,
    /// `Some(width)` for a bitfield.
    pub bitfield_bits: Option<u32>,
}

/// A named, typed argument of a tracepoint or kernel function.
#[derive(Debug, Clone, PartialEq)]
pub struct Param {
    pub name: String,
    pub ty: TypeId,
}

/// Where a tracepoint's arguments come from, which decides how the backend
/// attaches to it.
#[derive(Debug, Clone, PartialEq)]
pub enum TracepointArgs {
    /// BTF-typed arguments of the raw tracepoint (`__traceiter_NAME` names,
    /// `btf_trace_NAME` types), in order: `ctx[0]`, `ctx[1]`, ...
    Raw(Vec<Param>),
    /// Only a classic tracepoint exists (the `syscalls:` events): the
    /// fields of its tracefs `format` file, at their record offsets.
    Classic(Vec<ClassicField>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct ClassicField {
    pub name: String,
    pub ty: TypeId,
    pub offset: u32,
    pub size: u32,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Tracepoint {
    pub system: String,
    pub name: String,
    pub args: TracepointArgs,
}

#[derive(Debug, Clone, PartialEq)]
pub struct FunctionProto {
    pub name: String,
    pub params: Vec<Param>,
    /// `None` for `void`.
    pub ret: Option<TypeId>,
    /// The module that defines it; `None` for vmlinux.
    pub module: Option<String>,
}

/// Which lines of a `kernel.statement("FUNC@FILE:LINES")`: `*` (every
/// line of the function), `N`, or `N-M`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineSelector {
    Every,
    Range(u64, u64),
}

impl LineSelector {
    /// `*`, `N` or `N-M`; `None` for anything else.
    pub fn parse(text: &str) -> Option<LineSelector> {
        if text == "*" {
            return Some(LineSelector::Every);
        }
        let (from, to) = text.split_once('-').unwrap_or((text, text));
        let (from, to) = (from.trim().parse().ok()?, to.trim().parse().ok()?);
        (from <= to).then_some(LineSelector::Range(from, to))
    }

    pub fn contains(self, line: u64) -> bool {
        match self {
            LineSelector::Every => true,
            LineSelector::Range(from, to) => (from..=to).contains(&line),
        }
    }
}

/// A kernel function found through DWARF by its source file
/// (`kernel.function("F@FILE")`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceFunction {
    pub name: String,
    /// The file that declares it, as its compilation unit names it.
    pub file: String,
    /// Its `DW_AT_decl_line`, 0 when DWARF gives none.
    pub line: u64,
}

/// One source line of a kernel function as a probe address: the first
/// instruction of the line, as an offset from the function's symbol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelLine {
    pub function: String,
    pub offset: u64,
    pub file: String,
    pub line: u64,
}

/// The kernel functions the function tracer can hook, as ftrace lists them
/// (`available_filter_functions`): what fentry, kprobe_multi and a
/// wildcard's expansion accept. A function BTF names may be absent here
/// (inlined everywhere, `notrace`, blacklisted), or present only as
/// compiler clones (`finish_task_switch.isra.0`): those are indexed under
/// their source name, as stap, reading DWARF, names them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TraceableFunctions {
    /// Plain symbols (no clone suffix), of vmlinux and modules alike.
    names: hashbrown::HashSet<String>,
    /// Source name to its clone symbols, sorted, for vmlinux functions.
    clones: hashbrown::HashMap<String, Vec<String>>,
}

impl TraceableFunctions {
    /// From ftrace's lines, `name` or `name [module]`.
    pub fn from_lines<'s>(lines: impl IntoIterator<Item = &'s str>) -> TraceableFunctions {
        let mut out = TraceableFunctions::default();
        for line in lines {
            let mut words = line.split_whitespace();
            let Some(symbol) = words.next() else {
                continue;
            };
            let in_module = words.next().is_some();
            match clone_source_name(symbol) {
                Some(source) if !in_module => out
                    .clones
                    .entry(source.to_string())
                    .or_default()
                    .push(symbol.to_string()),
                Some(_) => {}
                None if symbol.contains('.') => {} // `.part.N`, `.cold`: fragments
                None => {
                    out.names.insert(symbol.to_string());
                }
            }
        }
        for symbols in out.clones.values_mut() {
            symbols.sort();
            symbols.dedup();
        }
        out
    }

    /// Whether `name` itself can be hooked.
    pub fn contains(&self, name: &str) -> bool {
        self.names.contains(name)
    }

    /// The clone symbols that stand for `name` when it has no symbol of its
    /// own (empty when it has one, or no clone).
    pub fn clones_of(&self, name: &str) -> &[String] {
        if self.names.contains(name) {
            return &[];
        }
        self.clones.get(name).map_or(&[], Vec::as_slice)
    }

    /// Source names that exist only as clones, for wildcards.
    pub fn clone_only_names(&self) -> impl Iterator<Item = &str> {
        self.clones
            .keys()
            .filter(|name| !self.names.contains(name.as_str()))
            .map(String::as_str)
    }
}

/// The source name of a compiler clone that is a whole function with the
/// source's body: `NAME.isra.N`, `NAME.constprop.N` and their combinations
/// (`NAME.constprop.0.isra.0`). Fragments are not functions of their own:
/// `NAME.part.N` (a split-off piece), `NAME.cold` (its cold path).
pub fn clone_source_name(symbol: &str) -> Option<&str> {
    let (source, suffix) = symbol.split_once('.')?;
    let mut parts = suffix.split('.');
    let mut any = false;
    while let Some(kind) = parts.next() {
        let number = parts.next()?;
        if !matches!(kind, "isra" | "constprop") || number.parse::<u32>().is_err() {
            return None;
        }
        any = true;
    }
    (any && !source.is_empty()).then_some(source)
}

/// The probe mechanisms this kernel allows, probed once at start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Mechanisms {
    pub tracepoints: bool,
    pub raw_tracepoints: bool,
    pub tp_btf: bool,
    pub fentry: bool,
    pub kprobes: bool,
    pub uprobes: bool,
    pub perf_events: bool,
}

/// One probe mechanism, for asking why it is unavailable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mechanism {
    Tracepoints,
    RawTracepoints,
    TpBtf,
    Fentry,
    Kprobes,
    Uprobes,
    PerfEvents,
}

/// `kernel_v` / `kernel_vr` for the preprocessor: `6.18.0` and the full release.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelVersion {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
    /// The whole `uname -r`, e.g. `6.12.48+deb12-amd64`.
    pub release: String,
}

impl fmt::Display for KernelVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// Why a question about the kernel could not be answered at all (as opposed
/// to "no such thing", which is `None`).
#[derive(Debug, Clone, PartialEq)]
pub struct FactsError(pub String);

impl fmt::Display for FactsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Why a facts source without a kernel DWARF reader cannot resolve a
/// source file or line.
pub const NO_KERNEL_DWARF: &str = "no kernel DWARF reader in this build";

pub trait KernelFacts {
    fn version(&self) -> KernelVersion;

    /// `x86_64`, `aarch64`, ...
    fn arch(&self) -> String;

    /// The value of a kernel config option (`y`, `m`, a number, a string),
    /// or `None` when it is not set or unknown.
    fn config(&self, name: &str) -> Option<String>;

    fn mechanisms(&self) -> Mechanisms;

    /// Why a mechanism is unavailable, in words for an error message
    /// ("CONFIG_KPROBES is not set"); `None` when it is available or unknown.
    fn unavailable_reason(&self, mechanism: Mechanism) -> Option<String> {
        let _ = mechanism;
        None
    }

    /// Every tracepoint as `(system, name)`, for wildcards and suggestions.
    fn tracepoint_names(&self) -> Result<Vec<(String, String)>, FactsError>;

    /// A tracepoint's arguments. `system` is `None` when the script gave a
    /// bare name (`kernel.trace("kfree_skb")`).
    fn tracepoint(
        &self,
        system: Option<&str>,
        name: &str,
    ) -> Result<Option<Tracepoint>, FactsError>;

    /// The fields of a tracepoint's classic record (its tracefs `format`
    /// file), for a tracepoint that also has raw arguments: stap's BPF
    /// backend reads those fields (`$next_comm` on `sched_switch`). `None`
    /// when there is no classic event.
    fn classic_fields(
        &self,
        _system: &str,
        _name: &str,
    ) -> Result<Option<Vec<ClassicField>>, FactsError> {
        Ok(None)
    }

    /// Every traceable kernel function name (from BTF FUNC records).
    fn function_names(&self) -> Result<Vec<String>, FactsError>;

    fn function(&self, name: &str) -> Result<Option<FunctionProto>, FactsError>;

    /// Makes module `name`'s functions and types known for the questions
    /// that follow: `Ok(true)` when it is loaded, `Ok(false)` when it is
    /// not and its BTF was read from its file on disk (as stap compiles
    /// module probes from debuginfo, loaded or not). `Err` says why
    /// neither is possible.
    fn open_module(&self, _name: &str) -> Result<bool, FactsError> {
        Ok(true)
    }

    /// Function `name` of module `module` (opened by [`Self::open_module`]).
    fn module_function(
        &self,
        module: &str,
        name: &str,
    ) -> Result<Option<FunctionProto>, FactsError> {
        Ok(self
            .function(name)?
            .filter(|proto| proto.module.as_deref() == Some(module)))
    }

    /// What the function tracer can hook; `None` when unknown (tracefs
    /// unreadable, or a kernel without ftrace), and then nothing is
    /// filtered: the kernel's refusal at attach is the test.
    fn traceable_functions(&self) -> Option<&TraceableFunctions> {
        None
    }

    /// Looks up a type by its C spelling: `struct sk_buff`, `union x`,
    /// `enum skb_drop_reason`, `unsigned int`, or a typedef name.
    fn find_type(&self, c_name: &str) -> Result<Option<TypeId>, FactsError>;

    /// The type with typedefs and qualifiers removed.
    fn kind(&self, ty: TypeId) -> TypeKind;

    /// The C spelling of a type, for listings and messages.
    fn type_name(&self, ty: TypeId) -> String;

    /// Direct members of a struct or union, anonymous members included.
    fn members(&self, ty: TypeId) -> Vec<Member>;

    /// Values of an enum, by its name without `enum `.
    fn enum_values(&self, name: &str) -> Result<Option<Vec<(String, i64)>>, FactsError>;

    /// Names of structs/unions the kernel knows, for "did you mean".
    fn struct_names(&self) -> Vec<String>;

    /// The prototype of `function` in the user-space binary at `path`, from
    /// its DWARF, for `process(PATH).function(FUNCTION)` probes. Its types
    /// are ids that [`KernelFacts::kind`] and [`KernelFacts::type_name`]
    /// answer; user structs are never expanded (`members` is empty).
    /// `Ok(None)`: the binary has no DWARF; `Err`: it could not be read,
    /// or its DWARF has no such function (the message says which).
    fn user_function(
        &self,
        path: &str,
        function: &str,
    ) -> Result<Option<FunctionProto>, FactsError> {
        let _ = (path, function);
        Ok(None)
    }

    /// `process(PATH).statement("FUNC@FILE:LINE")`: the file offset of the
    /// line's first instruction from the binary's DWARF line table;
    /// `Err` says why it cannot be found. `Ok(None)`: not checked here.
    fn user_statement(&self, path: &str, spec: &str) -> Result<Option<u64>, FactsError> {
        let _ = (path, spec);
        Ok(None)
    }

    /// `kernel.function("F@FILE")`: the functions with code whose names
    /// match the glob F, declared in a source file that matches the glob
    /// FILE (stap's rule: the pattern, or the pattern after any leading
    /// directories), from the running kernel's DWARF. `Err` says why
    /// there is no DWARF to read (where it was looked for).
    fn kernel_source_functions(
        &self,
        function: &str,
        file: &str,
    ) -> Result<Vec<SourceFunction>, FactsError> {
        let _ = (function, file);
        Err(FactsError(NO_KERNEL_DWARF.to_string()))
    }

    /// `kernel.statement("F@FILE:LINES")`: for each function F matches
    /// (as in [`KernelFacts::kernel_source_functions`]), the first
    /// instruction of each selected line of FILE in the function's body,
    /// from the DWARF line table; by function, then line.
    fn kernel_lines(
        &self,
        function: &str,
        file: &str,
        lines: LineSelector,
    ) -> Result<Vec<KernelLine>, FactsError> {
        let _ = (function, file, lines);
        Err(FactsError(NO_KERNEL_DWARF.to_string()))
    }

    /// The SDT marker sites of the user-space binary at `path` (its
    /// `.note.stapsdt` notes), for `process(PATH).mark(NAME)` probes.
    /// `Err` says why the binary could not be read.
    fn sdt_markers(&self, path: &str) -> Result<Vec<crate::sdt::SdtMarker>, FactsError> {
        let _ = path;
        Ok(Vec::new())
    }

    /// The PLT stubs of the user-space binary at `path`, as `(function,
    /// file offset)` by name, for `process(PATH).plt(PATTERN)` probes.
    /// `Err` says why the binary could not be read.
    fn plt_entries(&self, path: &str) -> Result<Vec<(String, u64)>, FactsError> {
        let _ = path;
        Ok(Vec::new())
    }

    /// Where the dynamic linker finds shared library `name` (`libc.so.6`):
    /// its cache, then its default directories. `None`: nowhere.
    fn library_path(&self, name: &str) -> Option<String> {
        let _ = name;
        None
    }

    /// The shared libraries `program` loads (its `DT_NEEDED` entries,
    /// transitively, resolved as by [`KernelFacts::library_path`]).
    fn needed_libraries(&self, program: &str) -> Vec<String> {
        let _ = program;
        Vec::new()
    }

    /// The files a `process("PATH")` names, as stap resolves them: a glob
    /// (`/usr/lib*/libpython*.so*`) against the file system, a name
    /// without `/` through `$PATH`, anything else as written. Empty when
    /// nothing matches.
    fn user_paths(&self, pattern: &str) -> Vec<String> {
        vec![pattern.to_string()]
    }

    /// The vmlinux BTF id of kernel function `name`, for a kfunc call
    /// (`pid2task` calls `bpf_task_from_pid`). `None` when this kernel has
    /// no such function (kfuncs come and go between versions).
    fn kfunc(&self, name: &str) -> Option<u32> {
        let _ = name;
        None
    }

    /// Every system call of the kernel's native ABI as `(number, name)`,
    /// by number. Names are the ABI's (`stat`, `umount2`), as `__NR_NAME`
    /// spells them. Empty when unknown.
    fn syscalls(&self) -> Vec<(u32, String)> {
        Vec::new()
    }

    /// The number of a system call, by its ABI name (`umount2`) or by the
    /// name of its kernel entry point as the `syscalls:sys_enter_NAME`
    /// trace events spell it (`umount`, `newstat`). `None` when unknown.
    fn syscall_number(&self, name: &str) -> Option<u32> {
        let table = self.syscalls();
        let find = |n: &str| table.iter().find(|(_, t)| t == n).map(|(nr, _)| *nr);
        find(name).or_else(|| find(&syscall_abi_name(name)?))
    }

    /// The ABI name of system call `nr` (what stap's `syscall_name` gives).
    fn syscall_name(&self, nr: u32) -> Option<String> {
        self.syscalls()
            .into_iter()
            .find(|(n, _)| *n == nr)
            .map(|(_, name)| name)
    }
}

/// The ABI name of a system call whose kernel entry point is named
/// differently (`SYSCALL_DEFINE(newstat)` is `__NR_stat`): the trace events
/// use the entry point's name. The renames are the kernel's own, the same
/// on every architecture that has the call: `new*` (the struct layouts
/// that replaced old ones), `umount` (`__NR_umount2`), `sendfile64`
/// (`__NR_sendfile` on 64-bit ABIs). `None` when no rule applies.
pub fn syscall_abi_name(entry: &str) -> Option<String> {
    match entry {
        "umount" => Some("umount2".to_string()),
        "sendfile64" => Some("sendfile".to_string()),
        _ => entry.strip_prefix("new").map(str::to_string),
    }
}

/// Finds `name` among the members of `ty`, descending into anonymous
/// structs and unions. Returns the member with its offset made relative to
/// `ty`.
pub fn find_member(facts: &dyn KernelFacts, ty: TypeId, name: &str) -> Option<Member> {
    for m in facts.members(ty) {
        if m.name == name {
            return Some(m);
        }
        if m.name.is_empty()
            && let Some(inner) = find_member(facts, m.ty, name)
        {
            return Some(Member {
                bit_offset: m.bit_offset + inner.bit_offset,
                ..inner
            });
        }
    }
    None
}

/// Every member name reachable from `ty` (anonymous members flattened), for
/// "did you mean".
pub fn member_names(facts: &dyn KernelFacts, ty: TypeId) -> Vec<String> {
    let mut out = Vec::new();
    for m in facts.members(ty) {
        if m.name.is_empty() {
            out.extend(member_names(facts, m.ty));
        } else {
            out.push(m.name);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{KernelFacts, TraceableFunctions, clone_source_name, syscall_abi_name};
    use crate::testing::FakeKernel;

    #[test]
    fn syscall_numbers_by_abi_and_entry_point_names() {
        let k = FakeKernel::new();
        assert_eq!(k.syscall_number("openat"), Some(257));
        // The trace events name the entry point: sys_enter_newstat is stat.
        assert_eq!(k.syscall_number("newstat"), Some(4));
        assert_eq!(k.syscall_number("umount"), Some(166));
        assert_eq!(k.syscall_number("nosuchcall"), None);
        assert_eq!(k.syscall_name(231).as_deref(), Some("exit_group"));
        assert_eq!(k.syscall_name(100_000), None);
        assert_eq!(syscall_abi_name("openat"), None);
        assert_eq!(syscall_abi_name("sendfile64").as_deref(), Some("sendfile"));
    }

    #[test]
    fn clones_are_whole_functions_under_their_source_name() {
        assert_eq!(
            clone_source_name("finish_task_switch.isra.0"),
            Some("finish_task_switch")
        );
        assert_eq!(clone_source_name("f.constprop.0.isra.0"), Some("f"));
        assert_eq!(clone_source_name("f.part.0"), None);
        assert_eq!(clone_source_name("f.cold"), None);
        assert_eq!(clone_source_name("f.isra.0.cold"), None);
        assert_eq!(clone_source_name("f.isra"), None);
        assert_eq!(clone_source_name("plain"), None);
    }

    #[test]
    fn traceable_functions_index_clones_only_where_no_plain_symbol_exists() {
        let t = TraceableFunctions::from_lines([
            "tcp_sendmsg",
            "finish_task_switch.isra.0",
            "both",
            "both.constprop.0",
            "two.constprop.1",
            "two.constprop.0",
            "frag.part.0",
            "modclone.isra.0 [nf_tables]",
            "modfunc [nf_tables]",
        ]);
        assert!(t.contains("tcp_sendmsg") && t.contains("modfunc"));
        assert!(!t.contains("finish_task_switch") && !t.contains("frag"));
        assert_eq!(
            t.clones_of("finish_task_switch"),
            ["finish_task_switch.isra.0"]
        );
        assert_eq!(t.clones_of("two"), ["two.constprop.0", "two.constprop.1"]);
        assert!(t.clones_of("both").is_empty() && t.clones_of("modclone").is_empty());
        let mut only: Vec<&str> = t.clone_only_names().collect();
        only.sort();
        assert_eq!(only, ["finish_task_switch", "two"]);
    }
}
