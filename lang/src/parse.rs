//! Pass 3: tokens to the spanned [`ast`] with the lalrpop grammar in
//! `grammar.lalrpop`. [`parse_file`] runs the whole front of the pipeline for
//! one file: lexing, preprocessing, token disambiguation, parsing. It never
//! fails: it returns what it could parse together with every error found.

use crate::ast::{
    self, BinaryOp, BulkContext, ContextVar, Expr, ExprKind, Foreach, PrettyDepth, Stmt, StmtKind,
};
use crate::diag::Diagnostic;
use crate::lexer::{self, LexError, PpToken, Token};
use crate::preprocess::{MacroLibrary, PreprocessEnv, collect_macros, preprocess_with};
use crate::source::{FileId, SourceMap, Span};
use lalrpop_util::{ErrorRecovery, ParseError};

lalrpop_util::lalrpop_mod!(
    #[allow(
        clippy::all,
        clippy::pedantic,
        unused_parens,
        unused_variables,
        dead_code
    )]
    grammar
);

pub struct Parsed {
    pub file: ast::File,
    pub diags: Vec<Diagnostic>,
}

/// Lexes, preprocesses and parses one file of the map. Never fails: returns what it could parse plus errors.
pub fn parse_file(map: &SourceMap, file: FileId, env: &PreprocessEnv) -> Parsed {
    parse_file_with(map, file, env, &MacroLibrary::default())
}

/// Reads a `.stpm` macro file into `library`; returns its diagnostics.
pub fn parse_macro_file(
    map: &SourceMap,
    file: FileId,
    env: &PreprocessEnv,
    library: &mut MacroLibrary,
) -> Vec<Diagnostic> {
    let text = map.get(file).text.as_str();
    let mut diags = Vec::new();
    let tokens = lex_for_parser(text, file, &mut diags);
    diags.extend(collect_macros(&tokens, file, env, library));
    diags
}

/// [`parse_file`] with the `.stpm` library's macros visible.
pub fn parse_file_with(
    map: &SourceMap,
    file: FileId,
    env: &PreprocessEnv,
    library: &MacroLibrary,
) -> Parsed {
    let text = map.get(file).text.as_str();
    let mut diags = Vec::new();
    let tokens = lex_for_parser(text, file, &mut diags);
    let (tokens, pp_diags) = preprocess_with(&tokens, file, env, library);
    diags.extend(pp_diags);
    let tokens = lexer::disambiguate(tokens);

    let end = text.len();
    let mut recovered = Vec::new();
    let mut action_diags = Vec::new();
    let input = tokens
        .iter()
        .map(|t| Ok::<_, LexError>((t.span.start, t.token.clone(), t.span.end)));
    let result = grammar::FileParser::new().parse(file, &mut recovered, &mut action_diags, input);
    let mut ast = match result {
        Ok(ast) => ast,
        Err(error) => {
            recovered.push(ErrorRecovery {
                error,
                dropped_tokens: Vec::new(),
            });
            ast::File::default()
        }
    };
    diags.extend(
        recovered
            .into_iter()
            .map(|r| syntax_error(r.error, text, file, end)),
    );
    diags.extend(action_diags);
    // Later passes recurse over the tree: refuse one deeper than they can
    // take, and never drop it recursively either.
    if let Some(too_deep) = crate::nesting::check(&ast) {
        diags.push(too_deep);
        crate::nesting::drop_deep(std::mem::take(&mut ast));
    }
    Parsed { file: ast, diags }
}

