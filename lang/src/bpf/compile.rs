//! The backend's entry point: maps for the globals kernel code touches plus
//! the fixed maps (`maps.rs`), then one program per kernel-placed probe.

use hashbrown::HashMap;

use super::TracepointMechanism;
use super::btf::{BtfWriter, FuncInfo, INT_SIGNED, LineInfo, Linkage};
use super::bulk;
use super::dispatch::MAP_PROG_ARRAY;
use super::emit::{self, FormatsIndex, MapIndex};
use super::inline::inline_calls;
use super::layout;
use super::maps::*;
use super::regex;
use super::snprintf;
use super::{AttachKind, MapRole, MapSpec, Object, Options, PerfChain, Program};
use crate::diag::Diagnostic;
use crate::ir::{Function, Global, Inst, Module, Op, Reg, Storage, ValType, identity};
use crate::ir::{FunctionMechanism, GlobalId, Placement, ProbeKind, ProcessTarget};
use crate::kernel::TracepointArgs;
use crate::source::SourceMap;

/// `PERF_TYPE_SOFTWARE` / `PERF_COUNT_SW_CPU_CLOCK`, for `timer.profile`.
const PERF_TYPE_SOFTWARE: u32 = 1;
const PERF_COUNT_SW_CPU_CLOCK: u64 = 0;
/// `timer.profile` fires on every scheduler tick; sample the cpu clock at
/// 250 Hz (a common CONFIG_HZ), in nanoseconds.
const PROFILE_PERIOD_NS: u64 = 4_000_000;

/// `BPF_F_RDONLY_PROG`: programs may only read the map.
const BPF_F_RDONLY_PROG: u32 = 1 << 7;

/// Compiles every kernel-placed probe handler of `module` to BPF. The
/// program BTF has func_info but no line_info (no source text): use
/// [`compile_with_source`] when the script is at hand.
pub fn compile(module: &Module, options: &Options) -> Result<Object, Vec<Diagnostic>> {
    compile_in(module, options, None)
}

/// [`compile`], with line_info (file, line text, line and column) for
/// every instruction's script statement, so verifier logs quote the script.
pub fn compile_with_source(
    module: &Module,
    options: &Options,
    source: &SourceMap,
) -> Result<Object, Vec<Diagnostic>> {
    compile_in(module, options, Some(source))
}

