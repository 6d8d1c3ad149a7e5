//! Runs the passes in order, stopping where `-p`/`--dump` asks, and turns
//! every failure into rendered diagnostics on stderr.

use crate::cli::{Args, DumpStage, KernelProbes};
use crate::{listing, tapsets};
use stap_lang::diag::{self, Diagnostic};
use stap_lang::kernel::KernelFacts;
use stap_lang::preprocess::PreprocessEnv;
use stap_lang::source::{FileId, SourceMap};
use stap_lang::{ast, ast_print, parse, sema};
use std::io::Read;
use std::time::Instant;

/// The run failed; the reason has already been printed.
pub struct Failed;

/// Prints a one-line error in stap's wording and fails.
pub fn fail(message: impl std::fmt::Display) -> Failed {
    eprintln!("ERROR: {message}");
    Failed
}

pub fn run(args: &Args) -> Result<(), Failed> {
    let started = Instant::now();
    if args.guru {
        return Err(fail(
            "unsupported: guru mode (-g): stap-rs never writes kernel memory or runs embedded C",
        ));
    }
    let kernel = open_kernel(args)?;
    if let Some(point) = args.list.as_deref() {
        return listing::run(point, false, kernel.as_ref(), args);
    }
    if let Some(point) = args.list_vars.as_deref() {
        return listing::run(point, true, kernel.as_ref(), args);
    }
    if args.interactive || (args.script_text.is_none() && args.positional.is_empty()) {
        return crate::repl::run(args, kernel.as_ref());
    }

    let mut map = SourceMap::new();
    let (user_file, script_args) = load_script(args, &mut map)?;
    let front = Frontend::new(kernel.as_ref(), &script_args);

    let user = front.parse_one(&map, user_file)?;
    let library = front.parse_tapsets(args, &mut map)?;
    if args.verbose > 0 {
        eprintln!(
            "Pass 1: parsed user script and {} library scripts in {}real ms.",
            library.len(),
            started.elapsed().as_millis()
        );
    }
    if args.pass == Some(1) || args.dump == Some(DumpStage::Ast) {
        print!("{}", ast_print::print_file(&user));
        return Ok(());
    }

    let elaborate_started = Instant::now();
    let program = front.elaborate(&map, &[user], &library, args)?;
    if args.verbose > 0 {
        eprintln!(
            "Pass 2: analyzed script: {} probes, {} functions, {} globals in {}real ms.",
            program.probes.len(),
            program.functions.len(),
            program.globals.len(),
            elaborate_started.elapsed().as_millis()
        );
    }
    if args.pass == Some(2) || args.dump == Some(DumpStage::Types) {
        print!("{}", sema::print::print_program(&program, &map));
        return Ok(());
    }

    crate::run::run(args, &map, &program, kernel.as_ref())
}

/// Opens the kernel's type information. Without BTF, parsing and host-only
/// scripts still work, so a missing default BTF file is a warning, while a
/// missing `--btf FILE` is an error.
fn open_kernel(args: &Args) -> Result<Box<dyn KernelFacts>, Failed> {
    use stap_runtime::kernel::BtfKernel;
    match &args.btf {
        Some(path) => match BtfKernel::open(path) {
            Ok(kernel) => Ok(Box::new(kernel)),
            Err(e) => Err(fail(e)),
        },
        None => match BtfKernel::open_default() {
            Ok(kernel) => Ok(Box::new(kernel)),
            Err(e) => {
                eprintln!("WARNING: {e}");
                Ok(Box::new(BtfKernel::without_btf()))
            }
        },
    }
}

/// Reads the script (file, `-` for stdin, or `-e` text) into the source map
/// and returns it with the script's own arguments.
fn load_script(args: &Args, map: &mut SourceMap) -> Result<(FileId, Vec<String>), Failed> {
    if let Some(text) = &args.script_text {
        return Ok((map.add("<input>", text.clone()), args.positional.clone()));
    }
    let (path, rest) = args
        .positional
        .split_first()
        .ok_or_else(|| fail("no script given"))?;
    let text = if path == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|e| fail(format!("cannot read the script from stdin: {e}")))?;
        text
    } else {
        std::fs::read_to_string(path)
            .map_err(|e| fail(format!("cannot read script file '{path}': {e}")))?
    };
    let name = if path == "-" {
        "<stdin>"
    } else {
        path.as_str()
    };
    Ok((map.add(name, text), rest.to_vec()))
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

/// Prints diagnostics; fails when any is an error.
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
