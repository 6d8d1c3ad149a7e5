//! Elaboration, SystemTap's pass 2: from parsed files to a resolved, typed
//! [`Program`].
//!
//! The steps, one file each:
//! - [`symbols`]: collect definitions; pull in tapset files on first use.
//! - [`points`]: resolve probe points (families, wildcards, aliases, `?`/`!`).
//! - [`lower`] and [`context`]: resolve names and context variables into HIR;
//!   its child `lower::autocast` types the variables that hold kernel
//!   pointers, with `pointer_slots` for those the whole program shares
//!   (globals, parameters, returns).
//! - [`elide`]: alias code's assignments that nothing reads are dropped.
//! - [`infer`]: type inference to a fixpoint.
//! - [`placement`]: kernel (BPF) or host (JIT) for every probe and function.
//! - [`print`]: the `-p2` listing.

pub mod builtins;
pub mod concurrency;
mod context;
mod display;
mod elide;
pub mod hir;
mod infer;
pub mod library;
mod lower;
mod misuse;
mod placement;
mod pointer_slots;
mod points;
pub mod print;
mod prune;
mod refused;
mod slices;
mod symbols;
mod walk;

pub use hir::*;
pub use library::{Declared, Library};
pub use points::glob_match;

use crate::ast;
use crate::diag::Diagnostic;
use crate::kernel::{KernelFacts, TracepointArgs};
use pointer_slots::PointerSlots;
use symbols::Elaborator;

/// Rounds of elaboration at most: each makes the stores a chain of typed
/// pointers reaches one link further known (`g = f(p)` where `p` is a
/// parameter typed by another function's call, ...).
const POINTER_ROUNDS: u32 = 4;

#[derive(Debug, Clone, Default)]
pub struct ElabOptions {
    /// -D NAME=VALUE (MAXSTRINGLEN, MAXMAPENTRIES, MAXACTION, MAXERRORS, ...), recorded in the Program.
    pub defines: Vec<(String, String)>,
    /// -G name=value overrides of globals (must name a declared global; type-checked).
    pub global_overrides: Vec<(String, String)>,
    /// --kernel-probes: how kernel.function probes attach.
    pub kernel_probes: KernelProbes,
    /// -g: guru mode. Constructs that need it (embedded C, writes to kernel
    /// memory) are then refused for what they are, not for lacking -g.
    pub guru: bool,
    /// --skip-badvars: a context variable that cannot be resolved reads
    /// as 0 (or ""), as in stap, instead of being an error.
    pub skip_badvars: bool,
    /// The program of the -c command (its first word) or of the -x
    /// process (its executable): what `process.function(...)` and the
    /// other process probes without a path probe, as in stap.
    pub target_program: Option<String>,
    /// Functions (name, module) whose fentry/fexit program the kernel
    /// refused to load or attach in an earlier try of this run: `auto`
    /// reaches every probe on them by kprobes instead.
    pub fentry_refused: Vec<(String, Option<String>)>,
    /// Print the globals the program writes but never reads at the end of
    /// the session, as stap does (`display`); off for listings (`-l`,
    /// `-L`), as in stap.
    pub display_unread_globals: bool,
}

/// The mechanism kernel.function probes use (`--kernel-probes`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum KernelProbes {
    /// fentry/fexit where the kernel allows it, kprobes otherwise.
    #[default]
    Auto,
    /// fentry/fexit only: an error where the kernel refuses them.
    Fentry,
    /// kprobes/kretprobes only: an error where the kernel has none.
    Kprobe,
}

/// Elaborates the user's files (the script, or -e text; possibly several) against the tapset library.
/// Only the tapset files that define something the user program uses (transitively) are pulled in.
/// Returns the program when there were no errors, and every diagnostic (errors and warnings) either way.
pub fn elaborate(
    user: &[ast::File],
    tapsets: &[ast::File],
    facts: &dyn KernelFacts,
    opts: &ElabOptions,
) -> (Option<Program>, Vec<Diagnostic>) {
    elaborate_with(user, &Library::parsed(tapsets), facts, opts)
}

