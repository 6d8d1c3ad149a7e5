//! Diagnostics: one type for every error and warning the compiler reports,
//! rendered rustc-style (source line, underline, hints) by codespan-reporting.

use crate::source::{SourceMap, Span};
use codespan_reporting::diagnostic::{Diagnostic as CsDiagnostic, Label};
use codespan_reporting::term::{self, termcolor};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    Error,
    Warning,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Diagnostic {
    pub severity: Severity,
    pub message: String,
    /// Where the problem is, with a short label shown under the underline.
    pub primary: Option<(Span, String)>,
    /// Other places involved, such as the first site of a type conflict.
    pub secondary: Vec<(Span, String)>,
    /// Hints and notes, printed after the source excerpt.
    pub notes: Vec<String>,
}

impl Diagnostic {
    pub fn error(message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            severity: Severity::Error,
            message: message.into(),
            primary: None,
            secondary: Vec::new(),
            notes: Vec::new(),
        }
    }

    pub fn warning(message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            severity: Severity::Warning,
            ..Diagnostic::error(message)
        }
    }

    /// An "unsupported: X" error, the one wording for everything outside
    /// the supported subset (docs/language.md).
    pub fn unsupported(what: impl std::fmt::Display, span: Span) -> Diagnostic {
        Diagnostic::error(format!("unsupported: {what}")).at(span, "not supported by stap-rs")
    }

    pub fn at(mut self, span: Span, label: impl Into<String>) -> Diagnostic {
        self.primary = Some((span, label.into()));
        self
    }

    pub fn also(mut self, span: Span, label: impl Into<String>) -> Diagnostic {
        self.secondary.push((span, label.into()));
        self
    }

    pub fn note(mut self, note: impl Into<String>) -> Diagnostic {
        self.notes.push(note.into());
        self
    }

    /// Adds "did you mean" with the candidates nearest to `wanted`, if any
    /// are close enough to be a plausible typo.
    pub fn suggest<'a>(self, wanted: &str, candidates: impl IntoIterator<Item = &'a str>) -> Self {
        let near = nearest_names(wanted, candidates, 3);
        match near.len() {
            0 => self,
            1 => self.note(format!("help: did you mean `{}`?", near[0])),
            _ => {
                let list: Vec<String> = near.iter().map(|n| format!("`{n}`")).collect();
                self.note(format!("help: did you mean one of {}?", list.join(", ")))
            }
        }
    }

    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }

    fn to_codespan(&self, map: &SourceMap) -> CsDiagnostic<crate::source::FileId> {
        let base = match self.severity {
            Severity::Error => CsDiagnostic::error(),
            Severity::Warning => CsDiagnostic::warning(),
        };
        let mut labels = Vec::new();
        let mut notes = Vec::new();
        let mut label = |span: &Span, text: &str, primary: bool| {
            // A label on a very long line would print the whole line: show
            // a window around the span instead, as a note.
            if longest_line(map, *span) > MAX_SNIPPET_LINE {
                notes.push(format!(
                    "at {}: {}{}",
                    map.location(*span),
                    excerpt(map, *span),
                    if text.is_empty() {
                        String::new()
                    } else {
                        format!(" ({text})")
                    }
                ));
            } else if primary {
                labels.push(Label::primary(span.file, span.range()).with_message(text));
            } else {
                labels.push(Label::secondary(span.file, span.range()).with_message(text));
            }
        };
        if let Some((span, text)) = &self.primary {
            label(span, text, true);
        }
        for (span, text) in &self.secondary {
            label(span, text, false);
        }
        notes.extend(self.notes.iter().cloned());
        base.with_message(&self.message)
            .with_labels(labels)
            .with_notes(notes)
    }
}

/// Source lines longer than this are not printed whole under a diagnostic.
const MAX_SNIPPET_LINE: usize = 240;
/// Bytes of context shown each side of a span on a long line.
const EXCERPT_CONTEXT: usize = 40;
/// Diagnostics printed per run; the rest are counted in one line. Hostile
/// input can produce thousands (one per `-` of a 10 KB line).
pub const MAX_SHOWN: usize = 50;

/// The length of the longest source line a span touches.
fn longest_line(map: &SourceMap, span: Span) -> usize {
    let text = map.get(span.file).text.as_str();
    let start = (span.start as usize).min(text.len());
    let end = (span.end as usize).clamp(start, text.len());
    let line_start = text[..start].rfind('\n').map_or(0, |i| i + 1);
    let line_end = text[end..].find('\n').map_or(text.len(), |i| end + i);
    line_end - line_start
}

