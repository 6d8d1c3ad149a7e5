//! What the driver, the run path, the REPL and the listings share: the
//! front-end passes (parse, tapsets, elaborate), the one compile entry
//! point with its options from the command line, and how failures end.
//! It depends on no other module of the binary but `cli` and `tapsets`,
//! so the binary's modules form no import circle.

use crate::cli::{Args, KernelProbes, TracepointMechanism};
use crate::out::errln;
use crate::tapsets;
use stap_lang::diag::{self, Diagnostic};
use stap_lang::kernel::KernelFacts;
use stap_lang::pipeline::{self, Compiled, Next};
use stap_lang::preprocess::{MacroLibrary, PreprocessEnv};
use stap_lang::source::{FileId, SourceMap};
use stap_lang::{ast, bpf, ir, parse, sema};

/// The run failed; the reason has already been printed.
pub struct Failed;

/// Prints a one-line error in stap's wording and fails.
pub fn fail(message: impl std::fmt::Display) -> Failed {
    errln!("ERROR: {message}");
    Failed
}

/// The kernel and arguments the front-end passes run against.
pub struct Frontend<'a> {
    kernel: &'a dyn KernelFacts,
    script_args: &'a [String],
    /// The `.stpm` macros, read by `parse_tapsets` and visible to every
    /// file parsed after it.
    macros: std::cell::RefCell<MacroLibrary>,
    /// How many library files the last elaboration parsed (for `-v`).
    library_parsed: std::cell::Cell<usize>,
    /// The warnings an earlier elaboration of this run printed: a run
    /// compiled again after an fentry refusal shows each once.
    warned: std::cell::RefCell<Vec<Diagnostic>>,
}

impl<'a> Frontend<'a> {
    pub fn new(kernel: &'a dyn KernelFacts, script_args: &'a [String]) -> Self {
        Frontend {
            kernel,
            script_args,
            macros: Default::default(),
            library_parsed: Default::default(),
            warned: Default::default(),
        }
    }

    pub fn kernel(&self) -> &'a dyn KernelFacts {
        self.kernel
    }

    fn with_env<T>(&self, f: impl FnOnce(&PreprocessEnv) -> T) -> T {
        let config = |name: &str| self.kernel.config(name);
        let env = PreprocessEnv {
            kernel: self.kernel.version(),
            arch: self.kernel.arch(),
            config: &config,
            args: self.script_args,
        };
        f(&env)
    }

    /// Parses one file, printing its diagnostics; fails on any error.
    pub fn parse_one(&self, map: &SourceMap, file: FileId) -> Result<ast::File, Failed> {
        let parsed =
            self.with_env(|env| parse::parse_file_with(map, file, env, &self.macros.borrow()));
        report(map, &parsed.diags)?;
        Ok(parsed.file)
    }

    /// Reads the tapset library into the source map: every file of the
    /// stdlib and the `-I` dirs, and this kernel's system call table. Only
    /// the `.stpm` macro files are parsed now (their macros are visible to
    /// every file); the rest is parsed by elaboration on first use.
    pub fn load_tapsets(&self, args: &Args, map: &mut SourceMap) -> Result<Tapsets, Failed> {
        let version = self.kernel.version();
        let key = tapsets::SearchKey {
            arch: &self.kernel.arch(),
            versions: vec![
                version.release.clone(),
                version.to_string(),
                format!("{}.{}", version.major, version.minor),
            ]
            .into_iter()
            .filter(|v| !v.is_empty())
            .collect(),
        };
        let mut texts = tapsets::load(&args.include, &key).map_err(fail)?;
        texts.push(tapsets::TapsetText {
            name: stap_lang::kernel_tapsets::SYSCALL_TABLE.to_string(),
            text: stap_lang::kernel_tapsets::syscall_table(self.kernel),
            macros: false,
            declared: stap_lang::kernel_tapsets::syscall_table_declares(),
        });
        let mut library = Tapsets::default();
        let mut failed = false;
        for text in texts {
            let id = map.add(text.name, text.text);
            if text.macros {
                let diags = self.with_env(|env| {
                    parse::parse_macro_file(map, id, env, &mut self.macros.borrow_mut())
                });
                failed |= report(map, &diags).is_err();
            } else {
                library.files.push(id);
                library.declared.push(text.declared);
            }
        }
        if failed {
            return Err(Failed);
        }
        Ok(library)
    }

    /// Parses every library file now (`-p1`, as stap's pass 1 does), so
    /// that one run reports every broken one.
    pub fn parse_library(&self, map: &SourceMap, library: &Tapsets) -> Result<usize, Failed> {
        let mut failed = false;
        for &id in &library.files {
            failed |= self.parse_one(map, id).is_err();
        }
        if failed {
            return Err(Failed);
        }
        Ok(library.files.len())
    }

    /// Runs `f` over the library, each file parsed on first use. A library
    /// file that does not parse has its errors printed and fails the run.
    pub fn with_library<T>(
        &self,
        map: &SourceMap,
        library: &Tapsets,
        f: impl FnOnce(&sema::Library<'_>) -> T,
    ) -> Result<T, Failed> {
        let failed = std::cell::Cell::new(false);
        let parse = |index: usize| {
            let parsed = self.parse_one(map, library.files[index]).ok();
            failed.set(failed.get() || parsed.is_none());
            parsed
        };
        let lazy = sema::Library::lazy(&library.declared, &parse);
        let out = f(&lazy);
        self.library_parsed.set(lazy.parsed_count());
        if failed.get() {
            return Err(Failed);
        }
        Ok(out)
    }

    /// How many library files the last elaboration parsed.
    pub fn library_parsed(&self) -> usize {
        self.library_parsed.get()
    }

    pub fn elaborate(
        &self,
        map: &SourceMap,
        user: &[ast::File],
        library: &Tapsets,
        args: &Args,
        fentry_refused: &[(String, Option<String>)],
    ) -> Result<sema::Program, Failed> {
        let options = sema::ElabOptions {
            fentry_refused: fentry_refused.to_vec(),
            ..elab_options(args)
        };
        let (program, mut diags) = self.with_library(map, library, |library| {
            sema::elaborate_with(user, library, self.kernel, &options)
        })?;
        let mut warned = self.warned.borrow_mut();
        diags.retain(|d| d.is_error() || !warned.contains(d));
        warned.extend(diags.iter().filter(|d| !d.is_error()).cloned());
        drop(warned);
        report(map, &diags)?;
        program.ok_or_else(|| fail("elaboration failed"))
    }
}