fn compile_in(
    module: &Module,
    options: &Options,
    source: Option<&SourceMap>,
) -> Result<Object, Vec<Diagnostic>> {
    let mut diags = Vec::new();
    // Each handler with its script-function calls inlined.
    let mut handlers: Vec<(usize, Function)> = Vec::new();
    for (index, probe) in module.probes.iter().enumerate() {
        if probe.placement != Placement::Kernel {
            continue;
        }
        match inline_calls(module, module.function(probe.function)) {
            Ok(function) => handlers.push((index, function)),
            Err(diag) => diags.push(diag),
        }
    }
    let n = options.max_string_len.max(8);
    let mut maps = Vec::new();
    let mut globals = HashMap::new();
    for (id, global) in module.globals.iter().enumerate() {
        let id = GlobalId(id as u32);
        if global.kernel || touched_by_kernel(&handlers, id) {
            globals.insert(id.0, maps.len());
            maps.push(global_map(id, global, n));
        }
    }
    let fixed = |name: &str, map_type, key_size, value_size, max_entries, role| MapSpec {
        name: name.to_string(),
        map_type,
        key_size,
        value_size,
        max_entries,
        flags: 0,
        role,
    };
    // Before the format table: a shared program may gain symname() calls.
    let contended = contended_functions(module, &handlers);
    let mut shared = shared_kprobe_programs(
        module,
        &mut handlers,
        options.kernel.kprobe_multi,
        &contended,
    );
    shared_syscall_programs(module, &handlers, options, &mut shared);
    let mut formats = match format_table(module, &handlers, maps.len() + 4, &options.local_time) {
        Ok(formats) => formats,
        Err(mut errors) => {
            diags.append(&mut errors);
            None
        }
    };
    if let Some((index, data)) = &mut formats {
        bulk_rows(&handlers, &mut shared, index, data);
    }
    let mut index = MapIndex {
        globals,
        events: maps.len(),
        scratch: maps.len() + 1,
        counters: maps.len() + 2,
        control: maps.len() + 3,
        formats: formats.as_ref().map(|(index, _)| index.clone()),
        perf_chain: None,
    };
    maps.push(events_map(options.cpus, kernel_prints(&handlers)));
    maps.push(fixed(
        "stap_scratch",
        MAP_PERCPU_ARRAY,
        4,
        8,
        NESTING_LEVELS,
        MapRole::Scratch,
    ));
    maps.push(fixed(
        "stap_counters",
        MAP_PERCPU_ARRAY,
        4,
        8 * COUNTER_SLOTS,
        1,
        MapRole::Counters,
    ));
    maps.push(fixed(
        "stap_control",
        MAP_ARRAY,
        4,
        8 * CONTROL_SLOTS,
        1,
        MapRole::Control,
    ));
    if let Some((_, data)) = formats {
        let mut spec = fixed(
            "stap_formats",
            MAP_ARRAY,
            4,
            data.len() as u32,
            1,
            MapRole::Formats(data),
        );
        spec.flags = BPF_F_RDONLY_PROG;
        maps.push(spec);
    }

    // Per handler: how its program attaches (`None` when it is folded
    // into another's or its kind has no kernel form).
    let mut attaches: Vec<Option<AttachKind>> = handlers
        .iter()
        .zip(&shared)
        .map(|((probe_index, _), share)| match share {
            Share::Alone => match raw_syscall(module, options, *probe_index) {
                Some((exit, event)) => Some(AttachKind::Syscall {
                    exit,
                    events: vec![event],
                }),
                None => {
                    let kind = &module.probes[*probe_index].kind;
                    attach_kind(
                        kind,
                        options
                            .kernel
                            .tracepoint_mechanism(*probe_index, options.tracepoint_mechanism),
                        options.kernel.kprobe_multi && !is_contended(kind, &contended),
                    )
                }
            },
            Share::Leader(attach, _) => Some(attach.clone()),
            Share::Folded => None,
        })
        .collect();
    let chained = chain_perf_events(&mut attaches);
    if chained > 0 {
        index.perf_chain = Some(maps.len());
        maps.push(fixed(
            "stap_perfchain",
            MAP_PROG_ARRAY,
            4,
            4,
            chained,
            MapRole::PerfChain,
        ));
    }

    let mut programs = Vec::new();
    let mut scratch_bytes = 8;
    for (position, (probe_index, function)) in handlers.iter().enumerate() {
        let probe_index = *probe_index;
        let probe = &module.probes[probe_index];
        if matches!(shared[position], Share::Folded) {
            continue;
        }
        let Some(attach) = attaches[position].take() else {
            diags.push(Diagnostic::unsupported(
                format!("{} probes in the kernel", probe.kind.family()),
                probe.span,
            ));
            continue;
        };
        let out_of_bounds = options.test_out_of_bounds && position == 0;
        match emit::emit_probe(
            module,
            probe_index,
            function,
            &attach,
            options,
            &index,
            out_of_bounds,
        ) {
            Ok(emitted) => {
                scratch_bytes = scratch_bytes.max(emitted.scratch_bytes);
                programs.push(Program {
                    name: format!("stap_p{probe_index}"),
                    probe: probe_index,
                    function: probe.function,
                    attach,
                    insns: emitted.insns,
                    map_relocs: emitted.map_relocs,
                    lines: emitted.lines,
                    stack_bytes: emitted.stack_bytes,
                    func_info: emitted
                        .callbacks
                        .iter()
                        .map(|at| FuncInfo {
                            insn_off: *at as u32,
                            type_id: 0,
                        })
                        .collect(),
                    line_info: Vec::new(),
                    plain_subprograms: emitted.plain_subprograms,
                });
            }
            Err(mut errors) => diags.append(&mut errors),
        }
    }
    if !diags.is_empty() {
        return Err(diags);
    }
    maps[index.scratch].value_size = scratch_bytes.div_ceil(8) * 8;
    let btf = program_btf(&mut programs, source);
    Ok(Object {
        maps,
        programs,
        btf,
    })
}

/// What becomes of one kernel handler's program.
enum Share {
    /// Its own program, attached to its own point.
    Alone,
    /// One program for every function of its group: the attachment and
    /// the member positions (itself first).
    Leader(AttachKind, Vec<usize>),
    /// Folded into an earlier leader's program.
    Folded,
}

/// Kernel functions, with a direction (`true` for returns), that two or
/// more probe statements reach by kprobe: `para-callgraph.stp`'s trigger
/// `tcp_sendmsg` inside its `tcp_*` wildcard.
///
/// The order of such handlers is the script's (entries in script order,
/// returns in the reverse, so probes on one function nest) only if the
/// kernel keeps them in one list: each per-function kprobe joins the
/// function's one aggregate kprobe, while each kprobe_multi link is an
/// ftrace_ops of its own, run before or after that aggregate depending on
/// when the kernel registered each. So every handler on a contended
/// function is a per-function kprobe (never folded into a shared program's
/// kprobe_multi link) and the attacher orders them.
type Contended = hashbrown::HashSet<(String, bool)>;

