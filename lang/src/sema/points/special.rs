//! `begin`, `init`, `oneshot`, `end`, `error` and `never`: points with
//! no kernel event, run by the session on the host.

use super::{Component, ResolvedPoint, no_arg, number_arg, plain, render};
use crate::diag::Diagnostic;
use crate::sema::hir::ProbeKind;
use crate::source::Span;

/// The point names, for "did you mean".
pub(super) const NAMES: &[&str] = &["begin", "end", "error", "never", "init", "oneshot"];

/// One of the names above, a single component.
pub(super) fn resolve(
    comps: &[Component],
    span: Span,
) -> Result<ResolvedPoint<'static>, Diagnostic> {
    let order = |c: &Component| -> Result<i64, Diagnostic> {
        match c.arg {
            None => Ok(0),
            Some(_) => number_arg(c, &c.name),
        }
    };
    Ok(match comps[0].name.as_str() {
        "begin" | "init" => {
            let order = order(&comps[0])?;
            let text = render(comps);
            plain(ProbeKind::Begin { order }, "begin", text, span)
        }
        "oneshot" => {
            no_arg(&comps[0])?;
            let mut p = plain(
                ProbeKind::Begin { order: 0 },
                "begin",
                "oneshot".into(),
                span,
            );
            p.oneshot = true;
            p
        }
        "end" => {
            let order = order(&comps[0])?;
            plain(ProbeKind::End { order }, "end", render(comps), span)
        }
        "error" => {
            let order = order(&comps[0])?;
            plain(ProbeKind::Error { order }, "error", render(comps), span)
        }
        _ => {
            no_arg(&comps[0])?;
            plain(ProbeKind::Never, "never", "never".into(), span)
        }
    })
}
