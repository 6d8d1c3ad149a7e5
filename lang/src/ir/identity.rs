//! Probe identity: what `pp()`, `pn()`, `ppfunc()`, `probemod()` and
//! `probefunc()` return. Each is a constant of the probe point (stap's
//! tapsets compute them from the point's text or the probed address), so
//! both backends take them from here: the BPF emitter as string constants
//! in each probe's program, the host runtime from the module's probe list.

use super::ProbeHandler;
use crate::sema::hir::ProbeKind;

/// The value of identity built-in `name` in probe `probe`, or `None` when
/// it is not a constant of the point (`probefunc()` in a tracepoint or perf
/// probe depends on the address where the event fired) or `name` is not an
/// identity built-in.
pub fn constant(name: &str, probe: &ProbeHandler) -> Option<String> {
    match name {
        "pp" => Some(probe.point.clone()),
        "pn" => Some(probe.written.clone()),
        "ppfunc" => Some(ppfunc(&probe.point)),
        "probemod" => Some(probemod(probe)),
        "probefunc" => probefunc(probe),
        _ => None,
    }
}

/// Whether `name` is one of the built-ins [`constant`] answers.
pub fn is_identity(name: &str) -> bool {
    matches!(name, "pp" | "pn" | "ppfunc" | "probemod" | "probefunc")
}

/// stap's rule: the text after `function("` (else `statement("`) up to
/// the first `@` or `"`; "" for a point with neither.
pub fn ppfunc(point: &str) -> String {
    let rest = ["function(\"", "statement(\""]
        .iter()
        .find_map(|marker| point.find(marker).map(|at| &point[at + marker.len()..]));
    match rest {
        Some(rest) => rest
            .split(['@', '"'])
            .next()
            .unwrap_or_default()
            .to_string(),
        None => String::new(),
    }
}

/// The module named by `module("M")` in the point, else `kernel` for a
/// probe inside the kernel image, else "" (host probes run in no module).
fn probemod(probe: &ProbeHandler) -> String {
    if let Some(at) = probe.point.find("module(\"") {
        let rest = &probe.point[at + "module(\"".len()..];
        return rest.split('"').next().unwrap_or_default().to_string();
    }
    match &probe.kind {
        ProbeKind::KernelFunction { module, .. } => {
            module.clone().unwrap_or_else(|| "kernel".to_string())
        }
        ProbeKind::Tracepoint { .. } | ProbeKind::Netfilter { .. } => "kernel".to_string(),
        _ => String::new(),
    }
}

/// The function being probed when the point names it; `None` when only
/// the address at run time can tell (tracepoints, perf events).
fn probefunc(probe: &ProbeHandler) -> Option<String> {
    match &probe.kind {
        ProbeKind::KernelFunction { name, .. } => Some(name.clone()),
        ProbeKind::Process { .. } => Some(ppfunc(&probe.point)),
        ProbeKind::Tracepoint { .. } | ProbeKind::Perf { .. } | ProbeKind::TimerProfile => None,
        // Host probes and netfilter hooks run at no probed address.
        _ => Some(String::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ppfunc_follows_stap_text_rule() {
        assert_eq!(ppfunc(r#"kernel.function("vfs_read").call"#), "vfs_read");
        assert_eq!(
            ppfunc(r#"kernel.function("vfs_read@fs/read_write.c:569")"#),
            "vfs_read"
        );
        assert_eq!(
            ppfunc(r#"process("/bin/ls").statement("main@ls.c:10")"#),
            "main"
        );
        assert_eq!(ppfunc(r#"kernel.trace("sched:sched_switch")"#), "");
        assert_eq!(ppfunc("begin"), "");
    }
}
