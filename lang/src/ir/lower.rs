//! HIR to IR (pass 3).
//!
//! Every probe becomes one handler function; every user function becomes
//! one function per side it runs on (`name@kernel`, `name@host`), so each
//! backend only ever sees code for its own side. Statistics globals learn
//! what they must keep per entry (`StatNeeds`) from every extractor used
//! anywhere in the program. A kretprobe handler using `@entry` also gets
//! an entry kprobe handler (after the function copies) that saves the
//! values in hidden tid-keyed globals (after the program's).
//!
//! The work is split by concern:
//! - `builder`: registers, blocks, terminators, and the final clean-up
//!   (default returns, unreachable blocks pruned);
//! - `stmt`: statements and control flow (loops with `Tick`, `foreach`);
//! - `expr`: expressions, assignments, short-circuit and checked division;
//! - `builtin`: printing, `exit`, `error` and other built-ins;
//! - `context`: kernel data reads (`$var->f`, `@cast`, bitfields, `$$vars`).

mod builder;
mod builtin;
mod context;
mod expr;
mod stmt;

use super::{
    Format, FormatId, FuncId, Function, Global, LinearHist, Module, ProbeHandler, StatNeeds,
    Storage, StrId, ValType,
};
use crate::ast::StatOp;
use crate::diag::Diagnostic;
use crate::sema::hir::{self, FunctionId, GlobalId, Placement, Program, Type};
use crate::source::Span;
use builder::Body;
use std::collections::HashMap;

/// Lowers an elaborated program. Fails only on constructs the backends
/// cannot express yet, each with an `unsupported: ...` diagnostic.
pub fn lower(program: &Program) -> Result<Module, Vec<Diagnostic>> {
    let mut state = ModuleState::new(program);
    let mut functions = Vec::new();
    for (index, probe) in program.probes.iter().enumerate() {
        functions.push(lower_probe(&mut state, index, probe));
    }
    for (_, function, side) in user_functions(program) {
        functions.push(lower_function(&mut state, function, side));
    }
    let mut probes: Vec<ProbeHandler> = program
        .probes
        .iter()
        .enumerate()
        .map(|(index, probe)| ProbeHandler {
            point: probe.resolved.clone(),
            written: probe.written.clone(),
            kind: probe.kind.clone(),
            placement: probe.placement,
            function: FuncId(index as u32),
            span: probe.span,
        })
        .collect();
    // The entry probes that save `@entry` values for return probes, last so
    // the handlers and function copies keep their ids.
    for (index, saves) in std::mem::take(&mut state.entry_saves) {
        let probe = &program.probes[index];
        let function = FuncId(functions.len() as u32);
        // A function's entry is the same point without `.return`; a
        // system call's exit event has its enter event.
        let (point, kind) = match &probe.entry_event {
            Some((point, kind)) => (point.clone(), kind.clone()),
            None => {
                let mut kind = probe.kind.clone();
                if let hir::ProbeKind::KernelFunction { is_return, .. }
                | hir::ProbeKind::Process { is_return, .. } = &mut kind
                {
                    *is_return = false;
                }
                let point = probe.resolved.strip_suffix(".return");
                (point.unwrap_or(&probe.resolved).to_string(), kind)
            }
        };
        let entry_kind = probe.entry_event.as_ref().map_or(&probe.kind, |(_, k)| k);
        functions.push(lower_entry_probe(
            &mut state, index, probe, entry_kind, &saves,
        ));
        probes.push(ProbeHandler {
            point,
            written: probe.written.clone(),
            kind,
            placement: probe.placement,
            function,
            span: probe.span,
        });
    }
    if !state.diags.is_empty() {
        return Err(state.diags);
    }
    let mut globals: Vec<Global> = program
        .globals
        .iter()
        .zip(&state.needs)
        .map(|(g, needs)| lower_global(g, *needs, &program.limits))
        .collect();
    globals.append(&mut state.hidden);
    Ok(Module {
        globals,
        functions,
        probes,
        strings: state.strings,
        formats: state.formats,
        limits: program.limits.clone(),
    })
}

/// The IR type of a HIR value type. Statistics never reach a register, and
/// a finished program has no unknown types; both fall back to long.
pub(super) fn val_type(ty: Type) -> ValType {
    match ty {
        Type::String => ValType::Str,
        Type::Long | Type::Stats | Type::Unknown => ValType::Long,
    }
}

