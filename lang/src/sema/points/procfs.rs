//! `procfs("NAME").read`, `procfs("NAME").write`, `procfs.read`/`.write`,
//! each with an optional `.maxsize(N)`: stap's `/proc/systemtap/MODULE/NAME`
//! files. stap-rs has no kernel module: the session serves them over HTTP
//! (`--http`), and their bodies run on the host with `$value`. The file
//! `__stdin` (stap's input tapset) is fed from stdin instead.

use super::{Component, ResolvedPoint, number_arg, plain, render};
use crate::ast::Literal;
use crate::diag::Diagnostic;
use crate::sema::hir::ProbeKind;
use crate::source::Span;

/// The point names, for "did you mean".
pub(super) const NAMES: &[&str] = &["procfs.read", "procfs.write"];

/// stap's file name when `procfs` has no argument.
const DEFAULT_NAME: &str = "command";

/// `comps[0]` is `procfs`.
pub(super) fn resolve(
    comps: &[Component],
    span: Span,
) -> Result<ResolvedPoint<'static>, Diagnostic> {
    let name = match &comps[0].arg {
        None => DEFAULT_NAME.to_string(),
        Some(Literal::String(s)) => check_name(s, comps[0].span)?,
        Some(_) => {
            return Err(Diagnostic::error("`procfs` needs a file name")
                .at(comps[0].span, "expected `procfs(\"NAME\")`"));
        }
    };
    let names: Vec<&str> = comps[1..].iter().map(|c| c.name.as_str()).collect();
    let write = match names.as_slice() {
        ["read"] | ["read", "maxsize"] => false,
        ["write"] | ["write", "maxsize"] => true,
        _ => {
            return Err(
                Diagnostic::error(format!("unknown procfs probe `{}`", render(comps))).at(
                    span,
                    "expected `procfs(\"NAME\").read` or `.write`, then optionally `.maxsize(N)`",
                ),
            );
        }
    };
    for c in &comps[1..2] {
        if c.arg.is_some() {
            return Err(Diagnostic::error(format!("`{}` takes no argument", c.name))
                .at(c.span, "unexpected argument"));
        }
    }
    let maxsize = match comps.get(2) {
        Some(c) => {
            let n = number_arg(c, "maxsize")?;
            Some(u64::try_from(n).ok().filter(|n| *n > 0).ok_or_else(|| {
                Diagnostic::error("`maxsize` must be positive").at(c.span, "here")
            })?)
        }
        None => None,
    };
    let resolved = format!(
        "procfs(\"{name}\").{}{}",
        if write { "write" } else { "read" },
        maxsize.map_or(String::new(), |n| format!(".maxsize({n})"))
    );
    let kind = ProbeKind::Procfs {
        name,
        write,
        maxsize,
    };
    Ok(plain(kind, "procfs", resolved, span))
}

/// A file name is a relative path of plain segments, served as `/NAME`.
fn check_name(name: &str, span: Span) -> Result<String, Diagnostic> {
    let plain_segment = |s: &str| {
        !s.is_empty()
            && s != "."
            && s != ".."
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
    };
    if name.split('/').all(plain_segment) {
        Ok(name.to_string())
    } else {
        Err(
            Diagnostic::error(format!("invalid procfs file name \"{name}\"")).at(
                span,
                "expected letters, digits, `_`, `-`, `.`, with `/` between directories",
            ),
        )
    }
}

/// Two read (or two write) probes on one file: stap refuses them, as
/// only one can answer.
pub(crate) fn duplicates(probes: &[crate::sema::hir::Probe]) -> Vec<Diagnostic> {
    let mut seen: Vec<(&str, bool, Span)> = Vec::new();
    let mut out = Vec::new();
    for p in probes {
        let ProbeKind::Procfs { name, write, .. } = &p.kind else {
            continue;
        };
        // Every stdin probe sees every byte (input.char and input.line
        // in one script): there is no answer to share.
        if p.kind.is_stdin_input() {
            continue;
        }
        match seen.iter().find(|(n, w, _)| n == name && w == write) {
            Some((_, _, first)) => out.push(
                Diagnostic::error(format!(
                    "two procfs(\"{name}\").{} probes",
                    if *write { "write" } else { "read" }
                ))
                .at(p.span, "a second one here")
                .also(*first, "the first"),
            ),
            None => seen.push((name, *write, p.span)),
        }
    }
    out
}