fn contended_functions(module: &Module, handlers: &[(usize, Function)]) -> Contended {
    let mut statements: HashMap<(String, bool), Vec<crate::source::Span>> = HashMap::new();
    for (index, _) in handlers {
        let probe = &module.probes[*index];
        if let Some(key) = kprobe_target(&probe.kind) {
            let spans = statements.entry(key).or_default();
            if !spans.contains(&probe.span) {
                spans.push(probe.span);
            }
        }
    }
    statements
        .into_iter()
        .filter(|(_, spans)| spans.len() > 1)
        .map(|(key, _)| key)
        .collect()
}

/// The kernel function and direction a kprobe handler reaches.
fn kprobe_target(kind: &ProbeKind) -> Option<(String, bool)> {
    match kind {
        ProbeKind::KernelFunction {
            name,
            is_return,
            module: None,
            mechanism: FunctionMechanism::Kprobe,
            // A kernel.statement line is not the function's entry.
            offset: 0,
            ..
        } => Some((name.clone(), *is_return)),
        _ => None,
    }
}

fn is_contended(kind: &ProbeKind, contended: &Contended) -> bool {
    kprobe_target(kind).is_some_and(|key| contended.contains(&key))
}

/// The kprobe handlers of one wildcard probe that can share a program: the
/// same probe statement and direction, and the same code once inlined (so
/// no argument whose type or register differs between functions) but for
/// their bulk lists (`$$parms`, `$$return`), which become rows of a table
/// the program finds through each function's attach cookie (`bulk`). Loading
/// one program and attaching it to every function is what makes
/// `kernel.function("tcp_*")` over hundreds of functions start in
/// milliseconds rather than seconds.
///
/// The identity built-ins are constants of each point: a group shares a
/// program only if each one it calls has the same value for every member
/// (`pn()`, `probemod()`), or is the probed function's name (`ppfunc()`,
/// `probefunc()` of kernel functions), which the shared program computes
/// from the address that fired: `symname(addr())`.
fn shared_kprobe_programs(
    module: &Module,
    handlers: &mut [(usize, Function)],
    multi: bool,
    contended: &Contended,
) -> Vec<Share> {
    // A function known by its clones keeps its own program: the shared
    // one's `ppfunc()` would name the clone's symbol, not the function.
    // So does a contended one (see `contended_functions`).
    let kprobe = |index: usize| match &module.probes[index].kind {
        ProbeKind::KernelFunction { clones, .. } if !clones.is_empty() => None,
        kind if is_contended(kind, contended) => None,
        kind => kprobe_target(kind),
    };
    // Groups: (is_return, member positions). The bulk lists are rows of a
    // table the program reads through the attach cookie (`bulk`).
    let groups = group_by_code(module, handlers, true, |_, index| {
        kprobe(index).map(|(_, is_return)| is_return)
    });
    let mut shares: Vec<Share> = handlers.iter().map(|_| Share::Alone).collect();
    for (is_return, members) in groups {
        if members.len() < 2 {
            continue;
        }
        let identities = identity_calls(&handlers[members[0]].1);
        let varying: Vec<&str> = identities
            .iter()
            .copied()
            .filter(|name| {
                let value = |at: usize| identity::constant(name, &module.probes[handlers[at].0]);
                members.iter().any(|at| value(*at) != value(members[0]))
            })
            .collect();
        if varying
            .iter()
            .any(|name| !RUNTIME_IDENTITIES.contains(name))
        {
            continue;
        }
        let functions = members
            .iter()
            .filter_map(|at| kprobe(handlers[*at].0).map(|(name, _)| name))
            .collect();
        runtime_identities(&mut handlers[members[0]].1, &varying);
        shares[members[0]] = Share::Leader(
            AttachKind::Kprobes {
                functions,
                is_return,
                multi,
                cookies: Vec::new(),
            },
            members.clone(),
        );
        for at in &members[1..] {
            shares[*at] = Share::Folded;
        }
    }
    shares
}

/// The most programs one perf event runs through tail calls: the kernel
/// allows 33 tail calls per run (`MAX_TAIL_CALL_CNT`), and a chain of N
/// programs makes N - 1. A longer group starts a second event.
const MAX_PERF_CHAIN: usize = 32;

