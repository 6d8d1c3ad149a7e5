//! Attaching loaded programs to their events, one small function per
//! [`AttachKind`]. Everything is owned by file descriptors (links and perf
//! events): no bpffs pins, no tracefs `kprobe_events`/`uprobe_events`
//! writes, so a killed stap-rs leaves nothing behind.

use std::fmt;
use std::fs;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

use stap_lang::bpf::{AttachKind, MapRole, Object, PerfChain};

use crate::load::Loaded;
use crate::sys::{self, PerfEvent};
use crate::tracefs::Tracefs;
use crate::uprobe;

mod early;
mod handoff;

pub use early::{UprobePoint, open_uprobes};

const EVENT_SOURCES: &str = "/sys/bus/event_source/devices";

/// Attached programs. Dropping it detaches everything (closing the link
/// and perf event fds).
#[derive(Debug, Default)]
pub struct Attached {
    /// Per program: the fds keeping it attached.
    attachments: Vec<Attachment>,
    /// What became of each multi-function kprobe program (`-v` prints it).
    pub function_sets: Vec<FunctionSet>,
    /// The sampling events, attached but not yet counting: the session
    /// takes them and switches them on and off together.
    pub sampling: SamplingEvents,
}

/// Sampling perf events (`perf.*`, `timer.profile`), attached but not
/// counting until the session switches them on. stap's probes go live
/// together and stop together at `exit()`: an event enabled at its own
/// attach would count from its own moment. So every event is opened
/// disabled and the session enables them all in one tight loop.
///
/// They are not one perf group, though one kernel call could switch a
/// group on: from Linux 6.16 the kernel throttles a group as a whole
/// when any member takes more samples in one tick than
/// `perf_event_max_sample_rate / HZ`, and restarts it only at the CPU's
/// next tick. On an idle CPU (no tick under NO_HZ) a 1 ms event passes
/// that limit within half a second, so its one-second neighbours in the
/// group stopped too, for as long as the CPU slept: perf1.stp's `p1 == 5`
/// failed on a quiet host. (`perf record` of the group {cpu-clock every
/// 10 us, cpu-clock every 1 s} on this host's 6.18: no sample of the
/// slow event in 5.5 s, two runs; the two ungrouped: 4.) Probes whose
/// events are identical share one event instead (`p2 == p4`), which
/// throttling cannot split. Closing the fds detaches them.
#[derive(Debug, Default)]
pub struct SamplingEvents {
    events: Vec<OwnedFd>,
}

impl SamplingEvents {
    /// Starts every event counting.
    pub fn enable(&self) -> io::Result<()> {
        self.events
            .iter()
            .try_for_each(|fd| sys::perf_event_enable(fd.as_fd()))
    }

    /// Stops every event: called after the kernel handlers are switched
    /// off, so nothing samples while end probes run and the events are
    /// closed. A failure here changes nothing the script sees, so it is
    /// ignored.
    pub fn disable(&self) {
        for fd in &self.events {
            let _ = sys::perf_event_disable(fd.as_fd());
        }
    }

    fn len(&self) -> usize {
        self.events.len()
    }

    /// Opens `event` for `prog` on the CPUs its probe samples, not yet
    /// counting.
    fn open(&mut self, prog: BorrowedFd, event: &PerfEvent, every_cpu: bool) -> Result<(), String> {
        let fds = perf_event(prog, event, every_cpu, Switch::Later)?;
        self.events.extend(fds);
        Ok(())
    }
}

/// One program attached to many kernel functions.
#[derive(Debug, Default)]
pub struct FunctionSet {
    /// Index into `Object::programs`.
    pub program: usize,
    /// The probe point, in script syntax.
    pub probe: String,
    /// "kprobe_multi" or "kprobes".
    pub mechanism: &'static str,
    pub attached: usize,
    /// Functions the kernel would not probe, with its reason.
    pub skipped: Vec<(String, String)>,
}

#[derive(Debug)]
struct Attachment {
    /// A duplicate of the program fd, for run statistics.
    program: OwnedFd,
    /// Links or perf event fds.
    fds: Vec<OwnedFd>,
    /// A kprobe's perf-event link, whose info counts the kprobe's misses.
    kprobe_link: Option<OwnedFd>,
}

impl Attached {
    /// Events whose handler did not run, stap's "skipped probes": BPF
    /// recursion misses (a program already running on that CPU) summed over
    /// every program, plus kprobe misses (a kprobe hit while another kprobe
    /// ran on that CPU). The kernel reports kprobe misses through the
    /// perf-event link's info from Linux 6.7; before that they cannot be
    /// read for a perf-event kprobe and are not counted.
    pub fn skipped(&self) -> u64 {
        // By program id: probes with identical bodies share one program
        // (load.rs), whose misses count once.
        let recursion: u64 = self
            .attachments
            .iter()
            .filter_map(|a| sys::prog_info(a.program.as_fd()).ok())
            .map(|info| (info.id, info.recursion_misses))
            .collect::<std::collections::BTreeMap<_, _>>()
            .into_values()
            .sum();
        let kprobe: u64 = self
            .attachments
            .iter()
            .filter_map(|a| a.kprobe_link.as_ref())
            .filter_map(|link| sys::kprobe_link_missed(link.as_fd()).ok().flatten())
            .sum();
        recursion + kprobe
    }

