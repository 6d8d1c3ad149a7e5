//! Pass 2: the preprocessor, token stream to token stream. It expands
//! `@define` macros, picks the live branch of `%( COND %? then %: else %)`
//! conditionals, and replaces `$1`/`@1`/`$#`/`@#` with the script arguments.
//! Spans stay in the original text: a token from a macro body keeps the
//! body's span.

use crate::diag::Diagnostic;
use crate::kernel::KernelVersion;
use crate::lexer::{PpToken, Token};
use crate::source::{FileId, Span};
use hashbrown::HashMap;
use std::cmp::Ordering;
use std::ops::Range;

/// What `%( CONDITION %? ... %)` and `$1`/`@1` are evaluated against.
pub struct PreprocessEnv<'a> {
    /// `kernel_v` / `kernel_vr`.
    pub kernel: KernelVersion,
    /// `arch`.
    pub arch: String,
    /// `CONFIG_FOO == "y"`: looks up a kernel config option.
    pub config: &'a dyn Fn(&str) -> Option<String>,
    /// Command-line script arguments: `$1`/`@1` is `args[0]`.
    pub args: &'a [String],
}

/// What `runtime` compares equal to.
const RUNTIME: &str = "bpf";
/// The SystemTap language version stap-rs implements (`systemtap_v`).
const SYSTEMTAP_VERSION: &str = "5.0";
/// Deeper macro nesting than this is reported as an error, not expanded.
const MAX_EXPANSION_DEPTH: usize = 64;
/// `@` operators of the language, which a macro may not redefine.
const BUILTIN_OPERATORS: [&str; 19] = [
    "const",
    "probewrite",
    "perf",
    "kregister",
    "uregister",
    "cast",
    "entry",
    "defined",
    "choose_defined",
    "var",
    "count",
    "sum",
    "min",
    "max",
    "avg",
    "variance",
    "hist_log",
    "hist_linear",
    "define",
];
/// Names a condition may test, for "did you mean".
const CONDITION_NAMES: [&str; 6] = [
    "kernel_v",
    "kernel_vr",
    "arch",
    "runtime",
    "systemtap_v",
    "systemtap_privilege",
];

/// Runs the preprocessor over one file's tokens.
pub fn preprocess(
    tokens: &[PpToken],
    file: FileId,
    env: &PreprocessEnv,
) -> (Vec<PpToken>, Vec<Diagnostic>) {
    preprocess_with(tokens, file, env, &MacroLibrary::default())
}

/// Runs the preprocessor over one file's tokens, with the macros of the
/// `.stpm` library files visible (a macro the file defines itself wins).
pub fn preprocess_with(
    tokens: &[PpToken],
    file: FileId,
    env: &PreprocessEnv,
    library: &MacroLibrary,
) -> (Vec<PpToken>, Vec<Diagnostic>) {
    let mut pp = Preprocessor::new(env, file, library, false);
    let mut out = Vec::with_capacity(tokens.len());
    pp.run(tokens, &HashMap::new(), &mut out);
    (out, pp.diags)
}

/// Reads the macros of one `.stpm` file into `library`, where every later
/// file sees them (stap's macro library). Text outside `@define` is
/// ignored, as stap ignores it.
pub fn collect_macros(
    tokens: &[PpToken],
    file: FileId,
    env: &PreprocessEnv,
    library: &mut MacroLibrary,
) -> Vec<Diagnostic> {
    let mut pp = Preprocessor::new(env, file, library, true);
    let mut out = Vec::new();
    pp.run(tokens, &HashMap::new(), &mut out);
    let Preprocessor { macros, diags, .. } = pp;
    for (name, mut mac) in macros {
        mac.library = true;
        library.macros.insert(name, mac);
    }
    diags
}

/// The macros of the `.stpm` library files.
#[derive(Clone, Default)]
pub struct MacroLibrary {
    macros: HashMap<String, Macro>,
}

impl MacroLibrary {
    pub fn len(&self) -> usize {
        self.macros.len()
    }

    pub fn is_empty(&self) -> bool {
        self.macros.is_empty()
    }
}

#[derive(Clone)]
struct Macro {
    params: Vec<String>,
    body: Vec<PpToken>,
    /// Where it is defined (a library macro's file differs from the file
    /// being preprocessed).
    span: Span,
    /// From a `.stpm` file: its body's byte ranges belong to another file,
    /// so its tokens take the span of the use that expands them.
    library: bool,
}

