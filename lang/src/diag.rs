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

    fn to_codespan(&self) -> CsDiagnostic<crate::source::FileId> {
        let base = match self.severity {
            Severity::Error => CsDiagnostic::error(),
            Severity::Warning => CsDiagnostic::warning(),
        };
        let mut labels = Vec::new();
        if let Some((span, label)) = &self.primary {
            labels.push(Label::primary(span.file, span.range()).with_message(label));
        }
        for (span, label) in &self.secondary {
            labels.push(Label::secondary(span.file, span.range()).with_message(label));
        }
        base.with_message(&self.message)
            .with_labels(labels)
            .with_notes(self.notes.clone())
    }
}

/// Renders diagnostics as plain text (for snapshots and non-terminals).
pub fn render_plain(map: &SourceMap, diags: &[Diagnostic]) -> String {
    let mut out = termcolor::NoColor::new(Vec::new());
    let config = term::Config::default();
    for d in diags {
        // Writing into a Vec cannot fail, and spans always come from `map`.
        let _ = term::emit(&mut out, &config, map, &d.to_codespan());
    }
    String::from_utf8_lossy(&out.into_inner()).into_owned()
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
    for d in diags {
        let _ = term::emit(&mut lock, &config, map, &d.to_codespan());
    }
}

/// Up to `max` candidates within a small edit distance of `wanted`, nearest
/// first. Prefix matches count as near, since truncated names are common.
pub fn nearest_names<'a>(
    wanted: &str,
    candidates: impl IntoIterator<Item = &'a str>,
    max: usize,
) -> Vec<String> {
    let limit = (wanted.len() / 3).max(2);
    let mut scored: Vec<(usize, &str)> = candidates
        .into_iter()
        .filter(|c| *c != wanted)
        .filter_map(|c| {
            let d = edit_distance(wanted, c);
            let prefix = wanted.len() >= 3 && c.starts_with(wanted);
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