    /// The number of kernel attachments (links and perf events) held.
    pub fn attachment_count(&self) -> usize {
        let links: usize = self.attachments.iter().map(|a| a.fds.len()).sum();
        links + self.sampling.len()
    }
}

impl Attached {
    /// Detaches everything without waiting for the kernel: the last closes
    /// are left to helper processes ([`handoff`]), for a run whose handlers
    /// are off and whose output is out. Closes here if no helper starts.
    pub fn detach_in_background(mut self) {
        let fds = self.take_fds();
        if let Err(fds) = handoff::close_later(fds) {
            close_in_parallel(fds);
        }
    }

    /// The fds whose closing detaches a program: links, perf events and
    /// kprobes' perf-event links.
    fn take_fds(&mut self) -> Vec<OwnedFd> {
        self.attachments
            .drain(..)
            .flat_map(|a| a.fds.into_iter().chain(a.kprobe_link))
            .collect()
    }
}

impl Drop for Attached {
    fn drop(&mut self) {
        let fds = self.take_fds();
        close_in_parallel(fds);
    }
}

/// Closing waits for an RCU grace period per classic tracepoint perf event
/// (50-85 ms each here); closing from several threads lets those waits
/// overlap instead of adding up.
fn close_in_parallel(mut fds: Vec<OwnedFd>) {
    if fds.len() <= 1 {
        return;
    }
    let threads = fds.len().min(MAX_CLOSE_THREADS);
    let per_thread = fds.len().div_ceil(threads);
    std::thread::scope(|scope| {
        while !fds.is_empty() {
            let chunk: Vec<OwnedFd> = fds.drain(..per_thread.min(fds.len())).collect();
            // If no thread can be spawned the chunk is closed right here.
            let spawned = std::thread::Builder::new().spawn_scoped(scope, move || drop(chunk));
            drop(spawned);
        }
    });
}

const MAX_CLOSE_THREADS: usize = 16;

/// Why a probe could not be attached.
#[derive(Debug)]
pub struct AttachError {
    /// Index into `Object::programs`.
    pub program: usize,
    /// The probe point, in script syntax.
    pub probe: String,
    pub reason: String,
}

impl fmt::Display for AttachError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot attach probe {}: {}", self.probe, self.reason)
    }
}

impl std::error::Error for AttachError {}

/// Attaches every program of `object`; on an error, what was attached so
/// far is detached again.
pub fn attach(object: &Object, loaded: &Loaded) -> Result<Attached, AttachError> {
    let attached = attach_points(object, loaded);
    early::discard_unused();
    attached
}

fn attach_points(object: &Object, loaded: &Loaded) -> Result<Attached, AttachError> {
    let mut attached = Attached::default();
    let dispatched = [false, true].map(|exit| dispatched_syscalls(object, exit));
    for index in attach_order(object) {
        let (program, fd) = (&object.programs[index], &loaded.programs[index]);
        let error = |reason: String| AttachError {
            program: index,
            probe: program.attach.point_text(),
            reason,
        };
        let in_dispatcher = dispatched.iter().flatten().any(|(at, _)| *at == index);
        let (fds, kprobe_link) = match &program.attach {
            // Attached below, through its direction's dispatcher.
            AttachKind::Syscall { .. } if in_dispatcher => (Vec::new(), None),
            AttachKind::Kprobes {
                functions,
                is_return,
                multi,
                cookies,
            } => {
                let (fds, set) = kprobe_set(fd.as_fd(), functions, cookies, *is_return, *multi)
                    .map_err(error)?;
                attached.function_sets.push(FunctionSet {
                    program: index,
                    probe: program.attach.point_text(),
                    ..set
                });
                (fds, None)
            }
            AttachKind::Kprobe {
                function,
                offset,
                is_return,
            } => kprobe(fd.as_fd(), function, *offset, *is_return, None)
                .map(|(event, link)| (vec![event], link))
                .map_err(error)?,
            AttachKind::PerfEvent {
                chain: PerfChain {
                    slot: Some(slot), ..
                },
                ..
            } => (
                perf_chained(object, &loaded.maps, *slot, fd.as_fd()).map_err(error)?,
                None,
            ),
            AttachKind::PerfEvent {
                perf_type,
                config,
                sample_period,
                frequency,
                every_cpu,
                ..
            } => {
                let event = sampling_event(*perf_type, *config, *sample_period, *frequency);
                (attached.sampling)
                    .open(fd.as_fd(), &event, *every_cpu)
                    .map_err(error)?;
                (Vec::new(), None)
            }
            other => (attach_one(other, fd.as_fd()).map_err(error)?, None),
        };
        let program = fd.try_clone().map_err(|e| AttachError {
            program: index,
            probe: program.attach.point_text(),
            reason: format!("duplicating the program fd: {e}"),
        })?;
        attached.attachments.push(Attachment {
            program,
            fds,
            kprobe_link,
        });
    }
    for (exit, members) in [false, true].into_iter().zip(&dispatched) {
        if members.is_empty() {
            continue;
        }
        let first = members[0].0;
        let dispatcher =
            syscall_dispatcher(exit, members, loaded).map_err(|reason| AttachError {
                program: first,
                probe: object.programs[first].attach.point_text(),
                reason,
            })?;
        attached.attachments.push(dispatcher);
    }
    // Back in script order, for `-v`.
    attached.function_sets.sort_by_key(|set| set.program);
    Ok(attached)
}