/// The tapset library of a run: its files in search order, each with the
/// names it may define.
#[derive(Default)]
pub struct Tapsets {
    files: Vec<FileId>,
    declared: Vec<sema::Declared>,
}

impl Tapsets {
    pub fn len(&self) -> usize {
        self.files.len()
    }
}

/// Pass 2's options from the command line.
pub fn elab_options(args: &Args) -> sema::ElabOptions {
    sema::ElabOptions {
        defines: args.defines.clone(),
        global_overrides: args.globals.clone(),
        guru: args.guru,
        skip_badvars: args.skip_badvars,
        kernel_probes: match args.kernel_probes {
            KernelProbes::Auto => sema::KernelProbes::Auto,
            KernelProbes::Fentry => sema::KernelProbes::Fentry,
            KernelProbes::Kprobe => sema::KernelProbes::Kprobe,
        },
        target_program: target_program(args),
        fentry_refused: Vec::new(),
        // stap adds no end probes to a listing.
        display_unread_globals: args.list.is_none() && args.list_vars.is_none(),
    }
}

/// The program `-c CMD` runs (its first word, resolved through $PATH in
/// pass 2) or the executable of `-x PID`.
fn target_program(args: &Args) -> Option<String> {
    if let Some(command) = &args.command {
        return command.split_whitespace().next().map(str::to_string);
    }
    let pid = args.target_pid?;
    std::fs::read_link(format!("/proc/{pid}/exe"))
        .ok()
        .map(|exe| exe.to_string_lossy().into_owned())
}

/// What `-w` (suppress) and `-W` (errors) do to warnings.
static WARNINGS: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(WARNINGS_SHOWN);
const WARNINGS_SHOWN: u8 = 0;
const WARNINGS_SUPPRESSED: u8 = 1;
const WARNINGS_ARE_ERRORS: u8 = 2;

/// Applies `-w`/`-W` to every later report.
pub fn set_warnings(args: &Args) {
    let mode = match (args.suppress_warnings, args.warnings_as_errors) {
        (_, true) => WARNINGS_ARE_ERRORS,
        (true, false) => WARNINGS_SUPPRESSED,
        _ => WARNINGS_SHOWN,
    };
    WARNINGS.store(mode, std::sync::atomic::Ordering::Relaxed);
}

/// Prints diagnostics; fails when any is an error.
fn report(map: &SourceMap, diags: &[Diagnostic]) -> Result<(), Failed> {
    let mode = WARNINGS.load(std::sync::atomic::Ordering::Relaxed);
    let shown: Vec<Diagnostic>;
    let diags = if mode == WARNINGS_SUPPRESSED {
        shown = diags.iter().filter(|d| d.is_error()).cloned().collect();
        &shown[..]
    } else {
        diags
    };
    if diags.is_empty() {
        return Ok(());
    }
    if mode == WARNINGS_ARE_ERRORS {
        diag::emit_stderr(map, diags);
        return Err(Failed);
    }
    diag::emit_stderr(map, diags);
    if diags.iter().any(Diagnostic::is_error) {
        Err(Failed)
    } else {
        Ok(())
    }
}

/// Passes 3 and 4's options from the command line.
/// Unknown only where sysfs is missing; the compiler's default bound then
/// holds.
pub fn possible_cpus() -> Option<u32> {
    stap_runtime::sys::possible_cpus()
        .ok()
        .and_then(|n| u32::try_from(n).ok())
}

