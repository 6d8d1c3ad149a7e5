//! The `-p1` listing: a parsed file printed back as canonical stap source.
//! Binary operations are fully parenthesised so that precedence is visible,
//! statements get one line each with two-space indentation, and expression
//! statements end in `;` so the output parses back the same way.

use crate::ast::*;
use std::fmt::Write;

/// The `-p1` listing: the parsed program printed back as canonical stap source, binary operations fully
/// parenthesised so precedence is visible (like stap -p1), one item after another.
pub fn print_file(file: &File) -> String {
    let mut p = Printer::default();
    for item in &file.items {
        p.item(item);
    }
    p.out
}

/// One expression as canonical source (used by diagnostics and `-p2`).
pub fn print_expr(expr: &Expr) -> String {
    let mut p = Printer::default();
    p.expr(expr);
    p.out
}

/// One probe point as canonical source: `kernel.function("f").return?`.
pub fn print_probe_point(point: &ProbePoint) -> String {
    let mut p = Printer::default();
    p.probe_point(point);
    p.out
}

#[derive(Default)]
struct Printer {
    out: String,
    indent: usize,
}

impl Printer {
    fn push(&mut self, s: &str) {
        self.out.push_str(s);
    }

    fn newline(&mut self) {
        self.out.push('\n');
        for _ in 0..self.indent {
            self.out.push_str("  ");
        }
    }

    fn item(&mut self, item: &Item) {
        match item {
            Item::Global(g) => {
                if g.private {
                    self.push("private ");
                }
                self.push("global ");
                self.push(&g.name.node);
                if g.array {
                    self.push(if g.wrap { "%[" } else { "[" });
                    if let Some(size) = g.size {
                        let _ = write!(self.out, "{size}");
                    }
                    self.push("]");
                }
                if let Some(init) = &g.init {
                    self.push(" = ");
                    self.literal(&init.node);
                }
            }
            Item::Function(f) => {
                if f.private {
                    self.push("private ");
                }
                self.push("function ");
                self.push(&f.name.node);
                if let Some(ret) = &f.ret {
                    self.type_name(ret.node);
                }
                self.push("(");
                for (i, param) in f.params.iter().enumerate() {
                    if i > 0 {
                        self.push(", ");
                    }
                    self.push(&param.name.node);
                    if let Some(ty) = &param.ty {
                        self.type_name(ty.node);
                    }
                }
                self.push(") ");
                match &f.body {
                    FunctionBody::Block(block) => self.block(block),
                    FunctionBody::EmbeddedC(_) => self.push("%{ ... %}"),
                }
            }
            Item::Probe(probe) => {
                self.push("probe ");
                self.probe_points(&probe.points);
                self.push(" ");
                self.block(&probe.body);
            }
            Item::Alias(alias) => {
                self.push("probe ");
                self.probe_points(&alias.names);
                self.push(if alias.epilogue { " += " } else { " = " });
                self.probe_points(&alias.points);
                self.push(" ");
                self.block(&alias.body);
                if let Some(after) = &alias.after {
                    self.push(", ");
                    self.block(after);
                }
            }
            Item::EmbeddedC(_) => self.push("%{ ... %}"),
        }
        self.push("\n");
    }

    fn type_name(&mut self, ty: TypeName) {
        self.push(match ty {
            TypeName::Long => ":long",
            TypeName::String => ":string",
        });
    }

    fn probe_points(&mut self, points: &[ProbePoint]) {
        for (i, point) in points.iter().enumerate() {
            if i > 0 {
                self.push(", ");
            }
            self.probe_point(point);
        }
    }

    fn probe_point(&mut self, point: &ProbePoint) {
        self.components(&point.components);
        if point.sufficient {
            self.push("!");
        } else if point.optional {
            self.push("?");
        }
        if let Some(cond) = &point.condition {
            self.push(" if (");
            self.expr(cond);
            self.push(")");
        }
    }

    fn components(&mut self, components: &[PointComponent]) {
        for (i, component) in components.iter().enumerate() {
            if i > 0 {
                self.push(".");
            }
            match component {
                PointComponent::Named { name, arg } => {
                    self.push(&name.node);
                    if let Some(arg) = arg {
                        self.push("(");
                        self.literal(&arg.node);
                        self.push(")");
                    }
                }
                PointComponent::Alternatives(alternatives, _) => {
                    self.push("{");
                    for (j, alternative) in alternatives.iter().enumerate() {
                        if j > 0 {
                            self.push(", ");
                        }
                        self.components(alternative);
                    }
                    self.push("}");
                }
            }
        }
    }

    fn block(&mut self, block: &Block) {
        self.push("{");
        self.indent += 1;
        for stmt in &block.stmts {
            self.newline();
            self.stmt(stmt);
        }
        self.indent -= 1;
        self.newline();
        self.push("}");
    }

