//! Runs the passes in order, stopping where `-p`/`--dump` asks, and turns
//! every failure into rendered diagnostics on stderr.

use crate::cli::{Args, DumpStage};
use crate::frontend::{self, Failed, Frontend, fail};
use crate::listing;
use crate::out::{errln, out};
use stap_lang::kernel::KernelFacts;
use stap_lang::source::{FileId, SourceMap};
use stap_lang::{ast_print, sema};
use std::io::Read;
use std::time::Instant;

pub fn run(args: &Args) -> Result<(), Failed> {
    let started = Instant::now();
    if will_run(args) {
        // A printing script's ring, made while the passes run
        // (runtime/src/load/early.rs); unused by any other script.
        let cpus = frontend::possible_cpus().unwrap_or(stap_lang::bpf::DEFAULT_CPUS);
        stap_runtime::load::create_events_ring(stap_lang::bpf::maps::events_map(cpus, true));
    }
    crate::frontend::set_warnings(args);
    if args.verbose > 0 {
        for note in args.ignored.notes() {
            errln!("Note: {note}.");
        }
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

    // The tapsets first: their `.stpm` macros are visible to the script.
    let library = front.load_tapsets(args, &mut map)?;
    let user = front.parse_one(&map, user_file)?;
    let only_parse = args.pass == Some(1) || args.dump == Some(DumpStage::Ast);
    // stap's pass 1 parses the whole library; a run leaves each file to
    // pass 2, which parses only those the script reaches.
    let parsed = if only_parse {
        front.parse_library(&map, &library)?
    } else {
        0
    };
    if args.verbose > 0 {
        let deferred = if only_parse {
            String::new()
        } else {
            format!(" ({} indexed, parsed when used)", library.len())
        };
        errln!(
            "Pass 1: parsed user script and {parsed} library scripts{deferred} in {}real ms.",
            started.elapsed().as_millis()
        );
    }
    if only_parse {
        out!("{}", ast_print::print_file(&user));
        return Ok(());
    }

    // In `--kernel-probes auto`, a function whose fentry/fexit the kernel
    // refuses at load or attach is compiled again with kprobes on it; each
    // try adds one function, so this ends.
    let mut fentry_refused: Vec<(String, Option<String>)> = Vec::new();
    let user = [user];
    loop {
        let elaborate_started = Instant::now();
        let program = front.elaborate(&map, &user, &library, args, &fentry_refused)?;
        if args.verbose > 0 {
            errln!(
                "Pass 2: analyzed script: {} probes, {} functions, {} globals, {} library scripts parsed in {}real ms.",
                program.probes.len(),
                program.functions.len(),
                program.globals.len(),
                front.library_parsed(),
                elaborate_started.elapsed().as_millis()
            );
        }
        // What a wildcard skips does not depend on the mechanism: said once.
        if fentry_refused.is_empty() {
            frontend::report_skipped_functions(&program.skipped_functions, args.verbose > 0);
        }
        if args.pass == Some(2) || args.dump == Some(DumpStage::Types) {
            out!("{}", sema::print::print_program(&program, &map));
            return Ok(());
        }
        if will_run(args) && fentry_refused.is_empty() {
            // Registering a uprobe waits for the kernel (runtime/src/attach/early.rs):
            // that wait overlaps passes 3-5.
            stap_runtime::attach::open_uprobes(uprobe_points(&program));
        }
        match crate::run::run(args, &map, &program, kernel.as_ref(), &fentry_refused)? {
            crate::run::Ran::Finished => return Ok(()),
            crate::run::Ran::FentryRefused(refused) => {
                if args.verbose > 0 {
                    errln!(
                        "Pass 5: the kernel refused fentry/fexit on {} ({}); probes on `{}` use kprobes instead, compiling again.",
                        refused.point,
                        refused.reason,
                        refused.function
                    );
                }
                fentry_refused.push((refused.function, refused.module));
            }
        }
    }
}

/// Whether these arguments run a script (rather than stop at a pass, list
/// probe points or start the interactive session).
fn will_run(args: &Args) -> bool {
    args.pass.is_none_or(|pass| pass >= 5)
        && args.dump.is_none()
        && args.list.is_none()
        && args.list_vars.is_none()
        && !args.interactive
        && (args.script_text.is_some() || !args.positional.is_empty())
}

/// The script's uprobes on one named function each (not a wildcard, not
/// a source line), one entry per probe.
fn uprobe_points(program: &sema::Program) -> Vec<stap_runtime::attach::UprobePoint> {
    use stap_lang::sema::hir::{ProbeKind, ProcessTarget};
    program
        .probes
        .iter()
        .filter_map(|probe| match &probe.kind {
            ProbeKind::Process {
                path,
                target: ProcessTarget::Function(function),
                is_return,
            } if !function.contains(['*', '?']) && !stap_runtime::lines::is_line_spec(function) => {
                Some((path.clone(), function.clone(), *is_return))
            }
            _ => None,
        })
        .collect()
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
                errln!("WARNING: {e}");
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
        read_capped(std::io::stdin(), "the script from stdin")?
    } else {
        let file = std::fs::File::open(path)
            .map_err(|e| fail(format!("cannot read script file '{path}': {e}")))?;
        read_capped(file, &format!("script file '{path}'"))?
    };
    let name = if path == "-" {
        "<stdin>"
    } else {
        path.as_str()
    };
    Ok((map.add(name, text), rest.to_vec()))
}

/// The largest script stap-rs reads. Real scripts are kilobytes; the cap
/// keeps `stap-rs /dev/zero` or a runaway generator from eating memory.
pub const MAX_SCRIPT_BYTES: u64 = 16 << 20;

/// Reads a whole script, refusing one past [`MAX_SCRIPT_BYTES`] without
/// reading further (the source may be endless).
fn read_capped(source: impl Read, what: &str) -> Result<String, Failed> {
    let mut bytes = Vec::new();
    source
        .take(MAX_SCRIPT_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| fail(format!("cannot read {what}: {e}")))?;
    if bytes.len() as u64 > MAX_SCRIPT_BYTES {
        return Err(fail(format!(
            "{what} is larger than {} MiB, the most stap-rs reads",
            MAX_SCRIPT_BYTES >> 20
        )));
    }
    String::from_utf8(bytes).map_err(|e| fail(format!("cannot read {what}: {e}")))
}