/// [`elaborate`] over a [`Library`] whose files are parsed on first use.
pub fn elaborate_with(
    user: &[ast::File],
    tapsets: &Library<'_>,
    facts: &dyn KernelFacts,
    opts: &ElabOptions,
) -> (Option<Program>, Vec<Diagnostic>) {
    // Pointers stored in globals, parameters and returns type their uses
    // (`pointer_slots`); a use lowered before a store it depends on asks
    // for another round, seeded with every store the last one found.
    let mut slots = PointerSlots::default();
    let mut round = 1;
    let (mut elab, mut probes) = loop {
        let mut elab = Elaborator::new(facts, tapsets);
        elab.kernel_probes = opts.kernel_probes;
        elab.guru = opts.guru;
        elab.skip_badvars = opts.skip_badvars;
        elab.target_program = opts.target_program.clone();
        elab.fentry_refused = opts.fentry_refused.clone();
        elab.pointer_slots = slots;
        for file in user {
            elab.add_file(file, false);
        }
        let probes = resolve_and_lower(&mut elab);
        if elab.pointer_slots.settled() || round == POINTER_ROUNDS {
            break (elab, probes);
        }
        slots = std::mem::take(&mut elab.pointer_slots).for_next_round();
        round += 1;
    };
    if probes.is_empty() && !elab.diags.iter().any(Diagnostic::is_error) {
        // stap refuses a script with nothing to run.
        elab.error(
            Diagnostic::error("no probes found").note("a script needs at least one `probe`"),
        );
    }
    let lowered: Vec<Option<&Function>> =
        elab.functions.iter().map(|f| f.lowered.as_ref()).collect();
    elide::unused_alias_assignments(&mut probes, &lowered);
    let pending = std::mem::take(&mut elab.alias_errors);
    let kept = elide::surviving_alias_errors(&mut probes, pending);
    elab.diags.extend(kept);
    let mut functions = keep_reachable(&mut elab, &mut probes);
    let referenced: Vec<bool> = elab.globals.iter().map(|g| g.referenced).collect();
    for g in elab
        .globals
        .iter()
        .filter(|g| !g.referenced && !g.hir.from_tapset)
    {
        let d = Diagnostic::warning(format!("global `{}` is never used", g.hir.name));
        elab.diags.push(d.at(g.hir.span, "declared here"));
    }
    let mut globals: Vec<Global> = elab
        .globals
        .iter()
        .map(|g| {
            let mut hir = g.hir.clone();
            hir.keys = vec![Type::Unknown; g.arity.map_or(0, |(n, _)| n)];
            hir
        })
        .collect();
    let returns_nothing = infer::infer(
        &mut globals,
        &referenced,
        &mut functions,
        &mut probes,
        &mut elab.diags,
    );
    let misused = misuse::check(&mut functions, &mut probes, &returns_nothing);
    elab.diags.extend(misused);
    for probe in &mut probes {
        prune::unused_alias_assignments(&functions, probe);
    }
    placement::place(&mut globals, &mut functions, &mut probes);
    apply_overrides(&mut globals, &opts.global_overrides, &mut elab.diags);
    let limits = limits(&opts.defines, &mut elab.diags);
    let needs = needs(&probes);
    elab.diags.extend(points::procfs::duplicates(&probes));
    let diags = dedup(elab.diags);
    if diags.iter().any(Diagnostic::is_error) {
        return (None, diags);
    }
    let program = Program {
        globals,
        functions,
        probes,
        limits,
        defines: opts.defines.clone(),
        needs,
        skipped_functions: dedup(std::mem::take(&mut elab.skipped_functions)),
    };
    let mut program = program;
    if opts.display_unread_globals {
        let shown = display::unread_globals(&mut program);
        if !shown.is_empty() {
            // Again, with stap's end probes that print them: they read
            // the globals, so the second round shows nothing more.
            let mut files = user.to_vec();
            files.push(display::end_probes(&program, &shown));
            let opts = ElabOptions {
                display_unread_globals: false,
                ..opts.clone()
            };
            return elaborate_with(&files, tapsets, facts, &opts);
        }
    }
    let mut diags = diags;
    diags.extend(dedup(concurrency::check(&program)));
    (Some(program), diags)
}