/// The raw tracepoint that `syscalls:sys_enter_*` (or `sys_exit_*`) events
/// hang off.
fn syscall_tracepoint(exit: bool) -> &'static str {
    if exit { "sys_exit" } else { "sys_enter" }
}

/// The system call programs of one direction that go behind its
/// dispatcher, with the numbers each takes: in script order, each program
/// whose numbers are all still free. A program sharing a number with an
/// earlier one attaches on its own (it checks the number itself). Empty
/// when the direction has fewer than two programs: one attaches directly.
fn dispatched_syscalls(object: &Object, exit: bool) -> Vec<(usize, Vec<u32>)> {
    let programs: Vec<(usize, Vec<u32>)> = object
        .programs
        .iter()
        .enumerate()
        .filter_map(|(index, program)| match &program.attach {
            AttachKind::Syscall { exit: e, events } if *e == exit => {
                Some((index, events.iter().map(|(nr, _)| *nr).collect()))
            }
            _ => None,
        })
        .collect();
    if programs.len() < 2 {
        return Vec::new();
    }
    let mut taken = std::collections::HashSet::new();
    programs
        .into_iter()
        .filter(|(_, numbers)| {
            let free = numbers.iter().all(|nr| !taken.contains(nr));
            if free {
                taken.extend(numbers.iter().copied());
            }
            free
        })
        .collect()
}

/// Loads the dispatcher of one direction (`stap_lang::bpf::dispatch`),
/// fills its program array with `members` at their numbers, and attaches
/// it. The attachment holds the link and the array: the kernel empties a
/// program array once no file descriptor refers to it.
fn syscall_dispatcher(
    exit: bool,
    members: &[(usize, Vec<u32>)],
    loaded: &Loaded,
) -> Result<Attachment, String> {
    use stap_lang::bpf::{MapRole, MapSpec, dispatch};
    use std::os::fd::AsRawFd;
    let slots = members
        .iter()
        .flat_map(|(_, numbers)| numbers)
        .max()
        .map_or(1, |nr| nr + 1);
    let table = sys::map_create(&MapSpec {
        name: format!("stap_{}", syscall_tracepoint(exit).replace('_', "")),
        map_type: dispatch::MAP_PROG_ARRAY,
        key_size: 4,
        value_size: 4,
        max_entries: slots,
        flags: 0,
        // The runtime's own map: the role is read only by the loader.
        role: MapRole::Control,
    })
    .map_err(|e| format!("creating the system call program array: {}", os_error(&e)))?;
    for (index, numbers) in members {
        let prog = loaded.programs[*index].as_raw_fd() as u32;
        for nr in numbers {
            sys::map_update(table.as_fd(), &nr.to_ne_bytes(), &prog.to_ne_bytes(), 0)
                .map_err(|e| format!("filling the system call program array: {}", os_error(&e)))?;
        }
    }
    let (mut insns, map_at) = dispatch::dispatcher(exit);
    insns[map_at] |= u64::from(table.as_raw_fd() as u32) << 32;
    let name = format!("stap_{}", syscall_tracepoint(exit));
    let program = sys::prog_load(
        &sys::ProgLoad {
            prog_type: stap_lang::bpf::attach::BPF_PROG_TYPE_RAW_TRACEPOINT,
            expected_attach_type: 0,
            name: &name,
            insns: &insns,
            attach_btf_id: 0,
            attach_btf_obj: None,
        },
        None,
    )
    .map_err(|e| format!("loading the system call dispatcher: {}", os_error(&e)))?;
    let link = raw_tracepoint(program.as_fd(), syscall_tracepoint(exit))?;
    Ok(Attachment {
        program,
        fds: vec![link, table],
        kprobe_link: None,
    })
}

