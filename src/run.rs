//! Passes 3 to 5: lower the elaborated program to the IR, compile its
//! kernel half to BPF and its host half with Cranelift, then run the
//! session. Stops where `-p`/`--dump` asks, printing stap's pass lines
//! with `-v`.

use crate::cli::{Args, DumpStage};
use crate::frontend::{self, Failed, emit, fail};
use crate::out::{errln, out};
use stap_lang::pipeline::{Compiled, Next};
use stap_lang::source::SourceMap;
use stap_lang::{bpf, ir, sema};
use stap_runtime::host::{HostRuntime, RuntimeError};
use stap_runtime::jit::{self, HostProgram};
use stap_runtime::{load, session};
use std::cell::{OnceCell, RefCell};
use std::thread::ScopedJoinHandle;
use std::time::{Duration, Instant};

/// How a run ended without an error of its own.
pub enum Ran {
    Finished,
    /// `--kernel-probes auto` only: the kernel refused a function's
    /// fentry/fexit program before anything ran; the caller compiles again
    /// with kprobes on that function.
    FentryRefused(RefusedFentry),
}

/// A function whose fentry/fexit program the kernel would not load or
/// attach.
#[derive(Debug, PartialEq)]
pub struct RefusedFentry {
    pub function: String,
    pub module: Option<String>,
    /// The probe point that failed, in script syntax.
    pub point: String,
    /// What the kernel said.
    pub reason: String,
}

/// `already`: functions a previous try moved to kprobes.
pub fn run(
    args: &Args,
    map: &SourceMap,
    program: &sema::Program,
    kernel: &dyn stap_lang::kernel::KernelFacts,
    already: &[(String, Option<String>)],
) -> Result<Ran, Failed> {
    let lowering = Instant::now();
    let mut compiling = Instant::now();
    let mut lowered = |module: &ir::Module| {
        if args.verbose > 0 {
            errln!(
                "Pass 3: translated to IR: {} functions, {} probes in {}real ms.",
                module.functions.len(),
                module.probes.len(),
                lowering.elapsed().as_millis()
            );
        }
        if args.pass == Some(3) || args.dump == Some(DumpStage::Ir) {
            out!("{}", ir::print::print_module(module, map));
            return Next::Stop;
        }
        compiling = Instant::now();
        Next::Emit
    };
    let Some(Compiled { module, mut object }) =
        frontend::compile(args, map, program, kernel, &mut lowered)?
    else {
        return Ok(Ran::Finished);
    };
    if args.dump == Some(DumpStage::Bpf) {
        out!("{}", bpf::listing(&object, map));
        return Ok(Ran::Finished);
    }
    if args.dump == Some(DumpStage::Clif) {
        let listing = jit::clif_listing(&module).map_err(fail)?;
        out!("{listing}");
        return Ok(Ran::Finished);
    }
    // The host code compiles on a thread while the kernel verifies the BPF
    // programs: a large end probe's JIT (the 500-line script's 200
    // printfs: 60% of passes 1-4's instructions) no longer comes before
    // loading. The session waits for it before attaching anything.
    let bpf_compiled = compiling.elapsed();
    std::thread::scope(|scope| {
        let host = HostJit {
            thread: RefCell::new(Some(scope.spawn(|| HostProgram::compile(&module)))),
            program: OnceCell::new(),
        };
        if args.pass == Some(4) {
            host.wait().map_err(fail)?;
        }
        if args.verbose > 0 {
            let insns: usize = object.programs.iter().map(|p| p.insns.len()).sum();
            // With -p4 the time includes the host JIT; in a run, the JIT
            // finishes during pass 5.
            let took = match args.pass {
                Some(4) => compiling.elapsed(),
                _ => bpf_compiled,
            };
            errln!(
                "Pass 4: compiled {} BPF programs ({insns} instructions) and {} host functions in {}real ms.",
                object.programs.len(),
                HostProgram::host_functions(&module),
                took.as_millis()
            );
        }
        if args.pass == Some(4) {
            return Ok(Ran::Finished);
        }
        run_compiled(args, map, &module, &mut object, kernel, already, &host)
    })
}

/// The host program, compiled on a thread of the driver's scope.
struct HostJit<'scope> {
    thread: RefCell<Option<ScopedJoinHandle<'scope, Result<HostProgram, jit::JitError>>>>,
    program: OnceCell<Result<HostProgram, String>>,
}