pub fn compile_options(args: &Args) -> pipeline::Options {
    pipeline::Options {
        tracepoint_mechanism: match args.tracepoint_mechanism {
            TracepointMechanism::RawTp => bpf::TracepointMechanism::RawTp,
            TracepointMechanism::TpBtf => bpf::TracepointMechanism::TpBtf,
        },
        test_out_of_bounds: args.test_verifier_reject,
        histogram_extremes: args.format == crate::cli::OutputFormat::Json,
        cpus: possible_cpus(),
        full_string_keys: false,
        local_time: Some(stap_runtime::host::builtins::local_time_zone()),
    }
}

/// [`pipeline::compile`] with the command line's options, its failures
/// printed. `Ok(None)`: `lowered` stopped after the IR.
pub fn compile(
    args: &Args,
    map: &SourceMap,
    program: &sema::Program,
    kernel: &dyn KernelFacts,
    lowered: &mut dyn FnMut(&ir::Module) -> Next,
) -> Result<Option<Compiled>, Failed> {
    compile_with(&compile_options(args), map, program, kernel, lowered)
}

/// [`compile`] with options the caller adjusted.
pub fn compile_with(
    options: &pipeline::Options,
    map: &SourceMap,
    program: &sema::Program,
    kernel: &dyn KernelFacts,
    lowered: &mut dyn FnMut(&ir::Module) -> Next,
) -> Result<Option<Compiled>, Failed> {
    pipeline::compile(program, map, kernel, options, lowered).map_err(|error| match error {
        pipeline::Error::Diagnostics(diags) => emit(map, &diags),
        pipeline::Error::MalformedIr(problems) => fail(format!(
            "internal error: the IR is malformed:\n  {}",
            problems.join("\n  ")
        )),
        pipeline::Error::Unavailable {
            mechanism,
            option,
            reason,
        } => fail(format!("cannot use {mechanism} ({option}): {reason}")),
    })
}

/// Prints diagnostics and fails.
pub fn emit(map: &SourceMap, diags: &[Diagnostic]) -> Failed {
    diag::emit_stderr(map, diags);
    Failed
}

/// A wildcard's matches the kernel cannot probe are left out, not fatal:
/// counted always, named with `-v`.
pub fn report_skipped_functions(skipped: &[sema::SkippedFunctions], verbose: bool) {
    for line in skipped_report(skipped, verbose, None) {
        errln!("{line}");
    }
}

/// How many skipped functions the REPL names per wildcard: a line typed
/// there (`kernel.function("*")`) may skip thousands, which would bury the
/// prompt; `-v -p2` on the same probe lists them all.
pub const REPL_SKIPPED_NAMES: usize = 20;

/// The lines of the skipped-functions report, naming each function with
/// `verbose`, at most `cap` of them per wildcard.
pub fn skipped_report(
    skipped: &[sema::SkippedFunctions],
    verbose: bool,
    cap: Option<usize>,
) -> Vec<String> {
    let mut lines = Vec::new();
    for point in skipped {
        let count = point.skipped.len();
        if !verbose {
            lines.push(format!(
                "WARNING: {}: {count} matching functions cannot be probed and are skipped (-v names them)",
                point.point
            ));
            continue;
        }
        lines.push(format!(
            "{}: {} of {} matching functions probed, {count} skipped",
            point.point,
            point.matched - count,
            point.matched
        ));
        let shown = cap.unwrap_or(count).min(count);
        for (function, why) in &point.skipped[..shown] {
            lines.push(format!("  skipped {function}: {why}"));
        }
        if shown < count {
            lines.push(format!(
                "  ... and {} more (`-v -p2` on the probe names them all)",
                count - shown
            ));
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn skipping(count: usize) -> Vec<sema::SkippedFunctions> {
        vec![sema::SkippedFunctions {
            point: r#"kernel.function("f*").call"#.to_string(),
            span: Default::default(),
            matched: count + 3,
            skipped: (0..count)
                .map(|i| (format!("f{i}"), "notrace".to_string()))
                .collect(),
        }]
    }

    /// The REPL names at most its cap of skipped functions per wildcard
    /// and counts the rest; a script's `-v` names them all.
    #[test]
    fn the_repl_caps_the_skipped_functions_it_names() {
        let many = skipping(REPL_SKIPPED_NAMES + 5);
        let capped = skipped_report(&many, true, Some(REPL_SKIPPED_NAMES));
        assert_eq!(capped.len(), 1 + REPL_SKIPPED_NAMES + 1, "{capped:#?}");
        assert_eq!(
            capped[0],
            r#"kernel.function("f*").call: 3 of 28 matching functions probed, 25 skipped"#
        );
        assert_eq!(capped[1], "  skipped f0: notrace");
        assert_eq!(
            capped.last().map(String::as_str),
            Some("  ... and 5 more (`-v -p2` on the probe names them all)")
        );
        let all = skipped_report(&many, true, None);
        assert_eq!(all.len(), 1 + REPL_SKIPPED_NAMES + 5);
        let few = skipped_report(&skipping(2), true, Some(REPL_SKIPPED_NAMES));
        assert_eq!(few.len(), 3, "{few:#?}");
    }
}