/// The order programs are attached in, so that probes on one function
/// nest as stap's do: at the entry the handlers run in script order, at the
/// return in the reverse (para-callgraph.stp's trigger probe encloses the
/// trigger function's own traced call and return).
///
/// What the kernel runs first, per mechanism (the compiler gives every
/// handler on one function the same mechanism):
/// - kprobes: one aggregate kprobe per address, each new kprobe added at
///   the head of its list, so entry handlers run newest first; a
///   kretprobe's entry half pushes its return instance in that pass and
///   the return trampoline pops the last pushed first, so return handlers
///   run oldest first. Both go on in reverse script order.
/// - fentry/fexit: one trampoline per function, each new program added at
///   the head of its kind's list, so both run newest first: fentry goes on
///   in reverse script order, fexit in script order.
///
/// Measured in the 6.12 guest: four probes on `tcp_sendmsg` printed
/// `A call, B call, B return, A return`, and para-callgraph.stp printed
/// `tcp_sendmsg`'s own entry and return (docs/callgraph.md).
fn attach_order(object: &Object) -> Vec<usize> {
    let newest_first = |i: &usize| match object.programs[*i].attach {
        AttachKind::Kprobe { .. } | AttachKind::Kprobes { .. } => true,
        AttachKind::Fentry { is_return, .. } => !is_return,
        _ => false,
    };
    let all = 0..object.programs.len();
    let mut order: Vec<usize> = all.clone().filter(|i| !newest_first(i)).collect();
    order.extend(all.rev().filter(newest_first));
    order
}

/// Puts a program that runs from another probe's perf event
/// ([`PerfChain`]) at its `slot` of the object's chain map (`maps`, by
/// `Object::maps` index). The returned fd, a duplicate of the map's, keeps
/// it there: the kernel empties a program array when its last user fd
/// closes, so the chain lasts as long as this attachment.
pub fn perf_chained(
    object: &Object,
    maps: &[OwnedFd],
    slot: u32,
    prog: BorrowedFd,
) -> Result<Vec<OwnedFd>, String> {
    use std::os::fd::AsRawFd;
    let chain = object
        .maps
        .iter()
        .position(|spec| spec.role == MapRole::PerfChain)
        .and_then(|at| maps.get(at))
        .ok_or("the object has no perf chain map")?;
    let prog = prog.as_raw_fd() as u32;
    sys::map_update(chain.as_fd(), &slot.to_ne_bytes(), &prog.to_ne_bytes(), 0)
        .map_err(|e| format!("joining the shared perf event: {}", os_error(&e)))?;
    let keep = chain
        .try_clone()
        .map_err(|e| format!("duplicating the perf chain map fd: {e}"))?;
    Ok(vec![keep])
}

/// Attaches one loaded program; closing the returned fds detaches it.
pub fn attach_one(kind: &AttachKind, prog: BorrowedFd) -> Result<Vec<OwnedFd>, String> {
    match kind {
        AttachKind::RawTracepoint { name } => raw_tracepoint(prog, name).map(|fd| vec![fd]),
        AttachKind::Syscall { exit, .. } => {
            raw_tracepoint(prog, syscall_tracepoint(*exit)).map(|fd| vec![fd])
        }
        AttachKind::TpBtf { name } => tp_btf(prog, name).map(|fd| vec![fd]),
        AttachKind::Tracepoint { system, name } => {
            tracepoint(prog, system, name).map(|fd| vec![fd])
        }
        AttachKind::PerfEvent {
            perf_type,
            config,
            sample_period,
            frequency,
            every_cpu,
            ..
        } => {
            let event = sampling_event(*perf_type, *config, *sample_period, *frequency);
            perf_event(prog, &event, *every_cpu, Switch::Now)
        }
        AttachKind::Kprobe {
            function,
            offset,
            is_return,
        } => kprobe(prog, function, *offset, *is_return, None).map(|(event, link)| {
            let mut fds = vec![event];
            fds.extend(link);
            fds
        }),
        AttachKind::Kprobes {
            functions,
            is_return,
            multi,
            cookies,
        } => kprobe_set(prog, functions, cookies, *is_return, *multi).map(|(fds, _)| fds),
        AttachKind::Fentry { function, .. } => fentry(prog, function).map(|fd| vec![fd]),
        AttachKind::Lsm { hook } => lsm(prog, hook).map(|fd| vec![fd]),
        AttachKind::Uprobe {
            path,
            function,
            is_return,
        } if function.contains(['*', '?']) => uprobes(prog, Path::new(path), function, *is_return),
        AttachKind::Uprobe {
            path,
            function,
            is_return,
        } => uprobe(prog, Path::new(path), function, *is_return).map(|fd| vec![fd]),
        AttachKind::Marker { path, sites, .. } => marker(prog, Path::new(path), sites),
        AttachKind::Plt {
            path,
            name,
            offset,
            is_return,
        } => {
            let what = format!("uprobe on the PLT stub of {name} in {path}");
            uprobe_at(prog, Path::new(path), *offset, *is_return, &what).map(|fd| vec![fd])
        }
        AttachKind::Netfilter {
            pf,
            hooknum,
            priority,
        } => netfilter(prog, *pf, *hooknum, *priority).map(|fd| vec![fd]),
    }
}

/// How many priorities after the asked one a netfilter probe may move to.
const NETFILTER_PRIORITY_STEPS: i32 = 64;

