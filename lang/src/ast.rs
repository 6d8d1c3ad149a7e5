//! The spanned syntax tree of a script or tapset, exactly as written: no
//! names are resolved and no types are known here (that is `sema`'s job).

use crate::source::{Span, Spanned};

pub type Ident = Spanned<String>;

/// One parsed file: a script, `-e` text, or a stdlib tapset.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct File {
    pub items: Vec<Item>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Item {
    Global(Global),
    Function(Function),
    Probe(Probe),
    /// `probe NAME = POINT, ... { prologue }` or `probe NAME += ... { epilogue }`.
    Alias(ProbeAlias),
    /// `%{ ... %}` at top level. Kept so that elaboration reports it as
    /// unsupported with its span.
    EmbeddedC(Span),
}

/// `[private] global name[[%]SIZE] [= init]`; one per declared name, so
/// `global a, b` gives two.
#[derive(Debug, Clone, PartialEq)]
pub struct Global {
    pub name: Ident,
    pub private: bool,
    /// `global a[100]` gives `Some(100)`.
    pub size: Option<u64>,
    /// `global a%[100]`: a wrap-around array.
    pub wrap: bool,
    /// `global a[]` or `global a[N]`: declared as an array without keys.
    pub array: bool,
    pub init: Option<Spanned<Literal>>,
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Function {
    pub name: Ident,
    pub private: bool,
    pub ret: Option<Spanned<TypeName>>,
    pub params: Vec<Param>,
    pub body: FunctionBody,
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq)]
pub enum FunctionBody {
    Block(Block),
    /// `%{ ... %}`: embedded C, always refused during elaboration.
    EmbeddedC(Span),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Param {
    pub name: Ident,
    pub ty: Option<Spanned<TypeName>>,
}

/// A type written in a declaration: `:long`, `:string`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TypeName {
    Long,
    String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Probe {
    pub points: Vec<ProbePoint>,
    pub body: Block,
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ProbeAlias {
    /// The names being defined, e.g. `tcp.sendmsg` (several are allowed:
    /// `probe a = x, b = x` is written as separate aliases by stap, but
    /// `probe a, b = x` defines both).
    pub names: Vec<ProbePoint>,
    /// `+=` (epilogue) instead of `=` (prologue).
    pub epilogue: bool,
    pub points: Vec<ProbePoint>,
    pub body: Block,
    /// `probe a = b { prologue }, { epilogue }`: a second body, run after
    /// the user's.
    pub after: Option<Block>,
    pub span: Span,
}

/// `kernel.function("tcp_*").return?` or `kernel.{function("a"),function("b")}`.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbePoint {
    pub components: Vec<PointComponent>,
    /// `?`: skip silently if it cannot be resolved.
    pub optional: bool,
    /// `!`: optional, and sufficient: later alternatives are not tried if
    /// this one resolves.
    pub sufficient: bool,
    /// `if (expr)` condition after the point.
    pub condition: Option<Expr>,
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq)]
pub enum PointComponent {
    /// `name` or `name(arg)`; `name` may hold `*` wildcards (`tcp_*`, `*`).
    Named {
        name: Ident,
        arg: Option<Spanned<Literal>>,
    },
    /// `{a, b.c}`: a brace set of alternative component sequences.
    Alternatives(Vec<Vec<PointComponent>>, Span),
}

