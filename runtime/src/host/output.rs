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

/// Pending bytes beyond which complete lines are written before a flush.
const SPILL: usize = 1 << 16;

pub struct Output {
    sink: Sink,
    /// Bytes not yet written to the sink (everything, for `Buffer`).
    pending: Vec<u8>,
}

impl Output {
    pub fn stdout() -> Output {
        Output {
            sink: Sink::Stdout(io::stdout()),
            pending: Vec::new(),
        }
    }

    /// `-o FILE`: created or truncated.
    pub fn file(path: &Path) -> io::Result<Output> {
        Ok(Output {
            sink: Sink::File(File::create(path)?),
            pending: Vec::new(),
        })
    }

    /// Keeps everything in memory; read it with [`Output::take_buffer`].
    pub fn buffer() -> Output {
        Output {
            sink: Sink::Buffer,
            pending: Vec::new(),
        }
    }

    /// Appends script output; it reaches the sink at the next
    /// [`Output::flush`], or its complete lines once [`SPILL`] bytes wait.
    pub fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.pending.extend_from_slice(bytes);
        if !matches!(self.sink, Sink::Buffer) && self.pending.len() >= SPILL {
            let cut = self
                .pending
                .iter()
                .rposition(|b| *b == b'\n')
                .map_or(0, |i| i + 1);
            let rest = self.pending.split_off(cut);
            let lines = std::mem::replace(&mut self.pending, rest);
            self.sink_write(&lines)?;
        }
        Ok(())
    }

    /// Writes everything pending and flushes the sink. The session calls
    /// this after each handler, before error messages and at exit.
    pub fn flush(&mut self) -> io::Result<()> {
        if matches!(self.sink, Sink::Buffer) {
            return Ok(());
        }
        let pending = std::mem::take(&mut self.pending);
        self.sink_write(&pending)?;
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

    fn sink_write(&mut self, bytes: &[u8]) -> io::Result<()> {
        match &mut self.sink {
            // Through `stop::write_all`, not `Write`: a write to a pipe
            // nobody reads must not hold the session past a stop.
            Sink::Stdout(out) => {
                out.lock().flush()?;
                crate::stop::write_all(libc::STDOUT_FILENO, bytes)
            }
            Sink::File(file) => crate::stop::write_all(file.as_raw_fd(), bytes),
            Sink::Buffer => {
                self.pending.extend_from_slice(bytes);
                Ok(())
            }
        }
    }
}

impl Drop for Output {
    fn drop(&mut self) {
        // Best effort: output is never silently lost on a normal exit path.
        let _ = self.flush();
    }
}