/// A netfilter link in this process's network namespace; closing it
/// unregisters the hook. The kernel allows one BPF program per hook and
/// priority (EBUSY), so a second probe on the same point takes the next
/// free priority: observers do not care about their order.
fn netfilter(prog: BorrowedFd, pf: u32, hooknum: u32, priority: i32) -> Result<OwnedFd, String> {
    let mut error = None;
    for step in 0..NETFILTER_PRIORITY_STEPS {
        // INT_MAX is reserved by the kernel.
        let Some(p) = priority.checked_add(step).filter(|p| *p != i32::MAX) else {
            break;
        };
        match sys::link_create_netfilter(prog, pf, hooknum, p) {
            Ok(fd) => return Ok(fd),
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => error = Some(e),
            Err(e) => {
                error = Some(e);
                break;
            }
        }
    }
    let e = error.unwrap_or_else(|| io::Error::from_raw_os_error(libc::EBUSY));
    let hint = match e.raw_os_error() {
        Some(libc::EINVAL) => " (no such hook, or a reserved priority)",
        Some(libc::EBUSY) => " (BPF programs hold this priority and the ones after it)",
        _ => "",
    };
    Err(format!(
        "BPF_LINK_CREATE netfilter pf {pf} hook {hooknum} priority {priority}: {}{hint}",
        os_error(&e)
    ))
}

/// "Operation not permitted (os error 1)" → "Operation not permitted (EPERM)".
fn os_error(error: &io::Error) -> String {
    let text = error.to_string();
    let text = text.split(" (os error").next().unwrap_or_default();
    format!("{text} ({})", sys::errno_name(error))
}

fn raw_tracepoint(prog: BorrowedFd, name: &str) -> Result<OwnedFd, String> {
    sys::raw_tracepoint_open(prog, Some(name)).map_err(|e| match e.raw_os_error() {
        Some(libc::ENOENT) => format!("the kernel has no raw tracepoint {name}"),
        _ => format!("BPF_RAW_TRACEPOINT_OPEN {name}: {}", os_error(&e)),
    })
}

/// tp_btf: the tracepoint was fixed at load time (attach_btf_id of
/// `btf_trace_NAME`), so the link needs no name.
fn tp_btf(prog: BorrowedFd, name: &str) -> Result<OwnedFd, String> {
    sys::raw_tracepoint_open(prog, None)
        .map_err(|e| format!("attaching tp_btf {name}: {}", os_error(&e)))
}

/// A classic tracepoint: one perf event (the program runs for hits on every
/// CPU: it hangs off the tracepoint, not the event), pid -1 and CPU 0.
fn tracepoint(prog: BorrowedFd, system: &str, name: &str) -> Result<OwnedFd, String> {
    let id = tracepoint_id(system, name)?;
    let event = PerfEvent {
        perf_type: sys::PERF_TYPE_TRACEPOINT,
        config: id,
        sample_period: 1,
        ..PerfEvent::default()
    };
    open_and_attach(
        prog,
        &event,
        0,
        &format!("tracepoint {system}:{name}"),
        Switch::Now,
    )
}

fn tracepoint_id(system: &str, name: &str) -> Result<u64, String> {
    let plain = |s: &str| !s.is_empty() && !s.contains('/') && s != "." && s != "..";
    if !plain(system) || !plain(name) {
        return Err(format!("{system}:{name} is not a tracepoint name"));
    }
    let tracefs = Tracefs::find().map_err(|e| e.to_string())?;
    let path = tracefs
        .root()
        .join("events")
        .join(system)
        .join(name)
        .join("id");
    let text = fs::read_to_string(&path)
        .map_err(|e| format!("no tracepoint {system}:{name} ({}: {e})", path.display()))?;
    text.trim()
        .parse()
        .map_err(|_| format!("{}: not a number: {text:?}", path.display()))
}

/// When a perf event starts counting: at once, or when the session
/// switches on every [`SamplingEvents`] together.
#[derive(Clone, Copy, PartialEq)]
enum Switch {
    Now,
    Later,
}

/// Opens `event` (pid -1 on `cpu`), runs `prog` on it and, for
/// [`Switch::Now`], enables it.
fn open_and_attach(
    prog: BorrowedFd,
    event: &PerfEvent,
    cpu: u32,
    what: &str,
    switch: Switch,
) -> Result<OwnedFd, String> {
    let fd = sys::perf_event_open(event, -1, cpu as i32)
        .map_err(|e| format!("perf_event_open for {what} on CPU {cpu}: {}", os_error(&e)))?;
    run_on(fd, prog, what, switch)
}

/// Runs `prog` on the opened (disabled) perf event `fd` and, for
/// [`Switch::Now`], enables it.
fn run_on(fd: OwnedFd, prog: BorrowedFd, what: &str, switch: Switch) -> Result<OwnedFd, String> {
    sys::perf_event_set_bpf(fd.as_fd(), prog)
        .map_err(|e| format!("attaching the program to {what}: {}", os_error(&e)))?;
    if switch == Switch::Now {
        sys::perf_event_enable(fd.as_fd())
            .map_err(|e| format!("enabling {what}: {}", os_error(&e)))?;
    }
    Ok(fd)
}

