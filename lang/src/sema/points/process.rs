//! `process("PATH").function("F")[.return]` and `.statement(...)`:
//! uprobes, with the parameters the binary's DWARF gives, read from the
//! registers of the calling convention. `process("PATH").mark("NAME")`:
//! uprobes on SDT marker sites, with `$argN` where each site's note says.

use super::lifecycle::runs_program;
use super::{
    Component, ProbeContext, ResolvedPoint, glob_match, has_wildcard, plain, render, string_arg,
    with_context,
};
use crate::ast_print::quote_string;
use crate::diag::Diagnostic;
use crate::kernel::{FunctionProto, KernelFacts, TypeId, TypeKind};
use crate::sdt::{SdtLocation, SdtMarker};
use crate::sema::hir::{ContextSource, ContextVar, ProbeKind, ProcessTarget};
use crate::sema::symbols::Elaborator;
use crate::source::Span;

/// The point names, for "did you mean".
pub(super) const NAMES: &[&str] = &[
    "process.function",
    "process.plt",
    "process.plt.return",
    "process.statement",
    "process.mark",
    "process.provider.mark",
];

impl<'a> Elaborator<'a> {
    /// `process[("PATH")][.library("LIB")]` then `.function("F")[.call|.return]`,
    /// `.statement("S")` or `[.provider("P")].mark("NAME")`.
    pub(super) fn resolve_process(
        &mut self,
        comps: &[Component],
        span: Span,
    ) -> Result<Vec<ResolvedPoint<'a>>, Diagnostic> {
        let target_program = self.target_program.clone();
        let pattern = match &comps[0].arg {
            Some(_) => string_arg(&comps[0], "process")?,
            // `process.function(...)`: the -c/-x target's program, as stap.
            None => target_program.as_deref().ok_or_else(|| {
                Diagnostic::error(format!(
                    "`{}` without a path probes the -c or -x target's program",
                    render(comps)
                ))
                .at(span, "no -c CMD or -x PID given")
                .note("write process(\"PATH\") to name the program")
            })?,
        };
        // `.library("LIB")`: LIB's code where the program maps it: the
        // library's file (each file a glob names), in processes running
        // the program.
        let (patterns, program, comps) = match comps.get(1).map(|c| c.name.as_str()) {
            Some("library") => {
                let library = string_arg(&comps[1], "library")?;
                (
                    self.library_patterns(library, pattern),
                    Some(pattern),
                    &comps[1..],
                )
            }
            _ => (vec![pattern.to_string()], None, comps),
        };
        // Several libraries: the ones where the rest of the point matches
        // (a PLT pattern, a function); an error only when none does.
        let mut points = Vec::new();
        let mut first_error = None;
        for pattern in &patterns {
            match self.resolve_in_file(pattern, comps, span) {
                Ok(found) => points.extend(found),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        if points.is_empty()
            && let Some(error) = first_error
        {
            return Err(error);
        }
        if let Some(program) = program {
            for point in &mut points {
                point.conditions.push(runs_program(program, span));
            }
        }
        Ok(points)
    }

    /// The rest of a process point (`comps[1..]`) in the file(s) `pattern`
    /// names.
    fn resolve_in_file(
        &mut self,
        pattern: &str,
        comps: &[Component],
        span: Span,
    ) -> Result<Vec<ResolvedPoint<'a>>, Diagnostic> {
        let pattern = pattern.to_string();
        let names: Vec<&str> = comps.iter().map(|c| c.name.as_str()).collect();
        let points = match &names[1..] {
            ["mark"] => self.resolve_marks(&pattern, "*", string_arg(&comps[1], "mark")?, span)?,
            ["provider", "mark"] => {
                let provider = string_arg(&comps[1], "provider")?;
                self.resolve_marks(&pattern, provider, string_arg(&comps[2], "mark")?, span)?
            }
            ["plt"] | ["plt", "return"] => {
                // `.plt` alone is every stub, as `.plt("*")`.
                let functions = match comps[1].arg {
                    Some(_) => string_arg(&comps[1], "plt")?,
                    None => "*",
                };
                self.resolve_plt(&pattern, functions, names.len() == 3, span)?
            }
            _ => self.resolve_code(&pattern, comps, span)?,
        };
        Ok(points)
    }

