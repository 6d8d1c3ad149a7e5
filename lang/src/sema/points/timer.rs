//! `timer.UNIT(N)[.randomize(M)]` and `timer.profile`: timers run on the
//! host (`timer.profile` on every CPU in the kernel).

use super::{Component, ResolvedPoint, no_arg, number_arg, plain, positive, render};
use crate::diag::Diagnostic;
use crate::kernel::KernelFacts;
use crate::sema::hir::ProbeKind;
use crate::source::Span;

/// The point names, for "did you mean".
pub(super) const NAMES: &[&str] = &[
    "timer.s",
    "timer.sec",
    "timer.ms",
    "timer.msec",
    "timer.us",
    "timer.usec",
    "timer.ns",
    "timer.nsec",
    "timer.hz",
    "timer.jiffies",
    "timer.profile",
];

/// `timer.*` points. `Ok(None)`: not a timer point (maybe an alias).
pub(super) fn resolve(
    comps: &[Component],
    span: Span,
    facts: &dyn KernelFacts,
) -> Result<Option<ResolvedPoint<'static>>, Diagnostic> {
    let names: Vec<&str> = comps.iter().map(|c| c.name.as_str()).collect();
    match names.as_slice() {
        ["timer", "profile"] => {
            no_arg(&comps[1])?;
            let text = "timer.profile".to_string();
            Ok(Some(plain(
                ProbeKind::TimerProfile,
                "timer.profile",
                text,
                span,
            )))
        }
        ["timer", unit] | ["timer", unit, "randomize"] => {
            let Some(scale) = timer_unit_ns(unit, facts) else {
                return Err(Diagnostic::error(format!("unknown timer unit `{unit}`"))
                    .at(comps[1].span, "unknown unit")
                    .suggest(
                        unit,
                        [
                            "s", "sec", "ms", "msec", "us", "usec", "ns", "nsec", "hz", "jiffies",
                            "profile",
                        ],
                    ));
            };
            let n = positive(number_arg(&comps[1], "timer")?, &comps[1])?;
            let period_ns = scale.period(n);
            let randomize_ns = match comps.get(2) {
                Some(c) => scale.period(positive(number_arg(c, "randomize")?, c)?),
                None => 0,
            };
            let kind = ProbeKind::HostTimer {
                period_ns,
                randomize_ns,
            };
            Ok(Some(plain(kind, "timer", render(comps), span)))
        }
        _ => Ok(None),
    }
}

/// How a timer unit turns `N` into nanoseconds.
enum TimerScale {
    /// Period = N * this.
    Multiple(u64),
    /// Period = this / N (`hz`).
    PerSecond,
}

impl TimerScale {
    fn period(&self, n: u64) -> u64 {
        match self {
            TimerScale::Multiple(ns) => n.saturating_mul(*ns),
            TimerScale::PerSecond => 1_000_000_000 / n,
        }
    }
}

fn timer_unit_ns(unit: &str, facts: &dyn KernelFacts) -> Option<TimerScale> {
    Some(match unit {
        "s" | "sec" => TimerScale::Multiple(1_000_000_000),
        "ms" | "msec" => TimerScale::Multiple(1_000_000),
        "us" | "usec" => TimerScale::Multiple(1_000),
        "ns" | "nsec" => TimerScale::Multiple(1),
        "hz" => TimerScale::PerSecond,
        "jiffies" => {
            // A jiffy is 1/CONFIG_HZ seconds; 250 is the common default.
            let hz = facts
                .config("CONFIG_HZ")
                .and_then(|v| v.parse::<u64>().ok())
                .filter(|hz| *hz > 0)
                .unwrap_or(250);
            TimerScale::Multiple(1_000_000_000 / hz)
        }
        _ => return None,
    })
}