/// Lexes `text`, reporting lexical errors and replacing the broken tokens
/// with harmless stand-ins so that the parser does not report them again.
fn lex_for_parser(text: &str, file: FileId, diags: &mut Vec<Diagnostic>) -> Vec<PpToken> {
    let mut out = Vec::new();
    for lexed in lexer::lex(text) {
        let span = Span::new(file, lexed.span.start, lexed.span.end);
        let token = match lexed.token {
            Ok(token) => token,
            Err(error) => {
                let message = error.message(&text[lexed.span.clone()]);
                let (label, stand_in) = match error {
                    LexError::BadToken => ("not part of the stap language", None),
                    LexError::UnterminatedString => (
                        "this string has no closing `\"`",
                        Some(Token::Str(String::new())),
                    ),
                    LexError::UnterminatedComment => ("this comment is never closed", None),
                    LexError::UnterminatedEmbeddedC => {
                        ("this block is never closed", Some(Token::EmbeddedC))
                    }
                    LexError::BadNumber(_) | LexError::NumberTooLarge(_) => {
                        ("invalid number", Some(Token::Number(0)))
                    }
                };
                let at = if matches!(error, LexError::UnterminatedComment) {
                    Span::new(file, lexed.span.start, lexed.span.start + 2)
                } else {
                    span
                };
                diags.push(Diagnostic::error(message).at(at, label));
                match stand_in {
                    Some(token) => token,
                    None => continue,
                }
            }
        };
        out.push(PpToken {
            token,
            span: lexed.span,
            newline_before: lexed.newline_before,
        });
    }
    out
}

// ------------------------------------------------- helpers for the grammar

/// A span from two token locations. Tokens expanded from a macro body keep
/// the body's place in the text, so the ends may come in either order.
pub(crate) fn span(file: FileId, l: usize, r: usize) -> Span {
    Span::new(file, l.min(r), l.max(r))
}

/// A probe-point component as written, before brace sets whose
/// alternatives carry `?`/`!` are expanded.
pub(crate) enum RawComponent {
    Named {
        name: ast::Ident,
        arg: Option<crate::source::Spanned<ast::Literal>>,
    },
    Alternatives(Vec<RawAlternative>, Span),
}

/// One alternative of a brace set, with its own `?`/`!` (optional,
/// sufficient).
pub(crate) type RawAlternative = (Vec<RawComponent>, Option<(bool, bool)>);

/// The points one written point stands for. A brace set stays one point
/// (`kernel.{a, b}`) unless an alternative has its own `?` or `!`
/// (`kernel.{trace("a")!, trace("b")}`): then, as stap does, the point
/// becomes one point per alternative, in order, each with its own flags
/// (or'ed with the whole point's).
pub(crate) fn probe_points(
    components: Vec<RawComponent>,
    (optional, sufficient): (bool, bool),
    condition: Option<Expr>,
    span: Span,
) -> Vec<ast::ProbePoint> {
    let point = |components, (o, s): (bool, bool)| ast::ProbePoint {
        components,
        optional: optional || o,
        sufficient: sufficient || s,
        condition: condition.clone(),
        span,
    };
    if !has_suffix(&components) {
        return vec![point(plain(components), (false, false))];
    }
    expand_raw(components)
        .into_iter()
        .map(|(components, flags)| point(components, flags))
        .collect()
}

fn has_suffix(components: &[RawComponent]) -> bool {
    components.iter().any(|c| match c {
        RawComponent::Named { .. } => false,
        RawComponent::Alternatives(alts, _) => alts
            .iter()
            .any(|(alt, suffix)| suffix.is_some() || has_suffix(alt)),
    })
}

fn plain(components: Vec<RawComponent>) -> Vec<ast::PointComponent> {
    components
        .into_iter()
        .map(|c| match c {
            RawComponent::Named { name, arg } => ast::PointComponent::Named { name, arg },
            RawComponent::Alternatives(alts, span) => ast::PointComponent::Alternatives(
                alts.into_iter().map(|(alt, _)| plain(alt)).collect(),
                span,
            ),
        })
        .collect()
}