    /// `process("PATH").function("F")[.call|.return]` or `.statement("S")`.
    fn resolve_code(
        &mut self,
        pattern: &str,
        comps: &[Component],
        span: Span,
    ) -> Result<Vec<ResolvedPoint<'a>>, Diagnostic> {
        let names: Vec<&str> = comps.iter().map(|c| c.name.as_str()).collect();
        let rest = &names[1..];
        let path = self.one_user_path(pattern, comps[0].span)?;
        let (target, is_return) = match rest {
            ["function"] | ["function", "call"] => (
                ProcessTarget::Function(string_arg(&comps[1], "function")?.into()),
                false,
            ),
            ["function", "return"] => (
                ProcessTarget::Function(string_arg(&comps[1], "function")?.into()),
                true,
            ),
            ["statement"] => (
                ProcessTarget::Statement(string_arg(&comps[1], "statement")?.into()),
                false,
            ),
            _ => {
                return Err(Diagnostic::error(format!(
                    "unknown process probe `{}`",
                    render(comps)
                ))
                .at(
                    span,
                    "expected `.function(\"f\")[.return]`, `.statement(\"...\")`, `.mark(\"name\")` or `.plt(\"f\")[.return]`",
                ));
            }
        };
        // A source line must be in the binary's line table now, not at
        // attach time.
        if let ProcessTarget::Statement(spec) = &target
            && spec.contains('@')
            && let Err(e) = self.facts.user_statement(&path, spec)
        {
            return Err(Diagnostic::error(format!(
                "cannot resolve `process({}).statement({})`: {}",
                quote_string(&path),
                quote_string(spec),
                e.0
            ))
            .at(span, "no such line"));
        }
        let context = self.process_context(&path, &target, is_return);
        let kind = ProbeKind::Process {
            path,
            target,
            is_return,
        };
        Ok(vec![with_context(
            plain(kind, "process", render(comps), span),
            context,
        )])
    }

    /// Where `.library("LIB")` is: a path (or glob) as written; a bare
    /// glob (`"*"`, `"libc*"`), each library the program loads whose file
    /// name matches, as stap expands it; a bare name where the dynamic
    /// linker finds it (its cache, then its usual directories).
    fn library_patterns(&self, library: &str, program: &str) -> Vec<String> {
        if library.contains('/') {
            return vec![library.to_string()];
        }
        if has_wildcard(library) {
            let loaded: Vec<String> = self
                .facts
                .user_paths(program)
                .first()
                .map(|program| self.facts.needed_libraries(program))
                .unwrap_or_default()
                .into_iter()
                .filter(|path| {
                    let file = path.rsplit('/').next().unwrap_or(path);
                    glob_match(library, file)
                })
                .collect();
            if !loaded.is_empty() {
                return loaded;
            }
        } else if let Some(path) = self.facts.library_path(library) {
            return vec![path];
        }
        vec![self.library_pattern(library)]
    }

    /// A bare library name (or glob) in the first of the dynamic linker's
    /// usual directories that has it.
    fn library_pattern(&self, library: &str) -> String {
        let candidates = LIBRARY_DIRS.iter().map(|dir| format!("{dir}/{library}"));
        let mut first = None;
        for candidate in candidates {
            if !self.facts.user_paths(&candidate).is_empty() {
                return candidate;
            }
            first.get_or_insert(candidate);
        }
        first.unwrap_or_else(|| library.to_string())
    }

    /// The one file a `process("PATH")` of a function or statement probe
    /// names: a glob or a bare program name resolved as stap does (the
    /// first match), a plain path as written.
    fn one_user_path(&self, pattern: &str, span: Span) -> Result<String, Diagnostic> {
        if pattern.contains('/') && !has_wildcard(pattern) {
            return Ok(pattern.to_string());
        }
        self.facts
            .user_paths(pattern)
            .into_iter()
            .next()
            .ok_or_else(|| no_such_file(pattern, span))
    }

    /// `process("PATH")[.provider("P")].mark("NAME")`: one probe per group
    /// of marker sites that share an argument layout, in every file PATH
    /// names. NAME and P may hold wildcards; `-` in NAME stands for the
    /// `__` of the note (dtrace's `function-entry` is `function__entry`).
    fn resolve_marks(
        &mut self,
        pattern: &str,
        provider: &str,
        name: &str,
        span: Span,
    ) -> Result<Vec<ResolvedPoint<'a>>, Diagnostic> {
        let paths = self.facts.user_paths(pattern);
        if paths.is_empty() {
            return Err(no_such_file(pattern, span));
        }
        let name = name.replace('-', "__");
        let long = self.facts.find_type("long").ok().flatten().ok_or_else(|| {
            Diagnostic::error("the kernel's BTF has no `long` type for SDT arguments")
                .at(span, "in this probe point")
        })?;
        let mut out = Vec::new();
        let mut seen: Vec<String> = Vec::new();
        let mut unreadable = None;
        for path in &paths {
            // A glob may match files that are no binaries (python3-config):
            // they are skipped, and an error only if nothing else matched.
            let markers = match self.facts.sdt_markers(path) {
                Ok(markers) => markers,
                Err(e) => {
                    unreadable.get_or_insert_with(|| {
                        Diagnostic::error(format!("cannot read the SDT markers of {path}: {e}"))
                            .at(span, "in this probe point")
                    });
                    continue;
                }
            };
            // Sites of one marker with the same argument specs share a program.
            let mut groups: Vec<(&SdtMarker, Vec<(u64, u64)>)> = Vec::new();
            for m in &markers {
                seen.push(format!("{}:{}", m.provider, m.name));
                if !glob_match(provider, &m.provider) || !glob_match(&name, &m.name) {
                    continue;
                }
                let same = |(g, _): &&mut (&SdtMarker, Vec<(u64, u64)>)| {
                    g.provider == m.provider && g.name == m.name && g.args == m.args
                };
                match groups.iter_mut().find(same) {
                    Some((_, sites)) => sites.push((m.offset, m.semaphore)),
                    None => groups.push((m, vec![(m.offset, m.semaphore)])),
                }
            }
            for (marker, sites) in groups {
                let resolved = format!(
                    "process({}).mark({})",
                    quote_string(path),
                    quote_string(&marker.name)
                );
                let kind = ProbeKind::Process {
                    path: path.clone(),
                    target: ProcessTarget::Mark {
                        provider: marker.provider.clone(),
                        name: marker.name.clone(),
                        sites,
                    },
                    is_return: false,
                };
                let mut point = with_context(
                    plain(kind, "process", resolved, span),
                    marker_context(marker, long),
                );
                point.expanded = Some(("mark", marker.name.clone()));
                out.push(point);
            }
        }
        if out.is_empty() {
            if let Some(error) = unreadable.filter(|_| seen.is_empty()) {
                return Err(error);
            }
            seen.sort();
            seen.dedup();
            let files = paths.join(", ");
            let listing = if seen.is_empty() {
                format!("{files} has no SDT markers (no .note.stapsdt section)")
            } else {
                format!("{files} has {}", seen.join(", "))
            };
            let error = Diagnostic::error(format!("no SDT marker `{provider}:{name}` in {files}"))
                .at(span, "no marker matches this")
                .note(listing);
            return Err(with_package_hint(error, pattern));
        }
        Ok(out)
    }

    /// `process("PATH").plt("PATTERN")[.return]`: one uprobe per PLT stub
    /// whose function matches, in every file PATH names; `$$name` is the
    /// stub's function. A binary without a PLT (static, `-fno-plt`) has no
    /// stubs: an error when no file has a match.
    fn resolve_plt(
        &mut self,
        pattern: &str,
        functions: &str,
        is_return: bool,
        span: Span,
    ) -> Result<Vec<ResolvedPoint<'a>>, Diagnostic> {
        let paths = self.facts.user_paths(pattern);
        if paths.is_empty() {
            return Err(no_such_file(pattern, span));
        }
        let mut out = Vec::new();
        let mut unreadable = None;
        for path in &paths {
            let entries = match self.facts.plt_entries(path) {
                Ok(entries) => entries,
                Err(e) => {
                    unreadable.get_or_insert_with(|| {
                        Diagnostic::error(format!("cannot read the PLT of {path}: {e}"))
                            .at(span, "in this probe point")
                    });
                    continue;
                }
            };
            for (name, offset) in entries {
                if !glob_match(functions, &name) {
                    continue;
                }
                let resolved = format!(
                    "process({}).plt({}){}",
                    quote_string(path),
                    quote_string(&name),
                    if is_return { ".return" } else { "" }
                );
                let kind = ProbeKind::Process {
                    path: path.clone(),
                    target: ProcessTarget::Plt {
                        name: name.clone(),
                        offset,
                    },
                    is_return,
                };
                let context = ProbeContext {
                    family: "process",
                    is_return,
                    no_dwarf: Some(format!(
                        "{resolved}: a PLT stub has no DWARF parameters; use int_arg(N)/pointer_arg(N) or register(\"rdi\")"
                    )),
                    marker: Some((String::new(), name.clone())),
                    ..ProbeContext::default()
                };
                let mut point = with_context(plain(kind, "process", resolved, span), context);
                point.expanded = Some(("plt", name));
                out.push(point);
            }
        }
        if out.is_empty() {
            if let Some(error) = unreadable {
                return Err(error);
            }
            return Err(Diagnostic::error(format!(
                "no PLT stub matching `{functions}` in {}",
                paths.join(", ")
            ))
            .at(span, "no PLT entry matches this")
            .note("a static or -fno-plt binary calls its libraries without PLT stubs"));
        }
        Ok(out)
    }

    /// What a process probe's body may read. The DWARF is read here, but
    /// its absence is an error only when the body uses a `$var`: the
    /// register built-ins (`int_arg(1)`) need none.
    fn process_context(&self, path: &str, target: &ProcessTarget, is_return: bool) -> ProbeContext {
        let function = match target {
            ProcessTarget::Function(f) if !has_wildcard(f) => f,
            _ => {
                return ProbeContext {
                    family: "process",
                    is_return,
                    needs_dwarf: true,
                    ..ProbeContext::default()
                };
            }
        };
        let point = format!(
            "process({}).function({})",
            quote_string(path),
            quote_string(function)
        );
        let fallback = "use int_arg(N)/pointer_arg(N) instead";
        match self.facts.user_function(path, function) {
            Ok(Some(proto)) => user_function_context(&proto, is_return, self.facts),
            Ok(None) => no_dwarf_context(
                is_return,
                format!("{point}: the binary has no DWARF debug info (build with -g); {fallback}"),
            ),
            Err(e) => no_dwarf_context(is_return, format!("{point}: {e}; {fallback}")),
        }
    }
}