/// Chains the perf-event programs whose events would be identical (the
/// same type, config, period or frequency, and CPUs) so that they share
/// one event ([`PerfChain`]): the first of each group, in script order,
/// keeps the event and the others get consecutive slots of the chain map.
/// Returns how many slots that map needs (0: no map).
fn chain_perf_events(attaches: &mut [Option<AttachKind>]) -> u32 {
    // The event a program opens: its attachment without its chain place.
    let event = |attach: &Option<AttachKind>| match attach {
        Some(AttachKind::PerfEvent {
            perf_type,
            config,
            sample_period,
            frequency,
            every_cpu,
            ..
        }) => Some((*perf_type, *config, *sample_period, *frequency, *every_cpu)),
        _ => None,
    };
    let mut groups: Vec<(_, Vec<usize>)> = Vec::new();
    for (position, attach) in attaches.iter().enumerate() {
        let Some(key) = event(attach) else { continue };
        match groups
            .iter_mut()
            .find(|(k, members)| *k == key && members.len() < MAX_PERF_CHAIN)
        {
            Some((_, members)) => members.push(position),
            None => groups.push((key, vec![position])),
        }
    }
    let mut slots = 0u32;
    for (_, members) in groups.iter().filter(|(_, members)| members.len() > 1) {
        // Members after the first take slots `first..first + len - 1`.
        let first = slots;
        slots += members.len() as u32 - 1;
        for (rank, at) in members.iter().enumerate() {
            let rank = rank as u32;
            if let Some(AttachKind::PerfEvent { chain, .. }) = &mut attaches[*at] {
                *chain = PerfChain {
                    slot: (rank > 0).then(|| first + rank - 1),
                    next: (rank + 1 < members.len() as u32).then_some(first + rank),
                };
            }
        }
    }
    slots
}

/// A `syscalls:` probe that runs on the raw `sys_enter`/`sys_exit`
/// tracepoint (`EmitFacts::syscall_numbers`): its direction, and its
/// system call number with the event's name.
fn raw_syscall(module: &Module, options: &Options, probe: usize) -> Option<(bool, (u32, String))> {
    let nr = options.kernel.syscall_number(probe)?;
    let ProbeKind::Tracepoint { name, .. } = &module.probes[probe].kind else {
        return None;
    };
    Some((name.starts_with("sys_exit_"), (nr, name.clone())))
}

/// Groups handler positions that can share one program: the same probe
/// statement, the same direction (`direction` gives it, or `None` for a
/// handler that takes no part), and the same code once inlined, with
/// `lists_as_data` the same but for their bulk lists (`bulk`). Each group
/// is (direction, member positions), its lead first.
fn group_by_code(
    module: &Module,
    handlers: &[(usize, Function)],
    lists_as_data: bool,
    direction: impl Fn(usize, usize) -> Option<bool>,
) -> Vec<(bool, Vec<usize>)> {
    let compared: Vec<std::borrow::Cow<Function>> = handlers
        .iter()
        .map(|(_, function)| {
            let lists = bulk::bulk_ops(function).iter().any(|(_, i)| !i.is_empty());
            if lists_as_data && lists {
                std::borrow::Cow::Owned(bulk::without_lists(function))
            } else {
                std::borrow::Cow::Borrowed(function)
            }
        })
        .collect();
    let mut groups: Vec<(bool, Vec<usize>)> = Vec::new();
    for (position, (index, _)) in handlers.iter().enumerate() {
        let Some(dir) = direction(position, *index) else {
            continue;
        };
        let span = module.probes[*index].span;
        let group = groups.iter_mut().find(|(d, members)| {
            let lead_index = handlers[members[0]].0;
            *d == dir
                && module.probes[lead_index].span == span
                && same_code(&compared[members[0]], &compared[position])
        });
        match group {
            Some((_, members)) => members.push(position),
            None => groups.push((dir, vec![position])),
        }
    }
    groups
}

/// The raw-tracepoint system call handlers of one wildcard probe
/// (`kernel.trace("syscalls:sys_enter_*")`, `syscall.*` whose bodies
/// agree) that can share a program: the same probe statement and
/// direction, the same code once inlined (the same fields at the same
/// offsets, which the raw program reads from the same registers), and the
/// same value of every identity built-in (`pn()`, `pp()` name the event,
/// so a body that calls them keeps a program per event). One program
/// checks the call number against every member's, so hundreds of events
/// load, verify and attach once.
fn shared_syscall_programs(
    module: &Module,
    handlers: &[(usize, Function)],
    options: &Options,
    shares: &mut [Share],
) {
    // Groups: (exit, member positions).
    let groups = group_by_code(module, handlers, false, |position, index| {
        if !matches!(shares[position], Share::Alone) {
            return None;
        }
        raw_syscall(module, options, index).map(|(exit, _)| exit)
    });
    for (exit, members) in groups {
        if members.len() < 2 {
            continue;
        }
        let identities = identity_calls(&handlers[members[0]].1);
        let varies = identities.iter().any(|name| {
            let value = |at: usize| identity::constant(name, &module.probes[handlers[at].0]);
            members.iter().any(|at| value(*at) != value(members[0]))
        });
        if varies {
            continue;
        }
        let events = members
            .iter()
            .filter_map(|at| raw_syscall(module, options, handlers[*at].0))
            .map(|(_, event)| event)
            .collect();
        shares[members[0]] = Share::Leader(AttachKind::Syscall { exit, events }, members.clone());
        for at in &members[1..] {
            shares[*at] = Share::Folded;
        }
    }
}