/// Every sequence of plain components, with the flags its alternatives add.
fn expand_raw(components: Vec<RawComponent>) -> Vec<(Vec<ast::PointComponent>, (bool, bool))> {
    let mut out = vec![(Vec::new(), (false, false))];
    for c in components {
        match c {
            RawComponent::Named { name, arg } => {
                for (seq, _) in &mut out {
                    seq.push(ast::PointComponent::Named {
                        name: name.clone(),
                        arg: arg.clone(),
                    });
                }
            }
            RawComponent::Alternatives(alts, _) => {
                let tails: Vec<_> = alts
                    .into_iter()
                    .flat_map(|(alt, suffix)| {
                        let (o, s) = suffix.unwrap_or((false, false));
                        expand_raw(alt)
                            .into_iter()
                            .map(move |(seq, (o2, s2))| (seq, (o || o2, s || s2)))
                    })
                    .collect();
                let mut next = Vec::new();
                for (prefix, (o, s)) in &out {
                    for (tail, (o2, s2)) in &tails {
                        let mut seq = prefix.clone();
                        seq.extend(tail.iter().cloned());
                        next.push((seq, (*o || *o2, *s || *s2)));
                    }
                }
                out = next;
            }
        }
    }
    out
}

pub(crate) fn global_items(private: bool, vars: Vec<ast::Global>) -> Vec<ast::Item> {
    vars.into_iter()
        .map(|mut g| {
            g.private = private;
            ast::Item::Global(g)
        })
        .collect()
}

pub(crate) fn binary(op: BinaryOp, lhs: Expr, rhs: Expr, span: Span) -> Expr {
    Expr {
        kind: ExprKind::Binary {
            op,
            lhs: Box::new(lhs),
            rhs: Box::new(rhs),
        },
        span,
    }
}

pub(crate) fn crement(increment: bool, prefix: bool, target: Expr, span: Span) -> Expr {
    Expr {
        kind: ExprKind::Crement {
            increment,
            prefix,
            target: Box::new(target),
        },
        span,
    }
}

pub(crate) fn for_stmt(
    (init, cond, step): (Option<Expr>, Option<Expr>, Option<Expr>),
    body: Stmt,
    span: Span,
) -> Stmt {
    Stmt {
        kind: StmtKind::For {
            init,
            cond,
            step,
            body: Box::new(body),
        },
        span,
    }
}

pub(crate) fn foreach_stmt(mut head: Foreach, body: Stmt, span: Span) -> Stmt {
    head.body = body;
    Stmt {
        kind: StmtKind::Foreach(Box::new(head)),
        span,
    }
}

pub(crate) fn bulk_context(
    name: &str,
    pretty: Option<PrettyDepth>,
    span: Span,
    diags: &mut Vec<Diagnostic>,
) -> Expr {
    let which = match name {
        "vars" => BulkContext::Vars,
        "parms" => BulkContext::Parms,
        "locals" => BulkContext::Locals,
        "return" => BulkContext::Return,
        // A marker's name and provider (`process.mark` and plt probes):
        // looked up like any context variable, which says where they exist.
        "name" | "provider" if pretty.is_none() => {
            return Expr {
                kind: ExprKind::Context(ContextVar::Named(format!("${name}"))),
                span,
            };
        }
        _ => {
            diags.push(
                Diagnostic::error(format!("unknown context variable list `$${name}`")).at(
                    span,
                    "expected `$$vars`, `$$parms`, `$$locals` or `$$return`",
                ),
            );
            return Expr {
                kind: ExprKind::Error,
                span,
            };
        }
    };
    Expr {
        kind: ExprKind::Context(ContextVar::Bulk { which, pretty }),
        span,
    }
}

// ------------------------------------------------------ syntax error words