fn lower_global(g: &hir::Global, needs: StatNeeds, limits: &hir::Limits) -> Global {
    let keys: Vec<ValType> = g.keys.iter().map(|t| val_type(*t)).collect();
    let max_entries = g.size.unwrap_or(limits.max_map_entries);
    let storage = match g.ty {
        Type::Stats => Storage::Stats {
            // A scalar statistic is a single entry.
            max_entries: if g.is_array { max_entries } else { 1 },
            keys,
            needs,
        },
        ty if g.is_array => Storage::Array {
            keys,
            value: val_type(ty),
            max_entries,
            wrap: g.wrap,
        },
        ty => Storage::Scalar(val_type(ty)),
    };
    Global {
        name: g.name.clone(),
        storage,
        init: g.init.clone(),
        kernel: g.used_by.kernel,
        host: g.used_by.host,
        span: g.span,
        key_text_bytes: None,
    }
}

fn lower_probe<'p>(state: &mut ModuleState<'p>, index: usize, probe: &'p hir::Probe) -> Function {
    let name = format!("probe{index} {}", probe.resolved);
    let mut f = FnLowering::new(state, probe.placement, &probe.locals, 0, None);
    f.user_memory = matches!(probe.kind, hir::ProbeKind::Process { .. });
    f.in_probe = true;
    f.probe_kind = Some(&probe.kind);
    f.init_locals(probe.span);
    // A kretprobe or uretprobe sees no arguments and fexit only the plain
    // ones: any other `@entry` value is saved by a companion entry probe.
    let function_return = matches!(
        probe.kind,
        hir::ProbeKind::KernelFunction {
            is_return: true,
            ..
        } | hir::ProbeKind::Process {
            is_return: true,
            ..
        }
    ) || probe.entry_event.is_some();
    // Where the saved `@entry` values get loaded, once they are known.
    let start = f.body.mark();
    if function_return {
        f.saved = Some(Vec::new());
    }
    if let Some(cond) = &probe.condition {
        let holds = f.value(cond);
        let body = f.body.new_block();
        let skip = f.body.new_block();
        f.body.branch(holds, body, skip, cond.span);
        f.body.switch_to(skip);
        f.body.terminate(super::Term::Return(None), cond.span);
        f.body.switch_to(body);
    }
    f.block(&probe.body);
    if let Some(saved) = f.saved.take().filter(|s| !s.is_empty()) {
        load_saved_entries(&mut f, start, probe.span, &saved);
        let saves = saved.into_iter().map(|(g, e, _)| (g, e)).collect();
        f.m.entry_saves.push((index, saves));
    }
    f.finish(name, probe.span, closing_brace(probe.body.span))
}

/// Loads (and deletes, so the map only holds calls still in progress)
/// each `@entry` value the entry probe saved for this thread.
fn load_saved_entries(
    f: &mut FnLowering<'_, '_>,
    at: (super::BlockId, usize),
    span: Span,
    saved: &[(GlobalId, hir::Expr, super::Reg)],
) {
    let tid = f.body.reg(ValType::Long);
    let mut ops = vec![(thread_id(tid), span)];
    for (global, expr, reg) in saved {
        let keys = vec![tid];
        let get = super::Op::MapGet {
            dst: *reg,
            global: *global,
            keys: keys.clone(),
        };
        let delete = super::Op::MapDelete {
            global: *global,
            keys,
        };
        ops.extend([(get, expr.span), (delete, expr.span)]);
    }
    f.body.insert_at(at, ops);
}

fn thread_id(dst: super::Reg) -> super::Op {
    super::Op::Builtin {
        dst: Some(dst),
        name: "tid".to_string(),
        args: Vec::new(),
    }
}

/// The kprobe on a kretprobe's function that saves its `@entry` values,
/// keyed by thread id.
fn lower_entry_probe<'p>(
    state: &mut ModuleState<'p>,
    index: usize,
    probe: &'p hir::Probe,
    kind: &'p hir::ProbeKind,
    saves: &[(GlobalId, hir::Expr)],
) -> Function {
    let name = format!("probe{index} @entry");
    let mut f = FnLowering::new(state, probe.placement, &probe.locals, 0, None);
    f.user_memory = matches!(probe.kind, hir::ProbeKind::Process { .. });
    f.in_probe = true;
    f.probe_kind = Some(kind);
    f.at_entry = true;
    f.init_locals(probe.span);
    let tid = f.body.reg(ValType::Long);
    f.body.emit(thread_id(tid), probe.span);
    for (global, expr) in saves {
        let src = f.value(expr);
        let set = super::Op::MapSet {
            global: *global,
            keys: vec![tid],
            src,
        };
        f.body.emit(set, expr.span);
    }
    f.finish(name, probe.span, closing_brace(probe.body.span))
}

fn lower_function<'p>(
    state: &mut ModuleState<'p>,
    function: &'p hir::Function,
    side: Placement,
) -> Function {
    let name = format!("{}@{}", function.name, side_name(side));
    let ret = Some(val_type(function.ret));
    let mut f = FnLowering::new(state, side, &function.locals, function.param_count, ret);
    f.init_locals(function.span);
    f.block(&function.body);
    f.finish(name, function.span, closing_brace(function.body.span))
}