/// Integer and pointer arguments a uprobe reads from registers: the
/// x86_64 SysV (and BPF backend) limit.
const REGISTER_ARGS: u32 = 6;

/// How a value of this type travels in a call.
enum Passing {
    /// In a general-purpose register (integers, enums, pointers).
    Register,
    /// In a floating-point register, which BPF cannot read.
    Float,
    /// Anything else (a struct by value): it shifts the registers of the
    /// arguments after it in ways DWARF alone does not tell.
    Other,
}

fn passing(facts: &dyn KernelFacts, ty: TypeId) -> Passing {
    match facts.kind(ty) {
        TypeKind::Int { .. } | TypeKind::Enum { .. } | TypeKind::Pointer(_) => Passing::Register,
        TypeKind::Float { .. } => Passing::Float,
        _ => Passing::Other,
    }
}

/// The context of a `process(...).function(...)` probe: parameters from
/// the binary's DWARF, each read from the register the calling convention
/// puts it in.
fn user_function_context(
    proto: &FunctionProto,
    is_return: bool,
    facts: &dyn KernelFacts,
) -> ProbeContext {
    let mut vars = Vec::new();
    let mut entry_vars = Vec::new();
    let mut unreadable = Vec::new();
    let mut register = 0u32;
    let mut lost: Option<String> = None;
    for p in &proto.params {
        let type_name = facts.type_name(p.ty);
        let why = match (passing(facts, p.ty), &lost) {
            (Passing::Register, Some(after)) => Some(format!(
                "it follows `{after}`, passed by value, so its register is unknown"
            )),
            (Passing::Register, None) if register >= REGISTER_ARGS => Some(format!(
                "only the first {REGISTER_ARGS} integer and pointer arguments are in registers"
            )),
            (Passing::Register, None) => None,
            (Passing::Float, _) => Some(format!(
                "`{type_name}` travels in a floating-point register, which uprobes cannot read"
            )),
            (Passing::Other, _) => {
                lost.get_or_insert_with(|| p.name.clone());
                Some(format!(
                    "`{type_name}` is passed by value, which stap-rs cannot read"
                ))
            }
        };
        match why {
            Some(why) => unreadable.push((p.name.clone(), why)),
            None => {
                let var = ContextVar {
                    name: p.name.clone(),
                    ty: p.ty,
                    type_name,
                    source: ContextSource::FunctionParam(register),
                };
                register += 1;
                if is_return {
                    // A uretprobe sees the registers at the return, where
                    // the arguments are gone: an entry uprobe saves them.
                    unreadable.push((
                        p.name.clone(),
                        format!(
                            "a return probe sees the registers at the return, where the \
                             arguments are gone: read the value at the entry with @entry(${})",
                            p.name
                        ),
                    ));
                    entry_vars.push(var);
                } else {
                    vars.push(var);
                }
            }
        }
    }
    let mut ret = None;
    if let Some(ty) = proto.ret.filter(|_| is_return) {
        let type_name = facts.type_name(ty);
        match passing(facts, ty) {
            Passing::Register => {
                ret = Some(ContextVar {
                    name: "return".to_string(),
                    ty,
                    type_name,
                    source: ContextSource::Return,
                });
            }
            _ => unreadable.push((
                "return".to_string(),
                format!("a `{type_name}` return value is not in the integer return register"),
            )),
        }
    }
    ProbeContext {
        family: "process",
        vars,
        ret,
        is_return,
        unreadable,
        entry_vars,
        ..ProbeContext::default()
    }
}

