//! Run-time errors of host code, worded as stap words them.

use std::fmt;

/// Why a host handler stopped. `Display` gives stap's message text; the
/// session prefixes it with `ERROR: ` and counts it against MAXERRORS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuntimeError {
    DivisionByZero,
    /// More than MAXACTION statements in one probe hit.
    MaxAction,
    /// Function calls nested deeper than MAXNESTING.
    MaxNesting,
    /// `@avg`, `@min`, `@max`, `@variance` of a statistic with no samples.
    EmptyAggregate,
    /// An array already holds MAXMAPENTRIES (or its declared size) elements.
    ArrayFull {
        global: String,
        max_entries: u64,
    },
    /// `error(msg)`.
    Explicit(String),
    /// A built-in the host cannot evaluate.
    Unsupported(String),
    /// A BPF map operation on a kernel-shared global failed.
    Map {
        global: String,
        message: String,
    },
    /// `%m`/`%M` could not read kernel memory at this address.
    KernelRead(u64),
    /// `kernel_string()` could not read the string at this address.
    KernelString(u64),
    /// A printf format could not be applied (pass 2 checks formats, so this
    /// means the IR and the format disagree).
    Format(String),
    /// The program does not match the runtime (bad ids in the IR).
    Internal(String),
    /// One probe hit created more string bytes than this.
    StringSpace(usize),
    /// The session is stopping (a signal, `-T`): the hit was cut short at
    /// a loop back-edge. Not an error: nothing is printed or counted.
    Stopped,
}

impl fmt::Display for RuntimeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RuntimeError::DivisionByZero => f.write_str("division by zero"),
            RuntimeError::MaxAction => f.write_str("MAXACTION exceeded"),
            RuntimeError::MaxNesting => f.write_str("MAXNESTING exceeded"),
            RuntimeError::EmptyAggregate => f.write_str("empty aggregate"),
            // stap's wording; the session adds where.
            RuntimeError::ArrayFull { .. } => f.write_str("Array overflow, check MAXMAPENTRIES"),
            RuntimeError::Explicit(msg) => f.write_str(msg),
            RuntimeError::Unsupported(what) => write!(f, "unsupported: {what}"),
            RuntimeError::Map { global, message } => {
                write!(f, "map operation on `{global}` failed: {message}")
            }
            RuntimeError::KernelRead(addr) => write!(f, "kernel read fault at 0x{addr:x}"),
            RuntimeError::KernelString(addr) => {
                write!(f, "kernel string copy fault at 0x{addr:x}")
            }
            RuntimeError::Format(msg) => write!(f, "bad format: {msg}"),
            RuntimeError::Internal(msg) => write!(f, "internal error: {msg}"),
            RuntimeError::StringSpace(limit) => write!(
                f,
                "out of string space: one probe hit created more than {} MiB of strings",
                limit >> 20
            ),
            RuntimeError::Stopped => f.write_str("stopped"),
        }
    }
}

impl std::error::Error for RuntimeError {}
