//! The `--dump=ir` / `-p3` listing: globals with their storage, probes with
//! their handlers, then every function's registers and blocks, one
//! instruction per line with the script line it came from. Deterministic,
//! and safe on malformed modules (out-of-range ids print as `?`).

use super::Placement;
use super::{BinOp, Constant};
use super::{
    Block, BulkSource, Catch, CmpOp, Failure, Function, Global, HistKind, Inst, Module, Op,
    PrintArg, Reg, Sort, SortBy, StatNeeds, StatValue, Storage, SymbolText, Term, UnOp, ValType,
};
use crate::ast_print::quote_string;
use crate::source::{SourceMap, Span};
use std::fmt::Write;

/// Instructions are padded to this column before their `; file:line`.
const COMMENT_COLUMN: usize = 48;

pub fn print_module(module: &Module, map: &SourceMap) -> String {
    let p = Printer { module, map };
    let mut out = String::new();
    out.push_str("# globals\n");
    for (i, g) in module.globals.iter().enumerate() {
        let _ = writeln!(out, "g{i} {}", global_line(g));
    }
    out.push_str("\n# probes\n");
    for (i, probe) in module.probes.iter().enumerate() {
        let _ = writeln!(
            out,
            "probe{i} {} ({}, {}) -> fn{}",
            probe.point,
            probe.kind.family(),
            side(probe.placement),
            probe.function.0
        );
    }
    for (i, f) in module.functions.iter().enumerate() {
        out.push('\n');
        p.function(&mut out, i, f);
    }
    let limits = &module.limits;
    let _ = writeln!(
        out,
        "\n# limits\nMAXSTRINGLEN={} MAXMAPENTRIES={} MAXACTION={} MAXERRORS={}",
        limits.max_string_len, limits.max_map_entries, limits.max_action, limits.max_errors
    );
    out
}

fn side(p: Placement) -> &'static str {
    match p {
        Placement::Kernel => "kernel",
        Placement::Host => "host",
    }
}

fn ty(t: ValType) -> &'static str {
    match t {
        ValType::Long => "long",
        ValType::Str => "str",
    }
}

fn types(ts: &[ValType]) -> String {
    ts.iter().map(|t| ty(*t)).collect::<Vec<_>>().join(", ")
}

fn global_line(g: &Global) -> String {
    let mut text = format!("{}: ", g.name);
    match &g.storage {
        Storage::Scalar(t) => text.push_str(ty(*t)),
        Storage::Array {
            keys,
            value,
            max_entries,
            wrap,
        } => {
            let _ = write!(text, "{}[{}] max {max_entries}", ty(*value), types(keys));
            if *wrap {
                text.push_str(" wraps");
            }
        }
        Storage::Stats {
            keys,
            max_entries,
            needs,
        } => {
            text.push_str("stats");
            if !keys.is_empty() {
                let _ = write!(text, "[{}]", types(keys));
            }
            let _ = write!(text, " max {max_entries} keeps {}", needs_text(needs));
        }
    }
    match &g.init {
        Some(Constant::Long(n)) => {
            let _ = write!(text, " = {n}");
        }
        Some(Constant::String(s)) => {
            let _ = write!(text, " = {}", quote_string(s));
        }
        None => {}
    }
    let sides = match (g.kernel, g.host) {
        (true, true) => "kernel, host",
        (true, false) => "kernel",
        (false, true) => "host",
        (false, false) => "unused",
    };
    let _ = write!(text, "  // {sides}");
    text
}

fn needs_text(needs: &StatNeeds) -> String {
    let mut parts = vec!["count".to_string(), "sum".to_string()];
    if needs.min_max {
        parts.push("min/max".into());
    }
    if needs.variance {
        parts.push("variance".into());
    }
    if needs.hist_log {
        parts.push("hist_log".into());
    }
    if let Some(h) = needs.hist_linear {
        parts.push(format!("hist_linear({}, {}, {})", h.lo, h.hi, h.width));
    }
    parts.join(", ")
}

fn unop(op: UnOp) -> &'static str {
    match op {
        UnOp::Neg => "neg",
        UnOp::Not => "not",
        UnOp::BitNot => "bitnot",
    }
}

