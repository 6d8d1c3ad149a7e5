//! The host backend: every host-side IR function compiled to machine code
//! with Cranelift. Host probes run only through this code; there is no IR
//! interpreter.
//!
//! Calling convention of compiled functions: the platform's C convention,
//! `(rt: *mut HostRuntime, params: i64...) -> i64` (no return value for
//! handlers and void functions). Longs are `i64`; strings are `i64` handles
//! into the runtime (see `host::StrHandle`).

mod translate;

use std::fmt;
use std::time::{Duration, Instant};

use cranelift_codegen::settings::{self, Configurable};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{FuncId as ClifFuncId, Module as _, default_libcall_names};
use stap_lang::ir;
use stap_lang::ir::{Placement, ProbeKind};

use crate::host::{HostRuntime, RuntimeError, rtlib};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JitError(pub String);

impl fmt::Display for JitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "host JIT: {}", self.0)
    }
}

impl std::error::Error for JitError {}

impl JitError {
    pub(crate) fn new(what: impl fmt::Display) -> JitError {
        JitError(what.to_string())
    }
}

/// Compiled host code for one module.
pub struct HostProgram {
    jit: Option<JITModule>,
    /// Entry of each IR function that was compiled (host side only).
    entries: Vec<Option<*const u8>>,
    /// Per probe: its function and whether it gets begin/end action limits.
    probes: Vec<(ir::FuncId, u64)>,
    functions: usize,
    compile_time: Duration,
}

// SAFETY: the entry pointers point into the code `jit` owns, and move with
// it; nothing is shared between threads. The driver compiles on a thread
// while the kernel verifies the BPF programs, then runs the code on its own.
unsafe impl Send for HostProgram {}

impl HostProgram {
    /// Compiles every host-side function of `module`.
    pub fn compile(module: &ir::Module) -> Result<HostProgram, JitError> {
        let start = Instant::now();
        let (mut jit, ids, _) = build(module, false)?;
        jit.finalize_definitions().map_err(JitError::new)?;
        let entries = ids
            .iter()
            .map(|id| id.map(|id| jit.get_finalized_function(id)))
            .collect();
        let probes = module
            .probes
            .iter()
            .map(|p| {
                let scale = match p.kind {
                    ProbeKind::Begin { .. } | ProbeKind::End { .. } | ProbeKind::Error { .. } => 10,
                    _ => 1,
                };
                (p.function, scale)
            })
            .collect();
        Ok(HostProgram {
            jit: Some(jit),
            entries,
            probes,
            functions: ids.iter().flatten().count(),
            compile_time: start.elapsed(),
        })
    }

    /// Runs probe `probe`'s handler (a host probe: begin, end, error, timer).
    pub fn run_probe(&self, probe: usize, rt: &mut HostRuntime) -> Result<(), RuntimeError> {
        let &(func, scale) = self
            .probes
            .get(probe)
            .ok_or_else(|| RuntimeError::Internal(format!("no probe {probe}")))?;
        let entry = self
            .entries
            .get(func.0 as usize)
            .copied()
            .flatten()
            .ok_or_else(|| RuntimeError::Internal(format!("probe {probe} has no host code")))?;
        rt.begin_hit(probe, scale);
        // SAFETY: `entry` was compiled by `build` for a handler, which has
        // the signature `extern "C" fn(*mut HostRuntime)` (handlers take no
        // parameters and return nothing); the JIT memory lives as long as
        // `self`, and `rt` is exclusively borrowed for the call.
        unsafe {
            let handler: unsafe extern "C" fn(*mut HostRuntime) = std::mem::transmute(entry);
            handler(rt);
        }
        rt.end_hit()
    }

    /// How many functions [`HostProgram::compile`] compiles for `module`.
    pub fn host_functions(module: &ir::Module) -> usize {
        module
            .functions
            .iter()
            .filter(|f| f.side == Placement::Host)
            .count()
    }

    /// Functions compiled and the time it took.
    pub fn compile_stats(&self) -> (usize, Duration) {
        (self.functions, self.compile_time)
    }
}

impl Drop for HostProgram {
    fn drop(&mut self) {
        if let Some(jit) = self.jit.take() {
            // SAFETY: the code is unreachable once `self` goes: entries are
            // only called through `run_probe`, which borrows `self`.
            unsafe { jit.free_memory() };
        }
    }
}

/// The Cranelift IR of every host function (`--dump=clif`).
pub fn clif_listing(module: &ir::Module) -> Result<String, JitError> {
    let (jit, _, listing) = build(module, true)?;
    // SAFETY: nothing was finalized or called; dropping the memory is safe.
    unsafe { jit.free_memory() };
    Ok(listing)
}

/// Declares and defines every host function; with `listing`, also renders
/// each function's CLIF before it is compiled.
fn build(
    module: &ir::Module,
    listing: bool,
) -> Result<(JITModule, Vec<Option<ClifFuncId>>, String), JitError> {
    let mut flags = settings::builder();
    flags.set("opt_level", "speed").map_err(JitError::new)?;
    let isa = cranelift_native::builder()
        .map_err(JitError::new)?
        .finish(settings::Flags::new(flags))
        .map_err(JitError::new)?;
    let mut builder = JITBuilder::with_isa(isa, default_libcall_names());
    for (name, ptr) in rtlib::symbols() {
        builder.symbol(name, ptr);
    }
    let mut jit = JITModule::new(builder);
    let host = |f: &ir::Function| f.side == Placement::Host;
    let mut ids = Vec::with_capacity(module.functions.len());
    for (i, f) in module.functions.iter().enumerate() {
        ids.push(if host(f) {
            let sig = translate::signature(&jit, f);
            Some(
                jit.declare_function(
                    &format!("stap_fn{i}"),
                    cranelift_module::Linkage::Local,
                    &sig,
                )
                .map_err(JitError::new)?,
            )
        } else {
            None
        });
    }
    let mut text = String::new();
    let mut translator = translate::Translator::new(&mut jit, module, &ids)?;
    for (i, f) in module.functions.iter().enumerate() {
        let Some(id) = ids[i] else { continue };
        let func = translator.translate(f, id)?;
        if listing {
            text.push_str(&format!("; {}\n{}\n", f.name, func.display()));
        }
        translator.define(id, func)?;
    }
    Ok((jit, ids, text))
}