impl HostJit<'_> {
    /// The compiled program, waiting for the thread the first time.
    fn wait(&self) -> Result<&HostProgram, String> {
        self.program
            .get_or_init(|| match self.thread.borrow_mut().take().map(|t| t.join()) {
                Some(Ok(compiled)) => compiled.map_err(|e| e.to_string()),
                Some(Err(panic)) => std::panic::resume_unwind(panic),
                None => Err("host JIT: the compiling thread is gone".into()),
            })
            .as_ref()
            .map_err(Clone::clone)
    }
}

impl session::Hooks for &HostJit<'_> {
    /// A host JIT error stops the run before anything is attached, as when
    /// the JIT ran before loading.
    fn before_attach(&mut self) -> Result<(), String> {
        self.wait().map(|_| ())
    }
}

/// Pass 5 of [`run`]: the checks before loading, then the session.
fn run_compiled(
    args: &Args,
    map: &SourceMap,
    module: &ir::Module,
    object: &mut bpf::Object,
    kernel: &dyn stap_lang::kernel::KernelFacts,
    already: &[(String, Option<String>)],
    host: &HostJit,
) -> Result<Ran, Failed> {
    check_target_pid(args.target_pid)?;
    leave_out_unloaded_modules(module, object, map, args.verbose > 0)?;
    crate::privilege::check(object)?;
    let http = http_settings(args, module)?;
    let settings = session::Settings {
        http,
        format: match args.format {
            crate::cli::OutputFormat::Text => stap_runtime::host::Format::Text,
            crate::cli::OutputFormat::Json => stap_runtime::host::Format::Json,
        },
        timeout: timeout(args.timeout)?,
        output: args.output.clone(),
        command: args.command.clone(),
        target_pid: args.target_pid,
        suppress_errors: args.suppress_handler_errors,
        quiet_errors: args.suppress_handler_errors,
        verbose: args.verbose > 0,
        stdin_input: true,
    };
    let run_host = |probe: usize, rt: &mut HostRuntime| -> Result<(), RuntimeError> {
        host.wait()
            .map_err(RuntimeError::Internal)?
            .run_probe(probe, rt)
    };
    let compiled = session::Compiled {
        module,
        object: &*object,
        host: &run_host,
        sources: map,
    };
    let running = Instant::now();
    let verbose = args.verbose > 0;
    let mut ready = || {
        if verbose {
            errln!("Pass 5: starting run.");
        }
    };
    let outcome = match session::run_with_hooks(&compiled, &settings, &mut ready, &mut &*host) {
        Ok(outcome) => outcome,
        Err(error) if may_fall_back(args, kernel) => match refused_fentry(&error, object) {
            Some(refused)
                if !already.contains(&(refused.function.clone(), refused.module.clone())) =>
            {
                return Ok(Ran::FentryRefused(refused));
            }
            _ => return Err(session_error(error, object, map, args.verbose > 0)),
        },
        Err(error) => return Err(session_error(error, object, map, args.verbose > 0)),
    };
    if verbose {
        // Through the session's stderr rule: a stderr nobody reads must
        // not hold the process after a stop.
        stap_runtime::stop::stderr_line(&format!(
            "Pass 5: run completed in {}real ms.",
            running.elapsed().as_millis()
        ));
    }
    if outcome.failed {
        stap_runtime::stop::stderr_line("Pass 5: run failed.  [man error::pass5]");
        return Err(Failed);
    }
    Ok(Ran::Finished)
}

/// A session error as rendered diagnostics.
fn session_error(
    error: session::SessionError,
    object: &bpf::Object,
    map: &SourceMap,
    verbose: bool,
) -> Failed {
    match error {
        session::SessionError::Load(error) => {
            let diag = load::describe(&error, object, map, verbose);
            emit(map, &[diag])
        }
        error => fail(error),
    }
}

/// Only `auto` chooses the mechanism, and only kprobes can take over.
fn may_fall_back(args: &Args, kernel: &dyn stap_lang::kernel::KernelFacts) -> bool {
    args.kernel_probes == crate::cli::KernelProbes::Auto && kernel.mechanisms().kprobes
}