fn binop(op: BinOp) -> &'static str {
    match op {
        BinOp::Add => "add",
        BinOp::Sub => "sub",
        BinOp::Mul => "mul",
        BinOp::Div => "div",
        BinOp::Mod => "mod",
        BinOp::Shl => "shl",
        BinOp::Shr => "sar",
        BinOp::And => "and",
        BinOp::Or => "or",
        BinOp::Xor => "xor",
    }
}

fn cmpop(op: CmpOp) -> &'static str {
    match op {
        CmpOp::Eq => "eq",
        CmpOp::Ne => "ne",
        CmpOp::Lt => "lt",
        CmpOp::Le => "le",
        CmpOp::Gt => "gt",
        CmpOp::Ge => "ge",
    }
}

fn stat_value(v: StatValue) -> String {
    match v {
        StatValue::Count => "count".into(),
        StatValue::Sum => "sum".into(),
        StatValue::Min => "min".into(),
        StatValue::Max => "max".into(),
        StatValue::Avg => "avg".into(),
        StatValue::Variance { shift } => format!("variance({shift})"),
    }
}

fn sort_text(sort: &Sort) -> String {
    let by = match sort.by {
        SortBy::Key(i) => format!("key {i}"),
        SortBy::Value => "value".into(),
        SortBy::Aggregate(v) => format!("@{}", stat_value(v)),
    };
    let dir = if sort.descending { "desc" } else { "asc" };
    format!(" sorted by {by} {dir}")
}

/// `r0-r7:long r8:str`: runs of registers of one type.
fn register_runs(regs: &[ValType]) -> String {
    let mut parts = Vec::new();
    let mut start = 0;
    for i in 1..=regs.len() {
        if i == regs.len() || regs[i] != regs[start] {
            let range = if i - 1 == start {
                format!("r{start}")
            } else {
                format!("r{start}-r{}", i - 1)
            };
            parts.push(format!("{range}:{}", ty(regs[start])));
            start = i;
        }
    }
    if parts.is_empty() {
        return "(none)".into();
    }
    parts.join(" ")
}

fn reg(r: Reg) -> String {
    format!("r{}", r.0)
}

fn regs(rs: &[Reg]) -> String {
    rs.iter().map(|r| reg(*r)).collect::<Vec<_>>().join(", ")
}

struct Printer<'a> {
    module: &'a Module,
    map: &'a SourceMap,
}