/// Macro parameters bound to their (already expanded) argument tokens.
type Bindings = HashMap<String, Vec<PpToken>>;

struct Preprocessor<'e, 'a> {
    env: &'e PreprocessEnv<'a>,
    file: FileId,
    macros: HashMap<String, Macro>,
    library: &'e MacroLibrary,
    /// Reading a `.stpm` file: a `@define` of a built-in operator's name
    /// (stap's library defines `@choose_defined`) is skipped, not an error.
    library_mode: bool,
    /// Macros being expanded, innermost last, to catch recursion.
    expanding: Vec<String>,
    /// `%(` conditionals being evaluated, outermost first: their nesting
    /// is a stack depth, bounded like the parser's (`crate::nesting`).
    conditionals: usize,
    diags: Vec<Diagnostic>,
}

impl<'e, 'a> Preprocessor<'e, 'a> {
    fn new(
        env: &'e PreprocessEnv<'a>,
        file: FileId,
        library: &'e MacroLibrary,
        library_mode: bool,
    ) -> Self {
        Preprocessor {
            env,
            file,
            macros: HashMap::new(),
            library,
            library_mode,
            expanding: Vec::new(),
            conditionals: 0,
            diags: Vec::new(),
        }
    }

    fn lookup(&self, name: &str) -> Option<&Macro> {
        self.macros
            .get(name)
            .or_else(|| self.library.macros.get(name))
    }

    fn span(&self, range: &Range<usize>) -> Span {
        Span::new(self.file, range.start, range.end)
    }

    fn error(&mut self, message: impl Into<String>, at: &Range<usize>, label: &str) {
        let d = Diagnostic::error(message).at(self.span(at), label);
        self.diags.push(d);
    }

    fn run(&mut self, tokens: &[PpToken], params: &Bindings, out: &mut Vec<PpToken>) {
        let mut i = 0;
        while i < tokens.len() {
            let tok = &tokens[i];
            match &tok.token {
                Token::AtDefine => i = self.define(tokens, i),
                Token::PpOpen => i = self.conditional(tokens, i, params, out),
                Token::AtName(name) => {
                    if let Some(bound) = params.get(name) {
                        push_expansion(out, bound, tok.newline_before);
                        i += 1;
                    } else if self.lookup(name).is_some() {
                        i = self.expand(tokens, i, params, out);
                    } else {
                        let names: Vec<&str> = self
                            .macros
                            .keys()
                            .chain(self.library.macros.keys())
                            .chain(params.keys())
                            .map(String::as_str)
                            .collect();
                        let d = Diagnostic::error(format!("undefined macro `@{name}`"))
                            .at(
                                self.span(&tok.span),
                                "no `@define` for this name before here",
                            )
                            .suggest(name, names);
                        self.diags.push(d);
                        out.push(stand_in(tok, Token::Number(0)));
                        i += 1;
                    }
                }
                Token::DollarArg(n) => {
                    match self.argument_tokens(*n, &tok.span) {
                        Some(tokens) => {
                            let tokens: Vec<PpToken> =
                                tokens.into_iter().map(|t| stand_in(tok, t)).collect();
                            push_expansion(out, &tokens, tok.newline_before);
                        }
                        None => out.push(stand_in(tok, Token::Number(0))),
                    }
                    i += 1;
                }
                Token::AtArg(n) => {
                    let arg = self.argument(*n, &tok.span, '@').unwrap_or_default();
                    let token = Token::Str(arg.to_string());
                    out.push(stand_in(tok, token));
                    i += 1;
                }
                Token::DollarCount | Token::AtCount => {
                    let token = Token::Number(self.env.args.len() as i64);
                    out.push(stand_in(tok, token));
                    i += 1;
                }
                Token::PpThen | Token::PpElse | Token::PpClose => {
                    let what = describe(&tok.token);
                    self.error(
                        format!("{what} outside a `%( ... %)` conditional"),
                        &tok.span,
                        "no matching `%(`",
                    );
                    i += 1;
                }
                _ => {
                    out.push(tok.clone());
                    i += 1;
                }
            }
        }
    }