/// The context of a process probe whose DWARF could not be had.
fn no_dwarf_context(is_return: bool, why: String) -> ProbeContext {
    ProbeContext {
        family: "process",
        is_return,
        no_dwarf: Some(why),
        ..ProbeContext::default()
    }
}

/// `python3.module("M").function("F")`: stap runs the script under its
/// HelperSDT Python module, whose markers report each Python call.
pub(super) fn python_module(comps: &[Component], span: Span) -> Diagnostic {
    Diagnostic::unsupported(
        format!(
            "`{}`: stap's Python function probes need its HelperSDT module \
             (`python3 -m HelperSDT`), which stap-rs does not provide; \
             python.function.entry/.return probe the interpreter's own markers",
            render(comps)
        ),
        span,
    )
}

/// Where `.library("NAME")` looks for a bare library name, in order.
const LIBRARY_DIRS: &[&str] = &[
    "/usr/lib/*-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/lib64",
    "/lib",
];

/// `process("PATH")` naming no file.
fn no_such_file(pattern: &str, span: Span) -> Diagnostic {
    let how = if pattern.contains('/') {
        "no file matches this path"
    } else {
        "no executable of this name in $PATH"
    };
    let error = Diagnostic::error(format!("process({}) names no file", quote_string(pattern)))
        .at(span, how);
    with_package_hint(error, pattern)
}