/// Places the bulk-list rows (`bulk`) of every program whose handler has
/// `Op::BulkArgs` in the formats map's `data`: one row at a fixed place
/// for a program of its own, one per function for a shared kprobe
/// program, whose functions get their row's offset as attach cookie.
fn bulk_rows(
    handlers: &[(usize, Function)],
    shares: &mut [Share],
    index: &mut FormatsIndex,
    data: &mut Vec<u8>,
) {
    let mut names = HashMap::new();
    for position in 0..handlers.len() {
        let (probe_index, function) = &handlers[position];
        if bulk::bulk_ops(function).is_empty() {
            continue;
        }
        if index.bulk_formats.is_none() {
            index.bulk_formats = Some(bulk::place_formats(data));
        }
        let (members, shared) = match &shares[position] {
            Share::Alone => (vec![position], false),
            Share::Leader(AttachKind::Kprobes { .. }, members) => (members.clone(), true),
            // A syscall group shares only identical code, lists included.
            Share::Leader(_, _) => (vec![position], false),
            Share::Folded => continue,
        };
        let functions: Vec<&Function> = members.iter().map(|at| &handlers[*at].1).collect();
        let (place, rows) = bulk::place_rows(data, &mut names, &functions, shared);
        if let Share::Leader(AttachKind::Kprobes { cookies, .. }, _) = &mut shares[position] {
            *cookies = rows;
        }
        index.bulk.insert(*probe_index, place);
    }
    while !data.len().is_multiple_of(8) {
        data.push(0);
    }
}

/// Two inlined handlers that compile to the same program.
fn same_code(a: &Function, b: &Function) -> bool {
    a.blocks == b.blocks
        && a.regs == b.regs
        && a.param_count == b.param_count
        && a.ret == b.ret
        && a.iters == b.iters
}

/// Identity built-ins a shared program computes when it runs: the name of
/// the function the address that fired belongs to.
const RUNTIME_IDENTITIES: &[&str] = &["ppfunc", "probefunc"];

/// The identity built-ins `function` calls.
fn identity_calls(function: &Function) -> Vec<&'static str> {
    let mut names: Vec<&'static str> = identity::NAMES
        .iter()
        .copied()
        .filter(|wanted| {
            function
                .blocks
                .iter()
                .flat_map(|b| &b.insts)
                .any(|inst| matches!(&inst.op, Op::Builtin { name, .. } if name == wanted))
        })
        .collect();
    names.dedup();
    names
}

/// Rewrites each call of the built-ins in `names` to `symname(addr())`.
fn runtime_identities(function: &mut Function, names: &[&str]) {
    for block in 0..function.blocks.len() {
        let insts = std::mem::take(&mut function.blocks[block].insts);
        let mut rewritten = Vec::with_capacity(insts.len());
        for inst in insts {
            match &inst.op {
                Op::Builtin {
                    dst: Some(dst),
                    name,
                    ..
                } if names.contains(&name.as_str()) => {
                    let addr = Reg(function.regs.len() as u32);
                    function.regs.push(ValType::Long);
                    rewritten.push(Inst {
                        op: Op::Builtin {
                            dst: Some(addr),
                            name: "addr".to_string(),
                            args: Vec::new(),
                        },
                        span: inst.span,
                    });
                    rewritten.push(Inst {
                        op: Op::Builtin {
                            dst: Some(*dst),
                            name: "symname".to_string(),
                            args: vec![addr],
                        },
                        span: inst.span,
                    });
                }
                _ => rewritten.push(inst),
            }
        }
        function.blocks[block].insts = rewritten;
    }
}

