//! The line-editor thread: prompts, multi-line input while braces are
//! open, history in ~/.stap-rs_history, session output through rustyline's
//! external printer (see `console.rs`), and completion (`complete.rs`).

use super::Request;
use super::complete::Completions;
use super::console;
use crate::out::errln;
use rustyline::completion::Completer;
use rustyline::config::{Behavior, CompletionType, Config};
use rustyline::error::ReadlineError;
use rustyline::highlight::Highlighter;
use rustyline::hint::Hinter;
use rustyline::history::DefaultHistory;
use rustyline::validate::{ValidationContext, ValidationResult, Validator};
use rustyline::{Context, Editor, ExternalPrinter, Helper};
use std::io::Write;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};

/// What the editor thread needs.
pub struct EditorEnd {
    pub requests: Sender<Request>,
    pub acks: Receiver<()>,
    /// For the forwarder, which answers in the main thread's name.
    pub ack_sender: Sender<()>,
    /// The session's global names, for completion.
    pub names: Arc<Mutex<Vec<String>>>,
    /// The read end of the output pipe, when output is redirected.
    pub output: Option<OwnedFd>,
}

/// Reads inputs until Ctrl-D or `:quit`, sending each to the main thread
/// and waiting for its answer before prompting again.
pub fn read_lines(end: EditorEnd) {
    let EditorEnd {
        requests,
        acks,
        ack_sender,
        names,
        output,
    } = end;
    let mut config = Config::builder()
        .completion_type(CompletionType::List)
        .auto_add_history(false);
    if output.is_some() {
        // stdout is the output pipe: the editor uses the terminal itself.
        config = config.behavior(Behavior::PreferTerm);
    }
    let mut editor = match Editor::<Input, DefaultHistory>::with_config(config.build()) {
        Ok(editor) => editor,
        Err(e) => {
            errln!("ERROR: cannot start the line editor: {e}");
            drop(output);
            let _ = requests.send(Request::Quit);
            let _ = acks.recv();
            return;
        }
    };
    editor.set_helper(Some(Input {
        completions: Completions::new(names),
    }));
    let history = history_file();
    if let Some(path) = &history {
        let _ = editor.load_history(path);
    }
    let forwarder = output.map(|read| {
        let sink: Box<dyn FnMut(String) + Send> = match editor.create_external_printer() {
            Ok(mut printer) => Box::new(move |text| {
                let _ = printer.print(text);
            }),
            Err(_) => {
                let mut tty = std::fs::OpenOptions::new()
                    .write(true)
                    .open("/dev/tty")
                    .ok();
                Box::new(move |text: String| {
                    if let Some(tty) = &mut tty {
                        let _ = tty.write_all(text.as_bytes());
                    }
                })
            }
        };
        std::thread::spawn(move || console::forward(read, sink, ack_sender))
    });
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
            break;
        }
    }
    // The printer writes to the editor's terminal: done before it closes.
    if let Some(forwarder) = forwarder {
        let _ = forwarder.join();
    }
}

fn history_file() -> Option<PathBuf> {
    std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".stap-rs_history"))
}

struct Input {
    completions: Completions,
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
        Ok(self.completions.complete(line, pos))
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
