//! Which probe mechanisms this kernel allows, each with a reason when not.
//!
//! Everything but fentry is a stat or two, done once at start. fentry needs a
//! real `BPF_PROG_LOAD` (some kernels refuse it even for `r0 = 0; exit`), so
//! it is probed only when a `kernel.function` probe asks.

use std::path::Path;
use std::sync::OnceLock;

use stap_lang::kernel::{KernelVersion, Mechanisms};

use crate::sys;
use crate::tracefs::Tracefs;

const EVENT_SOURCES: &str = "/sys/bus/event_source/devices";

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Availability {
    Available,
    /// Why not, in words for the user's error message.
    Unavailable(String),
}

impl Availability {
    pub fn is_available(&self) -> bool {
        matches!(self, Availability::Available)
    }

    /// The reason it is unavailable, if it is.
    pub fn reason(&self) -> Option<&str> {
        match self {
            Availability::Available => None,
            Availability::Unavailable(reason) => Some(reason),
        }
    }

    fn from_check(ok: bool, reason: impl FnOnce() -> String) -> Availability {
        if ok {
            Availability::Available
        } else {
            Availability::Unavailable(reason())
        }
    }
}

/// The probe mechanisms, probed once.
#[derive(Debug)]
pub struct Features {
    pub tracepoints: Availability,
    pub raw_tracepoints: Availability,
    pub tp_btf: Availability,
    pub kprobes: Availability,
    pub uprobes: Availability,
    pub perf_events: Availability,
    fentry: OnceLock<Availability>,
}

impl Features {
    /// The cheap probes: file checks and the kernel version.
    pub fn probe(
        tracefs: Option<&Tracefs>,
        btf_present: bool,
        version: &KernelVersion,
    ) -> Features {
        let at_least = |major: u32, minor: u32| (version.major, version.minor) >= (major, minor);
        let tracefs_file = |name: &str| tracefs.is_some_and(|fs| fs.root().join(name).exists());
        let event_source = |name: &str| Path::new(EVENT_SOURCES).join(name).exists();

        let tracepoints = Availability::from_check(tracefs.is_some(), || {
            match crate::tracefs::Tracefs::find() {
                Err(crate::tracefs::TracefsError::NotReadable(path)) => format!(
                    "tracefs at {} is not readable by this user (permission denied)",
                    path.display()
                ),
                _ => "tracefs is not mounted (mount -t tracefs tracefs /sys/kernel/tracing)"
                    .to_string(),
            }
        });
        let raw_tracepoints = Availability::from_check(at_least(4, 17), || {
            format!("kernel {version} is older than 4.17, which added raw tracepoints")
        });
        let tp_btf = if !btf_present {
            Availability::Unavailable("the kernel has no BTF (/sys/kernel/btf/vmlinux)".into())
        } else {
            Availability::from_check(at_least(5, 5), || {
                format!("kernel {version} is older than 5.5, which added BTF-typed tracepoints")
            })
        };
        let kprobes = Availability::from_check(
            event_source("kprobe") || tracefs_file("kprobe_events"),
            || {
                format!(
                    "no kprobe PMU ({EVENT_SOURCES}/kprobe) and no kprobe_events in tracefs: \
                     the kernel was probably built without CONFIG_KPROBES"
                )
            },
        );
        let uprobes = Availability::from_check(
            event_source("uprobe") || tracefs_file("uprobe_events"),
            || {
                format!(
                    "no uprobe PMU ({EVENT_SOURCES}/uprobe) and no uprobe_events in tracefs: \
                     the kernel was probably built without CONFIG_UPROBE_EVENTS"
                )
            },
        );
        let perf_events = Availability::from_check(event_source("software"), || {
            format!("no software perf events ({EVENT_SOURCES}/software)")
        });
        Features {
            tracepoints,
            raw_tracepoints,
            tp_btf,
            kprobes,
            uprobes,
            perf_events,
            fentry: OnceLock::new(),
        }
    }

    /// fentry, probed on first call. `target` names a kernel function to
    /// attach to as (BTF FUNC id, name); `None` means there is no BTF.
    pub fn fentry(&self, target: impl FnOnce() -> Option<(u32, String)>) -> &Availability {
        self.fentry.get_or_init(|| match target() {
            Some((btf_id, name)) => probe_fentry(btf_id, &name),
            None => Availability::Unavailable(
                "fentry needs kernel BTF for the function it attaches to".into(),
            ),
        })
    }

    /// The summary the compiler sees; `fentry` is passed in so the caller
    /// decides whether to pay for its probe.
    pub fn mechanisms(&self, fentry: bool) -> Mechanisms {
        Mechanisms {
            tracepoints: self.tracepoints.is_available(),
            raw_tracepoints: self.raw_tracepoints.is_available(),
            tp_btf: self.tp_btf.is_available(),
            fentry,
            kprobes: self.kprobes.is_available(),
            uprobes: self.uprobes.is_available(),
            perf_events: self.perf_events.is_available(),
        }
    }
}

/// Loads `r0 = 0; exit` as an fentry program on the vmlinux function with
/// BTF id `btf_id`, and unloads it. Not attached: loading is the step that
/// kernels refuse.
pub fn probe_fentry(btf_id: u32, function: &str) -> Availability {
    // mov64 r0, 0 ; exit
    let insns: [u64; 2] = [0xb7, 0x95];
    let request = sys::ProgLoad {
        prog_type: sys::BPF_PROG_TYPE_TRACING,
        expected_attach_type: sys::BPF_TRACE_FENTRY,
        name: "stap_fentry",
        insns: &insns,
        attach_btf_id: btf_id,
        attach_btf_obj: None,
    };
    let mut log = vec![0u8; 4096];
    // Dropping the fd unloads the program again.
    let error = match sys::prog_load(&request, Some((1, &mut log))) {
        Ok(_program) => return Availability::Available,
        Err(error) => error,
    };
    let errno = error.raw_os_error().unwrap_or(0);
    // "Operation not permitted (os error 1)" -> "Operation not permitted".
    let text = error.to_string();
    let text = text.split(" (os error").next().unwrap_or_default();
    let log_text = String::from_utf8_lossy(&log[..log.iter().position(|&b| b == 0).unwrap_or(0)])
        .trim()
        .to_string();
    let mut reason = format!(
        "the kernel refused to load a minimal fentry program on {function}: {} ({text})",
        sys::errno_name(&error)
    );
    if !log_text.is_empty() {
        reason.push_str(&format!("; verifier: {log_text}"));
    } else if errno == libc::EPERM {
        reason.push_str(
            " with an empty verifier log (lockdown or a kernel policy forbids BPF trampolines)",
        );
    }
    Availability::Unavailable(reason)
}