fn syntax_error(
    error: ParseError<usize, Token, LexError>,
    text: &str,
    file: FileId,
    end: usize,
) -> Diagnostic {
    match error {
        ParseError::UnrecognizedToken {
            token: (l, token, r),
            expected,
        } => {
            let found = token_text(text, l, r);
            let message = match describe_expected(&expected) {
                Some(list) => format!("expected {list}, found {found}"),
                None => format!("unexpected {found}"),
            };
            let diag =
                Diagnostic::error(message).at(span(file, l, r), format!("unexpected {found}"));
            let wanted_a_name = expected.iter().any(|e| e == "Ident");
            let used_as_name = |word: &&str| {
                let next = text.get(r..).unwrap_or("").trim_start_matches([' ', '\t']);
                matches!(*word, "limit" | "in") || next.starts_with(['=', '[', ':', '(', ','])
            };
            match token.keyword().filter(|_| wanted_a_name).filter(used_as_name) {
                Some(word) => diag.note(format!(
                    "`{word}` is a reserved word in the stap language and cannot name a variable or function"
                )),
                None => diag,
            }
        }
        ParseError::UnrecognizedEof { expected, .. } => {
            let message = match describe_expected(&expected) {
                Some(list) => format!("unexpected end of input: expected {list}"),
                None => "unexpected end of input".to_string(),
            };
            Diagnostic::error(message).at(span(file, end, end), "the input ends here")
        }
        ParseError::ExtraToken { token: (l, _, r) } => {
            let found = token_text(text, l, r);
            Diagnostic::error(format!("unexpected {found}"))
                .at(span(file, l, r), "expected the end of the input")
        }
        ParseError::InvalidToken { location } => Diagnostic::error("invalid token")
            .at(span(file, location, location + 1), "not understood"),
        // The parser is fed lexical errors as stand-in tokens, never as errors.
        ParseError::User { error } => Diagnostic::error(error.message("")),
    }
}

/// How a found token is named in a message: its text, shortened.
fn token_text(text: &str, l: usize, r: usize) -> String {
    let slice = text.get(l.min(r)..l.max(r)).unwrap_or("");
    let first_line = slice.lines().next().unwrap_or("");
    let mut shown: String = first_line.chars().take(24).collect();
    if shown.len() < slice.len() {
        shown.push_str("...");
    }
    format!("`{shown}`")
}

/// lalrpop terminal names that can start an expression.
const EXPRESSION_START: &[&str] = &[
    "Ident",
    "Num",
    "Str",
    "CtxVar",
    "BulkCtx",
    "\"(\"",
    "\"[\"",
    "UnaryMinus",
    "UnaryPlus",
    "AddressOf",
    "PreIncr",
    "PreDecr",
    "\"!\"",
    "\"~\"",
    "\"@cast\"",
    "\"@entry\"",
    "\"@defined\"",
    "\"@choose_defined\"",
    "\"@var\"",
    "AtStat",
    "AtOperator",
    "EmbeddedC",
];

/// Keywords and punctuation that can start a statement (besides expressions).
const STATEMENT_START: &[&str] = &[
    "\"if\"",
    "\"while\"",
    "\"for\"",
    "\"foreach\"",
    "\"break\"",
    "\"continue\"",
    "\"next\"",
    "\"return\"",
    "ReturnVoid",
    "\"delete\"",
    "\"try\"",
    "\"{\"",
    "\";\"",
    "EmbeddedC",
];

/// Keywords (and `*`) the grammar also accepts as names.
const NAME_KEYWORDS: &[&str] = &[
    "\"function\"",
    "\"limit\"",
    "\"return\"",
    "ReturnVoid",
    "\"delete\"",
    "\"next\"",
    "\"probe\"",
    "\"global\"",
    "\"private\"",
    "\"in\"",
    "\"break\"",
    "\"continue\"",
    "\"*\"",
];

