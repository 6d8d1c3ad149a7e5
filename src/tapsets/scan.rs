//! Which names a tapset file defines, read from its text without parsing
//! it: the top-level `function NAME`, `global NAME, ...` and alias names
//! (`probe NAME, ... =` or `+=`). Elaboration parses a library file only
//! when it may define a name the script uses, so this scan decides what is
//! parsed; it runs at build time over the stdlib (build.rs) and at run time
//! over `-I` directories.
//!
//! The scan may find too much (both branches of a `%( %? %: %)`
//! conditional, a private global): that costs a parse, never a wrong
//! answer, since elaboration decides on the parsed file. It must never miss
//! a name, which the tests check against the parser over the stdlib and
//! stap's own tapsets. Only names made by macro expansion escape it.
//!
//! Self-contained (std only): build.rs compiles this file too.

/// The names one file may define, each in order of appearance.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Names {
    pub functions: Vec<String>,
    pub globals: Vec<String>,
    pub aliases: Vec<String>,
}

pub fn scan(text: &str) -> Names {
    let mut tokens = Tokens::new(text);
    let mut names = Names::default();
    while let Some(token) = tokens.next() {
        if tokens.depth > 0 {
            continue;
        }
        match token {
            Tok::Ident("function") => {
                if let Some(Tok::Ident(name)) = tokens.peek() {
                    names.functions.push(name.to_string());
                }
            }
            Tok::Ident("global") => globals(&mut tokens, &mut names.globals),
            // `private NAME` is a private global, `global` left out.
            Tok::Ident("private")
                if !matches!(
                    tokens.peek(),
                    Some(Tok::Ident("function" | "global")) | None
                ) =>
            {
                globals(&mut tokens, &mut names.globals)
            }
            Tok::Ident("probe") => aliases(&mut tokens, &mut names.aliases),
            _ => {}
        }
    }
    names
}

/// `global a, b[10], c% = 3, d = "x", e = -1`: the names, up to the first
/// token that cannot continue the declaration.
fn globals(tokens: &mut Tokens, out: &mut Vec<String>) {
    loop {
        let Some(Tok::Ident(name)) = tokens.peek() else {
            return;
        };
        tokens.next();
        out.push(name.to_string());
        if tokens.peek() == Some(Tok::Punct("%")) {
            tokens.next();
        }
        if tokens.peek() == Some(Tok::Punct("[")) {
            while !matches!(tokens.next(), Some(Tok::Punct("]")) | None) {}
        }
        if tokens.peek() == Some(Tok::Punct("=")) {
            tokens.next();
            if tokens.peek() == Some(Tok::Punct("-")) {
                tokens.next();
            }
            tokens.next(); // the literal
        }
        if tokens.peek() != Some(Tok::Punct(",")) {
            return;
        }
        tokens.next();
    }
}

