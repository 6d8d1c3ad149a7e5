//! The `-p2` listing: the elaborated program, with inferred types, resolved
//! probe points, placements, and kernel accesses annotated with their
//! offsets and types.

use super::hir::{
    AccessBase, AccessStep, AccessValue, Block, Constant, ContextSource, ContextVar, Delete, Expr,
    ExprKind, Function, Global, Local, Probe, Program, Stmt, StmtKind,
};
use crate::ast::{BulkContext, PrettyDepth, SortDir, UnaryOp};
use crate::ast_print::quote_string;
use crate::source::SourceMap;
use std::fmt::Write;

/// The `-p2` listing.
pub fn print_program(program: &Program, map: &SourceMap) -> String {
    let mut p = Printer {
        program,
        map,
        out: String::new(),
        indent: 0,
    };
    p.program();
    p.out
}

struct Printer<'p> {
    program: &'p Program,
    map: &'p SourceMap,
    out: String,
    indent: usize,
}

fn global_type(g: &Global) -> String {
    if g.is_array {
        let keys: Vec<&str> = g.keys.iter().map(|k| k.name()).collect();
        format!("{}[{}]", g.ty.name(), keys.join(", "))
    } else {
        g.ty.name().to_string()
    }
}

fn locals_line(locals: &[Local]) -> String {
    if locals.is_empty() {
        return "(none)".to_string();
    }
    let parts: Vec<String> = locals
        .iter()
        .map(|l| format!("{}:{}", l.name, l.ty.name()))
        .collect();
    parts.join(", ")
}

fn source_of(v: &ContextVar) -> String {
    match &v.source {
        ContextSource::TracepointArg(i) => format!("ctx[{i}]"),
        ContextSource::ClassicField { offset, size } => format!("record +{offset}, {size} bytes"),
        ContextSource::FunctionParam(i) => format!("arg {i}"),
        ContextSource::Return => "return value".to_string(),
        ContextSource::PointedField { index, offset } => format!("ctx[{index}] +{offset}"),
        ContextSource::Constant(n) => format!("constant {n}"),
        ContextSource::SdtArg(arg) => format!("SDT argument {arg}"),
    }
}