/// A sampling event (timer.profile, perf.*): every `sample_period` events
/// (ns for the clock events), or `sample_period` times a second.
fn sampling_event(perf_type: u32, config: u64, sample_period: u64, frequency: bool) -> PerfEvent {
    PerfEvent {
        perf_type,
        config,
        sample_period: sample_period.max(1),
        sample_freq: frequency.then_some(sample_period.max(1)),
        ..PerfEvent::default()
    }
}

/// A sampling event on every online CPU, or on the first.
fn perf_event(
    prog: BorrowedFd,
    event: &PerfEvent,
    every_cpu: bool,
    switch: Switch,
) -> Result<Vec<OwnedFd>, String> {
    let cpus = match every_cpu {
        true => online_cpus()?,
        false => vec![first_cpu()?],
    };
    let what = perf_event_name(event);
    cpus.into_iter()
        .map(|cpu| open_and_attach(prog, event, cpu, &what, switch))
        .collect()
}

fn perf_event_name(event: &PerfEvent) -> String {
    format!(
        "perf event type {} config {}",
        event.perf_type, event.config
    )
}

fn online_cpus() -> Result<Vec<u32>, String> {
    sys::online_cpus().map_err(|e| format!("reading the online CPUs: {e}"))
}

/// The CPU that one-CPU perf probes sample: the first online one (CPU 0
/// unless it was taken offline), as stap's BPF backend picks it.
fn first_cpu() -> Result<u32, String> {
    online_cpus()?
        .into_iter()
        .min()
        .ok_or_else(|| "no CPU is online".to_string())
}

/// A dynamic PMU (`kprobe`, `uprobe`): its type and the config bit that
/// makes a return probe.
fn probe_pmu(name: &str) -> io::Result<(u32, u64)> {
    let dir = Path::new(EVENT_SOURCES).join(name);
    let perf_type = fs::read_to_string(dir.join("type"))?
        .trim()
        .parse()
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "bad PMU type"))?;
    // "config:0" → bit 0 of config.
    let retprobe_bit = fs::read_to_string(dir.join("format/retprobe"))
        .ok()
        .and_then(|text| text.trim().strip_prefix("config:")?.parse::<u32>().ok())
        .filter(|bit| *bit < 64)
        .unwrap_or(0);
    Ok((perf_type, 1 << retprobe_bit))
}

/// A kprobe through the kprobe PMU. The program goes on through a BPF
/// perf-event link where the kernel has them (5.15), since the link's info
/// counts the kprobe's misses (6.7); else through the perf ioctl. A
/// `cookie` (the function's row of a shared program's table) needs the
/// link: the ioctl cannot carry one. Returns the perf event and the link.
fn kprobe(
    prog: BorrowedFd,
    function: &str,
    offset: u64,
    is_return: bool,
    cookie: Option<u64>,
) -> Result<(OwnedFd, Option<OwnedFd>), String> {
    let (perf_type, retprobe) = probe_pmu("kprobe").map_err(|_| {
        format!(
            "kprobes are not available: no kprobe PMU ({EVENT_SOURCES}/kprobe), \
             the kernel was built without CONFIG_KPROBES"
        )
    })?;
    let event = PerfEvent {
        perf_type,
        config: if is_return { retprobe } else { 0 },
        sample_period: 1,
        probe_name: Some(function.to_string()),
        probe_offset: offset,
        ..PerfEvent::default()
    };
    let what = if offset == 0 {
        format!("kprobe on {function}")
    } else {
        format!("kprobe on {function}+{offset:#x}")
    };
    let hint = |e: String| {
        if e.contains("ENOENT") || e.contains("EINVAL") || e.contains("EADDRNOTAVAIL") {
            format!("{e}; is {function} a traceable (non-inlined, non-notrace) kernel function?")
        } else {
            e
        }
    };
    let fd = sys::perf_event_open(&event, -1, 0).map_err(|e| {
        hint(format!(
            "perf_event_open for {what} on CPU 0: {}",
            os_error(&e)
        ))
    })?;
    let link = match sys::link_create_perf_event(prog, fd.as_fd(), cookie.unwrap_or(0)) {
        Ok(link) => Some(link),
        Err(e) if cookie.is_some() => {
            return Err(format!(
                "BPF_LINK_CREATE for {what} with a BPF cookie (Linux 5.15): {}",
                os_error(&e)
            ));
        }
        Err(_) => {
            sys::perf_event_set_bpf(fd.as_fd(), prog)
                .map_err(|e| format!("attaching the program to {what}: {}", os_error(&e)))?;
            None
        }
    };
    sys::perf_event_enable(fd.as_fd()).map_err(|e| format!("enabling {what}: {}", os_error(&e)))?;
    Ok((fd, link))
}