#[derive(Debug, Clone, PartialEq)]
pub enum Literal {
    Number(i64),
    String(String),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Block {
    pub stmts: Vec<Stmt>,
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Stmt {
    pub kind: StmtKind,
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq)]
pub enum StmtKind {
    Block(Block),
    Expr(Expr),
    If {
        cond: Expr,
        then: Box<Stmt>,
        otherwise: Option<Box<Stmt>>,
    },
    While {
        cond: Expr,
        body: Box<Stmt>,
    },
    For {
        init: Option<Expr>,
        cond: Option<Expr>,
        step: Option<Expr>,
        body: Box<Stmt>,
    },
    Foreach(Box<Foreach>),
    Break,
    Continue,
    Next,
    Return(Option<Expr>),
    /// `delete x`, `delete a[k]`, `delete a`.
    Delete(Expr),
    /// `;` alone.
    Empty,
    /// `%{ ... %}` inside a block: refused during elaboration.
    EmbeddedC,
    /// `try { body } catch [(var)] { handler }`: a run-time error in
    /// `body` runs `handler` (with the error text in `var`) instead of
    /// counting towards MAXERRORS.
    Try {
        body: Block,
        var: Option<Ident>,
        handler: Block,
    },
}

/// `foreach ([a, b-] in arr @sum - limit 10) body`
#[derive(Debug, Clone, PartialEq)]
pub struct Foreach {
    /// `v = [a, b] in arr`: the value is bound to `v`.
    pub value: Option<Ident>,
    /// The key variables, each with an optional sort marker.
    pub keys: Vec<(Ident, Option<SortDir>)>,
    /// True when the keys were written in brackets (`[a]` rather than `a`).
    pub bracketed: bool,
    pub array: Ident,
    /// `in arr[k, *]`: iterate only the elements whose keys match.
    pub slice: Option<Vec<Expr>>,
    /// `arr+` / `arr-`: sort by value.
    pub value_sort: Option<SortDir>,
    /// `@sum` etc. after the array: which aggregate a stats array sorts by.
    pub aggregate: Option<Spanned<StatOp>>,
    pub limit: Option<Expr>,
    pub body: Stmt,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SortDir {
    Ascending,
    Descending,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Expr {
    pub kind: ExprKind,
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq)]
pub enum ExprKind {
    Literal(Literal),
    /// A local, a global, or a function parameter: resolved by sema.
    Var(String),
    /// `$name`, `$name$`, `$$vars`, `$$parms`, `$$locals`, `$$return`, `$return`.
    Context(ContextVar),
    /// `arr[k1, k2]`
    Index {
        array: Ident,
        keys: Vec<Expr>,
    },
    /// `base->field`, `base[idx]` on a context value or `@cast`, and the
    /// trailing `$` pretty-printing suffix.
    Member {
        base: Box<Expr>,
        path: Vec<MemberStep>,
        /// `$var->f$` / `$var->f$$`: pretty-print as a string.
        pretty: Option<PrettyDepth>,
    },
    /// `@cast(ptr, "type"[, "module"])`
    Cast {
        ptr: Box<Expr>,
        ty: Spanned<String>,
        module: Option<Spanned<String>>,
    },
    /// `&expr`: the address of a member access (`&@cast(...)->f`).
    AddressOf(Box<Expr>),
    Call {
        name: Ident,
        args: Vec<Expr>,
    },
    /// `@count(s)`, `@hist_log(s)`, ... applied to a stats value.
    Stat {
        op: StatOp,
        /// The aggregated value: a global scalar or an indexed array.
        operand: Box<Expr>,
        /// Extra arguments: `@hist_linear(s, lo, hi, w)`, `@variance(s, bits)`.
        args: Vec<Expr>,
    },
    /// `@entry(expr)` in a `.return` probe.
    Entry(Box<Expr>),
    /// `@defined(expr)`
    Defined(Box<Expr>),
    /// `@choose_defined(a, b)`
    ChooseDefined(Box<Expr>, Box<Expr>),
    /// `@var("name")`, `@var("name@file")`, `@var("name", "module")`:
    /// treated like `$name`.
    AtVar {
        name: Spanned<String>,
        module: Option<Spanned<String>>,
    },
    /// `@const("NAME")`, `@probewrite(v)`, `@perf("counter")`,
    /// `@kregister(n)`, `@uregister(n)`: parsed, and refused where
    /// elaboration reaches them unless supported there.
    AtOperator {
        name: String,
        args: Vec<Expr>,
    },
    /// `%{ ... %}` used as a value: refused where elaboration reaches it.
    EmbeddedC,
    /// `*` as an array key: a slice, `delete a[k, *]`, `[k, *] in a`.
    Wildcard,
    Unary {
        op: UnaryOp,
        operand: Box<Expr>,
    },
    Binary {
        op: BinaryOp,
        lhs: Box<Expr>,
        rhs: Box<Expr>,
    },
    /// `a = b`, `a += b`, ... and `s <<< v`.
    Assign {
        op: AssignOp,
        target: Box<Expr>,
        value: Box<Expr>,
    },
    /// `++x`, `x--`, ...
    Crement {
        increment: bool,
        prefix: bool,
        target: Box<Expr>,
    },
    Ternary {
        cond: Box<Expr>,
        then: Box<Expr>,
        otherwise: Box<Expr>,
    },
    /// `k in arr`, `[k1, k2] in arr`
    In {
        keys: Vec<Expr>,
        array: Ident,
    },
    /// `s =~ "re"`, `s !~ "re"`
    Regex {
        negated: bool,
        subject: Box<Expr>,
        pattern: Box<Expr>,
    },
    /// Something the parser recognised but recovered from; elaboration
    /// skips it (the parse error was already reported).
    Error,
}

#[derive(Debug, Clone, PartialEq)]
pub enum ContextVar {
    /// `$name`
    Named(String),
    /// `$return`
    Return,
    /// `$$vars`, `$$parms`, `$$locals`, `$$return`, with `$`/`$$` suffix.
    Bulk {
        which: BulkContext,
        pretty: Option<PrettyDepth>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BulkContext {
    Vars,
    Parms,
    Locals,
    Return,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrettyDepth {
    /// `$`: one level.
    Shallow,
    /// `$$`: recursive.
    Deep,
}

#[derive(Debug, Clone, PartialEq)]
pub enum MemberStep {
    Field(Ident),
    /// `[expr]` on an array or pointer member.
    Subscript(Expr),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatOp {
    Count,
    Sum,
    Min,
    Max,
    Avg,
    Variance,
    HistLog,
    HistLinear,
}

impl StatOp {
    pub fn from_name(name: &str) -> Option<StatOp> {
        Some(match name {
            "count" => StatOp::Count,
            "sum" => StatOp::Sum,
            "min" => StatOp::Min,
            "max" => StatOp::Max,
            "avg" => StatOp::Avg,
            "variance" => StatOp::Variance,
            "hist_log" => StatOp::HistLog,
            "hist_linear" => StatOp::HistLinear,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            StatOp::Count => "count",
            StatOp::Sum => "sum",
            StatOp::Min => "min",
            StatOp::Max => "max",
            StatOp::Avg => "avg",
            StatOp::Variance => "variance",
            StatOp::HistLog => "hist_log",
            StatOp::HistLinear => "hist_linear",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnaryOp {
    Neg,
    Plus,
    Not,
    BitNot,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
    Mod,
    Shl,
    Shr,
    BitAnd,
    BitOr,
    BitXor,
    And,
    Or,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    /// `.`: string concatenation.
    Concat,
}

impl BinaryOp {
    pub fn symbol(self) -> &'static str {
        match self {
            BinaryOp::Add => "+",
            BinaryOp::Sub => "-",
            BinaryOp::Mul => "*",
            BinaryOp::Div => "/",
            BinaryOp::Mod => "%",
            BinaryOp::Shl => "<<",
            BinaryOp::Shr => ">>",
            BinaryOp::BitAnd => "&",
            BinaryOp::BitOr => "|",
            BinaryOp::BitXor => "^",
            BinaryOp::And => "&&",
            BinaryOp::Or => "||",
            BinaryOp::Eq => "==",
            BinaryOp::Ne => "!=",
            BinaryOp::Lt => "<",
            BinaryOp::Le => "<=",
            BinaryOp::Gt => ">",
            BinaryOp::Ge => ">=",
            BinaryOp::Concat => ".",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AssignOp {
    /// `=`
    Set,
    /// `+=`, `.=`, ...: the binary operator applied before storing.
    Compound(BinaryOp),
    /// `<<<`: add a value to a statistic.
    Aggregate,
}

impl AssignOp {
    pub fn symbol(self) -> &'static str {
        match self {
            AssignOp::Set => "=",
            AssignOp::Aggregate => "<<<",
            AssignOp::Compound(op) => match op {
                BinaryOp::Add => "+=",
                BinaryOp::Sub => "-=",
                BinaryOp::Mul => "*=",
                BinaryOp::Div => "/=",
                BinaryOp::Mod => "%=",
                BinaryOp::Shl => "<<=",
                BinaryOp::Shr => ">>=",
                BinaryOp::BitAnd => "&=",
                BinaryOp::BitOr => "|=",
                BinaryOp::BitXor => "^=",
                BinaryOp::Concat => ".=",
                _ => "?=",
            },
        }
    }
}
