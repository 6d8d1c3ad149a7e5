//! Writing listings, dumps and REPL answers to stdout, and messages to
//! stderr.
//!
//! `print!` panics when stdout is a pipe whose reader has gone
//! (`stap-rs -p2 script | head -1`): Rust ignores SIGPIPE, so the write
//! fails with EPIPE instead of ending the process as it would a C program.
//! A reader that stops reading wants no more output, so that is a quiet,
//! successful exit (as for ripgrep), never a panic. Other write errors
//! (a full disk) fail the run with a message.

use std::fmt;
use std::io::{self, Write};

/// `print!` that never panics: see the module's comment.
macro_rules! out {
    ($($arg:tt)*) => { $crate::out::write(format_args!($($arg)*)) };
}

/// `println!` that never panics: see the module's comment.
macro_rules! outln {
    ($($arg:tt)*) => { $crate::out::write(format_args!("{}\n", format_args!($($arg)*))) };
}

/// `eprintln!` that never panics: when stderr is closed or full, the
/// message has nowhere to go, and losing it is better than a panic that
/// would also be written there.
macro_rules! errln {
    ($($arg:tt)*) => { $crate::out::write_err(format_args!("{}\n", format_args!($($arg)*))) };
}

pub(crate) use {errln, out, outln};

pub fn write(args: fmt::Arguments<'_>) {
    let mut stdout = io::stdout().lock();
    if let Err(error) = stdout.write_fmt(args) {
        exit_on_write_error(&error);
    }
}

/// Writes to stderr, ignoring a failure: see [`errln`].
pub fn write_err(args: fmt::Arguments<'_>) {
    let _ = io::stderr().lock().write_fmt(args);
}

/// Ends the process after stdout failed: quietly with status 0 when the
/// reader has gone, with a message and status 1 otherwise.
pub fn exit_on_write_error(error: &io::Error) -> ! {
    if error.kind() == io::ErrorKind::BrokenPipe {
        std::process::exit(0);
    }
    // Through libc, not `eprintln!`: stderr may be a closed pipe too.
    let line = format!("ERROR: cannot write output: {error}\n");
    // SAFETY: writes from a live buffer to fd 2; the result is ignored.
    unsafe { libc::write(2, line.as_ptr().cast(), line.len()) };
    std::process::exit(1);
}