/// The fentry/fexit program the kernel refused to load or attach, if that
/// is what stopped the session: its attach target failed (6.1 answers
/// ENOTSUPP to fexit on `tcp_v4_syn_recv_sock`), not the program's code. A
/// verifier rejection at an instruction is the code's, and stays an error.
fn refused_fentry(error: &session::SessionError, object: &bpf::Object) -> Option<RefusedFentry> {
    use stap_runtime::load::LoadError;
    let (program, reason) = match error {
        session::SessionError::Attach(e) => (e.program, e.reason.clone()),
        session::SessionError::Load(LoadError::Kernel {
            program,
            what,
            error,
        }) => (*program, format!("{what}: {error}")),
        session::SessionError::Load(LoadError::Verifier {
            program,
            insn: None,
            reason,
            ..
        }) => (*program, reason.clone()),
        _ => return None,
    };
    let program = object.programs.get(program)?;
    match &program.attach {
        bpf::AttachKind::Fentry {
            function, module, ..
        } => Some(RefusedFentry {
            function: function.clone(),
            module: module.clone(),
            point: program.attach.point_text(),
            reason,
        }),
        _ => None,
    }
}

/// Probes into a module compile whether it is loaded or not (its BTF is
/// read from its file), but attach only to a loaded one. An optional
/// probe (`?`, `!`) on a module that is not loaded is left out, as stap's
/// rules for optional probes say; any other is an error naming the module.
fn leave_out_unloaded_modules(
    module: &ir::Module,
    object: &mut bpf::Object,
    map: &SourceMap,
    verbose: bool,
) -> Result<(), Failed> {
    let module_of = |program: &bpf::Program| match &module.probes.get(program.probe)?.kind {
        ir::ProbeKind::KernelFunction {
            module: Some(name),
            optional,
            ..
        } => Some((name.clone(), *optional)),
        _ => None,
    };
    if object.programs.iter().all(|p| module_of(p).is_none()) {
        return Ok(());
    }
    let loaded = stap_runtime::modfile::loaded_modules();
    let is_loaded = |name: &str| loaded.contains(&stap_runtime::modfile::canonical_name(name));
    let mut errors = Vec::new();
    let mut left_out = Vec::new();
    for program in &object.programs {
        let Some((name, optional)) = module_of(program) else {
            continue;
        };
        if is_loaded(&name) {
            continue;
        }
        let probe = &module.probes[program.probe];
        if optional {
            left_out.push(probe.point.clone());
            continue;
        }
        if errors.iter().any(|(span, _)| *span == probe.span) {
            continue;
        }
        errors.push((probe.span, name));
    }
    if !errors.is_empty() {
        let diags: Vec<_> = errors
            .into_iter()
            .map(|(span, name)| {
                stap_lang::diag::Diagnostic::error(format!(
                    "module {name} is not loaded; modprobe {name}"
                ))
                .at(
                    span,
                    "this probe attaches to a function of that module (write `?` after \
                     the point to leave it out when the module is absent)",
                )
            })
            .collect();
        return Err(emit(map, &diags));
    }
    if verbose {
        for point in &left_out {
            errln!("WARNING: probe {point} left out: its module is not loaded");
        }
    }
    object
        .programs
        .retain(|p| module_of(p).is_none_or(|(name, _)| is_loaded(&name)));
    Ok(())
}

/// `--http`: where procfs probes are served. stap makes /proc files for
/// them, which stap-rs, with no kernel module, cannot; so a script with
/// procfs probes and no `--http` still runs unmodified, served on a
/// loopback port the kernel picks, and the address is always printed (the
/// user cannot guess it).
fn http_settings(
    args: &Args,
    module: &ir::Module,
) -> Result<Option<session::HttpSettings>, Failed> {
    let procfs = module
        .probes
        .iter()
        .any(|p| matches!(p.kind, ir::ProbeKind::Procfs { .. }) && !p.kind.is_stdin_input());
    let Some(text) = &args.http else {
        return Ok(procfs.then(|| session::HttpSettings {
            addr: std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
            allow_write: args.http_write,
            announce: true,
        }));
    };
    let addr = stap_runtime::http::parse_addr(text).map_err(|e| fail(format!("--http: {e}")))?;
    if !procfs {
        errln!("WARNING: --http {text}: the script has no procfs probes; nothing is served");
        return Ok(None);
    }
    if stap_runtime::http::is_exposed(&addr) {
        errln!(
            "WARNING: --http {addr} is not a loopback address: anyone who can reach it can read the metrics{}",
            if args.http_write {
                " and run the write probes"
            } else {
                ""
            }
        );
    }
    Ok(Some(session::HttpSettings {
        addr,
        allow_write: args.http_write,
        announce: args.verbose > 0,
    }))
}