impl Printer<'_> {
    fn func_name(&self, index: u32) -> String {
        self.module
            .functions
            .get(index as usize)
            .map_or_else(|| format!("fn{index}?"), |f| f.name.clone())
    }

    fn global_name(&self, id: super::GlobalId) -> String {
        self.module
            .globals
            .get(id.0 as usize)
            .map_or_else(|| format!("g{}?", id.0), |g| g.name.clone())
    }

    fn string(&self, id: super::StrId) -> String {
        self.module
            .strings
            .get(id.0 as usize)
            .map_or_else(|| format!("s{}?", id.0), |s| quote_string(s))
    }

    fn format(&self, id: super::FormatId) -> String {
        self.module
            .formats
            .get(id.0 as usize)
            .map_or_else(|| format!("f{}?", id.0), |f| quote_string(&f.text))
    }

    /// `script.stp:11`: the file's base name and the line.
    fn location(&self, span: Span) -> String {
        let Some((_, file)) = self.map.files().find(|(id, _)| *id == span.file) else {
            return "?".into();
        };
        let name = file.name.rsplit('/').next().unwrap_or(&file.name);
        let offset = (span.start as usize).min(file.text.len());
        format!("{name}:{}", file.line_col(offset).0)
    }

    fn line(&self, out: &mut String, text: &str, span: Span) {
        let _ = writeln!(
            out,
            "    {text:<width$} ; {}",
            self.location(span),
            width = COMMENT_COLUMN
        );
    }

    fn function(&self, out: &mut String, index: usize, f: &Function) {
        let params: Vec<String> = (0..f.param_count.min(f.regs.len()))
            .map(|i| format!("r{i}:{}", ty(f.regs[i])))
            .collect();
        let ret = f.ret.map_or("void", ty);
        let _ = writeln!(
            out,
            "fn{index} {} [{}] ({}) -> {ret}",
            f.name,
            side(f.side),
            params.join(", ")
        );
        let _ = writeln!(out, "  regs: {}", register_runs(&f.regs));
        if f.iters > 0 {
            let _ = writeln!(out, "  iterators: {}", f.iters);
        }
        for (i, block) in f.blocks.iter().enumerate() {
            self.block(out, i, block);
        }
    }

    fn block(&self, out: &mut String, index: usize, block: &Block) {
        match block.catch {
            None => {
                let _ = writeln!(out, "  bb{index}:");
            }
            Some(Catch {
                handler,
                message: None,
            }) => {
                let _ = writeln!(out, "  bb{index}: (errors -> bb{})", handler.0);
            }
            Some(Catch {
                handler,
                message: Some(m),
            }) => {
                let _ = writeln!(
                    out,
                    "  bb{index}: (errors -> bb{}, text in r{})",
                    handler.0, m.0
                );
            }
        }
        for Inst { op, span } in &block.insts {
            self.line(out, &self.op(op), *span);
        }
        self.line(out, &self.term(&block.term), block.term_span);
    }

    fn keyed(&self, global: super::GlobalId, keys: &[Reg]) -> String {
        format!("{}[{}]", self.global_name(global), regs(keys))
    }

    fn op(&self, op: &Op) -> String {
        match op {
            Op::Const { dst, value } => format!("{} = const {value}", reg(*dst)),
            Op::ConstStr { dst, id } => format!("{} = const {}", reg(*dst), self.string(*id)),
            Op::Move { dst, src } => format!("{} = {}", reg(*dst), reg(*src)),
            Op::Unary { dst, op, src } => format!("{} = {} {}", reg(*dst), unop(*op), reg(*src)),
            Op::Binary { dst, op, lhs, rhs } => {
                format!(
                    "{} = {} {}, {}",
                    reg(*dst),
                    binop(*op),
                    reg(*lhs),
                    reg(*rhs)
                )
            }
            Op::Compare { dst, op, lhs, rhs } => format!(
                "{} = cmp.{} {}, {}",
                reg(*dst),
                cmpop(*op),
                reg(*lhs),
                reg(*rhs)
            ),
            Op::StrCompare { dst, op, lhs, rhs } => format!(
                "{} = strcmp.{} {}, {}",
                reg(*dst),
                cmpop(*op),
                reg(*lhs),
                reg(*rhs)
            ),
            Op::Concat { dst, lhs, rhs } => {
                format!("{} = concat {}, {}", reg(*dst), reg(*lhs), reg(*rhs))
            }
            Op::LoadGlobal { dst, global } => {
                format!("{} = load {}", reg(*dst), self.global_name(*global))
            }
            Op::StoreGlobal { global, src } => {
                format!("store {} = {}", self.global_name(*global), reg(*src))
            }
            Op::AddGlobal { global, delta } => {
                format!(
                    "atomic_add {} += {}",
                    self.global_name(*global),
                    reg(*delta)
                )
            }
            Op::MapGet { dst, global, keys } => {
                format!("{} = map_get {}", reg(*dst), self.keyed(*global, keys))
            }
            Op::MapSet { global, keys, src } => {
                format!("map_set {} = {}", self.keyed(*global, keys), reg(*src))
            }
            Op::MapAdd {
                global,
                keys,
                delta,
            } => format!("map_add {} += {}", self.keyed(*global, keys), reg(*delta)),
            Op::MapDelete { global, keys } => {
                format!("map_delete {}", self.keyed(*global, keys))
            }
            Op::MapContains { dst, global, keys } => {
                format!("{} = map_contains {}", reg(*dst), self.keyed(*global, keys))
            }
            Op::MapInsert {
                dst,
                global,
                keys,
                src,
            } => format!(
                "{} = map_insert {} = {}",
                reg(*dst),
                self.keyed(*global, keys),
                reg(*src)
            ),
            Op::Clear { global } => format!("clear {}", self.global_name(*global)),
            Op::StatAdd {
                global,
                keys,
                value,
            } => format!("stat_add {} <<< {}", self.keyed(*global, keys), reg(*value)),
            Op::StatGet {
                dst,
                global,
                keys,
                what,
            } => format!(
                "{} = stat_get @{} {}",
                reg(*dst),
                stat_value(*what),
                self.keyed(*global, keys)
            ),
            Op::PrintHist { global, keys, kind } => {
                let kind = match kind {
                    HistKind::Log => "log".to_string(),
                    HistKind::Linear(h) => format!("linear({}, {}, {})", h.lo, h.hi, h.width),
                };
                format!("print_hist {kind} {}", self.keyed(*global, keys))
            }
            Op::IterStart {
                iter,
                global,
                sort,
                limit,
            } => {
                let mut text = format!("iter_start it{} {}", iter.0, self.global_name(*global));
                if let Some(sort) = sort {
                    text.push_str(&sort_text(sort));
                }
                if let Some(limit) = limit {
                    let _ = write!(text, " limit {}", reg(*limit));
                }
                text
            }
            Op::IterNext {
                iter,
                has,
                keys,
                value,
            } => {
                let mut text = format!(
                    "{} = iter_next it{} keys [{}]",
                    reg(*has),
                    iter.0,
                    regs(keys)
                );
                if let Some(v) = value {
                    let _ = write!(text, " value {}", reg(*v));
                }
                text
            }
            Op::Call { dst, func, args } => {
                let call = format!("call {}({})", self.func_name(func.0), regs(args));
                match dst {
                    Some(d) => format!("{} = {call}", reg(*d)),
                    None => call,
                }
            }
            Op::Builtin { dst, name, args } => {
                let call = format!("builtin {name}({})", regs(args));
                match dst {
                    Some(d) => format!("{} = {call}", reg(*d)),
                    None => call,
                }
            }
            Op::ContextArg { dst, index } => format!("{} = ctx_arg {index}", reg(*dst)),
            Op::ContextField {
                dst,
                offset,
                size,
                signed,
            } => format!(
                "{} = ctx_field +{offset} {}{}",
                reg(*dst),
                if *signed { "s" } else { "u" },
                size * 8
            ),
            Op::ContextReturn { dst } => format!("{} = ctx_return", reg(*dst)),
            Op::ReadKernel {
                dst,
                addr,
                size,
                signed,
            } => format!(
                "{} = read_kernel.{}{} [{}]",
                reg(*dst),
                if *signed { "s" } else { "u" },
                size * 8,
                reg(*addr)
            ),
            Op::ReadUser {
                dst,
                addr,
                size,
                signed,
            } => format!(
                "{} = read_user.{}{} [{}]",
                reg(*dst),
                if *signed { "s" } else { "u" },
                size * 8,
                reg(*addr)
            ),
            Op::Printf { format, args } => {
                let args: Vec<String> = args
                    .iter()
                    .map(|a| match a {
                        PrintArg::Value(r) => reg(*r),
                        PrintArg::Symbol { addr, how } => match how {
                            SymbolText::Name => format!("symname({})", reg(*addr)),
                            SymbolText::Data => format!("symdata({})", reg(*addr)),
                            SymbolText::Module => format!("modname({})", reg(*addr)),
                            SymbolText::Enum(e) => {
                                format!("enum_name({}, {})", self.string(*e), reg(*addr))
                            }
                            SymbolText::Time { local } => {
                                format!("{}ctime({})", if *local { "tz_" } else { "" }, reg(*addr))
                            }
                            SymbolText::Stack { user, full } => format!(
                                "{}stack({})",
                                if *user { "u" } else { "k" },
                                if *full { "full" } else { "short" }
                            ),
                        },
                    })
                    .collect();
                format!("printf {}({})", self.format(*format), args.join(", "))
            }
            Op::Sprintf { dst, format, args } => format!(
                "{} = sprintf {}({})",
                reg(*dst),
                self.format(*format),
                regs(args)
            ),
            Op::BulkArgs { dst, items } => {
                let items: Vec<String> = items
                    .iter()
                    .map(|item| match item.source {
                        BulkSource::Arg(index) => format!("{}=arg {index}", item.name),
                        BulkSource::Return => format!("{}=return", item.name),
                    })
                    .collect();
                format!("{} = bulk_args({})", reg(*dst), items.join(", "))
            }
            Op::Exit => "exit".into(),
            Op::Tick => "tick".into(),
        }
    }

    fn term(&self, term: &Term) -> String {
        match term {
            Term::Jump(b) => format!("jump bb{}", b.0),
            Term::Branch {
                cond,
                then,
                otherwise,
            } => format!("branch {} ? bb{} : bb{}", reg(*cond), then.0, otherwise.0),
            Term::Return(None) => "return".into(),
            Term::Return(Some(r)) => format!("return {}", reg(*r)),
            Term::Fail(Failure::DivisionByZero) => "fail division by zero".into(),
            Term::Fail(Failure::Explicit(r)) => format!("fail error({})", reg(*r)),
        }
    }
}
