//! What the emitter needs from the kernel's BTF, looked up at compile time
//! and only for what the kernel probes use (other scripts pay nothing):
//!
//! - where the current task's fields sit, for the built-ins BPF has no
//!   helper for: `ppid()` is `current->real_parent->tgid` and `euid()` is
//!   `current->cred->euid`;
//! - which context slots of BTF-typed programs (fentry/fexit, tp_btf) hold
//!   pointers, which must be copied out as numbers (`emit/context.rs`).

use super::TracepointMechanism;
use crate::ir::{FuncId, Module, Op};
use crate::ir::{Placement, ProbeKind};
use crate::kernel::{self, KernelFacts, TracepointArgs, TypeKind};

/// Kernel facts for code generation; `Default` knows nothing, which is
/// always safe (pointer slots are all copied, `ppid()` is unsupported).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EmitFacts {
    pub task: TaskLayout,
    /// Per probe (by index): bit `i` set when context slot `i` may be a
    /// typed pointer. Probes past the end: every slot may be.
    pub pointer_slots: Vec<u64>,
    /// The kernel attaches one kprobe program to many functions with one
    /// kprobe_multi link (Linux 5.18+ built with `CONFIG_FPROBE`).
    pub kprobe_multi: bool,
    /// Per probe (by index): a raw tracepoint probe loaded as tp_btf
    /// whatever `--tracepoint-mechanism` says, because it calls a kfunc
    /// (`pid2task`), which the kernel offers to tracing programs only.
    pub tp_btf_for_kfuncs: Vec<bool>,
    /// Per probe (by index): the system call number of a
    /// `syscalls:sys_enter_NAME`/`sys_exit_NAME` probe that runs on the raw
    /// `sys_enter`/`sys_exit` tracepoint instead of the classic event.
    /// `None` (and probes past the end) keep the classic event.
    pub syscall_numbers: Vec<Option<u32>>,
    /// How a raw-tracepoint system call probe tells a 32-bit (ia32) call,
    /// which the classic events skip; `None` when the kernel runs none.
    pub compat: CompatCheck,
}

/// What a raw `sys_enter`/`sys_exit` program checks to skip the calls the
/// classic `syscalls:` events skip: x86_64 reports ia32 calls as number -1
/// to them (`trace_get_syscall_nr`), by `current_thread_info()->status &
/// TS_COMPAT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CompatCheck {
    /// The kernel has no ia32 emulation: every call is native.
    #[default]
    None,
    /// Byte offset of the 4-byte `thread_info.status` in `task_struct`.
    Status(u32),
}

/// `TS_COMPAT` in x86's `thread_info.status`.
pub const TS_COMPAT: i32 = 0x2;

impl EmitFacts {
    pub fn for_module(module: &Module, facts: &dyn KernelFacts) -> EmitFacts {
        EmitFacts {
            task: TaskLayout::for_module(module, facts),
            pointer_slots: module
                .probes
                .iter()
                .map(|probe| pointer_slots(&probe.kind, facts))
                .collect(),
            // Asked only when a probe needs it: the answer reads the
            // kernel's config and probes fentry with a program load, which
            // a script of user-space probes should not wait for.
            kprobe_multi: module
                .probes
                .iter()
                .any(|probe| matches!(probe.kind, ProbeKind::KernelFunction { .. }))
                && has_kprobe_multi(facts),
            tp_btf_for_kfuncs: module
                .probes
                .iter()
                .map(|probe| {
                    matches!(
                        probe.kind,
                        ProbeKind::Tracepoint {
                            args: TracepointArgs::Raw(_),
                            ..
                        }
                    ) && reaches_builtin(module, probe.function, KFUNC_BUILTINS)
                        // Last: `mechanisms()` loads a probe program (the
                        // fentry check), which most scripts need not wait for.
                        && facts.mechanisms().tp_btf
                })
                .collect(),
            syscall_numbers: Vec::new(),
            compat: CompatCheck::None,
        }
        .with_raw_syscalls(module, facts)
    }

    /// The system call number of probe `probe` when it runs on the raw
    /// `sys_enter`/`sys_exit` tracepoint.
    pub fn syscall_number(&self, probe: usize) -> Option<u32> {
        self.syscall_numbers.get(probe).copied().flatten()
    }