    fn argument(&mut self, n: u32, at: &Range<usize>, sigil: char) -> Option<&str> {
        let found = (n as usize)
            .checked_sub(1)
            .and_then(|i| self.env.args.get(i));
        if found.is_none() {
            let count = self.env.args.len();
            let d = Diagnostic::error(format!("missing script argument {sigil}{n}"))
                .at(
                    self.span(at),
                    format!("the script was given {count} argument(s)"),
                )
                .note("help: pass arguments after the script: `stap-rs script.stp ARG1 ARG2`");
            self.diags.push(d);
        }
        found.map(String::as_str)
    }

    /// `$N` is the argument's text as script tokens, as in stap: a number
    /// (`-5` too), but also a name or a whole probe point
    /// (`probe $1 { }` with `'kernel.function("vfs_*")'`).
    fn argument_tokens(&mut self, n: u32, at: &Range<usize>) -> Option<Vec<Token>> {
        let arg = self.argument(n, at, '$')?.to_string();
        let text = arg.trim();
        let (negative, digits) = match text.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, text.strip_prefix('+').unwrap_or(text)),
        };
        // A signed number stays one token, so `x = $1` keeps its value.
        if let Ok(v) = crate::lexer::parse_number(digits) {
            return Some(vec![Token::Number(if negative {
                v.wrapping_neg()
            } else {
                v
            })]);
        }
        let lexed = crate::lexer::lex(text);
        let tokens: Result<Vec<Token>, _> = lexed.into_iter().map(|l| l.token).collect();
        match tokens {
            Ok(tokens) if !tokens.is_empty() => Some(tokens),
            _ => {
                let d = Diagnostic::error(format!("argument ${n} is not script text"))
                    .at(self.span(at), format!("the argument is `{arg}`"))
                    .note(format!("help: use @{n} for the argument as a string"));
                self.diags.push(d);
                None
            }
        }
    }

    /// `@define NAME [(PARAMS)] %( BODY %)`; returns the index after it.
    fn define(&mut self, tokens: &[PpToken], start: usize) -> usize {
        let define_span = tokens[start].span.clone();
        let mut i = start + 1;
        let name = match tokens.get(i).and_then(|t| word(&t.token)) {
            Some(name) if BUILTIN_OPERATORS.contains(&name.as_str()) && self.library_mode => {
                // Built into the language here; skip the library's version.
                return match tokens.iter().skip(i).position(|t| t.token == Token::PpOpen) {
                    Some(open) => matching_close(tokens, i + open).map_or(tokens.len(), |c| c + 1),
                    None => tokens.len(),
                };
            }
            Some(name) if BUILTIN_OPERATORS.contains(&name.as_str()) => {
                let at = tokens[i].span.clone();
                self.error(
                    format!("cannot define macro `@{name}`: it is a built-in operator"),
                    &at,
                    "choose another name",
                );
                name
            }
            Some(name) => name,
            _ => {
                self.error(
                    "expected a macro name after `@define`",
                    &define_span,
                    "the name should follow here",
                );
                return i;
            }
        };
        let name_span = tokens[i].span.clone();
        i += 1;
        let mut params = Vec::new();
        if matches!(tokens.get(i).map(|t| &t.token), Some(Token::LParen)) {
            i += 1;
            loop {
                match tokens.get(i).map(|t| &t.token) {
                    Some(t) if word(t).is_some() => params.extend(word(t)),
                    Some(Token::RParen) if params.is_empty() => break,
                    _ => {
                        let at = tokens.get(i).map_or(name_span.clone(), |t| t.span.clone());
                        self.error(
                            format!("expected a parameter name in `@define {name}(...)`"),
                            &at,
                            "expected a name",
                        );
                        return i;
                    }
                }
                i += 1;
                match tokens.get(i).map(|t| &t.token) {
                    Some(Token::Comma) => i += 1,
                    Some(Token::RParen) => break,
                    _ => {
                        let at = tokens.get(i).map_or(name_span.clone(), |t| t.span.clone());
                        self.error(
                            format!("expected `,` or `)` in the parameters of `@{name}`"),
                            &at,
                            "expected `,` or `)`",
                        );
                        return i;
                    }
                }
            }
            i += 1;
        }
        if !matches!(tokens.get(i).map(|t| &t.token), Some(Token::PpOpen)) {
            self.error(
                format!("expected `%(` to start the body of macro `@{name}`"),
                &name_span,
                "the body `%( ... %)` should follow",
            );
            return i;
        }
        let body_start = i + 1;
        let Some(close) = matching_close(tokens, i) else {
            self.error(
                format!("missing `%)`: the body of macro `@{name}` is not closed"),
                &tokens[i].span,
                "this `%(` has no matching `%)`",
            );
            return tokens.len();
        };
        let span = self.span(&(define_span.start..tokens[close].span.end));
        let body = tokens[body_start..close].to_vec();
        if let Some(previous) = self.macros.get(&name) {
            let d = Diagnostic::error(format!("macro `@{name}` is defined twice"))
                .at(self.span(&name_span), "defined again here")
                .also(previous.span, "first defined here");
            self.diags.push(d);
        }
        let library = false;
        self.macros.insert(
            name,
            Macro {
                params,
                body,
                span,
                library,
            },
        );
        close + 1
    }

    /// `@name` or `@name(args)`; returns the index after the use.
    fn expand(
        &mut self,
        tokens: &[PpToken],
        start: usize,
        params: &Bindings,
        out: &mut Vec<PpToken>,
    ) -> usize {
        let use_tok = &tokens[start];
        let Token::AtName(name) = &use_tok.token else {
            return start + 1;
        };
        let Some(mut mac) = self.lookup(name).cloned() else {
            return start + 1;
        };
        let mut i = start + 1;
        let mut args: Vec<Vec<PpToken>> = Vec::new();
        if !mac.params.is_empty() {
            match split_call_arguments(tokens, i) {
                Some((found, next)) => {
                    args = found;
                    i = next;
                }
                None => {
                    let count = mac.params.len();
                    self.error(
                        format!("macro `@{name}` needs {count} argument(s) in parentheses"),
                        &use_tok.span,
                        "expected `(` after this",
                    );
                    return i;
                }
            }
            if args.len() != mac.params.len() {
                let d = Diagnostic::error(format!(
                    "macro `@{name}` takes {} argument(s), but this use gives {}",
                    mac.params.len(),
                    args.len()
                ))
                .at(self.span(&use_tok.span), "in this use")
                .also(mac.span, "defined here");
                self.diags.push(d);
                out.push(stand_in(use_tok, Token::Number(0)));
                return i;
            }
        }
        if self.expanding.iter().any(|m| m == name) {
            let chain: Vec<String> = self
                .expanding
                .iter()
                .chain(std::iter::once(name))
                .map(|m| format!("@{m}"))
                .collect();
            let d = Diagnostic::error(format!("recursive macro `@{name}`"))
                .at(self.span(&use_tok.span), "this use expands itself")
                .note(format!("expansion: {}", chain.join(" -> ")));
            self.diags.push(d);
            out.push(stand_in(use_tok, Token::Number(0)));
            return i;
        }
        if self.expanding.len() >= MAX_EXPANSION_DEPTH {
            self.error(
                format!("macro expansion deeper than {MAX_EXPANSION_DEPTH} levels"),
                &use_tok.span,
                "while expanding this",
            );
            out.push(stand_in(use_tok, Token::Number(0)));
            return i;
        }
        let mut bindings = Bindings::new();
        for (param, arg) in mac.params.iter().zip(args) {
            let mut expanded = Vec::new();
            self.run(&arg, params, &mut expanded);
            bindings.insert(param.clone(), expanded);
        }
        if mac.library {
            for t in &mut mac.body {
                t.span = use_tok.span.clone();
            }
        }
        let mut body = Vec::new();
        self.expanding.push(name.clone());
        self.run(&mac.body, &bindings, &mut body);
        self.expanding.pop();
        push_expansion(out, &body, use_tok.newline_before);
        i
    }

    /// `%( COND %? THEN [%: ELSE] %)`; returns the index after `%)`.
    fn conditional(
        &mut self,
        tokens: &[PpToken],
        start: usize,
        params: &Bindings,
        out: &mut Vec<PpToken>,
    ) -> usize {
        let open_span = tokens[start].span.clone();
        if self.conditionals >= crate::nesting::MAX_NESTING {
            self.error(
                format!(
                    "nesting too deep: more than {} nested `%(` conditionals",
                    crate::nesting::MAX_NESTING
                ),
                &open_span,
                "this conditional is one too many",
            );
            return tokens.len();
        }
        let Some(close) = matching_close(tokens, start) else {
            let mut d = Diagnostic::error("missing `%)` to close this conditional")
                .at(self.span(&open_span), "this `%(` has no matching `%)`");
            if start > 0 && tokens[start - 1].span.end == open_span.start {
                d = d.note("help: `%(` starts a preprocessor conditional; for the modulo operator write `a % (b)`");
            }
            self.diags.push(d);
            return tokens.len();
        };
        let inner = &tokens[start + 1..close];
        let Some(then_at) = find_at_top_level(inner, |t| *t == Token::PpThen) else {
            self.error(
                "expected `%?` after the preprocessor condition",
                &open_span,
                "this conditional has no `%?`",
            );
            return close + 1;
        };
        let condition = &inner[..then_at];
        let rest = &inner[then_at + 1..];
        let (then_branch, else_branch) = match find_at_top_level(rest, |t| *t == Token::PpElse) {
            Some(e) => (&rest[..e], &rest[e + 1..]),
            None => (rest, &rest[rest.len()..]),
        };
        let mut substituted = Vec::new();
        self.run(condition, params, &mut substituted);
        let whole = open_span.start..tokens[close].span.end;
        let live = match Condition::new(self, &substituted, whole).evaluate() {
            Ok(value) => value,
            Err(d) => {
                self.diags.push(d);
                false
            }
        };
        let branch = if live { then_branch } else { else_branch };
        self.conditionals += 1;
        self.run(branch, params, out);
        self.conditionals -= 1;
        close + 1
    }
}

