//! Pass 1: source text to tokens (logos), and the context pass that gives
//! ambiguous tokens distinct kinds before the parser sees them.
//!
//! [`lex`] turns text into [`Lexed`] tokens, each with its byte range and
//! whether a newline precedes it. After preprocessing, [`disambiguate`]
//! rewrites tokens whose meaning depends on their neighbours (unary or binary
//! `-`, prefix or postfix `++`, call or grouping `(`, ...) so that the LALR
//! grammar needs no statement separators; the rules are documented at the top
//! of `grammar.lalrpop`.

use crate::ast::StatOp;
use logos::{FilterResult, Logos};
use std::ops::Range;

/// What can go wrong while cutting text into tokens.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum LexError {
    #[default]
    BadToken,
    UnterminatedString,
    UnterminatedComment,
    UnterminatedEmbeddedC,
    /// A malformed number, such as `0x` or `09` or `12ab`.
    BadNumber(String),
    /// A number that does not fit in 64 bits.
    NumberTooLarge(String),
}

impl LexError {
    pub fn message(&self, text: &str) -> String {
        match self {
            LexError::BadToken => format!("unexpected character `{}`", text.escape_debug()),
            LexError::UnterminatedString => "unterminated string literal".into(),
            LexError::UnterminatedComment => "unterminated `/*` comment".into(),
            LexError::UnterminatedEmbeddedC => "unterminated `%{` block: no `%}` found".into(),
            LexError::BadNumber(n) => format!("invalid number literal `{n}`"),
            LexError::NumberTooLarge(n) => format!("number literal `{n}` does not fit in 64 bits"),
        }
    }
}

/// A token of the stap language. The "context kinds" at the end are never
/// produced by the lexer itself: [`disambiguate`] creates them from `-`, `+`,
/// `&`, `++`, `--`, `(`, `[` and `return`.
#[derive(Logos, Debug, Clone, PartialEq)]
#[logos(error = LexError)]
#[logos(skip r"[ \t\r\n\f\v]+")]
#[logos(skip(r"(#|//)[^\n]*", allow_greedy = true))]
pub enum Token {
    // Keywords.
    #[token("probe")]
    Probe,
    #[token("global")]
    Global,
    #[token("private")]
    Private,
    #[token("function")]
    Function,
    #[token("if")]
    If,
    #[token("else")]
    Else,
    #[token("while")]
    While,
    #[token("for")]
    For,
    #[token("foreach")]
    Foreach,
    #[token("in")]
    In,
    #[token("limit")]
    Limit,
    /// `return` followed by an expression.
    #[token("return")]
    Return,
    #[token("delete")]
    Delete,
    #[token("next")]
    Next,
    #[token("break")]
    Break,
    #[token("continue")]
    Continue,
    #[token("try")]
    Try,
    #[token("catch")]
    Catch,