    /// A loop or branch body: a block stays on the line, anything else goes
    /// on its own indented line.
    fn body(&mut self, stmt: &Stmt) {
        if let StmtKind::Block(block) = &stmt.kind {
            self.push(" ");
            self.block(block);
        } else {
            self.indent += 1;
            self.newline();
            self.stmt(stmt);
            self.indent -= 1;
        }
    }

    fn stmt(&mut self, stmt: &Stmt) {
        match &stmt.kind {
            StmtKind::Block(block) => self.block(block),
            StmtKind::Expr(e) => {
                self.expr(e);
                self.push(";");
            }
            StmtKind::If {
                cond,
                then,
                otherwise,
            } => {
                self.push("if (");
                self.expr(cond);
                self.push(")");
                self.body(then);
                if let Some(otherwise) = otherwise {
                    if matches!(then.kind, StmtKind::Block(_)) {
                        self.push(" ");
                    } else {
                        self.newline();
                    }
                    self.push("else");
                    if matches!(otherwise.kind, StmtKind::If { .. }) {
                        self.push(" ");
                        self.stmt(otherwise);
                    } else {
                        self.body(otherwise);
                    }
                }
            }
            StmtKind::While { cond, body } => {
                self.push("while (");
                self.expr(cond);
                self.push(")");
                self.body(body);
            }
            StmtKind::For {
                init,
                cond,
                step,
                body,
            } => {
                self.push("for (");
                if let Some(e) = init {
                    self.expr(e);
                }
                self.push("; ");
                if let Some(e) = cond {
                    self.expr(e);
                }
                self.push("; ");
                if let Some(e) = step {
                    self.expr(e);
                }
                self.push(")");
                self.body(body);
            }
            StmtKind::Foreach(f) => self.foreach(f),
            StmtKind::Break => self.push("break;"),
            StmtKind::Continue => self.push("continue;"),
            StmtKind::Next => self.push("next;"),
            StmtKind::Return(None) => self.push("return;"),
            StmtKind::Return(Some(e)) => {
                self.push("return ");
                self.expr(e);
                self.push(";");
            }
            StmtKind::Delete(e) => {
                self.push("delete ");
                self.expr(e);
                self.push(";");
            }
            StmtKind::Empty => self.push(";"),
            StmtKind::EmbeddedC => self.push("%{ ... %}"),
            StmtKind::Try { body, var, handler } => {
                self.push("try ");
                self.block(body);
                self.push(" catch");
                if let Some(var) = var {
                    self.push(" (");
                    self.push(&var.node);
                    self.push(")");
                }
                self.push(" ");
                self.block(handler);
            }
        }
    }

    fn foreach(&mut self, f: &Foreach) {
        self.push("foreach (");
        if let Some(value) = &f.value {
            self.push(&value.node);
            self.push(" = ");
        }
        if f.bracketed {
            self.push("[");
        }
        for (i, (key, dir)) in f.keys.iter().enumerate() {
            if i > 0 {
                self.push(", ");
            }
            self.push(&key.node);
            self.sort_dir(*dir);
        }
        if f.bracketed {
            self.push("]");
        }
        self.push(" in ");
        self.push(&f.array.node);
        if let Some(slice) = &f.slice {
            self.push("[");
            for (i, key) in slice.iter().enumerate() {
                if i > 0 {
                    self.push(", ");
                }
                self.expr(key);
            }
            self.push("]");
        }
        if let Some(op) = &f.aggregate {
            self.push(" @");
            self.push(op.node.name());
            if f.value_sort.is_some() {
                self.push(" ");
            }
        }
        self.sort_dir(f.value_sort);
        if let Some(limit) = &f.limit {
            self.push(" limit ");
            self.expr(limit);
        }
        self.push(")");
        self.body(&f.body);
    }

    fn sort_dir(&mut self, dir: Option<SortDir>) {
        match dir {
            Some(SortDir::Ascending) => self.push("+"),
            Some(SortDir::Descending) => self.push("-"),
            None => {}
        }
    }

    fn literal(&mut self, literal: &Literal) {
        match literal {
            Literal::Number(n) => {
                let _ = write!(self.out, "{n}");
            }
            Literal::String(s) => self.string(s),
        }
    }

    fn string(&mut self, s: &str) {
        self.out.push_str(&quote_string(s));
    }

    fn exprs(&mut self, exprs: &[Expr]) {
        for (i, e) in exprs.iter().enumerate() {
            if i > 0 {
                self.push(", ");
            }
            self.expr(e);
        }
    }

