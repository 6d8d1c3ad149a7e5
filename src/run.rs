//! Passes 3 to 5: lower the elaborated program to the IR, compile its
//! kernel half to BPF and its host half with Cranelift, then run the
//! session. Stops where `-p`/`--dump` asks, printing stap's pass lines
//! with `-v`.

use crate::cli::{Args, DumpStage};
use crate::driver::{Failed, fail};
use stap_lang::diag::{self, Diagnostic};
use stap_lang::source::SourceMap;
use stap_lang::{bpf, ir, sema};
use stap_runtime::host::{HostRuntime, RuntimeError};
use stap_runtime::jit::{self, HostProgram};
use stap_runtime::{load, session};
use std::time::{Duration, Instant};

pub fn run(
    args: &Args,
    map: &SourceMap,
    program: &sema::Program,
    kernel: &dyn stap_lang::kernel::KernelFacts,
) -> Result<(), Failed> {
    let lowering = Instant::now();
    let module = ir::lower::lower(program).map_err(|diags| emit(map, &diags))?;
    if let Err(problems) = ir::verify::verify(&module) {
        return Err(fail(format!(
            "internal error: the IR is malformed:\n  {}",
            problems.join("\n  ")
        )));
    }
    if args.verbose > 0 {
        eprintln!(
            "Pass 3: translated to IR: {} functions, {} probes in {}real ms.",
            module.functions.len(),
            module.probes.len(),
            lowering.elapsed().as_millis()
        );
    }
    if args.pass == Some(3) || args.dump == Some(DumpStage::Ir) {
        print!("{}", ir::print::print_module(&module, map));
        return Ok(());
    }

    let compiling = Instant::now();
    if args.tracepoint_mechanism == crate::cli::TracepointMechanism::TpBtf
        && let Some(reason) = kernel.unavailable_reason(stap_lang::kernel::Mechanism::TpBtf)
    {
        return Err(fail(format!(
            "cannot use tp_btf (--tracepoint-mechanism=tp_btf): {reason}"
        )));
    }
    let options = bpf::Options {
        test_out_of_bounds: args.test_verifier_reject,
        tracepoint_mechanism: match args.tracepoint_mechanism {
            crate::cli::TracepointMechanism::RawTp => bpf::TracepointMechanism::RawTp,
            crate::cli::TracepointMechanism::TpBtf => bpf::TracepointMechanism::TpBtf,
        },
        kernel: bpf::facts::EmitFacts::for_module(&module, kernel),
        ..bpf::Options::from_limits(&module.limits)
    };
    let object =
        bpf::compile_with_source(&module, &options, map).map_err(|diags| emit(map, &diags))?;
    if args.dump == Some(DumpStage::Bpf) {
        print!("{}", bpf::listing(&object, map));
        return Ok(());
    }
    if args.dump == Some(DumpStage::Clif) {
        let listing = jit::clif_listing(&module).map_err(fail)?;
        print!("{listing}");
        return Ok(());
    }
    let host = HostProgram::compile(&module).map_err(fail)?;
    if args.verbose > 0 {
        let insns: usize = object.programs.iter().map(|p| p.insns.len()).sum();
        let (host_functions, _) = host.compile_stats();
        eprintln!(
            "Pass 4: compiled {} BPF programs ({insns} instructions) and {host_functions} host functions in {}real ms.",
            object.programs.len(),
            compiling.elapsed().as_millis()
        );
    }
    if args.pass == Some(4) {
        return Ok(());
    }

    let settings = session::Settings {
        timeout: timeout(args.timeout)?,
        output: args.output.clone(),
        command: args.command.clone(),
        target_pid: args.target_pid,
        suppress_errors: args.suppress_handler_errors,
    };
    let run_host = |probe: usize, rt: &mut HostRuntime| -> Result<(), RuntimeError> {
        host.run_probe(probe, rt)
    };
    let compiled = session::Compiled {
        module: &module,
        object: &object,
        host: &run_host,
        sources: map,
    };
    let running = Instant::now();
    let verbose = args.verbose > 0;
    let mut ready = || {
        if verbose {
            eprintln!("Pass 5: starting run.");
        }
    };
    let outcome = match session::run(&compiled, &settings, &mut ready) {
        Ok(outcome) => outcome,
        Err(session::SessionError::Load(error)) => {
            let diag = load::describe(&error, &object, map, args.verbose > 0);
            return Err(emit(map, &[diag]));
        }
        Err(error) => return Err(fail(error)),
    };
    if verbose {
        eprintln!(
            "Pass 5: run completed in {}real ms.",
            running.elapsed().as_millis()
        );
    }
    if outcome.failed {
        eprintln!("Pass 5: run failed.  [man error::pass5]");
        return Err(Failed);
    }
    Ok(())
}

/// `-T SECONDS` as a duration; negative, NaN or huge values are refused.
fn timeout(seconds: Option<f64>) -> Result<Option<Duration>, Failed> {
    match seconds {
        None => Ok(None),
        Some(s) => Duration::try_from_secs_f64(s)
            .map(Some)
            .map_err(|_| fail(format!("-T {s}: expected a number of seconds ≥ 0"))),
    }
}

fn emit(map: &SourceMap, diags: &[Diagnostic]) -> Failed {
    diag::emit_stderr(map, diags);
    Failed
}