    // Names and literals.
    /// A `$` may join name parts (`dtv$pointer$val`, as in stap), but a
    /// trailing `$`/`$$` is the pretty-printing suffix of `->field$`.
    #[regex(r"[A-Za-z_][A-Za-z0-9_]*(\$[A-Za-z0-9_]+)*", |lex| lex.slice().to_string())]
    Ident(String),
    #[regex(r"[0-9][A-Za-z0-9_]*", number)]
    Number(i64),
    #[token("\"", string)]
    Str(String),
    /// `$name` (without the `$`); `$return` too.
    #[regex(r"\$[A-Za-z_][A-Za-z0-9_]*", |lex| lex.slice()[1..].to_string())]
    Context(String),
    /// `$$vars`, `$$parms`, `$$locals`, `$$return` (the name without `$$`).
    #[regex(r"\$\$[A-Za-z_][A-Za-z0-9_]*", |lex| lex.slice()[2..].to_string())]
    BulkContext(String),
    /// `@name` that is not a built-in operator: a macro use or parameter.
    #[regex(r"@[A-Za-z_][A-Za-z0-9_]*", |lex| lex.slice()[1..].to_string())]
    AtName(String),
    #[token("@define")]
    AtDefine,
    #[token("@cast")]
    AtCast,
    #[token("@entry")]
    AtEntry,
    #[token("@defined")]
    AtDefined,
    #[token("@choose_defined")]
    AtChooseDefined,
    #[token("@var")]
    AtVar,
    /// The other built-in `@` operators: `@const`, `@probewrite`, `@perf`,
    /// `@kregister`, `@uregister` (the name without `@`).
    #[token("@const", |_| "const".to_string())]
    #[token("@probewrite", |_| "probewrite".to_string())]
    #[token("@perf", |_| "perf".to_string())]
    #[token("@kregister", |_| "kregister".to_string())]
    #[token("@uregister", |_| "uregister".to_string())]
    AtOperator(String),
    #[token("@count", |_| StatOp::Count)]
    #[token("@sum", |_| StatOp::Sum)]
    #[token("@min", |_| StatOp::Min)]
    #[token("@max", |_| StatOp::Max)]
    #[token("@avg", |_| StatOp::Avg)]
    #[token("@variance", |_| StatOp::Variance)]
    #[token("@hist_log", |_| StatOp::HistLog)]
    #[token("@hist_linear", |_| StatOp::HistLinear)]
    AtStat(StatOp),
    /// `$1`, `$2`, ...: a script argument as a number.
    #[regex(r"\$[0-9]+", |lex| lex.slice()[1..].parse::<u32>().ok())]
    DollarArg(u32),
    /// `@1`, `@2`, ...: a script argument as a string.
    #[regex(r"@[0-9]+", |lex| lex.slice()[1..].parse::<u32>().ok())]
    AtArg(u32),
    /// `$#`
    #[token("$#")]
    DollarCount,
    /// `@#`
    #[token("@#")]
    AtCount,
    /// `%{ ... %}`, the whole embedded-C block.
    #[token("%{", embedded_c)]
    EmbeddedC,
    /// `/* ... */`: dropped by [`lex`].
    #[token("/*", block_comment)]
    BlockComment,

    // Preprocessor brackets.
    #[token("%(")]
    PpOpen,
    #[token("%?")]
    PpThen,
    #[token("%:")]
    PpElse,
    #[token("%)")]
    PpClose,

    // Punctuation.
    #[token("{")]
    LBrace,
    #[token("}")]
    RBrace,
    /// A grouping `(`; see [`Token::CallParen`].
    #[token("(")]
    LParen,
    #[token(")")]
    RParen,
    /// An opening `[` (`[a, b] in arr`); see [`Token::IndexBracket`].
    #[token("[")]
    LBracket,
    #[token("]")]
    RBracket,
    #[token(",")]
    Comma,
    #[token(";")]
    Semi,
    #[token(":")]
    Colon,
    #[token("?")]
    Question,
    #[token("!")]
    Bang,
    #[token(".")]
    Dot,
    #[token("->")]
    Arrow,
    /// Binary `+`; see [`Token::UnaryPlus`].
    #[token("+")]
    Plus,
    /// Binary `-`; see [`Token::UnaryMinus`].
    #[token("-")]
    Minus,
    #[token("*")]
    Star,
    #[token("/")]
    Slash,
    #[token("%")]
    Percent,
    /// Binary `&`; see [`Token::AddressOf`].
    #[token("&")]
    Amp,
    #[token("|")]
    Pipe,
    #[token("^")]
    Caret,
    #[token("~")]
    Tilde,
    #[token("<<")]
    Shl,
    #[token(">>")]
    Shr,
    #[token("<")]
    Lt,
    #[token("<=")]
    Le,
    #[token(">")]
    Gt,
    #[token(">=")]
    Ge,
    #[token("==")]
    EqEq,
    #[token("!=")]
    Ne,
    #[token("=~")]
    RegexMatch,
    #[token("!~")]
    RegexNoMatch,
    #[token("&&")]
    AndAnd,
    #[token("||")]
    OrOr,
    #[token("=")]
    Assign,
    #[token("+=")]
    PlusAssign,
    #[token("-=")]
    MinusAssign,
    #[token("*=")]
    StarAssign,
    #[token("/=")]
    SlashAssign,
    #[token("%=")]
    PercentAssign,
    #[token("&=")]
    AmpAssign,
    #[token("|=")]
    PipeAssign,
    #[token("^=")]
    CaretAssign,
    #[token("<<=")]
    ShlAssign,
    #[token(">>=")]
    ShrAssign,
    #[token(".=")]
    DotAssign,
    #[token("<<<")]
    Aggregate,
    /// Postfix `++`; see [`Token::PreIncr`].
    #[token("++")]
    Incr,
    /// Postfix `--`; see [`Token::PreDecr`].
    #[token("--")]
    Decr,
    /// A bare `$` after a member chain: shallow pretty-printing.
    #[token("$")]
    Dollar,
    /// A bare `$$` after a member chain: deep pretty-printing.
    #[token("$$")]
    DollarDollar,