/// One BTF blob for every program: `long (void *ctx)` for each handler,
/// `long (void *map, void *key, void *value, void *ctx)` for each callback
/// (static, as the verifier requires), and line_info from each program's
/// instruction-to-span table. On entry a program's `func_info` holds only
/// its callbacks' first instructions.
fn program_btf(programs: &mut [Program], source: Option<&SourceMap>) -> Vec<u8> {
    if programs.is_empty() {
        return Vec::new();
    }
    let mut w = BtfWriter::new();
    let long = w.int("long", 8, INT_SIGNED);
    let ptr = w.ptr(0);
    let handler = w.func_proto(long, &[("ctx", ptr)]);
    let callback = w.func_proto(
        long,
        &[("map", ptr), ("key", ptr), ("value", ptr), ("ctx", ptr)],
    );
    for program in programs.iter_mut() {
        let mut records = vec![FuncInfo {
            insn_off: 0,
            type_id: w.func(&program.name, handler, Linkage::Global),
        }];
        for (i, start) in program.func_info.iter().enumerate() {
            let name = format!("{}_each{i}", program.name);
            records.push(FuncInfo {
                insn_off: start.insn_off,
                type_id: w.func(&name, callback, Linkage::Static),
            });
        }
        program.func_info = records;
        if let Some(source) = source {
            program.line_info = line_info(program, source, &mut w);
        }
    }
    w.finish()
}

/// One record per line-table entry, the last one when several share an
/// instruction (the kernel wants strictly increasing offsets).
fn line_info(program: &Program, source: &SourceMap, w: &mut BtfWriter) -> Vec<LineInfo> {
    let mut records: Vec<LineInfo> = Vec::new();
    for (at, span) in &program.lines {
        if *at >= program.insns.len() {
            continue;
        }
        let Some((_, file)) = source.files().nth(span.file.0 as usize) else {
            continue;
        };
        let (line, column) = file.line_col(span.start as usize);
        let starts = file.line_starts();
        let begin = starts.get(line - 1).copied().unwrap_or(0);
        let end = starts.get(line).copied().unwrap_or(file.text.len());
        let text = file.text.get(begin..end).unwrap_or("").trim_end();
        let record = LineInfo {
            insn_off: *at as u32,
            file_name_off: w.string(&file.name),
            line_off: w.string(text),
            line: line as u32,
            column: column as u32,
        };
        match records.last_mut() {
            Some(last) if last.insn_off == record.insn_off => *last = record,
            _ => records.push(record),
        }
    }
    records
}

fn touched_by_kernel(handlers: &[(usize, Function)], global: GlobalId) -> bool {
    handlers.iter().any(|(_, function)| {
        function
            .blocks
            .iter()
            .flat_map(|b| &b.insts)
            .any(|inst| op_global(&inst.op) == Some(global))
    })
}

/// Whether a kernel handler prints: printf (print, println) or
/// `print_hist`, the records whose number grows with the events.
fn kernel_prints(handlers: &[(usize, Function)]) -> bool {
    handlers
        .iter()
        .flat_map(|(_, function)| function.blocks.iter().flat_map(|b| &b.insts))
        .any(|inst| matches!(inst.op, Op::Printf { .. } | Op::PrintHist { .. }))
}

