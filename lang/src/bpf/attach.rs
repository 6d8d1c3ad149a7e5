//! Pure facts about an [`AttachKind`]: the program type and expected
//! attach type it is loaded with, and the probe point it implements in
//! script syntax. The loader, the attacher and diagnostics all ask here,
//! so a new kind of program adds its facts in this one place.

use super::AttachKind;

// `enum bpf_prog_type` and `enum bpf_attach_type` values (uapi/linux/bpf.h).
pub const BPF_PROG_TYPE_KPROBE: u32 = 2;
pub const BPF_PROG_TYPE_TRACEPOINT: u32 = 5;
pub const BPF_PROG_TYPE_PERF_EVENT: u32 = 7;
pub const BPF_PROG_TYPE_RAW_TRACEPOINT: u32 = 17;
pub const BPF_PROG_TYPE_TRACING: u32 = 26;
pub const BPF_PROG_TYPE_LSM: u32 = 29;
pub const BPF_PROG_TYPE_NETFILTER: u32 = 32;

pub const BPF_TRACE_RAW_TP: u32 = 23;
pub const BPF_TRACE_FENTRY: u32 = 24;
pub const BPF_TRACE_FEXIT: u32 = 25;
pub const BPF_LSM_MAC: u32 = 27;
pub const BPF_TRACE_KPROBE_MULTI: u32 = 42;
pub const BPF_NETFILTER: u32 = 45;

impl AttachKind {
    /// The `BPF_PROG_TYPE_*` a program of this kind is loaded as.
    pub fn program_type(&self) -> u32 {
        match self {
            AttachKind::RawTracepoint { .. } | AttachKind::Syscall { .. } => {
                BPF_PROG_TYPE_RAW_TRACEPOINT
            }
            AttachKind::TpBtf { .. } => BPF_PROG_TYPE_TRACING,
            AttachKind::Tracepoint { .. } => BPF_PROG_TYPE_TRACEPOINT,
            AttachKind::Kprobe { .. }
            | AttachKind::Kprobes { .. }
            | AttachKind::Uprobe { .. }
            | AttachKind::Marker { .. }
            | AttachKind::Plt { .. } => BPF_PROG_TYPE_KPROBE,
            AttachKind::Fentry { .. } => BPF_PROG_TYPE_TRACING,
            AttachKind::Lsm { .. } => BPF_PROG_TYPE_LSM,
            AttachKind::PerfEvent { .. } => BPF_PROG_TYPE_PERF_EVENT,
            AttachKind::Netfilter { .. } => BPF_PROG_TYPE_NETFILTER,
        }
    }

    /// The load-time `expected_attach_type` (0 where the type needs none).
    pub fn expected_attach_type(&self) -> u32 {
        match self {
            AttachKind::TpBtf { .. } => BPF_TRACE_RAW_TP,
            AttachKind::Fentry { is_return, .. } => {
                if *is_return {
                    BPF_TRACE_FEXIT
                } else {
                    BPF_TRACE_FENTRY
                }
            }
            AttachKind::Netfilter { .. } => BPF_NETFILTER,
            AttachKind::Lsm { .. } => BPF_LSM_MAC,
            AttachKind::Kprobes { multi: true, .. } => BPF_TRACE_KPROBE_MULTI,
            AttachKind::Kprobes { multi: false, .. }
            | AttachKind::RawTracepoint { .. }
            | AttachKind::Syscall { .. }
            | AttachKind::Tracepoint { .. }
            | AttachKind::Kprobe { .. }
            | AttachKind::Uprobe { .. }
            | AttachKind::Marker { .. }
            | AttachKind::Plt { .. }
            | AttachKind::PerfEvent { .. } => 0,
        }
    }

    /// The probe point a program implements, in script syntax.
    pub fn point_text(&self) -> String {
        let ret = |is_return: bool| if is_return { ".return" } else { "" };
        match self {
            AttachKind::RawTracepoint { name } | AttachKind::TpBtf { name } => {
                format!("kernel.trace(\"{name}\")")
            }
            AttachKind::Tracepoint { system, name } => format!("kernel.trace(\"{system}:{name}\")"),
            AttachKind::Syscall { events, .. } => match events.as_slice() {
                [(_, name)] => format!("kernel.trace(\"syscalls:{name}\")"),
                events => format!(
                    "kernel.trace(\"syscalls:{}\" and {} more)",
                    events.first().map_or("", |(_, name)| name.as_str()),
                    events.len().saturating_sub(1)
                ),
            },
            AttachKind::Kprobe {
                function,
                offset: 0,
                is_return,
            } => format!("kernel.function(\"{function}\"){}", ret(*is_return)),
            AttachKind::Kprobe {
                function, offset, ..
            } => format!("kernel.statement(\"{function}+{offset:#x}\")"),
            AttachKind::Kprobes {
                functions,
                is_return,
                ..
            } => format!(
                "kernel.function(\"{}\" and {} more){}",
                functions.first().map_or("", String::as_str),
                functions.len().saturating_sub(1),
                ret(*is_return)
            ),
            AttachKind::Fentry {
                function,
                is_return,
                module,
            } => match module {
                Some(module) => format!(
                    "module(\"{module}\").function(\"{function}\"){}",
                    ret(*is_return)
                ),
                None => format!("kernel.function(\"{function}\"){}", ret(*is_return)),
            },
            AttachKind::Lsm { hook } => format!("kernel.lsm(\"{hook}\")"),
            AttachKind::PerfEvent {
                perf_type,
                config,
                sample_period,
                frequency,
                ..
            } => format!(
                "perf.type({perf_type}).config({config}).{}({sample_period})",
                if *frequency { "hz" } else { "sample" }
            ),
            AttachKind::Uprobe {
                path,
                function,
                is_return,
            } => format!(
                "process(\"{path}\").function(\"{function}\"){}",
                ret(*is_return)
            ),
            AttachKind::Marker {
                path,
                provider,
                name,
                ..
            } => format!("process(\"{path}\").provider(\"{provider}\").mark(\"{name}\")"),
            AttachKind::Plt {
                path,
                name,
                is_return,
                ..
            } => format!("process(\"{path}\").plt(\"{name}\"){}", ret(*is_return)),
            AttachKind::Netfilter {
                pf,
                hooknum,
                priority,
            } => format!("netfilter.hook({hooknum}).pf({pf}).priority({priority})"),
        }
    }
}