/// The last byte of a block's span: its closing brace.
fn closing_brace(body: Span) -> Span {
    Span::new(
        body.file,
        (body.end as usize).saturating_sub(1),
        body.end as usize,
    )
}

pub(super) fn side_name(side: Placement) -> &'static str {
    match side {
        Placement::Kernel => "kernel",
        Placement::Host => "host",
    }
}

/// Every (user function, side) to lower, in `FuncId` order after the
/// handlers: a function's kernel copy, then its host copy.
fn user_functions(program: &Program) -> Vec<(FunctionId, &hir::Function, Placement)> {
    let mut out = Vec::new();
    for (i, f) in program.functions.iter().enumerate() {
        let id = FunctionId(i as u32);
        if f.runs_on.kernel {
            out.push((id, f, Placement::Kernel));
        }
        if f.runs_on.host {
            out.push((id, f, Placement::Host));
        }
    }
    out
}

/// What the whole module accumulates while functions are lowered.
pub(super) struct ModuleState<'p> {
    pub program: &'p Program,
    strings: Vec<String>,
    string_ids: HashMap<String, StrId>,
    formats: Vec<Format>,
    format_ids: HashMap<String, FormatId>,
    /// Per global: what its statistics must keep.
    needs: Vec<StatNeeds>,
    /// Per global: where its `@hist_linear` layout was first given.
    linear_site: Vec<Option<Span>>,
    /// The IR function of each (user function, side).
    copies: HashMap<(FunctionId, bool), FuncId>,
    diags: Vec<Diagnostic>,
    /// Globals after the program's: one map per saved `@entry` value.
    hidden: Vec<Global>,
    /// Per kretprobe handler using `@entry`: its probe index and the
    /// values its entry probe saves.
    entry_saves: Vec<(usize, Vec<(GlobalId, hir::Expr)>)>,
}