    // Context kinds, made by `disambiguate` only.
    /// `(` right after a name: a call or probe-point argument.
    CallParen,
    /// `[` right after an operand: an index or subscript.
    IndexBracket,
    UnaryMinus,
    UnaryPlus,
    AddressOf,
    PreIncr,
    PreDecr,
    /// `return` with nothing to return.
    ReturnVoid,
    /// `;` right before `else`: ends the `then` branch (`if (x) y; else z`).
    SemiElse,
}

/// One token from [`lex`].
#[derive(Debug, Clone, PartialEq)]
pub struct Lexed {
    pub token: Result<Token, LexError>,
    /// Byte range in the text.
    pub span: Range<usize>,
    /// A newline lies between the previous token and this one.
    pub newline_before: bool,
}

/// Cuts `text` into tokens, dropping comments. Errors are kept in place so
/// that the caller can report them and carry on.
pub fn lex(text: &str) -> Vec<Lexed> {
    let mut out = Vec::new();
    let mut lexer = Token::lexer(text);
    let mut last_end = 0;
    while let Some(token) = lexer.next() {
        let span = lexer.span();
        if token == Ok(Token::BlockComment) {
            continue;
        }
        // The gap includes skipped comments, so a newline inside one counts.
        let newline_before = text[last_end..span.start].contains('\n');
        last_end = span.end;
        out.push(Lexed {
            token,
            span,
            newline_before,
        });
    }
    out
}

/// Parses a number literal: decimal, `0x` hex, or leading-`0` octal. Values
/// wrap to i64 like stap's 64-bit longs, so `0xffffffffffffffff` is -1.
fn number(lex: &mut logos::Lexer<Token>) -> Result<i64, LexError> {
    parse_number(lex.slice())
}

pub(crate) fn parse_number(text: &str) -> Result<i64, LexError> {
    let bad = || LexError::BadNumber(text.to_string());
    let (digits, radix) =
        if let Some(hex) = text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
            (hex, 16)
        } else if text.len() > 1 && text.starts_with('0') {
            (&text[1..], 8)
        } else {
            (text, 10)
        };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return Err(bad());
    }
    u64::from_str_radix(digits, radix)
        .map(|v| v as i64)
        .map_err(|_| LexError::NumberTooLarge(text.to_string()))
}

/// Reads a string literal after its opening quote, decoding C escapes.
/// Unknown escapes such as `\d` are kept as written (regexes use them).
fn string(lex: &mut logos::Lexer<Token>) -> Result<String, LexError> {
    let rest = lex.remainder();
    let mut value = String::new();
    let mut chars = rest.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => {
                lex.bump(i + 1);
                return Ok(value);
            }
            '\n' => break,
            '\\' => {
                let Some((_, e)) = chars.next() else { break };
                match e {
                    'n' => value.push('\n'),
                    't' => value.push('\t'),
                    'r' => value.push('\r'),
                    'a' => value.push('\x07'),
                    'b' => value.push('\x08'),
                    'f' => value.push('\x0c'),
                    'v' => value.push('\x0b'),
                    '\\' | '"' | '\'' => value.push(e),
                    '\n' => {} // a backslash-newline continues the string
                    '0'..='7' => {
                        let mut code = e.to_digit(8).unwrap_or(0);
                        for _ in 0..2 {
                            match chars.peek().and_then(|(_, d)| d.to_digit(8)) {
                                Some(d) => {
                                    code = code * 8 + d;
                                    chars.next();
                                }
                                None => break,
                            }
                        }
                        value.push(char::from((code & 0xff) as u8));
                    }
                    'x' => {
                        let mut code = 0;
                        let mut seen = 0;
                        while seen < 2 {
                            match chars.peek().and_then(|(_, d)| d.to_digit(16)) {
                                Some(d) => {
                                    code = code * 16 + d;
                                    chars.next();
                                    seen += 1;
                                }
                                None => break,
                            }
                        }
                        if seen == 0 {
                            value.push_str("\\x");
                        } else {
                            value.push(char::from(code as u8));
                        }
                    }
                    other => {
                        value.push('\\');
                        value.push(other);
                    }
                }
            }
            _ => value.push(c),
        }
    }
    // Point the error at the opening quote and the rest of its line.
    let line_len = rest.find('\n').unwrap_or(rest.len());
    lex.bump(line_len);
    Err(LexError::UnterminatedString)
}