/// After `probe`: the points up to `{`; when `=` or `+=` comes first, they
/// are alias names, kept when plain (`a.b.c`). A `%( COND %? A %: B %)`
/// among them offers both A and B.
fn aliases(tokens: &mut Tokens, out: &mut Vec<String>) {
    let mut points: Vec<(String, bool)> = vec![(String::new(), true)];
    let mut parens = 0usize;
    // Per open conditional: still in its condition (before `%?`).
    let mut conditionals: Vec<bool> = Vec::new();
    while let Some(token) = tokens.peek() {
        match token {
            Tok::Punct("{") if parens == 0 => return,
            Tok::Punct("=") | Tok::Punct("+=") if parens == 0 => {
                tokens.next();
                out.extend(
                    points
                        .into_iter()
                        .filter(|(name, plain)| *plain && !name.is_empty())
                        .map(|(name, _)| name),
                );
                return;
            }
            _ => {}
        }
        tokens.next();
        let in_condition = conditionals.last() == Some(&true);
        match token {
            Tok::Punct("%(") => conditionals.push(true),
            Tok::Punct("%?") => {
                if let Some(in_condition) = conditionals.last_mut() {
                    *in_condition = false;
                }
            }
            Tok::Punct("%)") => {
                conditionals.pop();
            }
            _ if in_condition => continue,
            _ => {}
        }
        let (name, plain) = points.last_mut().expect("never empty");
        match token {
            Tok::Punct("%(" | "%?" | "%:" | "%)") => points.push((String::new(), true)),
            Tok::Punct("(") => {
                parens += 1;
                *plain = false;
            }
            Tok::Punct(")") => parens = parens.saturating_sub(1),
            Tok::Punct(",") if parens == 0 => points.push((String::new(), true)),
            _ if parens > 0 => {}
            Tok::Ident(word) => name.push_str(word),
            // A `*` is kept: the parser would take `a.*` as a name too.
            Tok::Punct(part @ ("." | "*")) => name.push_str(part),
            _ => *plain = false,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tok<'a> {
    Ident(&'a str),
    Punct(&'a str),
    /// A string, a number or embedded C: nothing the scan looks into.
    Other,
}

/// Tokens at the level the scan needs, tracking the brace depth. Each
/// branch of a `%( %? %: %)` conditional starts at the depth the
/// conditional started at, so branches that each open a block (two
/// versions of one probe header) do not count twice.
struct Tokens<'a> {
    text: &'a str,
    pos: usize,
    depth: usize,
    /// Per open conditional: the depth its branches start at.
    conditionals: Vec<usize>,
}

impl<'a> Tokens<'a> {
    fn new(text: &'a str) -> Tokens<'a> {
        Tokens {
            text,
            pos: 0,
            depth: 0,
            conditionals: Vec::new(),
        }
    }

    fn peek(&self) -> Option<Tok<'a>> {
        let mut copy = Tokens {
            text: self.text,
            pos: self.pos,
            depth: 0,
            conditionals: Vec::new(),
        };
        copy.raw()
    }

    fn next(&mut self) -> Option<Tok<'a>> {
        let token = self.raw()?;
        match token {
            Tok::Punct("{") => self.depth += 1,
            Tok::Punct("}") => self.depth = self.depth.saturating_sub(1),
            Tok::Punct("%(") | Tok::Punct("%?") => {
                if token == Tok::Punct("%(") {
                    self.conditionals.push(self.depth);
                } else if let Some(start) = self.conditionals.last_mut() {
                    *start = self.depth;
                }
            }
            Tok::Punct("%:") => {
                if let Some(&start) = self.conditionals.last() {
                    self.depth = start;
                }
            }
            Tok::Punct("%)") => {
                self.conditionals.pop();
            }
            _ => {}
        }
        Some(token)
    }

    /// The next token, skipping blanks and comments.
    fn raw(&mut self) -> Option<Tok<'a>> {
        let bytes = self.text.as_bytes();
        loop {
            let rest = &self.text[self.pos..];
            let c = *bytes.get(self.pos)?;
            if c.is_ascii_whitespace() {
                self.pos += 1;
            } else if c == b'#' || rest.starts_with("//") {
                self.pos += rest.find('\n').unwrap_or(rest.len());
            } else if let Some(comment) = rest.strip_prefix("/*") {
                self.pos += comment.find("*/").map_or(rest.len(), |end| end + 4);
            } else {
                break;
            }
        }
        let rest = &self.text[self.pos..];
        let c = rest.as_bytes()[0];
        let len = if let Some(embedded) = rest.strip_prefix("%{") {
            let len = embedded.find("%}").map_or(rest.len(), |end| end + 4);
            self.pos += len;
            return Some(Tok::Other);
        } else if c == b'"' {
            let mut escaped = false;
            let end = rest[1..].char_indices().find(|&(_, ch)| {
                let closes = ch == '"' && !escaped;
                escaped = ch == '\\' && !escaped;
                closes
            });
            self.pos += end.map_or(rest.len(), |(i, _)| i + 2);
            return Some(Tok::Other);
        } else if c.is_ascii_digit() {
            let len = rest
                .find(|ch: char| !ch.is_ascii_alphanumeric() && ch != '_')
                .unwrap_or(rest.len());
            self.pos += len;
            return Some(Tok::Other);
        } else if c.is_ascii_alphabetic() || c == b'_' || c == b'$' || c == b'@' {
            1 + rest[1..]
                .find(|ch: char| !ch.is_ascii_alphanumeric() && ch != '_' && ch != '$')
                .unwrap_or(rest.len() - 1)
        } else if ["%(", "%?", "%:", "%)", "+="]
            .iter()
            .any(|p| rest.starts_with(p))
        {
            2
        } else if c == b'=' || c == b'!' || c == b'<' || c == b'>' {
            // `==`, `!=`, `<=`, `>=`, `=~`: never a lone `=`.
            if rest[1..].starts_with(['=', '~']) {
                2
            } else {
                1
            }
        } else {
            rest.chars().next().map_or(1, char::len_utf8)
        };
        let token = &rest[..len];
        self.pos += len;
        let first = token.as_bytes()[0];
        if first.is_ascii_alphabetic() || first == b'_' || first == b'$' || first == b'@' {
            Some(Tok::Ident(token))
        } else {
            Some(Tok::Punct(token))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_top_level_definitions() {
        let names = scan(
            r#"
# a comment: function not_me
global a, b[10], c% = 3, d = "x, global e", f = -1
private global g
private g2, g3
private function p() { }
function h:long (x:long) { probe_me = 1; return x }
probe i.j, k = kernel.function("x").return, l.m { }
probe n.o += p { }
probe kernel.trace("x") { function = 1 }
/* function not_me_either */
function q() %{ function not_c %}
%( kernel_v >= "6.1" %? probe r = s { %: probe r = t { %)
  global_name = 2
}
probe u.* = v { }
probe
%( systemtap_v <= "2.8" %? w.old %: w.new %) = x { }
"#,
        );
        assert_eq!(names.functions, ["p", "h", "q"]);
        assert_eq!(names.globals, ["a", "b", "c", "d", "f", "g", "g2", "g3"]);
        assert_eq!(
            names.aliases,
            ["i.j", "k", "n.o", "r", "r", "u.*", "w.old", "w.new"]
        );
    }
}