    /// Numbers the `syscalls:` probes that can run on the raw tracepoints,
    /// when the script has at least [`RAW_SYSCALLS_FROM`] of them:
    /// on x86_64 (the pt_regs layout `emit` knows) with raw tracepoints,
    /// each event whose number the system call table knows, unless two
    /// events of the script would get the same number (a table that names
    /// a call differently from the kernel), and with the ia32 check where
    /// the kernel has ia32 emulation. Anything else keeps the classic event.
    fn with_raw_syscalls(mut self, module: &Module, facts: &dyn KernelFacts) -> EmitFacts {
        // Too few `syscalls:` probes: no need to ask the kernel anything.
        let syscall_probes = module
            .probes
            .iter()
            .filter(|probe| {
                matches!(&probe.kind, ProbeKind::Tracepoint { system, .. } if system == "syscalls")
            })
            .count();
        if syscall_probes < RAW_SYSCALLS_FROM {
            return self;
        }
        if facts.arch() != "x86_64" || !facts.mechanisms().raw_tracepoints {
            return self;
        }
        let numbers: Vec<Option<(u32, &str)>> = module
            .probes
            .iter()
            .map(|probe| match &probe.kind {
                ProbeKind::Tracepoint {
                    system,
                    name,
                    args: TracepointArgs::Classic(_),
                } if system == "syscalls"
                    // A kfunc needs a tracing program: that probe keeps
                    // the classic event's behaviour.
                    && !reaches_builtin(module, probe.function, KFUNC_BUILTINS) =>
                {
                    let call = name
                        .strip_prefix("sys_enter_")
                        .or_else(|| name.strip_prefix("sys_exit_"))?;
                    Some((facts.syscall_number(call)?, call))
                }
                _ => None,
            })
            .collect();
        // The raw route runs a program on every system call of the
        // machine, where the classic events filter by number before any
        // BPF runs; it pays off only in the time to close the links (about
        // 30 ms per classic event, serially, at exit). A few events stay
        // classic: bench/run measured a single raw `syscalls:` probe at
        // +60 ns per call of every process.
        if numbers.iter().flatten().count() < RAW_SYSCALLS_FROM {
            return self;
        }
        // Only now: reading the kernel config (/proc/config.gz, inflated)
        // costs about a millisecond of every start-up that has a
        // `syscalls:` probe at all.
        if facts.config("CONFIG_IA32_EMULATION").as_deref() == Some("y") {
            match compat_status(facts) {
                Some(offset) => self.compat = CompatCheck::Status(offset),
                None => return self,
            }
        }
        let ambiguous = |nr: u32, call: &str| {
            numbers
                .iter()
                .flatten()
                .any(|(other_nr, other)| *other_nr == nr && *other != call)
        };
        self.syscall_numbers = numbers
            .iter()
            .map(|n| {
                n.filter(|(nr, call)| !ambiguous(*nr, call))
                    .map(|(nr, _)| nr)
            })
            .collect();
        self
    }

    pub fn pointer_slots(&self, probe: usize) -> u64 {
        self.pointer_slots.get(probe).copied().unwrap_or(u64::MAX)
    }

    /// How raw tracepoint probe `probe` loads: as the command line says,
    /// or tp_btf when it needs a kfunc.
    pub fn tracepoint_mechanism(
        &self,
        probe: usize,
        asked: TracepointMechanism,
    ) -> TracepointMechanism {
        if self.tp_btf_for_kfuncs.get(probe) == Some(&true) {
            TracepointMechanism::TpBtf
        } else {
            asked
        }
    }
}

/// Fewest `syscalls:` probes in a script that take the raw route (see
/// `with_raw_syscalls`): below it, closing the classic events at exit costs
/// less than a program run on every system call of the machine.
const RAW_SYSCALLS_FROM: usize = 8;

/// The built-ins that call kfuncs.
const KFUNC_BUILTINS: &[&str] = &["pid2task", "pid2execname"];

/// Whether `function` or a function it calls (transitively) calls one of
/// the built-ins `names`.
fn reaches_builtin(module: &Module, function: FuncId, names: &[&str]) -> bool {
    let mut seen = vec![false; module.functions.len()];
    let mut pending = vec![function];
    while let Some(id) = pending.pop() {
        if std::mem::replace(&mut seen[id.0 as usize], true) {
            continue;
        }
        for inst in module.function(id).blocks.iter().flat_map(|b| &b.insts) {
            match &inst.op {
                Op::Builtin { name, .. } if names.contains(&name.as_str()) => return true,
                Op::Call { func, .. } => pending.push(*func),
                _ => {}
            }
        }
    }
    false
}