impl<'p> ModuleState<'p> {
    fn new(program: &'p Program) -> ModuleState<'p> {
        // Handlers come first, then the copies in `user_functions` order.
        let copies = user_functions(program)
            .into_iter()
            .enumerate()
            .map(|(i, (id, _, side))| {
                let func = FuncId((program.probes.len() + i) as u32);
                ((id, side == Placement::Kernel), func)
            })
            .collect();
        ModuleState {
            program,
            strings: Vec::new(),
            string_ids: HashMap::new(),
            formats: Vec::new(),
            format_ids: HashMap::new(),
            needs: vec![StatNeeds::default(); program.globals.len()],
            linear_site: vec![None; program.globals.len()],
            copies,
            diags: Vec::new(),
            hidden: Vec::new(),
            entry_saves: Vec::new(),
        }
    }

    /// A new hidden map, tid -> value, for one `@entry` value. LRU, so
    /// calls that never return (a thread killed inside) age out.
    pub fn entry_global(&mut self, ty: Type, span: Span) -> GlobalId {
        let id = GlobalId((self.program.globals.len() + self.hidden.len()) as u32);
        self.hidden.push(Global {
            name: format!("@entry{}", self.hidden.len()),
            storage: Storage::Array {
                keys: vec![ValType::Long],
                value: val_type(ty),
                max_entries: self.program.limits.max_map_entries,
                wrap: true,
            },
            init: None,
            kernel: true,
            host: false,
            span,
            key_text_bytes: None,
        });
        id
    }

    /// The copy of a user function that code on `side` calls.
    pub fn callee(&self, id: FunctionId, side: Placement) -> Option<FuncId> {
        self.copies.get(&(id, side == Placement::Kernel)).copied()
    }

    pub fn string(&mut self, text: &str) -> StrId {
        if let Some(id) = self.string_ids.get(text) {
            return *id;
        }
        let id = StrId(self.strings.len() as u32);
        self.strings.push(text.to_string());
        self.string_ids.insert(text.to_string(), id);
        id
    }

    pub fn format(&mut self, text: &str) -> FormatId {
        if let Some(id) = self.format_ids.get(text) {
            return *id;
        }
        let id = FormatId(self.formats.len() as u32);
        self.formats.push(Format {
            text: text.to_string(),
        });
        self.format_ids.insert(text.to_string(), id);
        id
    }

    /// Records a diagnostic once: a function lowered for both sides would
    /// otherwise report the same construct twice.
    pub fn report(&mut self, diag: Diagnostic) {
        if !self.diags.contains(&diag) {
            self.diags.push(diag);
        }
    }

    pub fn unsupported(&mut self, what: impl std::fmt::Display, span: Span) {
        self.report(Diagnostic::unsupported(what, span));
    }

    /// Notes that statistic `global` is read with `op`.
    pub fn need(&mut self, global: GlobalId, op: StatOp) {
        let Some(needs) = self.needs.get_mut(global.0 as usize) else {
            return;
        };
        match op {
            StatOp::Min | StatOp::Max => needs.min_max = true,
            StatOp::Variance => needs.variance = true,
            StatOp::HistLog => needs.hist_log = true,
            StatOp::Count | StatOp::Sum | StatOp::Avg | StatOp::HistLinear => {}
        }
    }

    /// Notes a `@hist_linear` layout; one statistic keeps one layout.
    pub fn need_linear(&mut self, global: GlobalId, hist: LinearHist, span: Span) {
        let index = global.0 as usize;
        let Some(needs) = self.needs.get_mut(index) else {
            return;
        };
        match needs.hist_linear {
            None => {
                needs.hist_linear = Some(hist);
                self.linear_site[index] = Some(span);
            }
            Some(existing) if existing == hist => {}
            Some(existing) => {
                let name = &self.program.global(global).name;
                let mut d = Diagnostic::unsupported(
                    format!("two different @hist_linear layouts for `{name}`"),
                    span,
                )
                .note(format!(
                    "the first is ({}, {}, {}); stap-rs keeps one linear histogram per statistic",
                    existing.lo, existing.hi, existing.width
                ));
                if let Some(first) = self.linear_site[index] {
                    d = d.also(first, "first layout");
                }
                self.report(d);
            }
        }
    }
}

/// Where `break` and `continue` go inside the innermost loop.
#[derive(Clone, Copy)]
pub(super) struct LoopTargets {
    pub exit: super::BlockId,
    pub next: super::BlockId,
}

/// The state of one function being lowered.
pub(super) struct FnLowering<'s, 'p> {
    pub m: &'s mut ModuleState<'p>,
    pub side: Placement,
    pub body: Body,
    /// The register of each HIR local (parameters first).
    pub local_regs: Vec<super::Reg>,
    pub locals: &'p [hir::Local],
    pub param_count: usize,
    pub ret: Option<ValType>,
    pub in_probe: bool,
    pub probe_kind: Option<&'p hir::ProbeKind>,
    /// Memory reads go to user memory (uprobe handlers).
    pub user_memory: bool,
    /// A function return handler (kretprobe or fexit): each `@entry` value its entry probe
    /// saves (map, expression, the register it is loaded into).
    pub saved: Option<Vec<(GlobalId, hir::Expr, super::Reg)>>,
    /// The entry probe that saves `@entry` values: `@entry(e)` is `e`.
    pub at_entry: bool,
    pub loops: Vec<LoopTargets>,
    pub iters: u32,
}

impl<'s, 'p> FnLowering<'s, 'p> {
    fn new(
        m: &'s mut ModuleState<'p>,
        side: Placement,
        locals: &'p [hir::Local],
        param_count: usize,
        ret: Option<ValType>,
    ) -> FnLowering<'s, 'p> {
        let mut body = Body::new();
        let local_regs = locals.iter().map(|l| body.reg(val_type(l.ty))).collect();
        FnLowering {
            m,
            side,
            body,
            local_regs,
            locals,
            param_count,
            ret,
            in_probe: false,
            probe_kind: None,
            user_memory: false,
            saved: None,
            at_entry: false,
            loops: Vec::new(),
            iters: 0,
        }
    }

    pub fn is_kernel(&self) -> bool {
        self.side == Placement::Kernel
    }

    /// Locals start at 0 or "", as in stap; parameters keep their arguments.
    fn init_locals(&mut self, span: Span) {
        for i in self.param_count..self.locals.len() {
            let reg = self.local_regs[i];
            self.zero_into(reg, span);
        }
    }

    /// Sets `reg` to its type's zero value.
    pub fn zero_into(&mut self, reg: super::Reg, span: Span) {
        let op = match self.body.reg_type(reg) {
            ValType::Long => super::Op::Const { dst: reg, value: 0 },
            ValType::Str => super::Op::ConstStr {
                dst: reg,
                id: self.m.string(""),
            },
        };
        self.body.emit(op, span);
    }

    /// `end` is where falling off the end returns (the closing brace).
    fn finish(self, name: String, span: Span, end: Span) -> Function {
        // Only a string function's default return needs "" interned.
        let empty = match self.ret {
            Some(ValType::Str) => self.m.string(""),
            _ => StrId(0),
        };
        let iters = self.iters;
        let (regs, blocks) = self.body.finish(self.ret, empty, end);
        Function {
            name,
            side: self.side,
            param_count: self.param_count,
            ret: self.ret,
            regs,
            blocks,
            iters,
            span,
        }
    }
}
