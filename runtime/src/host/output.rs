//! Where the script's output goes: stdout, a file given with `-o`, or a
//! memory buffer for tests.
//!
//! As in stap, whose handlers print into a buffer the runtime ships at the
//! end of each probe, output is buffered and the session flushes it after
//! each host probe and each batch of kernel events: one write(2) per
//! handler rather than per line, which a million-line `foreach` needs.
//! Past [`SPILL`] bytes, complete lines go out early to bound memory.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::path::Path;

enum Sink {
    Stdout(io::Stdout),
    File(File),
    Buffer,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Warning,
    Error,
}

/// Pending bytes beyond which complete lines are written before a flush.
const SPILL: usize = 1 << 16;

pub struct Output {
    sink: Sink,
    /// Bytes not yet written to the sink (everything, for `Buffer`).
    pending: Vec<u8>,
    format: Format,
}

/// `--format`: stap's text, or one JSON object per event (docs/output.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    #[default]
    Text,
    Json,
}

/// How a run ended, for the JSON `end` event.
#[derive(Debug, Clone, Copy, Default)]
pub struct Summary {
    pub errors: u64,
    pub skipped: u64,
    pub lost: u64,
    /// Ended because of run-time errors (exit status 1).
    pub failed: bool,
}

impl Output {
    pub fn stdout() -> Output {
        Output {
            sink: Sink::Stdout(io::stdout()),
            pending: Vec::new(),
            format: Format::Text,
        }
    }

    /// `-o FILE`: created or truncated.
    pub fn file(path: &Path) -> io::Result<Output> {
        Ok(Output {
            sink: Sink::File(File::create(path)?),
            pending: Vec::new(),
            format: Format::Text,
        })
    }

    /// Keeps everything in memory; read it with [`Output::take_buffer`].
    pub fn buffer() -> Output {
        Output {
            sink: Sink::Buffer,
            pending: Vec::new(),
            format: Format::Text,
        }
    }

    /// The same output in another format.
    pub fn with_format(mut self, format: Format) -> Output {
        self.format = format;
        self
    }

    pub fn format(&self) -> Format {
        self.format
    }

    /// Appends script output (one printf, print, ...: one JSON `output`
    /// event); it reaches the sink at the next [`Output::flush`], or its
    /// complete lines once [`SPILL`] bytes wait.
    pub fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        match self.format {
            Format::Text => self.push(bytes),
            Format::Json => {
                let line = super::json::event("output", &[("data", super::json::string(bytes))]);
                self.push(line.as_bytes())
            }
        }
    }

    /// A printed histogram: stap's ASCII `text`, or the JSON `event`.
    pub fn histogram(
        &mut self,
        text: impl FnOnce() -> String,
        event: impl FnOnce() -> Option<String>,
    ) -> io::Result<()> {
        match self.format {
            Format::Text => self.push(text().as_bytes()),
            Format::Json => match event() {
                Some(line) => self.push(line.as_bytes()),
                None => Ok(()),
            },
        }
    }

    /// A warning or error of the run. Text: stap's `WARNING: `/`ERROR: `
    /// line on stderr, after the output so far. JSON: a `warning`/`error`
    /// event in the stream, with its `kind` and any extra fields.
    pub fn notice(&mut self, level: Level, kind: &str, message: &str, extra: &[(&str, String)]) {
        match self.format {
            Format::Text => {
                let prefix = match level {
                    Level::Warning => "WARNING",
                    Level::Error => "ERROR",
                };
                crate::stop::stderr_line(&format!("{prefix}: {message}"));
            }
            Format::Json => {
                let mut fields = vec![
                    ("kind", super::json::string(kind.as_bytes())),
                    ("message", super::json::string(message.as_bytes())),
                ];
                fields.extend(extra.iter().cloned());
                let name = match level {
                    Level::Warning => "warning",
                    Level::Error => "error",
                };
                let _ = self.push(super::json::event(name, &fields).as_bytes());
                let _ = self.flush();
            }
        }
    }

    /// The run is over: JSON's `end` event (text has none).
    pub fn end(&mut self, summary: Summary) {
        if self.format == Format::Json {
            let line = super::json::event(
                "end",
                &[
                    ("errors", summary.errors.to_string()),
                    ("skipped", summary.skipped.to_string()),
                    ("lost", summary.lost.to_string()),
                    ("status", (u8::from(summary.failed)).to_string()),
                ],
            );
            let _ = self.push(line.as_bytes());
        }
        let _ = self.flush();
    }

    fn push(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.pending.extend_from_slice(bytes);
        if !matches!(self.sink, Sink::Buffer) && self.pending.len() >= SPILL {
            let cut = self
                .pending
                .iter()
                .rposition(|b| *b == b'\n')
                .map_or(0, |i| i + 1);
            // The written lines leave the front; the buffer keeps its
            // capacity (a fresh one per spill meant a realloc chain).
            let written = write_sink(&mut self.sink, &self.pending[..cut]);
            self.pending.drain(..cut);
            written?;
        }
        Ok(())
    }

    /// Writes everything pending and flushes the sink. The session calls
    /// this after each handler, before error messages and at exit.
    pub fn flush(&mut self) -> io::Result<()> {
        if matches!(self.sink, Sink::Buffer) {
            return Ok(());
        }
        let written = write_sink(&mut self.sink, &self.pending);
        // Cleared, not taken: the next batch reuses the allocation.
        self.pending.clear();
        written?;
        match &mut self.sink {
            Sink::Stdout(out) => out.flush(),
            Sink::File(file) => file.flush(),
            Sink::Buffer => Ok(()),
        }
    }

    /// The bytes a buffer output collected so far (empty for other sinks).
    pub fn take_buffer(&mut self) -> Vec<u8> {
        match self.sink {
            Sink::Buffer => std::mem::take(&mut self.pending),
            _ => Vec::new(),
        }
    }
}

/// Writes to a stdout or file sink (a `Buffer` keeps its bytes in
/// `pending` and never writes).
fn write_sink(sink: &mut Sink, bytes: &[u8]) -> io::Result<()> {
    match sink {
        // Through `stop::write_all`, not `Write`: a write to a pipe
        // nobody reads must not hold the session past a stop.
        Sink::Stdout(out) => {
            out.lock().flush()?;
            crate::stop::write_all(libc::STDOUT_FILENO, bytes)
        }
        Sink::File(file) => crate::stop::write_all(file.as_raw_fd(), bytes),
        Sink::Buffer => Ok(()),
    }
}

impl Drop for Output {
    fn drop(&mut self) {
        // Best effort: output is never silently lost on a normal exit path.
        let _ = self.flush();
    }
}