/// kprobe_multi links need kprobes, fprobe (`CONFIG_FPROBE`, which also
/// says the kernel is 5.18 or later: fprobe came with them) and BTF.
fn has_kprobe_multi(facts: &dyn KernelFacts) -> bool {
    facts.mechanisms().kprobes && facts.config("CONFIG_FPROBE").as_deref() == Some("y")
}

/// Slots whose BTF type is a pointer to anything but `void`: the verifier
/// types those as kernel objects (or rejects the load, for a pointer to a
/// pointer) in tracing programs. `void *` and integers load as numbers.
fn pointer_slots(kind: &ProbeKind, facts: &dyn KernelFacts) -> u64 {
    let (params, ret) = match kind {
        ProbeKind::Tracepoint {
            args: TracepointArgs::Raw(params),
            ..
        } => (params, None),
        ProbeKind::KernelFunction { proto, .. } => (&proto.params, proto.ret),
        _ => return u64::MAX,
    };
    let is_pointer = |ty| match facts.kind(ty) {
        TypeKind::Pointer(target) => !matches!(facts.kind(target), TypeKind::Void),
        _ => false,
    };
    let mut slots = 0u64;
    for (i, param) in params.iter().enumerate().take(63) {
        if is_pointer(param.ty) {
            slots |= 1 << i;
        }
    }
    // fexit's return value follows the arguments.
    if let Some(ret) = ret
        && params.len() < 63
        && is_pointer(ret)
    {
        slots |= 1 << params.len();
    }
    slots
}

/// Byte offsets of one pointer chain ending in a 4-byte integer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskChain {
    /// Offset of the pointer in `task_struct`.
    pub pointer: u32,
    /// Offset of the integer in the object it points to.
    pub value: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TaskLayout {
    /// `real_parent`, then `tgid` in the parent.
    pub ppid: Option<TaskChain>,
    /// `cred`, then `euid` (a `kuid_t`) in the credentials.
    pub euid: Option<TaskChain>,
    /// `mm`, then `arg_start` and `arg_end` in it (for `cmdline_args`).
    pub cmdline: Option<CmdlineLayout>,
    /// The kfuncs that find a task by pid (`pid2task`, `pid2execname`).
    pub pid_lookup: Option<PidLookup>,
    /// Offset of `comm` in `task_struct` (`pid2execname`).
    pub comm: Option<u32>,
}

/// BTF ids of `bpf_task_from_pid` (takes a reference on the task it finds)
/// and `bpf_task_release` (drops it): kfuncs of Linux 6.2 and later.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PidLookup {
    pub from_pid: u32,
    pub release: u32,
}

/// Byte offsets of the process's argument block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmdlineLayout {
    /// Offset of `mm` in `task_struct`.
    pub mm: u32,
    /// Offsets of `arg_start` and `arg_end` in `mm_struct`.
    pub arg_start: u32,
    pub arg_end: u32,
}

impl TaskLayout {
    /// The offsets and kfuncs the kernel probes of `module` need; `Default`
    /// (none) when no kernel probe calls a built-in that reads them.
    pub fn for_module(module: &Module, facts: &dyn KernelFacts) -> TaskLayout {
        let used = |wanted: &str| {
            module
                .functions
                .iter()
                .filter(|f| f.side == Placement::Kernel)
                .flat_map(|f| &f.blocks)
                .flat_map(|b| &b.insts)
                .any(|inst| matches!(&inst.op, Op::Builtin { name, .. } if name == wanted))
        };
        let mut layout = TaskLayout::default();
        if used("ppid") {
            layout.ppid = chain(facts, "real_parent", "struct task_struct", &["tgid"]);
        }
        if used("euid") {
            layout.euid = chain(facts, "cred", "struct cred", &["euid", "val"]);
        }
        if used("cmdline_args") {
            layout.cmdline = cmdline(facts);
        }
        if used("pid2task") || used("pid2execname") {
            layout.pid_lookup = facts
                .kfunc("bpf_task_from_pid")
                .zip(facts.kfunc("bpf_task_release"))
                .map(|(from_pid, release)| PidLookup { from_pid, release });
        }
        if used("pid2execname") {
            layout.comm = facts
                .find_type("struct task_struct")
                .ok()
                .flatten()
                .and_then(|task| kernel::find_member(facts, task, "comm"))
                .filter(|comm| comm.bit_offset % 8 == 0)
                .map(|comm| comm.bit_offset / 8);
        }
        layout
    }
}