/// Operators that can continue an expression.
const OPERATORS: &[&str] = &[
    "\"+\"",
    "\"-\"",
    "\"*\"",
    "\"/\"",
    "\"%\"",
    "\"&\"",
    "\"|\"",
    "\"^\"",
    "\"<<\"",
    "\">>\"",
    "\"<\"",
    "\"<=\"",
    "\">\"",
    "\">=\"",
    "\"==\"",
    "\"!=\"",
    "\"=~\"",
    "\"!~\"",
    "\"&&\"",
    "\"||\"",
    "\"=\"",
    "\"+=\"",
    "\"-=\"",
    "\"*=\"",
    "\"/=\"",
    "\"%=\"",
    "\"&=\"",
    "\"|=\"",
    "\"^=\"",
    "\"<<=\"",
    "\">>=\"",
    "\".=\"",
    "\"<<<\"",
    "\"++\"",
    "\"--\"",
    "\"?\"",
    "\"in\"",
    "\".\"",
    "\"->\"",
    "\"$\"",
    "\"$$\"",
    "IndexBracket",
];

/// Turns lalrpop's expected-terminal list into words: "`)` or `,`", or
/// "one of an expression, `;` or `}`" with big families collapsed.
pub(crate) fn describe_expected(expected: &[String]) -> Option<String> {
    let has = |name: &str| expected.iter().any(|e| e == name);
    let count_of = |family: &[&str]| family.iter().filter(|f| has(f)).count();
    let statements = has("\"if\"") && has("\"while\"");
    let expressions = count_of(EXPRESSION_START) >= 4;
    let operators = has("\"==\"") && count_of(OPERATORS) >= 4;
    // Where a name is expected, keywords that may serve as names are noise.
    let names = has("Ident");

    let mut words: Vec<String> = Vec::new();
    if statements {
        words.push("a statement".into());
    } else if expressions {
        words.push("an expression".into());
    }
    if operators {
        words.push("an operator".into());
    }
    for name in expected {
        let name = name.as_str();
        let collapsed = (statements && STATEMENT_START.contains(&name))
            || ((statements || expressions) && EXPRESSION_START.contains(&name))
            || (operators && OPERATORS.contains(&name))
            || (names && NAME_KEYWORDS.contains(&name));
        if collapsed {
            continue;
        }
        let word = terminal_words(name);
        if !words.contains(&word) {
            words.push(word);
        }
    }
    match words.len() {
        0 => None,
        1 => Some(words.remove(0)),
        2 => Some(format!("{} or {}", words[0], words[1])),
        _ => {
            let last = words.pop().unwrap_or_default();
            Some(format!("one of {} or {}", words.join(", "), last))
        }
    }
}

fn terminal_words(name: &str) -> String {
    if let Some(quoted) = name.strip_prefix('"').and_then(|n| n.strip_suffix('"')) {
        return format!("`{quoted}`");
    }
    match name {
        "Ident" => "a name".into(),
        "Num" => "a number".into(),
        "Str" => "a string".into(),
        "CtxVar" => "a `$` context variable".into(),
        "BulkCtx" => "`$$vars`".into(),
        "AtStat" => "a statistic such as `@count`".into(),
        "EmbeddedC" => "`%{`".into(),
        "AtOperator" => "an `@` operator such as `@const`".into(),
        "CallParen" => "`(`".into(),
        "IndexBracket" => "`[`".into(),
        "UnaryMinus" => "`-`".into(),
        "UnaryPlus" => "`+`".into(),
        "AddressOf" => "`&`".into(),
        "PreIncr" => "`++`".into(),
        "PreDecr" => "`--`".into(),
        "ReturnVoid" => "`return`".into(),
        "SemiElse" => "`;`".into(),
        other => format!("`{other}`"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn expected_lists_read_as_words() {
        assert_eq!(
            describe_expected(&names(&["\")\"", "\",\""])).as_deref(),
            Some("`)` or `,`")
        );
        assert_eq!(
            describe_expected(&names(&["CallParen"])).as_deref(),
            Some("`(`")
        );
        let expression = names(&["Ident", "Num", "Str", "\"(\"", "UnaryMinus", "\")\""]);
        assert_eq!(
            describe_expected(&expression).as_deref(),
            Some("an expression or `)`")
        );
    }
}
