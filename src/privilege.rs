//! Before pass 5: a run that loads BPF needs root, or CAP_BPF and
//! CAP_PERFMON (loading and attaching) with read access to tracefs
//! (tracepoint ids and formats). Without them every kernel call fails with
//! a bare EPERM; this says in one line what is needed and what is missing.

use crate::frontend::{Failed, fail};
use stap_lang::bpf::Object;

const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// Fails, naming what is missing, when this process cannot load `object`.
pub fn check(object: &Object) -> Result<(), Failed> {
    if object.maps.is_empty() && object.programs.is_empty() {
        return Ok(());
    }
    match missing(effective_capabilities(), tracefs_readable(object)) {
        None => Ok(()),
        Some(what) => Err(fail(format!(
            "stap-rs needs root, or CAP_BPF + CAP_PERFMON and read access to tracefs; \
             this process lacks {what}"
        ))),
    }
}

/// What is missing from `caps` (the effective set) and tracefs access, in
/// words; `None` when nothing is.
fn missing(caps: Option<u64>, tracefs_ok: bool) -> Option<String> {
    let has = |cap: u32| caps.is_some_and(|c| c & (1 << cap) != 0);
    let mut lacking = Vec::new();
    // CAP_SYS_ADMIN covers both on kernels before 5.8 and still does.
    if !has(CAP_SYS_ADMIN) {
        if !has(CAP_BPF) {
            lacking.push("CAP_BPF");
        }
        if !has(CAP_PERFMON) {
            lacking.push("CAP_PERFMON");
        }
    }
    // Raw tracepoints, timers and perf events load without tracefs, so an
    // unreadable tracefs is only named alongside a missing capability (a
    // classic tracepoint then fails at attach with the tracefs message).
    if lacking.is_empty() {
        return None;
    }
    if !tracefs_ok {
        lacking.push("read access to tracefs");
    }
    Some(lacking.join(", "))
}

/// The `CapEff` mask of /proc/self/status.
fn effective_capabilities() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let hex = status.lines().find_map(|l| l.strip_prefix("CapEff:"))?;
    u64::from_str_radix(hex.trim(), 16).ok()
}

/// Whether tracefs can be read, when the object needs it (any kernel
/// program: tracepoint ids and event formats come from there).
fn tracefs_readable(object: &Object) -> bool {
    if object.programs.is_empty() {
        return true;
    }
    !matches!(
        stap_runtime::tracefs::Tracefs::find(),
        Err(stap_runtime::tracefs::TracefsError::NotReadable(_))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_each_missing_part() {
        let all = (1 << CAP_BPF) | (1 << CAP_PERFMON);
        assert_eq!(missing(Some(all), true), None);
        assert_eq!(missing(Some(1 << CAP_SYS_ADMIN), true), None);
        assert_eq!(missing(Some(all), false), None);
        assert_eq!(
            missing(Some(1 << CAP_BPF), true).as_deref(),
            Some("CAP_PERFMON")
        );
        assert_eq!(
            missing(Some(0), false).as_deref(),
            Some("CAP_BPF, CAP_PERFMON, read access to tracefs")
        );
        assert_eq!(missing(None, true).as_deref(), Some("CAP_BPF, CAP_PERFMON"));
    }
}