/// The `bpf_snprintf` formats the handlers need, NUL-separated in one
/// read-only value, and where each starts; `None` when nothing formats.
fn format_table(
    module: &Module,
    handlers: &[(usize, Function)],
    map: usize,
    local_time: &super::LocalTime,
) -> Result<Option<(FormatsIndex, Vec<u8>)>, Vec<Diagnostic>> {
    let mut data = Vec::new();
    let mut offsets = HashMap::new();
    let mut segments = HashMap::new();
    let mut needed = false;
    let mut diags = Vec::new();
    let mut regexes = HashMap::new();
    let mut dates = false;
    for (_, function) in handlers {
        for inst in function.blocks.iter().flat_map(|b| &b.insts) {
            match &inst.op {
                Op::BulkArgs { .. } => needed = true,
                Op::Sprintf { format, .. } => {
                    needed = true;
                    if offsets.contains_key(&format.0) || segments.contains_key(&format.0) {
                        continue;
                    }
                    let text = &module.format(*format).text;
                    if let Ok(kernel) = snprintf::kernel_format(text) {
                        offsets.insert(format.0, data.len() as u32);
                        data.extend_from_slice(kernel.as_bytes());
                        data.push(0);
                        continue;
                    }
                    // Split: the helper's parts go in the table, the rest
                    // is emitted code (emit/format.rs).
                    match snprintf::segments(text) {
                        Ok(parts) => {
                            let mut placed = Vec::new();
                            for part in parts {
                                match part {
                                    snprintf::Segment::Kernel { format, args } => {
                                        placed.push(emit::FormatPart::Kernel {
                                            offset: data.len() as u32,
                                            args,
                                        });
                                        data.extend_from_slice(format.as_bytes());
                                        data.push(0);
                                    }
                                    snprintf::Segment::Custom(spec) => {
                                        placed.push(emit::FormatPart::Custom(spec))
                                    }
                                }
                            }
                            segments.insert(format.0, placed);
                        }
                        Err(directive) => diags.push(Diagnostic::unsupported(
                            format!("{directive} in a sprintf format in kernel probes"),
                            inst.span,
                        )),
                    }
                }
                Op::Builtin { name, .. }
                    if matches!(
                        name.as_str(),
                        "symname"
                            | "symdata"
                            | "modname"
                            | "probefunc"
                            | "caller_addr"
                            | "backtrace"
                            | "ubacktrace"
                    ) =>
                {
                    needed = true
                }
                Op::Builtin { name, .. } if name == "ctime" || name == "tz_ctime" => {
                    needed = true;
                    dates = true;
                }
                Op::Builtin { name, args, .. } if name == "regex_match" => {
                    // A pattern that is not a literal is the emitter's error.
                    let Some(pattern) = args
                        .get(1)
                        .and_then(|r| emit::literal(module, function, *r))
                    else {
                        continue;
                    };
                    if regexes.contains_key(pattern) {
                        continue;
                    }
                    match regex::compile(pattern) {
                        Ok(table) => {
                            needed = true;
                            while data.len() % 8 != 0 {
                                data.push(0);
                            }
                            let place = emit::RegexPlace {
                                offset: data.len() as u32,
                                row: table.row,
                                mask: table.mask,
                                start: table.start,
                            };
                            data.extend_from_slice(&table.bytes);
                            regexes.insert(pattern.to_string(), place);
                        }
                        Err(why) => diags.push(
                            Diagnostic::error(format!(
                                "the regular expression \"{pattern}\" cannot run in a kernel probe: {why}"
                            ))
                            .at(inst.span, "matched here")
                            .note("kernel probes match through a DFA built at compile time; match in a host probe instead"),
                        ),
                    }
                }
                _ => {}
            }
        }
    }
    if !diags.is_empty() {
        return Err(diags);
    }
    if !needed {
        return Ok(None);
    }
    let symname = data.len() as u32;
    data.extend_from_slice(b"%ps\0");
    let symdata = data.len() as u32;
    data.extend_from_slice(b"%pS\0");
    let hex_frame = data.len() as u32;
    data.extend_from_slice(b" 0x%lx\0");
    // ctime's names (4 bytes each) and formats: the names are copied
    // over the `XXX XXX` the formats print.
    let ctime = dates.then(|| {
        let days = data.len() as u32;
        data.extend_from_slice(b"Sun\0Mon\0Tue\0Wed\0Thu\0Fri\0Sat\0");
        let months = data.len() as u32;
        data.extend_from_slice(b"Jan\0Feb\0Mar\0Apr\0May\0Jun\0Jul\0Aug\0Sep\0Oct\0Nov\0Dec\0");
        let utc = data.len() as u32;
        data.extend_from_slice(b"XXX XXX %2d %02d:%02d:%02d %d\0");
        let local = data.len() as u32;
        data.extend_from_slice(b"XXX XXX %2d %02d:%02d:%02d %d ");
        data.extend_from_slice(local_time.name().as_bytes());
        data.push(0);
        emit::CtimePlace {
            days,
            months,
            utc,
            local,
            offset_east: local_time.offset_east,
        }
    });
    while data.len() % 8 != 0 {
        data.push(0);
    }
    let index = FormatsIndex {
        map,
        offsets,
        segments,
        symname,
        symdata,
        hex_frame,
        regexes,
        ctime,
        bulk_formats: None,
        bulk: HashMap::new(),
    };
    Ok(Some((index, data)))
}

fn op_global(op: &Op) -> Option<GlobalId> {
    match op {
        Op::LoadGlobal { global, .. }
        | Op::StoreGlobal { global, .. }
        | Op::AddGlobal { global, .. }
        | Op::MapGet { global, .. }
        | Op::MapSet { global, .. }
        | Op::MapAdd { global, .. }
        | Op::MapDelete { global, .. }
        | Op::MapContains { global, .. }
        | Op::MapInsert { global, .. }
        | Op::Clear { global }
        | Op::StatAdd { global, .. }
        | Op::StatGet { global, .. }
        | Op::PrintHist { global, .. }
        | Op::IterStart { global, .. } => Some(*global),
        _ => None,
    }
}