/// One program on many functions. Functions the kernel refuses (notrace,
/// inlined away, on the kprobe blacklist) are skipped and reported, not
/// fatal; it is an error only when none can be probed.
/// `cookies`, when not empty, gives each function its BPF cookie.
fn kprobe_set(
    prog: BorrowedFd,
    functions: &[String],
    cookies: &[u64],
    is_return: bool,
    multi: bool,
) -> Result<(Vec<OwnedFd>, FunctionSet), String> {
    let mut set = FunctionSet::default();
    let mut fds = Vec::new();
    let cookie = |at: usize| cookies.get(at).copied();
    if multi {
        set.mechanism = "kprobe_multi";
        // Pass 2 already left out what ftrace cannot hook (the kernel
        // facts' traceable functions); what the kernel still refuses is
        // found by halving.
        let wanted: Vec<(&str, u64)> = functions
            .iter()
            .enumerate()
            .map(|(at, f)| (f.as_str(), cookie(at).unwrap_or(0)))
            .collect();
        kprobe_multi_links(prog, &wanted, is_return, &mut fds, &mut set);
    } else {
        set.mechanism = "kprobes";
        for (at, function) in functions.iter().enumerate() {
            match kprobe(prog, function, 0, is_return, cookie(at)) {
                Ok((event, link)) => {
                    fds.push(event);
                    fds.extend(link);
                    set.attached += 1;
                }
                Err(reason) => set.skipped.push((function.clone(), reason)),
            }
        }
    }
    if set.attached == 0 {
        let first = set
            .skipped
            .first()
            .map_or(String::new(), |(f, why)| format!(": {f}: {why}"));
        return Err(format!(
            "none of the {} functions could be probed{first}",
            functions.len()
        ));
    }
    Ok((fds, set))
}

/// kprobe_multi links over `functions`. The kernel refuses a whole link
/// for one bad symbol, so a refused list is halved until the bad ones are
/// alone: a handful of extra links, never one per function.
fn kprobe_multi_links(
    prog: BorrowedFd,
    functions: &[(&str, u64)],
    is_return: bool,
    fds: &mut Vec<OwnedFd>,
    set: &mut FunctionSet,
) {
    if functions.is_empty() {
        return;
    }
    let (symbols, cookies): (Vec<std::ffi::CString>, Vec<u64>) = functions
        .iter()
        .filter_map(|(f, cookie)| Some((std::ffi::CString::new(*f).ok()?, *cookie)))
        .unzip();
    match sys::link_create_kprobe_multi(prog, &symbols, &cookies, is_return) {
        Ok(link) => {
            fds.push(link);
            set.attached += functions.len();
        }
        Err(e) if functions.len() == 1 => set.skipped.push((
            functions[0].0.to_string(),
            format!("kprobe_multi: {}", os_error(&e)),
        )),
        Err(_) => {
            let (left, right) = functions.split_at(functions.len() / 2);
            kprobe_multi_links(prog, left, is_return, fds, set);
            kprobe_multi_links(prog, right, is_return, fds, set);
        }
    }
}

/// fentry/fexit: the target was fixed at load time (attach_btf_id).
fn fentry(prog: BorrowedFd, function: &str) -> Result<OwnedFd, String> {
    sys::raw_tracepoint_open(prog, None).map_err(|e| match e.raw_os_error() {
        Some(libc::EPERM) => format!(
            "the kernel refused a BPF trampoline on {function} ({}): \
             lockdown or a kernel policy forbids fentry/fexit",
            os_error(&e)
        ),
        _ => format!("attaching to {function}: {}", os_error(&e)),
    })
}

/// A BPF LSM program goes on its hook's trampoline as fentry does; the
/// kernel refuses it where `bpf` is not an active LSM or trampolines are
/// forbidden.
fn lsm(prog: BorrowedFd, hook: &str) -> Result<OwnedFd, String> {
    sys::raw_tracepoint_open(prog, None).map_err(|e| match e.raw_os_error() {
        Some(libc::EPERM) => format!(
            "the kernel refused the BPF LSM program on hook {hook} ({}): it attaches \
             through a BPF trampoline, which lockdown or a kernel policy forbids here",
            os_error(&e)
        ),
        _ => format!(
            "attaching the BPF LSM program to hook {hook}: {} (`bpf` must be in the \
             active LSM list, /sys/kernel/security/lsm)",
            os_error(&e)
        ),
    })
}

fn uprobe(
    prog: BorrowedFd,
    path: &Path,
    function: &str,
    is_return: bool,
) -> Result<OwnedFd, String> {
    let what = format!("uprobe on {}:{function}", path.display());
    if let Some(fd) = early::take(path, function, is_return) {
        return run_on(fd, prog, &what, Switch::Now);
    }
    // `statement("FUNC@FILE:LINE")` names a source line, else a symbol.
    let offset = if crate::lines::is_line_spec(function) {
        crate::lines::statement_offset(path, function)?
    } else {
        uprobe::function_offset(path, function).map_err(|e| e.to_string())?
    };
    uprobe_at(prog, path, offset, is_return, &what)
}