fn embedded_c(lex: &mut logos::Lexer<Token>) -> Result<(), LexError> {
    match lex.remainder().find("%}") {
        Some(end) => {
            lex.bump(end + 2);
            Ok(())
        }
        None => {
            lex.bump(lex.remainder().len());
            Err(LexError::UnterminatedEmbeddedC)
        }
    }
}

fn block_comment(lex: &mut logos::Lexer<Token>) -> FilterResult<(), LexError> {
    match lex.remainder().find("*/") {
        Some(end) => {
            lex.bump(end + 2);
            FilterResult::Emit(())
        }
        None => {
            // The rest of the text is comment: do not lex it as code.
            lex.bump(lex.remainder().len());
            FilterResult::Error(LexError::UnterminatedComment)
        }
    }
}

/// A token after preprocessing, ready for [`disambiguate`] and the parser.
#[derive(Debug, Clone, PartialEq)]
pub struct PpToken {
    pub token: Token,
    /// Byte range in the file being parsed (macro bodies keep their own
    /// place in the text).
    pub span: Range<usize>,
    pub newline_before: bool,
}

impl Token {
    /// The spelling of a keyword token, which may still serve as a name
    /// (a macro called `limit`, a field called `next`).
    pub fn keyword(&self) -> Option<&'static str> {
        Some(match self {
            Token::Probe => "probe",
            Token::Global => "global",
            Token::Private => "private",
            Token::Function => "function",
            Token::If => "if",
            Token::Else => "else",
            Token::While => "while",
            Token::For => "for",
            Token::Foreach => "foreach",
            Token::In => "in",
            Token::Limit => "limit",
            Token::Return | Token::ReturnVoid => "return",
            Token::Delete => "delete",
            Token::Next => "next",
            Token::Break => "break",
            Token::Continue => "continue",
            Token::Try => "try",
            Token::Catch => "catch",
            _ => return None,
        })
    }

    /// Whether this token can end an operand, so that a following `-`, `+`,
    /// `&` is binary, `++`/`--` postfix and `[` an index.
    fn ends_operand(&self) -> bool {
        matches!(
            self,
            Token::Ident(_)
                | Token::Number(_)
                | Token::Str(_)
                | Token::Context(_)
                | Token::BulkContext(_)
                | Token::RParen
                | Token::RBracket
                | Token::Incr
                | Token::Decr
                | Token::Dollar
                | Token::DollarDollar
                | Token::EmbeddedC
        )
    }

    /// Whether a `(` after this token opens an argument list.
    fn takes_call_paren(&self) -> bool {
        matches!(
            self,
            Token::Ident(_)
                | Token::Function
                | Token::AtCast
                | Token::AtEntry
                | Token::AtDefined
                | Token::AtChooseDefined
                | Token::AtVar
                | Token::AtOperator(_)
                | Token::AtStat(_)
                | Token::AtName(_)
        )
    }
}