    fn expr(&mut self, expr: &Expr) {
        match &expr.kind {
            ExprKind::Literal(literal) => self.literal(literal),
            ExprKind::Var(name) => self.push(name),
            ExprKind::Context(var) => self.context(var),
            ExprKind::Index { array, keys } => {
                self.push(&array.node);
                self.push("[");
                self.exprs(keys);
                self.push("]");
            }
            ExprKind::Member { base, path, pretty } => {
                self.expr(base);
                for step in path {
                    match step {
                        MemberStep::Field(name) => {
                            self.push("->");
                            self.push(&name.node);
                        }
                        MemberStep::Subscript(index) => {
                            self.push("[");
                            self.expr(index);
                            self.push("]");
                        }
                    }
                }
                self.pretty(*pretty);
            }
            ExprKind::Cast { ptr, ty, module } => {
                self.push("@cast(");
                self.expr(ptr);
                self.push(", ");
                self.string(&ty.node);
                if let Some(module) = module {
                    self.push(", ");
                    self.string(&module.node);
                }
                self.push(")");
            }
            ExprKind::AddressOf(operand) => {
                self.push("&");
                self.expr(operand);
            }
            ExprKind::Call { name, args } => {
                self.push(&name.node);
                self.push("(");
                self.exprs(args);
                self.push(")");
            }
            ExprKind::Stat { op, operand, args } => {
                self.push("@");
                self.push(op.name());
                self.push("(");
                self.expr(operand);
                for arg in args {
                    self.push(", ");
                    self.expr(arg);
                }
                self.push(")");
            }
            ExprKind::Entry(e) => self.at_call("@entry", e),
            ExprKind::Defined(e) => self.at_call("@defined", e),
            ExprKind::ChooseDefined(a, b) => {
                self.push("@choose_defined(");
                self.expr(a);
                self.push(", ");
                self.expr(b);
                self.push(")");
            }
            ExprKind::AtVar { name, module } => {
                self.push("@var(");
                self.string(&name.node);
                if let Some(module) = module {
                    self.push(", ");
                    self.string(&module.node);
                }
                self.push(")");
            }
            ExprKind::AtOperator { name, args } => {
                self.push("@");
                self.push(name);
                self.push("(");
                for (i, arg) in args.iter().enumerate() {
                    if i > 0 {
                        self.push(", ");
                    }
                    self.expr(arg);
                }
                self.push(")");
            }
            ExprKind::EmbeddedC => self.push("%{ ... %}"),
            ExprKind::Wildcard => self.push("*"),
            ExprKind::Unary { op, operand } => {
                self.push(match op {
                    UnaryOp::Neg => "-",
                    UnaryOp::Plus => "+",
                    UnaryOp::Not => "!",
                    UnaryOp::BitNot => "~",
                });
                self.expr(operand);
            }
            ExprKind::Binary { op, lhs, rhs } => {
                self.push("(");
                self.expr(lhs);
                self.push(" ");
                self.push(op.symbol());
                self.push(" ");
                self.expr(rhs);
                self.push(")");
            }
            ExprKind::Assign { op, target, value } => {
                self.expr(target);
                self.push(" ");
                self.push(op.symbol());
                self.push(" ");
                self.expr(value);
            }
            ExprKind::Crement {
                increment,
                prefix,
                target,
            } => {
                let sign = if *increment { "++" } else { "--" };
                if *prefix {
                    self.push(sign);
                }
                self.expr(target);
                if !*prefix {
                    self.push(sign);
                }
            }
            ExprKind::Ternary {
                cond,
                then,
                otherwise,
            } => {
                self.push("(");
                self.expr(cond);
                self.push(" ? ");
                self.expr(then);
                self.push(" : ");
                self.expr(otherwise);
                self.push(")");
            }
            ExprKind::In { keys, array } => {
                self.push("(");
                if keys.len() == 1 {
                    self.expr(&keys[0]);
                } else {
                    self.push("[");
                    self.exprs(keys);
                    self.push("]");
                }
                self.push(" in ");
                self.push(&array.node);
                self.push(")");
            }
            ExprKind::Regex {
                negated,
                subject,
                pattern,
            } => {
                self.push("(");
                self.expr(subject);
                self.push(if *negated { " !~ " } else { " =~ " });
                self.expr(pattern);
                self.push(")");
            }
            ExprKind::Error => self.push("<error>"),
        }
    }

    fn at_call(&mut self, name: &str, e: &Expr) {
        self.push(name);
        self.push("(");
        self.expr(e);
        self.push(")");
    }

    fn context(&mut self, var: &ContextVar) {
        match var {
            ContextVar::Named(name) => {
                self.push("$");
                self.push(name);
            }
            ContextVar::Return => self.push("$return"),
            ContextVar::Bulk { which, pretty } => {
                self.push(match which {
                    BulkContext::Vars => "$$vars",
                    BulkContext::Parms => "$$parms",
                    BulkContext::Locals => "$$locals",
                    BulkContext::Return => "$$return",
                });
                self.pretty(*pretty);
            }
        }
    }

    fn pretty(&mut self, pretty: Option<PrettyDepth>) {
        match pretty {
            Some(PrettyDepth::Shallow) => self.push("$"),
            Some(PrettyDepth::Deep) => self.push("$$"),
            None => {}
        }
    }
}

/// `s` as a stap string literal that parses back to the same text; every
/// listing (`-p1`, `-p2`, the IR) quotes strings this way.
pub fn quote_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = write!(out, "\\{:03o}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