/// A uprobe (or uretprobe) at file offset `offset` of `path`; `what`
/// names it in errors.
fn uprobe_at(
    prog: BorrowedFd,
    path: &Path,
    offset: u64,
    is_return: bool,
    what: &str,
) -> Result<OwnedFd, String> {
    let event = uprobe_event(path, offset, is_return)?;
    open_and_attach(prog, &event, 0, what, Switch::Now)
}

/// The perf event of a uprobe (or uretprobe) at file offset `offset` of
/// `path`.
fn uprobe_event(path: &Path, offset: u64, is_return: bool) -> Result<PerfEvent, String> {
    let (perf_type, retprobe) = probe_pmu("uprobe").map_err(|_| {
        format!(
            "uprobes are not available: no uprobe PMU ({EVENT_SOURCES}/uprobe), \
             the kernel was built without CONFIG_UPROBE_EVENTS"
        )
    })?;
    Ok(PerfEvent {
        perf_type,
        config: if is_return { retprobe } else { 0 },
        sample_period: 1,
        probe_name: Some(path.to_string_lossy().into_owned()),
        probe_offset: offset,
        ..PerfEvent::default()
    })
}

/// `process(...).function("PATTERN")`: one program on every function of
/// the binary whose symbol matches.
fn uprobes(
    prog: BorrowedFd,
    path: &Path,
    pattern: &str,
    is_return: bool,
) -> Result<Vec<OwnedFd>, String> {
    let (perf_type, retprobe) = probe_pmu("uprobe").map_err(|_| {
        format!(
            "uprobes are not available: no uprobe PMU ({EVENT_SOURCES}/uprobe), \
             the kernel was built without CONFIG_UPROBE_EVENTS"
        )
    })?;
    let functions = uprobe::matching_offsets(path, pattern).map_err(|e| e.to_string())?;
    functions
        .iter()
        .map(|(function, offset)| {
            let event = PerfEvent {
                perf_type,
                config: if is_return { retprobe } else { 0 },
                sample_period: 1,
                probe_name: Some(path.to_string_lossy().into_owned()),
                probe_offset: *offset,
                ..PerfEvent::default()
            };
            let what = format!("uprobe on {}:{function}", path.display());
            open_and_attach(prog, &event, 0, &what, Switch::Now)
        })
        .collect()
}

/// An SDT marker: a uprobe at each site. A site with a semaphore gets it
/// as the uprobe's reference counter (`ref_ctr_offset`, Linux 4.20), which
/// the kernel increments in every process that maps the file while the
/// probe is attached, so the program evaluates the marker's arguments.
fn marker(prog: BorrowedFd, path: &Path, sites: &[(u64, u64)]) -> Result<Vec<OwnedFd>, String> {
    let (perf_type, _) = probe_pmu("uprobe").map_err(|_| {
        format!(
            "uprobes are not available: no uprobe PMU ({EVENT_SOURCES}/uprobe), \
             the kernel was built without CONFIG_UPROBE_EVENTS"
        )
    })?;
    let ref_ctr_shift = pmu_format_shift("uprobe", "ref_ctr_offset");
    sites
        .iter()
        .map(|&(offset, semaphore)| {
            let config = match (semaphore, ref_ctr_shift) {
                (0, _) => 0,
                (semaphore, Some(shift)) => semaphore << shift,
                (_, None) => {
                    return Err(format!(
                        "the marker at {}+{offset:#x} has a semaphore, which this kernel's \
                         uprobes cannot set (no ref_ctr_offset, Linux 4.20)",
                        path.display()
                    ));
                }
            };
            let event = PerfEvent {
                perf_type,
                config,
                sample_period: 1,
                probe_name: Some(path.to_string_lossy().into_owned()),
                probe_offset: offset,
                ..PerfEvent::default()
            };
            let what = format!("uprobe on {}+{offset:#x}", path.display());
            open_and_attach(prog, &event, 0, &what, Switch::Now)
        })
        .collect()
}

/// The first bit of a PMU format field in `config` ("config:32-63" → 32).
fn pmu_format_shift(pmu: &str, field: &str) -> Option<u32> {
    let text = fs::read_to_string(
        Path::new(EVENT_SOURCES)
            .join(pmu)
            .join("format")
            .join(field),
    )
    .ok()?;
    let bits = text.trim().strip_prefix("config:")?;
    bits.split('-').next()?.parse().ok().filter(|bit| *bit < 64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_probe() {
        let error = AttachError {
            program: 0,
            probe: "kernel.function(\"tcp_v4_connect\")".into(),
            reason: "kprobes are not available".into(),
        };
        assert_eq!(
            error.to_string(),
            "cannot attach probe kernel.function(\"tcp_v4_connect\"): kprobes are not available"
        );
    }

    #[test]
    fn tracepoint_names_stay_inside_tracefs() {
        assert!(tracepoint_id("..", "x").is_err());
        assert!(tracepoint_id("a/b", "x").is_err());
    }

    #[test]
    fn os_errors_carry_the_errno_name() {
        let e = io::Error::from_raw_os_error(libc::EPERM);
        assert_eq!(os_error(&e), "Operation not permitted (EPERM)");
    }
}