/// `token` in place of `at` (a substituted argument, or a harmless value
/// where a substitution failed, so the parser does not report it again).
fn stand_in(at: &PpToken, token: Token) -> PpToken {
    PpToken {
        token,
        ..at.clone()
    }
}

/// An identifier or keyword as a plain word (macro and parameter names).
fn word(token: &Token) -> Option<String> {
    match token {
        Token::Ident(name) => Some(name.clone()),
        other => other.keyword().map(str::to_string),
    }
}

/// Appends an expansion, giving its first token the newline flag of the use
/// site (so `++` after a macro behaves as it would after the use).
fn push_expansion(out: &mut Vec<PpToken>, tokens: &[PpToken], newline_before: bool) {
    let first = out.len();
    out.extend_from_slice(tokens);
    if let Some(t) = out.get_mut(first) {
        t.newline_before = newline_before;
    }
}

/// The index of the `%)` matching the `%(` at `open`.
fn matching_close(tokens: &[PpToken], open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (i, t) in tokens.iter().enumerate().skip(open) {
        match t.token {
            Token::PpOpen => depth += 1,
            Token::PpClose => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

/// The first token matching `pred` that is not inside a nested `%( %)`.
fn find_at_top_level(tokens: &[PpToken], pred: impl Fn(&Token) -> bool) -> Option<usize> {
    let mut depth = 0usize;
    for (i, t) in tokens.iter().enumerate() {
        match t.token {
            Token::PpOpen => depth += 1,
            Token::PpClose => depth = depth.saturating_sub(1),
            ref other if depth == 0 && pred(other) => return Some(i),
            _ => {}
        }
    }
    None
}

/// `( a, b(c, d), [e] )` starting at `open`: the comma-separated argument
/// token lists and the index after `)`, or `None` if there is no `(`.
fn split_call_arguments(tokens: &[PpToken], open: usize) -> Option<(Vec<Vec<PpToken>>, usize)> {
    if !matches!(tokens.get(open).map(|t| &t.token), Some(Token::LParen)) {
        return None;
    }
    let mut args = vec![Vec::new()];
    let mut depth = 0usize;
    for (i, t) in tokens.iter().enumerate().skip(open + 1) {
        match t.token {
            Token::LParen | Token::LBracket | Token::LBrace => depth += 1,
            Token::RParen if depth == 0 => {
                if args.len() == 1 && args[0].is_empty() {
                    args.clear();
                }
                return Some((args, i + 1));
            }
            Token::RParen | Token::RBracket | Token::RBrace => depth = depth.saturating_sub(1),
            Token::Comma if depth == 0 => {
                args.push(Vec::new());
                continue;
            }
            _ => {}
        }
        if let Some(last) = args.last_mut() {
            last.push(t.clone());
        }
    }
    None
}

fn describe(token: &Token) -> &'static str {
    match token {
        Token::PpThen => "`%?`",
        Token::PpElse => "`%:`",
        Token::PpClose => "`%)`",
        _ => "this token",
    }
}

/// A value in a preprocessor condition.
#[derive(Debug, Clone)]
enum Value {
    /// `kernel_v`, `kernel_vr`, `systemtap_v`: compared as versions.
    Version(String),
    Text(String),
    Number(i64),
    /// A `CONFIG_*` option: unset is `None`.
    Config(Option<String>),
}

/// Recursive-descent evaluator for one condition:
/// `or := and ("||" and)*`, `and := unary ("&&" unary)*`,
/// `unary := "!" unary | "(" or ")" | operand OP operand`.
struct Condition<'p, 'e, 'a> {
    pp: &'p Preprocessor<'e, 'a>,
    tokens: &'p [PpToken],
    pos: usize,
    /// The whole `%( ... %)`, for errors at the end of the condition.
    whole: Range<usize>,
    /// Nested `!` and `(` so far: bounded, as each is a stack frame.
    depth: usize,
}

impl<'p, 'e, 'a> Condition<'p, 'e, 'a> {
    fn new(pp: &'p Preprocessor<'e, 'a>, tokens: &'p [PpToken], whole: Range<usize>) -> Self {
        Condition {
            pp,
            tokens,
            pos: 0,
            whole,
            depth: 0,
        }
    }

    fn evaluate(mut self) -> Result<bool, Diagnostic> {
        let value = self.or()?;
        match self.tokens.get(self.pos) {
            None => Ok(value),
            Some(t) => Err(self.error_at(
                &t.span,
                "unexpected token in preprocessor condition",
                "expected `&&`, `||` or `%?`",
            )),
        }
    }

    fn error_at(&self, at: &Range<usize>, message: &str, label: &str) -> Diagnostic {
        Diagnostic::error(message).at(self.pp.span(at), label)
    }

    fn peek(&self) -> Option<&'p Token> {
        self.tokens.get(self.pos).map(|t| &t.token)
    }

    /// Where an error about the current token goes: the token, or the end
    /// of the conditional when the condition ran out.
    fn here(&self) -> Range<usize> {
        match self.tokens.get(self.pos) {
            Some(t) => t.span.clone(),
            None => self.whole.clone(),
        }
    }

    fn or(&mut self) -> Result<bool, Diagnostic> {
        let mut value = self.and()?;
        while self.peek() == Some(&Token::OrOr) {
            self.pos += 1;
            let rhs = self.and()?;
            value = value || rhs;
        }
        Ok(value)
    }

    fn and(&mut self) -> Result<bool, Diagnostic> {
        let mut value = self.unary()?;
        while self.peek() == Some(&Token::AndAnd) {
            self.pos += 1;
            let rhs = self.unary()?;
            value = value && rhs;
        }
        Ok(value)
    }

    fn unary(&mut self) -> Result<bool, Diagnostic> {
        self.depth += 1;
        if self.depth > crate::nesting::MAX_NESTING {
            return Err(self.error_at(
                &self.here(),
                "nesting too deep in preprocessor condition",
                "too many nested `!` or `(` before this",
            ));
        }
        let value = self.unary_inner();
        self.depth -= 1;
        value
    }

    fn unary_inner(&mut self) -> Result<bool, Diagnostic> {
        match self.peek() {
            Some(Token::Bang) => {
                self.pos += 1;
                Ok(!self.unary()?)
            }
            Some(Token::LParen) => {
                self.pos += 1;
                let value = self.or()?;
                if self.peek() != Some(&Token::RParen) {
                    return Err(self.error_at(
                        &self.here(),
                        "expected `)` in preprocessor condition",
                        "expected `)`",
                    ));
                }
                self.pos += 1;
                Ok(value)
            }
            _ => self.comparison(),
        }
    }

    fn comparison(&mut self) -> Result<bool, Diagnostic> {
        let lhs_span = self.here();
        let lhs = self.operand()?;
        let op = match self.peek() {
            Some(Token::EqEq) => CompareOp::Eq,
            Some(Token::Ne) => CompareOp::Ne,
            Some(Token::Lt) => CompareOp::Lt,
            Some(Token::Le) => CompareOp::Le,
            Some(Token::Gt) => CompareOp::Gt,
            Some(Token::Ge) => CompareOp::Ge,
            _ => {
                return Err(self.error_at(
                    &self.here(),
                    "expected a comparison in preprocessor condition",
                    "expected `==`, `!=`, `<`, `<=`, `>` or `>=`",
                ));
            }
        };
        self.pos += 1;
        let rhs_span = self.here();
        let rhs = self.operand()?;
        compare(&lhs, op, &rhs).ok_or_else(|| {
            Diagnostic::error("these values cannot be compared in a preprocessor condition")
                .at(self.pp.span(&lhs_span), format!("this is {}", lhs.kind()))
                .also(self.pp.span(&rhs_span), format!("this is {}", rhs.kind()))
        })
    }

    fn operand(&mut self) -> Result<Value, Diagnostic> {
        let at = self.here();
        let env = self.pp.env;
        let value = match self.peek() {
            Some(Token::Str(s)) => Value::Text(s.clone()),
            Some(Token::Number(n)) => Value::Number(*n),
            Some(Token::Minus) => {
                self.pos += 1;
                match self.peek() {
                    Some(Token::Number(n)) => Value::Number(n.wrapping_neg()),
                    _ => {
                        return Err(self.error_at(&self.here(), "expected a number after `-`", ""));
                    }
                }
            }
            Some(Token::Ident(name)) => match name.as_str() {
                "kernel_v" => Value::Version(env.kernel.to_string()),
                "kernel_vr" => Value::Version(env.kernel.release.clone()),
                "arch" => Value::Text(env.arch.clone()),
                "runtime" => Value::Text(RUNTIME.to_string()),
                "systemtap_v" => Value::Version(SYSTEMTAP_VERSION.to_string()),
                // stap-rs runs as root with every privilege stap's stapdev has.
                "systemtap_privilege" => Value::Text("stapdev".to_string()),
                config if config.starts_with("CONFIG_") => Value::Config((env.config)(config)),
                other => {
                    return Err(Diagnostic::error(format!(
                        "unknown preprocessor condition `{other}`"
                    ))
                    .at(self.pp.span(&at), "not a name a condition can test")
                    .note("conditions can test kernel_v, kernel_vr, arch, runtime, systemtap_v, systemtap_privilege, CONFIG_*, $# and @#")
                    .suggest(other, CONDITION_NAMES));
                }
            },
            Some(Token::AtDefined) => {
                return Err(Diagnostic::unsupported(
                    "@defined in a preprocessor condition (use `if (@defined(...))` in code)",
                    self.pp.span(&at),
                ));
            }
            _ => {
                return Err(self.error_at(
                    &at,
                    "expected a value in preprocessor condition",
                    "expected a name such as `kernel_v`, a string or a number",
                ));
            }
        };
        self.pos += 1;
        Ok(value)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CompareOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl CompareOp {
    fn holds(self, ord: Ordering) -> bool {
        match self {
            CompareOp::Eq => ord == Ordering::Equal,
            CompareOp::Ne => ord != Ordering::Equal,
            CompareOp::Lt => ord == Ordering::Less,
            CompareOp::Le => ord != Ordering::Greater,
            CompareOp::Gt => ord == Ordering::Greater,
            CompareOp::Ge => ord != Ordering::Less,
        }
    }

    fn is_equality(self) -> bool {
        matches!(self, CompareOp::Eq | CompareOp::Ne)
    }
}

impl Value {
    fn kind(&self) -> &'static str {
        match self {
            Value::Version(_) => "a version",
            Value::Text(_) => "a string",
            Value::Number(_) => "a number",
            Value::Config(_) => "a kernel config option",
        }
    }
}

/// Compares two condition values, or `None` if they are of kinds that
/// cannot be compared (a number with a string).
fn compare(lhs: &Value, op: CompareOp, rhs: &Value) -> Option<bool> {
    use Value::*;
    // `==`/`!=` against a pattern with `*` or `?` is a glob match.
    let glob = |subject: &str, pattern: &str| {
        let matched = glob_match(pattern.as_bytes(), subject.as_bytes());
        Some(if op == CompareOp::Eq {
            matched
        } else {
            !matched
        })
    };
    match (lhs, rhs) {
        (Version(v) | Text(v), Text(p)) | (Text(p), Version(v))
            if op.is_equality() && is_glob(p) =>
        {
            glob(v, p)
        }
        (Version(a), Text(b) | Version(b)) => Some(op.holds(version_cmp(a, b))),
        (Text(a), Version(b)) => Some(op.holds(version_cmp(a, b))),
        (Text(a), Text(b)) => Some(op.holds(a.cmp(b))),
        (Number(a), Number(b)) => Some(op.holds(a.cmp(b))),
        (Config(value), Text(p)) | (Text(p), Config(value)) => {
            let value = value.as_deref().unwrap_or("");
            if op.is_equality() && is_glob(p) {
                glob(value, p)
            } else {
                Some(op.holds(value.cmp(p)))
            }
        }
        (Config(value), Number(n)) | (Number(n), Config(value)) => {
            let parsed = value.as_deref().and_then(|v| {
                let v = v.trim();
                match v.strip_prefix("0x") {
                    Some(hex) => i64::from_str_radix(hex, 16).ok(),
                    None => v.parse::<i64>().ok(),
                }
            });
            // An unset or non-numeric option equals no number.
            Some(match parsed {
                Some(v) if matches!(lhs, Config(_)) => op.holds(v.cmp(n)),
                Some(v) => op.holds(n.cmp(&v)),
                None => op == CompareOp::Ne,
            })
        }
        (Config(a), Config(b)) => Some(op.holds(a.cmp(b))),
        _ => None,
    }
}

fn is_glob(pattern: &str) -> bool {
    pattern.contains(['*', '?'])
}

/// Shell-style matching with `*` (any run) and `?` (one byte).
fn glob_match(pattern: &[u8], text: &[u8]) -> bool {
    match pattern.split_first() {
        None => text.is_empty(),
        Some((b'*', rest)) => (0..=text.len()).any(|skip| glob_match(rest, &text[skip..])),
        Some((b'?', rest)) => !text.is_empty() && glob_match(rest, &text[1..]),
        Some((c, rest)) => text.first() == Some(c) && glob_match(rest, &text[1..]),
    }
}

/// Compares version strings piece by piece: `5.10` < `5.9.1` is false,
/// numeric pieces compare as numbers, missing pieces count as zero.
pub fn version_cmp(a: &str, b: &str) -> Ordering {
    let pieces = |s: &str| -> Vec<String> {
        s.split(|c: char| !c.is_ascii_alphanumeric())
            .filter(|p| !p.is_empty())
            .map(str::to_string)
            .collect()
    };
    let (pa, pb) = (pieces(a), pieces(b));
    for i in 0..pa.len().max(pb.len()) {
        let x = pa.get(i).map_or("0", String::as_str);
        let y = pb.get(i).map_or("0", String::as_str);
        let ord = match (x.parse::<u64>(), y.parse::<u64>()) {
            (Ok(m), Ok(n)) => m.cmp(&n),
            _ => x.cmp(y),
        };
        if ord != Ordering::Equal {
            return ord;
        }
    }
    Ordering::Equal
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_compare_numerically() {
        assert_eq!(version_cmp("6.12.48", "5.10"), Ordering::Greater);
        assert_eq!(version_cmp("5.9", "5.10"), Ordering::Less);
        assert_eq!(version_cmp("5.10", "5.10.0"), Ordering::Equal);
        assert_eq!(
            version_cmp("6.12.48+deb12-amd64", "6.12.48+deb12-amd64"),
            Ordering::Equal
        );
    }

    #[test]
    fn globs_match_whole_strings() {
        assert!(glob_match(b"x86*", b"x86_64"));
        assert!(glob_match(b"6.12.*-amd64", b"6.12.48-amd64"));
        assert!(!glob_match(b"arm*", b"x86_64"));
        assert!(glob_match(b"x86_6?", b"x86_64"));
    }

    #[test]
    fn config_values_compare_as_strings_or_numbers() {
        let y = Value::Config(Some("y".into()));
        let unset = Value::Config(None);
        let num = Value::Config(Some("32".into()));
        assert_eq!(
            compare(&y, CompareOp::Eq, &Value::Text("y".into())),
            Some(true)
        );
        assert_eq!(
            compare(&unset, CompareOp::Eq, &Value::Text("y".into())),
            Some(false)
        );
        assert_eq!(compare(&num, CompareOp::Ge, &Value::Number(16)), Some(true));
        assert_eq!(
            compare(&unset, CompareOp::Ne, &Value::Number(1)),
            Some(true)
        );
        assert_eq!(
            compare(&Value::Number(1), CompareOp::Eq, &Value::Text("1".into())),
            None
        );
    }
}