impl Printer<'_> {
    fn line(&mut self, text: &str) {
        for _ in 0..self.indent {
            self.out.push_str("  ");
        }
        self.out.push_str(text);
        self.out.push('\n');
    }

    fn program(&mut self) {
        let program = self.program;
        self.line("# globals");
        for g in &program.globals {
            self.global(g);
        }
        self.line("");
        self.line("# functions");
        for f in &program.functions {
            self.function(f);
        }
        self.line("");
        self.line("# probes");
        for (i, probe) in program.probes.iter().enumerate() {
            if i > 0 {
                self.line("");
            }
            self.probe(probe);
        }
        let limits = &program.limits;
        self.line("");
        self.line("# limits");
        self.line(&format!(
            "MAXSTRINGLEN={} MAXMAPENTRIES={} MAXACTION={} MAXERRORS={}",
            limits.max_string_len, limits.max_map_entries, limits.max_action, limits.max_errors
        ));
        let needs = &program.needs;
        let named = [
            (needs.raw_tracepoints, "raw tracepoints"),
            (needs.classic_tracepoints, "classic tracepoints"),
            (needs.fentry, "fentry/fexit"),
            (needs.kprobes, "kprobes"),
            (needs.uprobes, "uprobes"),
            (needs.perf_events, "perf events"),
        ];
        let list: Vec<&str> = named
            .iter()
            .filter(|(on, _)| *on)
            .map(|(_, name)| *name)
            .collect();
        let list = if list.is_empty() {
            "none".to_string()
        } else {
            list.join(", ")
        };
        self.line(&format!("kernel mechanisms needed: {list}"));
    }

    fn global(&mut self, g: &Global) {
        let mut text = format!("{}: {}", g.name, global_type(g));
        match &g.init {
            Some(Constant::Long(n)) => {
                let _ = write!(text, " = {n}");
            }
            Some(Constant::String(s)) => {
                let _ = write!(text, " = {}", quote_string(s));
            }
            None => {}
        }
        let mut notes = Vec::new();
        if let Some(size) = g.size {
            notes.push(format!("size {size}"));
        }
        if g.wrap {
            notes.push("wraps".to_string());
        }
        if g.private {
            notes.push("private".to_string());
        }
        if g.from_tapset {
            notes.push(format!("tapset {}", self.map.get(g.span.file).name));
        }
        notes.push(format!("used by: {}", g.used_by.describe()));
        let _ = write!(text, "  // {}", notes.join(", "));
        self.line(&text);
    }

    fn function(&mut self, f: &Function) {
        let params: Vec<String> = f
            .params()
            .iter()
            .map(|l| format!("{}:{}", l.name, l.ty.name()))
            .collect();
        self.line(&format!(
            "{}:{} ({})",
            f.name,
            f.ret.name(),
            params.join(", ")
        ));
        self.indent += 1;
        self.line(&format!("defined at: {}", self.map.location(f.span)));
        self.line(&format!("runs on: {}", f.runs_on.describe()));
        self.line(&format!(
            "locals: {}",
            locals_line(&f.locals[f.param_count..])
        ));
        self.block(&f.body, &f.locals);
        self.indent -= 1;
    }

    fn probe(&mut self, p: &Probe) {
        self.line(&p.resolved);
        self.indent += 1;
        self.line(&format!(
            "written: {} at {}",
            p.written,
            self.map.location(p.span)
        ));
        if !p.alias_chain.is_empty() {
            self.line(&format!("via alias: {}", p.alias_chain.join(" -> ")));
        }
        self.mechanism(p);
        self.line(&format!("runs in: {}", p.placement.describe()));
        self.line(&format!("locals: {}", locals_line(&p.locals)));
        if let Some(c) = &p.condition {
            let text = self.expr(c, &p.locals);
            self.line(&format!("condition: {text}"));
        }
        self.block(&p.body, &p.locals);
        self.indent -= 1;
    }

    fn mechanism(&mut self, p: &Probe) {
        let text = p.kind.mechanism();
        self.line(&format!("mechanism: {text}"));
        self.indent += 1;
        for v in &p.context {
            self.line(&format!("${}: {} ({})", v.name, v.type_name, source_of(v)));
        }
        self.indent -= 1;
    }

    fn block(&mut self, b: &Block, locals: &[Local]) {
        self.line("{");
        self.indent += 1;
        for s in &b.stmts {
            self.stmt(s, locals);
        }
        self.indent -= 1;
        self.line("}");
    }

    /// A statement that is the body of `if`/`while`/...: a block prints its
    /// braces on its own lines, anything else is indented.
    fn body(&mut self, s: &Stmt, locals: &[Local]) {
        match &s.kind {
            StmtKind::Block(b) => self.block(b, locals),
            _ => {
                self.indent += 1;
                self.stmt(s, locals);
                self.indent -= 1;
            }
        }
    }

    fn stmt(&mut self, s: &Stmt, locals: &[Local]) {
        match &s.kind {
            StmtKind::Block(b) => self.block(b, locals),
            StmtKind::Expr(e) => {
                let text = self.expr(e, locals);
                self.line(&text);
            }
            StmtKind::If {
                cond,
                then,
                otherwise,
            } => {
                let text = self.expr(cond, locals);
                self.line(&format!("if ({text})"));
                self.body(then, locals);
                if let Some(o) = otherwise {
                    self.line("else");
                    self.body(o, locals);
                }
            }
            StmtKind::While { cond, body } => {
                let text = self.expr(cond, locals);
                self.line(&format!("while ({text})"));
                self.body(body, locals);
            }
            StmtKind::For {
                init,
                cond,
                step,
                body,
            } => {
                let part = |p: &mut Self, e: &Option<Expr>| {
                    e.as_ref().map_or(String::new(), |e| p.expr(e, locals))
                };
                let (i, c, st) = (part(self, init), part(self, cond), part(self, step));
                self.line(&format!("for ({i}; {c}; {st})"));
                self.body(body, locals);
            }
            StmtKind::Foreach(f) => {
                let sort = |d: &Option<SortDir>| match d {
                    Some(SortDir::Ascending) => "+",
                    Some(SortDir::Descending) => "-",
                    None => "",
                };
                let keys: Vec<String> = f
                    .keys
                    .iter()
                    .zip(&f.key_sort)
                    .map(|(k, s)| format!("{}{}", locals[k.0 as usize].name, sort(s)))
                    .collect();
                let mut text = String::from("foreach (");
                if let Some(v) = f.value {
                    let _ = write!(text, "{} = ", locals[v.0 as usize].name);
                }
                let g = self.program.global(f.global);
                let _ = write!(text, "[{}] in {}", keys.join(", "), g.name);
                match (f.aggregate, f.value_sort) {
                    (Some(a), Some(_)) => {
                        let _ = write!(text, " @{} {}", a.name(), sort(&f.value_sort));
                    }
                    (Some(a), None) => {
                        let _ = write!(text, " @{}", a.name());
                    }
                    (None, _) => text.push_str(sort(&f.value_sort)),
                }
                if let Some(l) = &f.limit {
                    let _ = write!(text, " limit {}", self.expr(l, locals));
                }
                text.push(')');
                if f.is_sorted() {
                    text.push_str("  // sorted");
                }
                self.line(&text);
                self.body(&f.body, locals);
            }
            StmtKind::Break => self.line("break"),
            StmtKind::Continue => self.line("continue"),
            StmtKind::Next => self.line("next"),
            StmtKind::Return(None) => self.line("return"),
            StmtKind::Return(Some(e)) => {
                let text = self.expr(e, locals);
                self.line(&format!("return {text}"));
            }
            StmtKind::Delete(d) => {
                let text = match d {
                    Delete::Global(g) => self.program.global(*g).name.clone(),
                    Delete::Local(l) => locals[l.0 as usize].name.clone(),
                    Delete::Element { global, keys } => {
                        let keys: Vec<String> = keys.iter().map(|k| self.expr(k, locals)).collect();
                        format!("{}[{}]", self.program.global(*global).name, keys.join(", "))
                    }
                };
                self.line(&format!("delete {text}"));
            }
            StmtKind::Empty => self.line(";"),
            StmtKind::Try {
                body,
                message,
                handler,
            } => {
                self.line("try");
                self.block(body, locals);
                match message {
                    Some(m) => self.line(&format!("catch ({})", locals[m.0 as usize].name)),
                    None => self.line("catch"),
                }
                self.block(handler, locals);
            }
        }
    }

    /// An operand: compound expressions get parentheses.
    fn operand(&self, e: &Expr, locals: &[Local]) -> String {
        let text = self.expr(e, locals);
        match e.kind {
            ExprKind::Binary { .. }
            | ExprKind::Assign { .. }
            | ExprKind::Ternary { .. }
            | ExprKind::Regex { .. }
            | ExprKind::In { .. } => format!("({text})"),
            _ => text,
        }
    }

    fn list(&self, args: &[Expr], locals: &[Local]) -> String {
        let parts: Vec<String> = args.iter().map(|a| self.expr(a, locals)).collect();
        parts.join(", ")
    }

    fn expr(&self, e: &Expr, locals: &[Local]) -> String {
        match &e.kind {
            ExprKind::Long(n) => n.to_string(),
            ExprKind::Str(s) => quote_string(s),
            ExprKind::Local(l) => locals
                .get(l.0 as usize)
                .map_or("?".to_string(), |l| l.name.clone()),
            ExprKind::Global(g) => self.program.global(*g).name.clone(),
            ExprKind::Index { global, keys } => {
                format!(
                    "{}[{}]",
                    self.program.global(*global).name,
                    self.list(keys, locals)
                )
            }
            ExprKind::Context(access) => {
                let mut text = match &access.base {
                    AccessBase::Var(v) if v.source == ContextSource::Return => {
                        "$return".to_string()
                    }
                    AccessBase::Var(v) => format!("${}", v.name),
                    AccessBase::Cast {
                        ptr, target_name, ..
                    } => {
                        format!(
                            "@cast({}, {})",
                            self.expr(ptr, locals),
                            quote_string(target_name)
                        )
                    }
                };
                let mut notes = Vec::new();
                if let AccessBase::Var(v) = &access.base
                    && access.steps.is_empty()
                {
                    notes.push(format!("{}, {}", source_of(v), v.type_name));
                }
                for step in &access.steps {
                    match step {
                        AccessStep::Member {
                            name,
                            byte_offset,
                            bitfield,
                            type_name,
                            ..
                        } => {
                            let _ = write!(text, "->{name}");
                            let bits = bitfield.map_or(String::new(), |b| {
                                format!(" bits {}..{}", b.bit_shift, b.bit_shift + b.bits)
                            });
                            notes.push(format!("+{byte_offset}{bits}, {type_name}"));
                        }
                        AccessStep::Subscript {
                            index,
                            elem_size,
                            type_name,
                            ..
                        } => {
                            let _ = write!(text, "[{}]", self.expr(index, locals));
                            notes.push(format!("* {elem_size}, {type_name}"));
                        }
                    }
                }
                match access.value {
                    AccessValue::Address => notes.push("its address".to_string()),
                    AccessValue::AddressOf => text = format!("&{text}"),
                    AccessValue::Pretty(PrettyDepth::Shallow) => {
                        text.push('$');
                        notes.push("pretty-printed".to_string());
                    }
                    AccessValue::Pretty(PrettyDepth::Deep) => {
                        text.push_str("$$");
                        notes.push("pretty-printed, recursively".to_string());
                    }
                    AccessValue::Integer { .. } | AccessValue::Pointer => {}
                }
                format!("{text} /* {} */", notes.join("; "))
            }
            ExprKind::Bulk {
                which,
                vars,
                pretty,
                ..
            } => {
                let name = match which {
                    BulkContext::Vars => "$$vars",
                    BulkContext::Parms => "$$parms",
                    BulkContext::Locals => "$$locals",
                    BulkContext::Return => "$$return",
                };
                let suffix = match pretty {
                    None => "",
                    Some(PrettyDepth::Shallow) => "$",
                    Some(PrettyDepth::Deep) => "$$",
                };
                let names: Vec<String> = vars.iter().map(|v| format!("${}", v.name)).collect();
                format!("{name}{suffix} /* {} */", names.join(" "))
            }
            ExprKind::Call { function, args } => {
                format!(
                    "{}({})",
                    self.program.function(*function).name,
                    self.list(args, locals)
                )
            }
            ExprKind::Builtin { name, args } => format!("{name}({})", self.list(args, locals)),
            ExprKind::Stat { op, operand, args } => {
                let mut parts = vec![self.expr(operand, locals)];
                parts.extend(args.iter().map(|a| self.expr(a, locals)));
                format!("@{}({})", op.name(), parts.join(", "))
            }
            ExprKind::Entry(inner) => format!("@entry({})", self.expr(inner, locals)),
            ExprKind::Unary { op, operand } => {
                let sym = match op {
                    UnaryOp::Neg => "-",
                    UnaryOp::Plus => "+",
                    UnaryOp::Not => "!",
                    UnaryOp::BitNot => "~",
                };
                format!("{sym}{}", self.operand(operand, locals))
            }
            ExprKind::Binary { op, lhs, rhs } => format!(
                "{} {} {}",
                self.operand(lhs, locals),
                op.symbol(),
                self.operand(rhs, locals)
            ),
            ExprKind::Assign { op, target, value } => {
                format!(
                    "{} {} {}",
                    self.expr(target, locals),
                    op.symbol(),
                    self.operand(value, locals)
                )
            }
            ExprKind::Crement {
                increment,
                prefix,
                target,
            } => {
                let sym = if *increment { "++" } else { "--" };
                let t = self.operand(target, locals);
                if *prefix {
                    format!("{sym}{t}")
                } else {
                    format!("{t}{sym}")
                }
            }
            ExprKind::Ternary {
                cond,
                then,
                otherwise,
            } => format!(
                "{} ? {} : {}",
                self.operand(cond, locals),
                self.operand(then, locals),
                self.operand(otherwise, locals)
            ),
            ExprKind::In { keys, global } => {
                format!(
                    "[{}] in {}",
                    self.list(keys, locals),
                    self.program.global(*global).name
                )
            }
            ExprKind::Regex {
                negated,
                subject,
                pattern,
            } => format!(
                "{} {} {}",
                self.operand(subject, locals),
                if *negated { "!~" } else { "=~" },
                self.operand(pattern, locals)
            ),
            ExprKind::Invalid => "<invalid>".to_string(),
        }
    }
}