/// Resolves and lowers every probe, then every user function and every
/// tapset function something calls, until no new work appears (a lowered
/// body may pull in more tapsets).
fn resolve_and_lower(elab: &mut Elaborator<'_>) -> Vec<Probe> {
    let mut probes = Vec::new();
    loop {
        if !elab.pending_probes.is_empty() {
            // Every point first: whether a function is probed by kprobes
            // anywhere decides how its other probes attach.
            let mut resolved = Vec::new();
            for pending in std::mem::take(&mut elab.pending_probes) {
                let probe = pending.ast;
                for point in elab.resolve_probe_points(&probe.points) {
                    resolved.push((probe, point));
                }
            }
            elab.one_mechanism_per_function(resolved.iter_mut().map(|(_, point)| point));
            for (probe, point) in resolved {
                probes.push(lower::lower_probe(elab, point, &probe.body, probe.span));
            }
            continue;
        }
        let next = elab
            .functions
            .iter()
            .position(|f| f.lowered.is_none() && (!f.from_tapset || f.referenced));
        match next {
            Some(i) => {
                let lowered = lower::lower_function(elab, FunctionId(i as u32));
                elab.functions[i].lowered = Some(lowered);
            }
            None => return probes,
        }
    }
}

/// Keeps the functions some probe reaches (stap elides the rest) and
/// renumbers the calls to match.
fn keep_reachable(elab: &mut Elaborator<'_>, probes: &mut [Probe]) -> Vec<Function> {
    let mut all: Vec<Function> = elab
        .functions
        .iter_mut()
        .map(|f| {
            f.lowered.take().unwrap_or_else(|| Function {
                name: f.ast.name.node.clone(),
                param_count: 0,
                ret: Type::Long,
                locals: Vec::new(),
                body: Block {
                    stmts: Vec::new(),
                    span: f.ast.span,
                },
                runs_on: Sides::default(),
                from_tapset: f.from_tapset,
                span: f.ast.name.span,
            })
        })
        .collect();
    let keep = placement::reachable(&mut all, probes);
    let mut new_ids = vec![None; all.len()];
    let mut kept = Vec::new();
    for (i, f) in all.into_iter().enumerate() {
        if keep[i] {
            new_ids[i] = Some(FunctionId(kept.len() as u32));
            kept.push(f);
        }
    }
    let mut renumber = |node: walk::Node<'_>| {
        if let walk::Node::Expr(e) = node
            && let ExprKind::Call { function, .. } = &mut e.kind
            && let Some(new) = new_ids[function.0 as usize]
        {
            *function = new;
        }
    };
    for f in &mut kept {
        walk::block(&mut f.body, &mut renumber);
    }
    for p in probes.iter_mut() {
        walk::block(&mut p.body, &mut renumber);
        if let Some(c) = &mut p.condition {
            walk::expr(c, &mut renumber);
        }
    }
    kept
}

fn parse_long(text: &str) -> Option<i64> {
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let value = if let Some(hex) = digits
        .strip_prefix("0x")
        .or_else(|| digits.strip_prefix("0X"))
    {
        i64::from_str_radix(hex, 16).ok()?
    } else {
        digits.parse::<i64>().ok()?
    };
    Some(if negative { -value } else { value })
}

/// `-G name=value`: must name a user scalar global; the value must fit its type.
fn apply_overrides(
    globals: &mut [Global],
    overrides: &[(String, String)],
    diags: &mut Vec<Diagnostic>,
) {
    for (name, value) in overrides {
        let Some(g) = globals
            .iter_mut()
            .find(|g| &g.name == name && !g.from_tapset)
        else {
            let names: Vec<&str> = globals
                .iter()
                .filter(|g| !g.from_tapset)
                .map(|g| g.name.as_str())
                .collect();
            diags.push(
                Diagnostic::error(format!(
                    "-G {name}={value}: the script has no global `{name}`"
                ))
                .suggest(name, names),
            );
            continue;
        };
        if g.is_array || g.ty == Type::Stats {
            diags.push(
                Diagnostic::error(format!("-G {name}={value}: `{name}` is not a scalar"))
                    .at(g.span, "declared here"),
            );
            continue;
        }
        match g.ty {
            Type::String => g.init = Some(Constant::String(value.clone())),
            _ => match parse_long(value) {
                Some(n) => {
                    g.init = Some(Constant::Long(n));
                    g.ty = Type::Long;
                }
                None => diags.push(
                    Diagnostic::error(format!(
                        "-G {name}={value}: `{name}` is a long, and `{value}` is not a number"
                    ))
                    .at(g.span, "declared here"),
                ),
            },
        }
    }
}

