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
use stap_lang::preprocess::PreprocessEnv;
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
}

impl<'a> Frontend<'a> {
    pub fn new(kernel: &'a dyn KernelFacts, script_args: &'a [String]) -> Self {
        Frontend {
            kernel,
            script_args,
        }
    }

    /// Parses one file, printing its diagnostics; fails on any error.
    pub fn parse_one(&self, map: &SourceMap, file: FileId) -> Result<ast::File, Failed> {
        let config = |name: &str| self.kernel.config(name);
        let env = PreprocessEnv {
            kernel: self.kernel.version(),
            arch: self.kernel.arch(),
            config: &config,
            args: self.script_args,
        };
        let parsed = parse::parse_file(map, file, &env);
        report(map, &parsed.diags)?;
        Ok(parsed.file)
    }

    /// Parses every tapset. An error in a tapset is reported like a script
    /// error: it names the tapset file.
    pub fn parse_tapsets(
        &self,
        args: &Args,
        map: &mut SourceMap,
    ) -> Result<Vec<ast::File>, Failed> {
        let texts = tapsets::load(&args.include).map_err(fail)?;
        let ids: Vec<FileId> = texts.into_iter().map(|t| map.add(t.name, t.text)).collect();
        let mut files = Vec::with_capacity(ids.len());
        for id in ids {
            files.push(self.parse_one(map, id)?);
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
        kernel_probes: match args.kernel_probes {
            KernelProbes::Auto => sema::KernelProbes::Auto,
            KernelProbes::Fentry => sema::KernelProbes::Fentry,
            KernelProbes::Kprobe => sema::KernelProbes::Kprobe,
        },
    }
}

/// Prints diagnostics; fails when any is an error.
fn report(map: &SourceMap, diags: &[Diagnostic]) -> Result<(), Failed> {
    if diags.is_empty() {
        return Ok(());
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
