//! Probe identity: what `pp()`, `pn()`, `ppfunc()`, `probemod()`,
//! `probefunc()`, `probe_type()` and `is_return()` return. Each is a
//! constant of the probe point (stap's tapsets compute them from the
//! point's text, the probed address or the kind of low-level probe), so
//! both backends take them from here: the BPF emitter as constants in each
//! probe's program, the host runtime from the module's probe list.

use super::ProbeHandler;
use crate::sema::hir::ProbeKind;

/// The value of an identity built-in: all are strings but `is_return()`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Identity {
    Text(String),
    Long(i64),
}

/// The identity built-ins, each a constant of the probe point.
pub const NAMES: &[&str] = &[
    "pp",
    "pn",
    "ppfunc",
    "probefunc",
    "probemod",
    "probe_type",
    "is_return",
];

/// The value of identity built-in `name` in probe `probe`, or `None` when
/// it is not a constant of the point (`probefunc()` in a tracepoint or perf
/// probe depends on the address where the event fired) or `name` is not an
/// identity built-in.
pub fn constant(name: &str, probe: &ProbeHandler) -> Option<Identity> {
    let text = match name {
        "pp" => probe.point.clone(),
        "pn" => probe.written.clone(),
        "ppfunc" => ppfunc(&probe.point),
        "probemod" => probemod(probe),
        "probefunc" => probefunc(probe)?,
        "probe_type" => probe_type(probe).to_string(),
        "is_return" => return Some(Identity::Long(is_return(probe) as i64)),
        _ => return None,
    };
    Some(Identity::Text(text))
}

/// Whether `name` is one of the built-ins [`constant`] answers.
pub fn is_identity(name: &str) -> bool {
    NAMES.contains(&name)
}

/// stap's name for the low-level handler a probe runs in (its
/// `probe_type()` tapset function), by what the point asks for rather than
/// how stap-rs attaches it: a `kernel.function` probe is a `kprobe`
/// whether it runs on fentry or a kprobe, as a `process` probe is a
/// `uprobe` (SDT markers and PLT stubs included). Timers given in time
/// units are stap's hrtimers; `timer.jiffies` its jiffy timer.
pub fn probe_type(probe: &ProbeHandler) -> &'static str {
    if stands_for_function_return(probe) {
        return "kretprobe";
    }
    match &probe.kind {
        ProbeKind::Begin { .. }
        | ProbeKind::End { .. }
        | ProbeKind::Error { .. }
        | ProbeKind::Never => "begin_end",
        ProbeKind::HostTimer { .. } if probe.point.starts_with("timer.jiffies") => "timer",
        ProbeKind::HostTimer { .. } => "hrtimer",
        ProbeKind::TimerProfile => "profile_timer",
        ProbeKind::Tracepoint { .. } => "kernel_tracepoint",
        ProbeKind::KernelFunction { is_return, .. } => {
            if *is_return {
                "kretprobe"
            } else {
                "kprobe"
            }
        }
        ProbeKind::Process { is_return, .. } => {
            if *is_return {
                "uretprobe"
            } else {
                "uprobe"
            }
        }
        ProbeKind::Perf { .. } => "perf_event",
        ProbeKind::Netfilter { .. } => "netfilter",
        ProbeKind::Procfs { .. } => "procfs",
    }
}

/// stap's `is_return()`: 1 in a kretprobe or uretprobe, that is a
/// `.return` of a kernel or user function; 0 elsewhere.
pub fn is_return(probe: &ProbeHandler) -> bool {
    stands_for_function_return(probe)
        || matches!(
            probe.kind,
            ProbeKind::KernelFunction {
                is_return: true,
                ..
            } | ProbeKind::Process {
                is_return: true,
                ..
            }
        )
}

/// A tracepoint reached through an alias's `.return` point: the stdlib
/// puts a function's exit tracepoint where stap's tapset has a kretprobe
/// (`syscall.read.return` on `syscalls:sys_exit_read`), so the probe keeps
/// stap's answer. A tracepoint named directly stays a tracepoint.
fn stands_for_function_return(probe: &ProbeHandler) -> bool {
    matches!(probe.kind, ProbeKind::Tracepoint { .. })
        && probe
            .written
            .trim_end_matches(['?', '!'])
            .ends_with(".return")
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

    fn handler(point: &str, written: &str, kind: ProbeKind) -> ProbeHandler {
        ProbeHandler {
            point: point.to_string(),
            written: written.to_string(),
            kind,
            placement: crate::sema::hir::Placement::Kernel,
            function: crate::ir::FuncId(0),
            span: crate::source::Span::default(),
        }
    }

    fn tracepoint(name: &str) -> ProbeKind {
        ProbeKind::Tracepoint {
            system: "syscalls".to_string(),
            name: name.to_string(),
            args: crate::kernel::TracepointArgs::Classic(Vec::new()),
        }
    }

    #[test]
    fn probe_type_and_is_return_follow_the_low_level_probe() {
        let cases = [
            (
                handler("begin", "begin", ProbeKind::Begin { order: 0 }),
                "begin_end",
                0,
            ),
            (
                handler("end", "end", ProbeKind::End { order: 0 }),
                "begin_end",
                0,
            ),
            (
                handler(
                    "timer.ms(100)",
                    "timer.ms(100)",
                    ProbeKind::HostTimer {
                        period_ns: 100_000_000,
                        randomize_ns: 0,
                    },
                ),
                "hrtimer",
                0,
            ),
            (
                handler(
                    "timer.jiffies(10)",
                    "timer.jiffies(10)",
                    ProbeKind::HostTimer {
                        period_ns: 40_000_000,
                        randomize_ns: 0,
                    },
                ),
                "timer",
                0,
            ),
            (
                handler("timer.profile", "timer.profile", ProbeKind::TimerProfile),
                "profile_timer",
                0,
            ),
            (
                handler(
                    r#"kernel.trace("syscalls:sys_exit_read")"#,
                    r#"kernel.trace("syscalls:sys_exit_read")"#,
                    tracepoint("sys_exit_read"),
                ),
                "kernel_tracepoint",
                0,
            ),
            // The stdlib's exit tracepoint behind stap's kretprobe alias.
            (
                handler(
                    r#"kernel.trace("syscalls:sys_exit_read")"#,
                    "syscall.read.return",
                    tracepoint("sys_exit_read"),
                ),
                "kretprobe",
                1,
            ),
            (
                handler(
                    r#"kernel.trace("syscalls:sys_enter_read")"#,
                    "syscall.read",
                    tracepoint("sys_enter_read"),
                ),
                "kernel_tracepoint",
                0,
            ),
        ];
        for (probe, probe_type, is_return) in cases {
            assert_eq!(
                constant("probe_type", &probe),
                Some(Identity::Text(probe_type.to_string())),
                "{}",
                probe.written
            );
            assert_eq!(
                constant("is_return", &probe),
                Some(Identity::Long(is_return)),
                "{}",
                probe.written
            );
        }
    }
}