/// The span's text with a little context, cut to a bounded width.
fn excerpt(map: &SourceMap, span: Span) -> String {
    let text = map.get(span.file).text.as_str();
    let floor = |mut i: usize| {
        i = i.min(text.len());
        while !text.is_char_boundary(i) {
            i -= 1;
        }
        i
    };
    let start = floor(span.start as usize);
    let end = floor(
        (span.end as usize)
            .max(start)
            .min(start + 2 * EXCERPT_CONTEXT),
    );
    let from = floor(start.saturating_sub(EXCERPT_CONTEXT));
    let to = floor(end + EXCERPT_CONTEXT);
    let line = |s: &str| s.replace(['\n', '\r', '\t'], " ");
    format!(
        "{}{}>>>{}<<<{}{}",
        if from > 0 { "..." } else { "" },
        line(&text[from..start]),
        line(&text[start..end]),
        line(&text[end..to]),
        if to < text.len() { "..." } else { "" },
    )
}

/// The first [`MAX_SHOWN`] diagnostics, and a count of the rest.
fn shown(diags: &[Diagnostic]) -> (&[Diagnostic], Option<String>) {
    if diags.len() <= MAX_SHOWN {
        return (diags, None);
    }
    let (head, rest) = diags.split_at(MAX_SHOWN);
    let errors = rest.iter().filter(|d| d.is_error()).count();
    let warnings = rest.len() - errors;
    let mut parts = Vec::new();
    if errors > 0 {
        parts.push(format!("{errors} more errors"));
    }
    if warnings > 0 {
        parts.push(format!("{warnings} more warnings"));
    }
    let summary = format!(
        "note: {} not shown (stap-rs prints the first {MAX_SHOWN})\n",
        parts.join(" and ")
    );
    (head, Some(summary))
}

/// Renders diagnostics as plain text (for snapshots and non-terminals).
pub fn render_plain(map: &SourceMap, diags: &[Diagnostic]) -> String {
    let mut out = termcolor::NoColor::new(Vec::new());
    let config = term::Config::default();
    let (head, summary) = shown(diags);
    for d in head {
        // Writing into a Vec cannot fail, and spans always come from `map`.
        let _ = term::emit(&mut out, &config, map, &d.to_codespan(map));
    }
    let mut text = String::from_utf8_lossy(&out.into_inner()).into_owned();
    text.extend(summary);
    text
}

/// Renders diagnostics to stderr, in colour when stderr is a terminal.
pub fn emit_stderr(map: &SourceMap, diags: &[Diagnostic]) {
    use std::io::IsTerminal;
    let choice = if std::io::stderr().is_terminal() {
        termcolor::ColorChoice::Auto
    } else {
        termcolor::ColorChoice::Never
    };
    let stream = termcolor::StandardStream::stderr(choice);
    let mut lock = stream.lock();
    let config = term::Config::default();
    let (head, summary) = shown(diags);
    for d in head {
        let _ = term::emit(&mut lock, &config, map, &d.to_codespan(map));
    }
    if let Some(summary) = summary {
        use std::io::Write;
        let _ = lock.write_all(summary.as_bytes());
    }
}

/// Up to `max` candidates within a small edit distance of `wanted`, nearest
/// first. Prefix matches count as near, since truncated names are common.
pub fn nearest_names<'a>(
    wanted: &str,
    candidates: impl IntoIterator<Item = &'a str>,
    max: usize,
) -> Vec<String> {
    // Suggestions are for typos in names of ordinary length: a longer
    // name only gets prefix matches, so the work stays linear in the
    // candidates rather than growing with the name's length squared.
    let typo_checked = wanted.len() <= MAX_SUGGESTED_NAME;
    let limit = (wanted.len() / 3).max(2);
    let mut scored: Vec<(usize, &str)> = candidates
        .into_iter()
        .filter(|c| *c != wanted)
        .filter_map(|c| {
            let prefix = wanted.len() >= 3 && c.starts_with(wanted);
            // The edit distance is at least the difference in length.
            if !prefix && (!typo_checked || c.len().abs_diff(wanted.len()) > limit) {
                return None;
            }
            let d = edit_distance(wanted, c);
            (d <= limit || prefix).then_some((if prefix { d.min(limit) } else { d }, c))
        })
        .collect();
    scored.sort();
    scored.dedup_by(|a, b| a.1 == b.1);
    scored
        .into_iter()
        .take(max)
        .map(|(_, c)| c.to_string())
        .collect()
}

/// Names longer than this get no edit-distance suggestions.
const MAX_SUGGESTED_NAME: usize = 64;

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.chars().enumerate() {
        cur[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_names_finds_typos() {
        let names = ["execname", "exit", "pid", "ppid", "printf"];
        assert_eq!(nearest_names("execnme", names, 3), vec!["execname"]);
        assert_eq!(nearest_names("prinf", names, 1), vec!["printf"]);
        assert!(nearest_names("zzzzzzzz", names, 3).is_empty());
    }
}