/// `task_struct.POINTER` and the offset of `path` (members, nested) inside
/// `target`, all from BTF; `None` when the kernel lacks any of them or a
/// field is not where a 4-byte read can take it.
fn chain(facts: &dyn KernelFacts, pointer: &str, target: &str, path: &[&str]) -> Option<TaskChain> {
    let task = facts.find_type("struct task_struct").ok()??;
    let field = kernel::find_member(facts, task, pointer)?;
    if field.bit_offset % 8 != 0 || !matches!(facts.kind(field.ty), TypeKind::Pointer(_)) {
        return None;
    }
    let mut ty = facts.find_type(target).ok()??;
    let mut bits = 0;
    for name in path {
        let member = kernel::find_member(facts, ty, name)?;
        bits += member.bit_offset;
        ty = member.ty;
    }
    let four_bytes = matches!(facts.kind(ty), TypeKind::Int { bytes: 4, .. });
    (bits % 8 == 0 && four_bytes).then_some(TaskChain {
        pointer: field.bit_offset / 8,
        value: bits / 8,
    })
}

/// The offset of `thread_info.status` (4 bytes) in `task_struct`, whose
/// first member is the `thread_info` on x86_64.
fn compat_status(facts: &dyn KernelFacts) -> Option<u32> {
    let task = facts.find_type("struct task_struct").ok()??;
    let info = kernel::find_member(facts, task, "thread_info")?;
    let status = kernel::find_member(facts, info.ty, "status")?;
    let bits = info.bit_offset + status.bit_offset;
    let four_bytes = matches!(facts.kind(status.ty), TypeKind::Int { bytes: 4, .. });
    (bits % 8 == 0 && four_bytes).then_some(bits / 8)
}

/// `task_struct.mm` and the 8-byte `arg_start`/`arg_end` of `mm_struct`.
fn cmdline(facts: &dyn KernelFacts) -> Option<CmdlineLayout> {
    let task = facts.find_type("struct task_struct").ok()??;
    let mm = kernel::find_member(facts, task, "mm")?;
    let mm_struct = facts.find_type("struct mm_struct").ok()??;
    let start = kernel::find_member(facts, mm_struct, "arg_start")?;
    let end = kernel::find_member(facts, mm_struct, "arg_end")?;
    let aligned = [mm.bit_offset, start.bit_offset, end.bit_offset]
        .iter()
        .all(|bits| bits % 8 == 0);
    aligned.then_some(CmdlineLayout {
        mm: mm.bit_offset / 8,
        arg_start: start.bit_offset / 8,
        arg_end: end.bit_offset / 8,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::FakeKernel;

    #[test]
    fn ppid_chain_comes_from_btf_offsets() {
        let facts = FakeKernel::new();
        let ppid = chain(&facts, "real_parent", "struct task_struct", &["tgid"]);
        assert_eq!(
            ppid,
            Some(TaskChain {
                pointer: 1280,
                value: 1268
            })
        );
        // A type the kernel lacks gives no chain, never a guess.
        assert_eq!(
            chain(&facts, "cred", "struct no_such_cred", &["euid"]),
            None
        );
    }

    #[test]
    fn only_non_void_pointer_slots_are_marked() {
        let facts = FakeKernel::new();
        let tp = facts.tracepoint(Some("skb"), "kfree_skb").unwrap().unwrap();
        let kind = ProbeKind::Tracepoint {
            system: tp.system,
            name: tp.name,
            args: tp.args,
        };
        // skb and rx_sk are struct pointers; location is `void *`, reason
        // an enum.
        assert_eq!(pointer_slots(&kind, &facts), 0b1001);
        assert_eq!(pointer_slots(&ProbeKind::TimerProfile, &facts), u64::MAX);
    }
}
