//! `perf.sw.EVENT`, `perf.hw.EVENT` and `perf.type(T).config(C)`, each
//! with an optional `.sample(N)` (every N events) or `.hz(N)` (N samples a
//! second): perf events.

use super::{Component, ResolvedPoint, number_arg, plain, positive, render};
use crate::diag::Diagnostic;
use crate::sema::hir::ProbeKind;
use crate::sema::symbols::Elaborator;
use crate::source::Span;

/// The point names, for "did you mean".
pub(super) const NAMES: &[&str] = &[
    "perf.sw.cpu_clock",
    "perf.sw.task_clock",
    "perf.type.config",
];

impl<'a> Elaborator<'a> {
    pub(super) fn resolve_perf(
        &mut self,
        comps: &[Component],
        span: Span,
    ) -> Result<ResolvedPoint<'a>, Diagnostic> {
        const DEFAULT_PERIOD: u64 = 1_000_000;
        let names: Vec<&str> = comps.iter().map(|c| c.name.as_str()).collect();
        let (perf_type, config, event, rest) = match names.as_slice() {
            ["perf", "type", "config", rest @ ..] => {
                let t = number_arg(&comps[1], "perf.type")?;
                let c = number_arg(&comps[2], "config")?;
                (t as u32, c as u64, format!("type({t}).config({c})"), rest)
            }
            ["perf", class @ ("sw" | "hw"), event, rest @ ..] => {
                let table: &[&str] = if *class == "sw" { SW_EVENTS } else { HW_EVENTS };
                let Some(config) = table.iter().position(|e| e == event) else {
                    return Err(Diagnostic::error(format!(
                        "unknown perf event `perf.{class}.{event}`"
                    ))
                    .at(comps[2].span, "unknown event")
                    .suggest(event, table.iter().copied()));
                };
                let t = if *class == "sw" { 1 } else { 0 };
                (t, config as u64, format!("{class}.{event}"), rest)
            }
            _ => {
                return Err(
                    Diagnostic::error(format!("unknown perf probe `{}`", render(comps))).at(
                        span,
                        "expected `perf.sw.EVENT`, `perf.hw.EVENT` or `perf.type(T).config(C)`",
                    ),
                );
            }
        };
        let (sample_period, frequency) = match rest {
            [] => (DEFAULT_PERIOD, false),
            [suffix @ ("sample" | "hz")] => {
                let c = &comps[comps.len() - 1];
                (positive(number_arg(c, suffix)?, c)?, *suffix == "hz")
            }
            // stap's counters: a perf event per thread of the process,
            // read by `@perf("NAME")` in its other probes.
            [.., "counter"] => {
                return Err(Diagnostic::unsupported(
                    format!(
                        "perf counters read with @perf (`{}`): a perf event array per \
                         process is not implemented",
                        render(comps)
                    ),
                    span,
                ));
            }
            _ => {
                return Err(Diagnostic::error(format!(
                    "unknown perf probe suffix in `{}`",
                    render(comps)
                ))
                .at(span, "expected `.sample(N)` or `.hz(N)`"));
            }
        };
        let kind = ProbeKind::Perf {
            perf_type,
            config,
            sample_period,
            frequency,
            event,
        };
        Ok(plain(kind, "perf", render(comps), span))
    }
}

/// `PERF_COUNT_SW_*`, in config order.
const SW_EVENTS: &[&str] = &[
    "cpu_clock",
    "task_clock",
    "page_faults",
    "context_switches",
    "cpu_migrations",
    "page_faults_min",
    "page_faults_maj",
    "alignment_faults",
    "emulation_faults",
];

/// `PERF_COUNT_HW_*`, in config order.
const HW_EVENTS: &[&str] = &[
    "cpu_cycles",
    "instructions",
    "cache_references",
    "cache_misses",
    "branch_instructions",
    "branch_misses",
    "bus_cycles",
    "stalled_cycles_frontend",
    "stalled_cycles_backend",
    "ref_cpu_cycles",
];
