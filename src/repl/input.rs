//! The line-editor thread: prompts, multi-line input while braces are
//! open, history in ~/.stap-rs_history, and completion of commands,
//! keywords, common builtins and the session's globals.

use super::Request;
use rustyline::completion::Completer;
use rustyline::error::ReadlineError;
use rustyline::highlight::Highlighter;
use rustyline::hint::Hinter;
use rustyline::history::DefaultHistory;
use rustyline::validate::{ValidationContext, ValidationResult, Validator};
use rustyline::{Context, Editor, Helper};
use std::path::PathBuf;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};

const WORDS: &[&str] = &[
    ":probes",
    ":detach",
    ":attach",
    ":globals",
    ":print",
    ":clear",
    ":save",
    ":load",
    ":help",
    ":quit",
    "global",
    "function",
    "probe",
    "foreach",
    "delete",
    "printf",
    "println",
    "print",
    "sprintf",
    "execname",
    "pid",
    "tid",
    "cpu",
    "symname",
    "symdata",
    "gettimeofday_s",
    "gettimeofday_ms",
    "exit",
    "begin",
    "end",
    "kernel.trace",
    "kernel.function",
    "timer.s",
    "timer.ms",
];

/// Reads inputs until Ctrl-D or `:quit`, sending each to the main thread
/// and waiting for its answer before prompting again.
pub fn read_lines(requests: Sender<Request>, acks: Receiver<()>, names: Arc<Mutex<Vec<String>>>) {
    let mut editor = match Editor::<Input, DefaultHistory>::new() {
        Ok(editor) => editor,
        Err(e) => {
            eprintln!("ERROR: cannot start the line editor: {e}");
            let _ = requests.send(Request::Quit);
            let _ = acks.recv();
            return;
        }
    };
    editor.set_helper(Some(Input { names }));
    let history = history_file();
    if let Some(path) = &history {
        let _ = editor.load_history(path);
    }
    loop {
        let request = match editor.readline("stap> ") {
            Ok(line) if line.trim().is_empty() => continue,
            Ok(line) => {
                let _ = editor.add_history_entry(line.as_str());
                if let Some(path) = &history {
                    let _ = editor.save_history(path);
                }
                match line.trim() {
                    ":quit" | ":q" => Request::Quit,
                    _ => Request::Line(line),
                }
            }
            // Ctrl-C drops the line being typed.
            Err(ReadlineError::Interrupted) => continue,
            Err(_) => Request::Quit,
        };
        let quit = matches!(request, Request::Quit);
        if requests.send(request).is_err() || acks.recv().is_err() || quit {
            return;
        }
    }
}

fn history_file() -> Option<PathBuf> {
    std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".stap-rs_history"))
}

struct Input {
    names: Arc<Mutex<Vec<String>>>,
}

impl Helper for Input {}
impl Highlighter for Input {}
impl Hinter for Input {
    type Hint = String;
}

impl Completer for Input {
    type Candidate = String;

    fn complete(
        &self,
        line: &str,
        pos: usize,
        _ctx: &Context<'_>,
    ) -> rustyline::Result<(usize, Vec<String>)> {
        let before = &line[..pos];
        let start = before
            .rfind(|c: char| !(c.is_alphanumeric() || matches!(c, '_' | '.' | ':')))
            .map_or(0, |i| i + 1);
        let word = &before[start..];
        if word.is_empty() {
            return Ok((pos, Vec::new()));
        }
        let globals = self.names.lock().map(|n| n.clone()).unwrap_or_default();
        let mut found: Vec<String> = WORDS
            .iter()
            .map(|w| w.to_string())
            .chain(globals)
            .filter(|w| w.starts_with(word))
            .collect();
        found.sort();
        found.dedup();
        Ok((start, found))
    }
}

impl Validator for Input {
    fn validate(&self, ctx: &mut ValidationContext<'_>) -> rustyline::Result<ValidationResult> {
        Ok(if open_braces(ctx.input()) > 0 {
            ValidationResult::Incomplete
        } else {
            ValidationResult::Valid(None)
        })
    }
}

/// How many `{`/`(` are still open, outside strings and comments.
pub fn open_braces(text: &str) -> i64 {
    let mut depth = 0i64;
    let mut chars = text.chars().peekable();
    let mut in_string = false;
    while let Some(c) = chars.next() {
        if in_string {
            match c {
                '\\' => {
                    chars.next();
                }
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_string = true,
            '#' => skip_line(&mut chars),
            '/' if chars.peek() == Some(&'/') => skip_line(&mut chars),
            '/' if chars.peek() == Some(&'*') => {
                chars.next();
                let mut last = ' ';
                for c in chars.by_ref() {
                    if last == '*' && c == '/' {
                        break;
                    }
                    last = c;
                }
            }
            '{' | '(' => depth += 1,
            '}' | ')' => depth -= 1,
            _ => {}
        }
    }
    depth
}

fn skip_line(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) {
    for c in chars.by_ref() {
        if c == '\n' {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::open_braces;

    #[test]
    fn input_continues_while_braces_are_open() {
        assert_eq!(open_braces("probe begin {"), 1);
        assert_eq!(open_braces("probe begin { printf(\"{\") }"), 0);
        assert_eq!(open_braces("probe begin { # }\n"), 1);
        assert_eq!(open_braces("probe begin { /* } */ }"), 0);
        assert_eq!(open_braces("printf(\"%d\\n\", 1+2)"), 0);
    }
}