/// The Debian packages of the binaries the marker tapsets (stdlib/user)
/// probe, by the start of the file name, for "not installed" errors.
const MARKER_PACKAGES: &[(&str, &str)] = &[
    ("stapio", "systemtap"),
    ("staprun", "systemtap"),
    ("stap", "systemtap"),
    (
        "libglib-2.0",
        "libglib2.0-0 (Debian builds it without SDT markers: a glib built with --enable-systemtap has them)",
    ),
    (
        "libpython",
        "libpython3.X (its Debian build carries the markers)",
    ),
    ("python", "python3.X (its Debian build carries the markers)"),
];

fn with_package_hint(error: Diagnostic, pattern: &str) -> Diagnostic {
    let file = pattern.rsplit('/').next().unwrap_or(pattern);
    match MARKER_PACKAGES
        .iter()
        .find(|(prefix, _)| file.starts_with(prefix))
    {
        Some((_, package)) => error.note(format!("{file} is in the Debian package {package}")),
        None => error,
    }
}

/// An SDT marker's context: `$arg1`..`$argN` as longs, from its note's
/// argument specs; `$$name` and `$$provider`.
fn marker_context(marker: &SdtMarker, long: TypeId) -> ProbeContext {
    let mut vars = Vec::new();
    let mut unreadable = Vec::new();
    for (i, arg) in marker.args.iter().enumerate() {
        let name = format!("arg{}", i + 1);
        match &arg.location {
            SdtLocation::Unsupported(why) => {
                unreadable.push((name, format!("its note says {why}")));
            }
            _ => vars.push(ContextVar {
                name,
                ty: long,
                type_name: "long".to_string(),
                source: ContextSource::SdtArg(arg.clone()),
            }),
        }
    }
    ProbeContext {
        family: "process",
        vars,
        unreadable,
        marker: Some((marker.provider.clone(), marker.name.clone())),
        ..ProbeContext::default()
    }
}