/// Gives context-dependent tokens their kind (see the grammar's header
/// comment) and joins adjacent string literals.
pub fn disambiguate(tokens: Vec<PpToken>) -> Vec<PpToken> {
    let mut out: Vec<PpToken> = Vec::with_capacity(tokens.len());
    // For each open `(`: whether it holds the condition of `if`, `while`,
    // `for` or `foreach`, whose `)` is followed by a statement, not by more
    // of an expression (`if (x) ++y`, `while (i) -i`).
    let mut parens: Vec<bool> = Vec::new();
    let mut after_operand = false;
    let mut iter = tokens.into_iter().peekable();
    while let Some(mut tok) = iter.next() {
        let prev = out.last().map(|p| &p.token);
        // After `->` even a keyword is a field name (`->next - 1`): an operand.
        let mut ends_operand = tok.token.ends_operand() || prev == Some(&Token::Arrow);
        tok.token = match tok.token {
            Token::Str(s) => {
                if let Some(PpToken {
                    token: Token::Str(previous),
                    span,
                    ..
                }) = out.last_mut()
                {
                    previous.push_str(&s);
                    span.end = span.end.max(tok.span.end);
                    continue;
                }
                Token::Str(s)
            }
            Token::Minus if !after_operand => Token::UnaryMinus,
            Token::Plus if !after_operand => Token::UnaryPlus,
            Token::Amp if !after_operand => Token::AddressOf,
            Token::Incr if !after_operand || tok.newline_before => {
                ends_operand = false;
                Token::PreIncr
            }
            Token::Decr if !after_operand || tok.newline_before => {
                ends_operand = false;
                Token::PreDecr
            }
            Token::LParen => {
                let control = matches!(
                    prev,
                    Some(Token::If | Token::While | Token::For | Token::Foreach)
                );
                parens.push(control);
                if prev.is_some_and(Token::takes_call_paren) {
                    Token::CallParen
                } else {
                    Token::LParen
                }
            }
            Token::RParen => {
                ends_operand = !parens.pop().unwrap_or(false);
                Token::RParen
            }
            Token::LBracket if after_operand => Token::IndexBracket,
            Token::Semi if iter.peek().is_some_and(|t| t.token == Token::Else) => Token::SemiElse,
            Token::Return => match iter.peek().map(|t| &t.token) {
                None | Some(Token::Semi | Token::RBrace | Token::Else) => Token::ReturnVoid,
                Some(_) => Token::Return,
            },
            other => other,
        };
        after_operand = ends_operand;
        out.push(tok);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(text: &str) -> Vec<Token> {
        let tokens = lex(text)
            .into_iter()
            .map(|l| PpToken {
                token: l.token.expect("test input lexes"),
                span: l.span,
                newline_before: l.newline_before,
            })
            .collect();
        disambiguate(tokens).into_iter().map(|t| t.token).collect()
    }

    fn ident(s: &str) -> Token {
        Token::Ident(s.into())
    }

    #[test]
    fn numbers_wrap_like_stap_longs() {
        assert_eq!(parse_number("0xffffffffffffffff"), Ok(-1));
        assert_eq!(parse_number("010"), Ok(8));
        assert_eq!(parse_number("0"), Ok(0));
        assert_eq!(parse_number("0x1F"), Ok(31));
        assert!(matches!(parse_number("09"), Err(LexError::BadNumber(_))));
        assert!(matches!(parse_number("12ab"), Err(LexError::BadNumber(_))));
        assert!(matches!(
            parse_number("99999999999999999999"),
            Err(LexError::NumberTooLarge(_))
        ));
    }

    #[test]
    fn strings_decode_escapes_and_join() {
        assert_eq!(
            kinds(r#""a\n\t\\\"\101\x41\d" "b""#),
            vec![Token::Str("a\n\t\\\"AA\\db".into())]
        );
    }

    #[test]
    fn longest_operators_win() {
        assert_eq!(
            kinds("a <<< b <<= c << d -> e =~ f !~ g .= h"),
            vec![
                ident("a"),
                Token::Aggregate,
                ident("b"),
                Token::ShlAssign,
                ident("c"),
                Token::Shl,
                ident("d"),
                Token::Arrow,
                ident("e"),
                Token::RegexMatch,
                ident("f"),
                Token::RegexNoMatch,
                ident("g"),
                Token::DotAssign,
                ident("h"),
            ]
        );
    }

    #[test]
    fn comments_are_skipped_and_embedded_c_is_one_token() {
        assert_eq!(
            kinds("# x\n// y\n/* z */ a %{ int x; /* c */ %} b"),
            vec![ident("a"), Token::EmbeddedC, ident("b")]
        );
    }

    #[test]
    fn minus_plus_amp_are_unary_after_operators() {
        assert_eq!(
            kinds("a - -b + +c & &d"),
            vec![
                ident("a"),
                Token::Minus,
                Token::UnaryMinus,
                ident("b"),
                Token::Plus,
                Token::UnaryPlus,
                ident("c"),
                Token::Amp,
                Token::AddressOf,
                ident("d"),
            ]
        );
        assert_eq!(kinds("(-1)")[1], Token::UnaryMinus);
        assert_eq!(kinds("f(x)-1")[4], Token::Minus);
        assert_eq!(kinds("p->next - 1")[3], Token::Minus);
        assert_eq!(kinds("p->next & 1")[3], Token::Amp);
    }

    #[test]
    fn crement_is_postfix_only_on_the_same_line() {
        assert_eq!(
            kinds("x++ y\n++z"),
            vec![
                ident("x"),
                Token::Incr,
                ident("y"),
                Token::PreIncr,
                ident("z")
            ]
        );
        assert_eq!(kinds("--x")[0], Token::PreDecr);
        // After the condition of a control statement a new statement starts.
        assert_eq!(kinds("if (x) ++y")[4], Token::PreIncr);
        assert_eq!(kinds("while (f(i)) -i")[7], Token::UnaryMinus);
        assert_eq!(kinds("x = (y) ++")[5], Token::Incr);
        assert_eq!(kinds("a[1]--")[4], Token::Decr);
    }

    #[test]
    fn paren_after_name_is_a_call() {
        assert_eq!(kinds("f(x)")[1], Token::CallParen);
        assert_eq!(kinds("@cast(p)")[1], Token::CallParen);
        assert_eq!(kinds("kernel.function(\"f\")")[3], Token::CallParen);
        assert_eq!(kinds("if (x)")[1], Token::LParen);
        assert_eq!(kinds("x = (y)")[2], Token::LParen);
    }

    #[test]
    fn bracket_after_operand_is_an_index() {
        assert_eq!(kinds("a[1]")[1], Token::IndexBracket);
        assert_eq!(kinds("$p->f[1]")[3], Token::IndexBracket);
        assert_eq!(kinds("([a] in b)")[1], Token::LBracket);
        assert_eq!(kinds("x = [a] in b")[2], Token::LBracket);
    }

    #[test]
    fn return_without_value() {
        assert_eq!(kinds("return;")[0], Token::ReturnVoid);
        assert_eq!(kinds("{ return }")[1], Token::ReturnVoid);
        assert_eq!(kinds("return")[0], Token::ReturnVoid);
        assert_eq!(kinds("if (x) return else y")[4], Token::ReturnVoid);
        assert_eq!(kinds("return x")[0], Token::Return);
    }

    #[test]
    fn semicolon_before_else_ends_the_then_branch() {
        assert_eq!(kinds("if (x) y; else z")[5], Token::SemiElse);
        assert_eq!(kinds("if (x) ; else z")[4], Token::SemiElse);
        assert_eq!(kinds("x; y")[1], Token::Semi);
    }

    #[test]
    fn context_variables_and_script_arguments() {
        assert_eq!(
            kinds("$skb $$parms $1 @2 $# @# @count @foo $var$ $x->y$$"),
            vec![
                Token::Context("skb".into()),
                Token::BulkContext("parms".into()),
                Token::DollarArg(1),
                Token::AtArg(2),
                Token::DollarCount,
                Token::AtCount,
                Token::AtStat(StatOp::Count),
                Token::AtName("foo".into()),
                Token::Context("var".into()),
                Token::Dollar,
                Token::Context("x".into()),
                Token::Arrow,
                ident("y"),
                Token::DollarDollar,
            ]
        );
    }

    #[test]
    fn lex_errors_are_kept_in_place() {
        let lexed = lex("a \"open\nb");
        assert_eq!(lexed[1].token, Err(LexError::UnterminatedString));
        assert_eq!(lexed[2].token, Ok(ident("b")));
        assert!(lexed[2].newline_before);
        let comment = lex("/* x y");
        assert_eq!(comment.len(), 1);
        assert_eq!(comment[0].token, Err(LexError::UnterminatedComment));
        assert_eq!(lex("`")[0].token, Err(LexError::BadToken));
    }
}
