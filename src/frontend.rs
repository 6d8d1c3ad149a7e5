//! What the driver, the run path, the REPL and the listings share: the
//! front-end passes (parse, tapsets, elaborate), the one compile entry
//! point with its options from the command line, and how failures end.
//! It depends on no other module of the binary but `cli` and `tapsets`,
//! so the binary's modules form no import circle.

use crate::cli::{Args, KernelProbes, TracepointMechanism};
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
    eprintln!("ERROR: {message}");
    Failed
}

/// The kernel and arguments the front-end passes run against.
pub struct Frontend<'a> {
    kernel: &'a dyn KernelFacts,
    script_args: &'a [String],
    /// The `.stpm` macros, read by `parse_tapsets` and visible to every
    /// file parsed after it.
    macros: std::cell::RefCell<MacroLibrary>,
}

impl<'a> Frontend<'a> {
    pub fn new(kernel: &'a dyn KernelFacts, script_args: &'a [String]) -> Self {
        Frontend {
            kernel,
            script_args,
            macros: Default::default(),
        }
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

    /// Parses every tapset, the `.stpm` macro files first. An error in a
    /// tapset is reported like a script error: it names the tapset file.
    pub fn parse_tapsets(
        &self,
        args: &Args,
        map: &mut SourceMap,
    ) -> Result<Vec<ast::File>, Failed> {
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
        });
        let ids: Vec<(FileId, bool)> = texts
            .into_iter()
            .map(|t| (map.add(t.name, t.text), t.macros))
            .collect();
        // Every file is parsed, so that one run reports every broken one.
        let mut files = Vec::with_capacity(ids.len());
        let mut failed = false;
        for (id, macros) in ids {
            if macros {
                let diags = self.with_env(|env| {
                    parse::parse_macro_file(map, id, env, &mut self.macros.borrow_mut())
                });
                failed |= report(map, &diags).is_err();
            } else {
                match self.parse_one(map, id) {
                    Ok(file) => files.push(file),
                    Err(Failed) => failed = true,
                }
            }
        }
        if failed {
            return Err(Failed);
        }
        Ok(files)
    }

    pub fn elaborate(
        &self,
        map: &SourceMap,
        user: &[ast::File],
        library: &[ast::File],
        args: &Args,
    ) -> Result<sema::Program, Failed> {
        let (program, diags) = sema::elaborate(user, library, self.kernel, &elab_options(args));
        report(map, &diags)?;
        program.ok_or_else(|| fail("elaboration failed"))
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
    }
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
pub fn compile_options(args: &Args) -> pipeline::Options {
    pipeline::Options {
        tracepoint_mechanism: match args.tracepoint_mechanism {
            TracepointMechanism::RawTp => bpf::TracepointMechanism::RawTp,
            TracepointMechanism::TpBtf => bpf::TracepointMechanism::TpBtf,
        },
        test_out_of_bounds: args.test_verifier_reject,
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
    let options = compile_options(args);
    pipeline::compile(program, map, kernel, &options, lowered).map_err(|error| match error {
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