/// The `-D` limits stap-rs understands; other names are only recorded.
fn limits(defines: &[(String, String)], diags: &mut Vec<Diagnostic>) -> Limits {
    let mut limits = Limits::default();
    for (name, value) in defines {
        let slot = match name.as_str() {
            "MAXSTRINGLEN" => &mut limits.max_string_len,
            "MAXMAPENTRIES" => &mut limits.max_map_entries,
            "MAXACTION" => &mut limits.max_action,
            "MAXERRORS" => &mut limits.max_errors,
            // stap's -D also reaches its C compiler; here nothing else
            // reads these, and a limit set in vain must not pass silently.
            "MAXNESTING" => {
                diags.push(Diagnostic::warning(format!(
                    "-D MAXNESTING={value} has no effect: calls nest at most {} deep in stap-rs",
                    crate::bpf::inline::MAX_DEPTH
                )));
                continue;
            }
            _ => {
                diags.push(Diagnostic::warning(format!(
                    "-D {name} has no effect: stap-rs reads only MAXSTRINGLEN, MAXMAPENTRIES, MAXACTION and MAXERRORS"
                )));
                continue;
            }
        };
        match value.parse::<u64>() {
            Ok(n) => *slot = n,
            Err(_) => diags.push(Diagnostic::error(format!(
                "-D {name}={value}: `{value}` is not a non-negative number"
            ))),
        }
    }
    // Kernel string slots are never smaller than 8 bytes, and the host and
    // the kernel must cut strings at the same length: below 8 the two would
    // disagree, so small values are refused rather than half-honoured.
    // Above the top, no kernel program fits and host strings would grow
    // without a useful bound.
    let (min, max) = (MIN_STRING_LEN, MAX_STRING_LEN);
    if !(min..=max).contains(&limits.max_string_len) {
        diags.push(
            Diagnostic::error(format!(
                "-D MAXSTRINGLEN={}: must be between {min} and {max}",
                limits.max_string_len
            ))
            .note("MAXSTRINGLEN counts the terminating NUL: strings keep MAXSTRINGLEN - 1 bytes"),
        );
    }
    limits
}

fn needs(probes: &[Probe]) -> MechanismNeeds {
    let mut needs = MechanismNeeds::default();
    for p in probes {
        match &p.kind {
            ProbeKind::Tracepoint {
                args: TracepointArgs::Raw(_),
                ..
            } => needs.raw_tracepoints = true,
            ProbeKind::Tracepoint {
                args: TracepointArgs::Classic(_),
                ..
            } => needs.classic_tracepoints = true,
            ProbeKind::KernelFunction { mechanism, .. } => match mechanism {
                // An LSM program attaches through a trampoline, as fentry.
                FunctionMechanism::Fentry | FunctionMechanism::Lsm => needs.fentry = true,
                FunctionMechanism::Kprobe => needs.kprobes = true,
            },
            ProbeKind::Process { .. } => needs.uprobes = true,
            ProbeKind::Perf { .. } | ProbeKind::TimerProfile => needs.perf_events = true,
            _ => {}
        }
    }
    needs
}

/// A body lowered once per resolved point reports the same error once per
/// point (and a point used twice skips the same functions twice); keep the
/// first of each.
fn dedup<T: PartialEq>(diags: Vec<T>) -> Vec<T> {
    let mut out: Vec<T> = Vec::new();
    for d in diags {
        if !out.contains(&d) {
            out.push(d);
        }
    }
    out
}