/// `-T SECONDS` as a duration (the command line checked the range).
fn timeout(seconds: Option<f64>) -> Result<Option<Duration>, Failed> {
    match seconds {
        None => Ok(None),
        Some(s) => Duration::try_from_secs_f64(s)
            .map(Some)
            .map_err(|_| fail(format!("-T {s}: expected a number of seconds ≥ 0.001"))),
    }
}

/// `-x PID` names the process `target()` returns. stap accepts a pid that
/// does not exist (its own BPF conformance tests run with `-x 12345`, and
/// a script may only compare against `target()`), so a missing process is
/// a warning, never silent; a pid that cannot be one is an error.
fn check_target_pid(pid: Option<i32>) -> Result<(), Failed> {
    let Some(pid) = pid else {
        return Ok(());
    };
    if pid <= 0 {
        return Err(fail(format!("-x {pid}: not a process id")));
    }
    // SAFETY: signal 0 only checks that the process exists.
    if unsafe { libc::kill(pid, 0) } != 0
        && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
    {
        errln!("WARNING: -x {pid}: no such process; target() is {pid} all the same");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use stap_runtime::attach::AttachError;
    use stap_runtime::load::LoadError;

    fn object(attach: bpf::AttachKind) -> bpf::Object {
        bpf::Object {
            maps: vec![],
            programs: vec![bpf::Program {
                name: "stap_p0".into(),
                probe: 0,
                function: ir::FuncId(0),
                attach,
                insns: vec![0x95],
                map_relocs: vec![],
                lines: vec![],
                stack_bytes: 0,
                func_info: vec![],
                line_info: vec![],
                plain_subprograms: 0,
            }],
            btf: vec![],
        }
    }

    fn fexit(function: &str) -> bpf::AttachKind {
        bpf::AttachKind::Fentry {
            function: function.into(),
            is_return: true,
            module: None,
        }
    }

    fn attach_error(reason: &str) -> session::SessionError {
        session::SessionError::Attach(AttachError {
            program: 0,
            probe: String::new(),
            reason: reason.into(),
        })
    }

    /// 6.1's refusal of fexit on tcp_v4_syn_recv_sock: an attach error on
    /// an fentry/fexit program names the function to move to kprobes.
    #[test]
    fn a_refused_fexit_attach_names_its_function() {
        let object = object(fexit("tcp_v4_syn_recv_sock"));
        let refused = refused_fentry(&attach_error("Unknown error 524"), &object);
        assert_eq!(
            refused,
            Some(RefusedFentry {
                function: "tcp_v4_syn_recv_sock".into(),
                module: None,
                point: r#"kernel.function("tcp_v4_syn_recv_sock").return"#.into(),
                reason: "Unknown error 524".into(),
            })
        );
        // Refused at load, before verification (no attach target) too.
        let load = session::SessionError::Load(LoadError::Kernel {
            program: 0,
            what: "BPF_PROG_LOAD".into(),
            error: std::io::Error::from_raw_os_error(524),
        });
        assert!(refused_fentry(&load, &object).is_some());
    }

    /// What is not the kernel refusing a function's trampoline stays the
    /// error it is: the verifier rejecting the program's code, a kprobe
    /// that failed, a map that could not be made.
    #[test]
    fn other_failures_do_not_fall_back() {
        let object_fexit = object(fexit("tcp_sendmsg"));
        let rejected = session::SessionError::Load(LoadError::Verifier {
            program: 0,
            insn: Some(3),
            reason: "invalid mem access".into(),
            log: String::new(),
        });
        assert_eq!(refused_fentry(&rejected, &object_fexit), None);
        let map = session::SessionError::Load(LoadError::Map {
            map: 0,
            name: "m".into(),
            error: std::io::Error::from_raw_os_error(libc::ENOMEM),
        });
        assert_eq!(refused_fentry(&map, &object_fexit), None);
        let kprobe = object(bpf::AttachKind::Kprobe {
            function: "tcp_sendmsg".into(),
            offset: 0,
            is_return: false,
        });
        assert_eq!(refused_fentry(&attach_error("ENOENT"), &kprobe), None);
    }
}