/// A global's map, per `layout.rs`. Hash maps stay preallocated (no
/// `BPF_F_NO_PREALLOC`): perf-event programs require it.
fn global_map(id: GlobalId, global: &Global, max_string_len: u32) -> MapSpec {
    let (key_size, value_size) = layout::map_sizes(global, max_string_len);
    let (map_type, max_entries) = match &global.storage {
        Storage::Scalar(_) => (MAP_ARRAY, 1),
        // `a%[N]` keeps the newest entries; LRU eviction is the closest
        // kernel behaviour (it evicts the least recently used instead).
        Storage::Array {
            max_entries, wrap, ..
        } => (if *wrap { MAP_LRU_HASH } else { MAP_HASH }, *max_entries),
        Storage::Stats { keys, .. } if keys.is_empty() => (MAP_PERCPU_ARRAY, 1),
        Storage::Stats { max_entries, .. } => (MAP_PERCPU_HASH, *max_entries),
    };
    MapSpec {
        name: format!("stap_g{}", id.0),
        map_type,
        key_size,
        value_size,
        max_entries: max_entries.clamp(1, u32::MAX as u64) as u32,
        flags: 0,
        role: MapRole::Global(id),
    }
}

fn attach_kind(
    kind: &ProbeKind,
    tracepoints: TracepointMechanism,
    kprobe_multi: bool,
) -> Option<AttachKind> {
    Some(match kind {
        ProbeKind::Tracepoint { system, name, args } => match args {
            TracepointArgs::Raw(_) if tracepoints == TracepointMechanism::TpBtf => {
                AttachKind::TpBtf { name: name.clone() }
            }
            TracepointArgs::Raw(_) => AttachKind::RawTracepoint { name: name.clone() },
            TracepointArgs::Classic(_) => AttachKind::Tracepoint {
                system: system.clone(),
                name: name.clone(),
            },
        },
        ProbeKind::KernelFunction {
            name,
            is_return,
            module,
            mechanism,
            clones,
            offset,
            ..
        } => match mechanism {
            FunctionMechanism::Fentry => AttachKind::Fentry {
                function: name.clone(),
                is_return: *is_return,
                module: module.clone(),
            },
            FunctionMechanism::Lsm => AttachKind::Lsm {
                hook: name
                    .strip_prefix(crate::kernel::LSM_STUB_PREFIX)
                    .unwrap_or(name)
                    .to_string(),
            },
            // A function known by its clones is probed on each of them.
            FunctionMechanism::Kprobe => match clones.as_slice() {
                [] => AttachKind::Kprobe {
                    function: name.clone(),
                    offset: *offset,
                    is_return: *is_return,
                },
                [clone] => AttachKind::Kprobe {
                    function: clone.clone(),
                    offset: 0,
                    is_return: *is_return,
                },
                clones => AttachKind::Kprobes {
                    functions: clones.to_vec(),
                    is_return: *is_return,
                    multi: kprobe_multi,
                    cookies: Vec::new(),
                },
            },
        },
        ProbeKind::Perf {
            perf_type,
            config,
            sample_period,
            frequency,
            ..
        } => AttachKind::PerfEvent {
            perf_type: *perf_type,
            config: *config,
            sample_period: *sample_period,
            frequency: *frequency,
            every_cpu: false,
            chain: PerfChain::default(),
        },
        ProbeKind::TimerProfile => AttachKind::PerfEvent {
            perf_type: PERF_TYPE_SOFTWARE,
            config: PERF_COUNT_SW_CPU_CLOCK,
            sample_period: PROFILE_PERIOD_NS,
            frequency: false,
            every_cpu: true,
            chain: PerfChain::default(),
        },
        ProbeKind::Process {
            path,
            target:
                ProcessTarget::Mark {
                    provider,
                    name,
                    sites,
                },
            ..
        } => AttachKind::Marker {
            path: path.clone(),
            provider: provider.clone(),
            name: name.clone(),
            sites: sites.clone(),
        },
        ProbeKind::Process {
            path,
            target: ProcessTarget::Plt { name, offset },
            is_return,
        } => AttachKind::Plt {
            path: path.clone(),
            name: name.clone(),
            offset: *offset,
            is_return: *is_return,
        },
        ProbeKind::Process {
            path,
            target: ProcessTarget::Function(function) | ProcessTarget::Statement(function),
            is_return,
        } => AttachKind::Uprobe {
            path: path.clone(),
            function: function.clone(),
            is_return: *is_return,
        },
        ProbeKind::Netfilter {
            pf,
            hooknum,
            priority,
        } => AttachKind::Netfilter {
            pf: *pf,
            hooknum: *hooknum,
            priority: *priority,
        },
        _ => return None,
    })
}
