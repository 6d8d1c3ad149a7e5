//! Passes 3 and 4 (kernel half) as one function: lower the elaborated
//! program to the IR, verify the IR, gather what code generation needs
//! from the kernel, and emit BPF with line_info from the script text.
//!
//! Every front end (a script run, the REPL) compiles through [`compile`],
//! so a step added here (a check, an option) reaches all of them. The host
//! half (Cranelift) lives in `stap-runtime`, which runs it on the result.

use crate::diag::Diagnostic;
use crate::kernel::{KernelFacts, Mechanism};
use crate::source::SourceMap;
use crate::{bpf, ir, sema};

/// What the command line decides about compilation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Options {
    /// `--tracepoint-mechanism`.
    pub tracepoint_mechanism: bpf::TracepointMechanism,
    /// `--test-verifier-reject` (tests only: see
    /// [`bpf::Options::test_out_of_bounds`]).
    pub test_out_of_bounds: bool,
    /// `--format json`: a printed histogram carries its statistic's min
    /// and max, so every statistic printed as a histogram keeps them.
    pub histogram_extremes: bool,
    /// The machine's possible CPUs, when the caller knows them: they size
    /// the ring buffer and bound the per-CPU loops (else
    /// [`bpf::DEFAULT_CPUS`]).
    pub cpus: Option<u32>,
    /// Keep every string key part MAXSTRINGLEN bytes instead of sizing it
    /// by what can reach it ([`bpf::key_text`]). The interactive session
    /// sets it: its maps outlive one program, and a later program could
    /// use longer keys.
    pub full_string_keys: bool,
    /// The host's time zone (else UTC), for `tz_ctime` in kernel probes.
    pub local_time: Option<bpf::LocalTime>,
}

/// Whether [`compile`] goes on after lowering (`-p3` and `--dump=ir` stop).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    Emit,
    Stop,
}

/// Why a program did not compile.
#[derive(Debug)]
pub enum Error {
    /// Errors at script lines.
    Diagnostics(Vec<Diagnostic>),
    /// The lowering produced IR that breaks its own rules: a compiler bug.
    MalformedIr(Vec<String>),
    /// The options ask for a mechanism this kernel lacks.
    Unavailable {
        mechanism: &'static str,
        option: &'static str,
        reason: String,
    },
}

/// The kernel half of a compiled program, with the IR both halves share.
pub struct Compiled {
    pub module: ir::Module,
    pub object: bpf::Object,
}

/// Lowers, verifies and emits `program`. `lowered` sees the IR before
/// emission (for `-v` timings and the IR listing) and may stop there, in
/// which case the result is `Ok(None)`.
pub fn compile(
    program: &sema::Program,
    source: &SourceMap,
    kernel: &dyn KernelFacts,
    options: &Options,
    lowered: &mut dyn FnMut(&ir::Module) -> Next,
) -> Result<Option<Compiled>, Error> {
    let mut module = ir::lower::lower(program).map_err(Error::Diagnostics)?;
    if options.histogram_extremes {
        keep_histogram_extremes(&mut module);
    }
    if !options.full_string_keys {
        bpf::key_text::narrow_string_keys(&mut module);
    }
    ir::verify::verify(&module).map_err(Error::MalformedIr)?;
    if lowered(&module) == Next::Stop {
        return Ok(None);
    }
    if options.tracepoint_mechanism == bpf::TracepointMechanism::TpBtf
        && let Some(reason) = kernel.unavailable_reason(Mechanism::TpBtf)
    {
        return Err(Error::Unavailable {
            mechanism: "tp_btf",
            option: "--tracepoint-mechanism=tp_btf",
            reason,
        });
    }
    let emit = bpf::Options {
        test_out_of_bounds: options.test_out_of_bounds,
        tracepoint_mechanism: options.tracepoint_mechanism,
        kernel: bpf::facts::EmitFacts::for_module(&module, kernel),
        cpus: options.cpus.unwrap_or(bpf::DEFAULT_CPUS),
        local_time: options.local_time.unwrap_or_default(),
        ..bpf::Options::from_limits(&module.limits)
    };
    let object = bpf::compile_with_source(&module, &emit, source).map_err(Error::Diagnostics)?;
    Ok(Some(Compiled { module, object }))
}

/// Every statistic with a histogram also keeps its min and max.
fn keep_histogram_extremes(module: &mut ir::Module) {
    for global in &mut module.globals {
        if let ir::Storage::Stats { needs, .. } = &mut global.storage
            && (needs.hist_log || needs.hist_linear.is_some())
        {
            needs.min_max = true;
        }
    }
}
