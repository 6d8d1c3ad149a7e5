//! The ring-buffer record format: what kernel handlers send to the host,
//! and the host-side [`decode`].
//!
//! Every record starts with a 16-byte header of little-endian `u32`s:
//! `{kind, id, probe, len}`; `probe` indexes `ir::Module::probes` and `len`
//! is the whole record's size in bytes, header included. The payload:
//!
//! - [`KIND_PRINTF`] (`id` = the `FormatId`): the arguments in the order the
//!   format consumes them (`printf::arg_kinds`):
//!   - a long: 8 bytes (`i64`);
//!   - a string-kind argument: `u32 tag, u32 len`, then for [`TAG_TEXT`]
//!     `len` bytes of text (no NUL) padded to a multiple of 8 (padding bytes are unspecified), or
//!     for a symbol tag ([`TAG_SYMNAME`], [`TAG_SYMDATA`], [`TAG_MODNAME`],
//!     `len` = 8) the 8-byte address the host resolves through kallsyms;
//!   - the address a `%m`/`%M` consumes (`printf::memory_args`): `u32`
//!     [`TAG_MEMORY`], `u32 len`, then the `len` bytes read there when the
//!     event fired, padded to a multiple of 8 (the host cannot read kernel
//!     memory later); `len` is at most MAXSTRINGLEN.
//! - [`KIND_EXIT`]: no payload (`exit()` was called); [`KIND_ABORT`] the
//!   same for `abort()`.
//! - [`KIND_ERROR`] (`id` = an `ERROR_*` kind): the script span of the
//!   failing statement as `u32 file, u32 start, u32 end, u32 0`, then:
//!   - [`ERROR_KERNEL_READ`], [`ERROR_USER_READ`], [`ERROR_KERNEL_STRING`],
//!     [`ERROR_USER_STRING`]: the faulting address (`u64`);
//!   - [`ERROR_EXPLICIT`] (`error(msg)`), [`ERROR_WARNING`] (`warn(msg)`,
//!     not counted as an error): the message as a text argument;
//!   - [`ERROR_DIVISION_BY_ZERO`], [`ERROR_MAXACTION`],
//!     [`ERROR_EMPTY_AGGREGATE`] (`@avg`/`@min`/`@max` of no samples),
//!     [`ERROR_TOO_MANY_CPUS`] (a statistic on more CPUs than the code was
//!     compiled for, `bpf::Options::cpus`), [`ERROR_ARRAY_OVERFLOW`],
//!     [`ERROR_POSITION`]: nothing.
//! - [`KIND_HIST`] (`id` = the `GlobalId` of a statistic): `print` of its
//!   histogram in a kernel probe. `u32` [`HIST_LOG`] or [`HIST_LINEAR`],
//!   `u32 0`, then the element's key as the map stores it (`layout.rs`,
//!   strings MAXSTRINGLEN bytes, at least 8), padded to 8. The host prints
//!   the histogram of that element as it is in the map when it handles
//!   the record.
//! - [`KIND_SYSTEM`]: `system(cmd)`: the command as a text argument
//!   (`u32 tag, u32 len`, text), for the host to run.
//! - [`KIND_SPECULATION`] (`id` = [`SPECULATE_ADD`], [`SPECULATE_COMMIT`]
//!   or [`SPECULATE_DISCARD`]): the speculation id (`i64`), then for
//!   `speculate(id, text)` the text as a text argument. The host keeps the
//!   buffers, so a commit prints in order with the rest of the output.
//! - [`KIND_END`]: no payload; the handler run that sent [`FLAG_MORE`]
//!   records on this stream is over (see below).
//!
//! **One unit per handler run.** stap buffers a handler's output and ships
//! it whole, so two handlers' lines never interleave. The ring buffer is
//! shared by every CPU, so the kind word also carries framing: the kind in
//! its low byte ([`KIND_MASK`]), [`FLAG_MORE`] when more records of the same
//! handler run follow, the run's number on its stream modulo 128
//! ([`SEQ_SHIFT`]), and the run's stream (`cpu * NESTING_LEVELS + nesting
//! level`, unique among the runs in flight) in the top 16 bits. The host
//! holds `FLAG_MORE` records per stream and handles them, in order, when
//! the stream's next record without the flag arrives (the run's last
//! record, or a [`KIND_END`] that carries nothing). A unit that lost a
//! record to a full ring buffer (a run number that changes mid-unit) is
//! dropped whole and counted as lost, as stap drops a handler's buffer
//! whole: never printed in part. A handler that sends one
//! record (the common case) sends it on [`STANDALONE_STREAM`], with no
//! CPU lookup.

use crate::ir::GlobalId;
use crate::ir::{FormatId, Module, StrId, SymbolText, ValType};
use crate::printf::{self, ArgKind};
use crate::source::{FileId, Span};

pub const HEADER_BYTES: u32 = 16;

pub const KIND_PRINTF: u32 = 1;
pub const KIND_EXIT: u32 = 2;
pub const KIND_ERROR: u32 = 3;
pub const KIND_HIST: u32 = 4;
/// `abort()`: no payload; the session ends at once, without end probes.
pub const KIND_ABORT: u32 = 5;
pub const KIND_END: u32 = 6;
/// `system(cmd)`: the host runs the command.
pub const KIND_SYSTEM: u32 = 7;
/// Speculative output (`id` = a `SPECULATE_*` operation).
pub const KIND_SPECULATION: u32 = 8;

/// `speculate(id, text)`: payload `i64 id`, then the text argument.
pub const SPECULATE_ADD: u32 = 0;
/// `commit(id)`: payload `i64 id`.
pub const SPECULATE_COMMIT: u32 = 1;
/// `discard(id)`: payload `i64 id`.
pub const SPECULATE_DISCARD: u32 = 2;

/// The kind word: kind, framing flag, stream (see the module comment).
pub const KIND_MASK: u32 = 0xff;
pub const FLAG_MORE: u32 = 1 << 8;
pub const SEQ_SHIFT: u32 = 9;
pub const SEQ_MASK: u32 = 0x7f;
pub const STREAM_SHIFT: u32 = 16;
/// The stream of a record that is its handler run's whole output.
pub const STANDALONE_STREAM: u32 = 0xffff;

/// A record's place in its handler run's unit (the kind word's framing).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Framing {
    pub stream: u32,
    /// The run's number on its stream (modulo 128).
    pub seq: u32,
    /// More records of this run follow: hold this one.
    pub more: bool,
    /// A [`KIND_END`] marker: nothing to handle besides the held records.
    pub end: bool,
}

/// The framing of a record (`None` when it is too short for a header).
pub fn framing(bytes: &[u8]) -> Option<Framing> {
    let word = u32::from_le_bytes(bytes.get(..4)?.try_into().ok()?);
    Some(Framing {
        stream: word >> STREAM_SHIFT,
        seq: (word >> SEQ_SHIFT) & SEQ_MASK,
        more: word & FLAG_MORE != 0,
        end: word & KIND_MASK == KIND_END,
    })
}

/// The histogram a [`KIND_HIST`] record prints.
pub const HIST_LOG: u32 = 0;
pub const HIST_LINEAR: u32 = 1;

pub const TAG_TEXT: u32 = 0;
pub const TAG_SYMNAME: u32 = 1;
pub const TAG_SYMDATA: u32 = 2;
pub const TAG_MODNAME: u32 = 3;
/// The memory a `%m`/`%M` argument addresses.
pub const TAG_MEMORY: u32 = 4;
/// `enum_name`: this plus the enum type name's [`StrId`], then the value.
pub const TAG_ENUM_BASE: u32 = 0x100;
/// A captured stack: this plus 1 for a user stack plus 2 for the full
/// (`print_stack`) layout; `len` = [`STACK_BYTES`]: `u64` the bytes of
/// frames captured, `u64` the thread group id (user stacks), then
/// [`MAX_FRAMES`] `u64` return addresses.
pub const TAG_STACK_BASE: u32 = 0x10;
/// `ctime(secs)`, then `tz_ctime(secs)`: `len` = 8, the seconds.
pub const TAG_CTIME: u32 = 0x20;
pub const TAG_TZ_CTIME: u32 = 0x21;

/// Frames a stack capture keeps: stap's default MAXBACKTRACE.
pub const MAX_FRAMES: u32 = 20;
/// The bytes of a stack argument after its tag and length.
pub const STACK_BYTES: u32 = 16 + 8 * MAX_FRAMES;

pub const ERROR_DIVISION_BY_ZERO: u32 = 1;
pub const ERROR_EXPLICIT: u32 = 2;
pub const ERROR_MAXACTION: u32 = 3;
pub const ERROR_KERNEL_READ: u32 = 4;
pub const ERROR_USER_READ: u32 = 5;
pub const ERROR_KERNEL_STRING: u32 = 6;
pub const ERROR_USER_STRING: u32 = 7;
pub const ERROR_EMPTY_AGGREGATE: u32 = 8;
pub const ERROR_TOO_MANY_CPUS: u32 = 9;
/// An insert into a full array or statistic (past MAXMAPENTRIES or its
/// declared size).
pub const ERROR_ARRAY_OVERFLOW: u32 = 10;
/// `warn(msg)`: not an error; the message as a text argument.
pub const ERROR_WARNING: u32 = 11;
/// `stringat` past the string's end.
pub const ERROR_POSITION: u32 = 12;

/// The payload bytes of an error's span.
pub const ERROR_SPAN_BYTES: u32 = 16;

/// The text a kernel-side `catch (msg)` receives for an error of `kind`
/// (the host's wording, without a fault's address).
pub fn error_text(kind: u32) -> &'static str {
    match kind {
        ERROR_DIVISION_BY_ZERO => "division by zero",
        ERROR_MAXACTION => "MAXACTION exceeded",
        ERROR_KERNEL_READ => "kernel read fault",
        ERROR_USER_READ => "user read fault",
        ERROR_KERNEL_STRING => "kernel string copy fault",
        ERROR_USER_STRING => "user string copy fault",
        ERROR_EMPTY_AGGREGATE => "empty aggregate",
        ERROR_TOO_MANY_CPUS => "too many CPUs",
        ERROR_ARRAY_OVERFLOW => "Array overflow, check MAXMAPENTRIES",
        ERROR_POSITION => "Position out of bounds",
        _ => "error",
    }
}

pub fn symbol_tag(how: SymbolText) -> u32 {
    match how {
        SymbolText::Name => TAG_SYMNAME,
        SymbolText::Data => TAG_SYMDATA,
        SymbolText::Module => TAG_MODNAME,
        SymbolText::Enum(name) => TAG_ENUM_BASE + name.0,
        SymbolText::Stack { user, full } => TAG_STACK_BASE + user as u32 + 2 * full as u32,
        SymbolText::Time { local } => TAG_CTIME + local as u32,
    }
}

/// One decoded record; strings borrow from the record bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct Record<'a> {
    pub probe: u32,
    pub body: RecordBody<'a>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum RecordBody<'a> {
    Printf {
        format: FormatId,
        args: Vec<Arg<'a>>,
    },
    Exit,
    Abort,
    /// `system(cmd)`: a shell command for the host to run.
    System(&'a [u8]),
    /// `speculate(id, text)` (`text` is `Some`), `commit(id)`, `discard(id)`.
    Speculation {
        op: u32,
        id: i64,
        text: Option<&'a [u8]>,
    },
    Error {
        kind: ErrorKind<'a>,
        span: Span,
    },
    /// Print the histogram of `global[keys]` (`Arg::Long`/`Arg::Str`).
    Hist {
        global: GlobalId,
        linear: bool,
        keys: Vec<Arg<'a>>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arg<'a> {
    Long(i64),
    Str(&'a [u8]),
    /// An address to print as a symbol, resolved on the host.
    Symbol {
        addr: u64,
        how: SymbolText,
    },
    /// A stack to symbolize on the host: `frames` holds `u64` addresses,
    /// innermost first; `tgid` is the process of a user stack.
    Stack {
        user: bool,
        full: bool,
        tgid: u32,
        frames: &'a [u8],
    },
}

impl<'a> Arg<'a> {
    /// The formatter's view, once symbols are resolved by the caller.
    pub fn as_value(&self) -> Option<printf::Value<'a>> {
        match *self {
            Arg::Long(v) => Some(printf::Value::Long(v)),
            Arg::Str(bytes) => Some(printf::Value::Str(bytes)),
            Arg::Symbol { .. } | Arg::Stack { .. } => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind<'a> {
    DivisionByZero,
    MaxAction,
    EmptyAggregate,
    TooManyCpus,
    Explicit(&'a [u8]),
    /// `warn(msg)`: printed as a warning, not counted as an error.
    Warning(&'a [u8]),
    ArrayOverflow,
    Position,
    KernelRead(u64),
    UserRead(u64),
    KernelString(u64),
    UserString(u64),
}

impl ErrorKind<'_> {
    /// stap's wording of the error (without the location).
    pub fn message(&self) -> String {
        match self {
            ErrorKind::DivisionByZero => "division by zero".to_string(),
            ErrorKind::MaxAction => {
                "MAXACTION exceeded: too many statements in one probe hit".to_string()
            }
            ErrorKind::EmptyAggregate => "empty aggregate".to_string(),
            ErrorKind::TooManyCpus => {
                "a statistic is spread over more CPUs than the kernel code was compiled for"
                    .to_string()
            }
            ErrorKind::Explicit(text) | ErrorKind::Warning(text) => {
                String::from_utf8_lossy(text).into_owned()
            }
            ErrorKind::ArrayOverflow => "Array overflow, check MAXMAPENTRIES".to_string(),
            ErrorKind::Position => "Position out of bounds".to_string(),
            ErrorKind::KernelRead(addr) => format!("kernel read fault at 0x{addr:x}"),
            ErrorKind::UserRead(addr) => format!("user read fault at 0x{addr:x}"),
            ErrorKind::KernelString(addr) => format!("kernel string copy fault at 0x{addr:x}"),
            ErrorKind::UserString(addr) => format!("user string copy fault at 0x{addr:x}"),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    Truncated {
        needed: usize,
        have: usize,
    },
    UnknownKind(u32),
    UnknownFormat(u32),
    UnknownError(u32),
    /// A histogram record naming no statistic of the module.
    UnknownGlobal(u32),
    BadTag(u32),
    /// A string longer than MAXSTRINGLEN, or a length past the record.
    BadLength(u32),
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            DecodeError::Truncated { needed, have } => {
                write!(f, "record truncated: need {needed} bytes, have {have}")
            }
            DecodeError::UnknownKind(k) => write!(f, "unknown record kind {k}"),
            DecodeError::UnknownFormat(id) => write!(f, "unknown format id {id}"),
            DecodeError::UnknownError(id) => write!(f, "unknown error kind {id}"),
            DecodeError::UnknownGlobal(id) => write!(f, "unknown statistic id {id}"),
            DecodeError::BadTag(tag) => write!(f, "unknown string argument tag {tag}"),
            DecodeError::BadLength(len) => write!(f, "bad string length {len}"),
        }
    }
}

impl std::error::Error for DecodeError {}

/// A little-endian reader over one record.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let end = self
            .at
            .checked_add(n)
            .filter(|end| *end <= self.bytes.len());
        let Some(end) = end else {
            return Err(DecodeError::Truncated {
                needed: self.at.saturating_add(n),
                have: self.bytes.len(),
            });
        };
        let slice = &self.bytes[self.at..end];
        self.at = end;
        Ok(slice)
    }

    fn u32(&mut self) -> Result<u32, DecodeError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self) -> Result<u64, DecodeError> {
        let b = self.take(8)?;
        let mut word = [0u8; 8];
        word.copy_from_slice(b);
        Ok(u64::from_le_bytes(word))
    }

    /// `u32 len` (after the tag) then the text padded to 8.
    fn text(&mut self, len: u32, max_string_len: u32) -> Result<&'a [u8], DecodeError> {
        if len >= max_string_len.max(1) {
            return Err(DecodeError::BadLength(len));
        }
        self.padded(len)
    }

    /// `len` bytes padded to 8.
    fn padded(&mut self, len: u32) -> Result<&'a [u8], DecodeError> {
        let padded = (len as usize).div_ceil(8) * 8;
        let bytes = self.take(padded)?;
        Ok(&bytes[..len as usize])
    }
}

/// What a printf record's arguments are, per format, parsed once: a host
/// reading a million records a second should not parse the format of
/// each.
#[derive(Debug, Default)]
pub struct FormatShapes {
    shapes: Vec<Option<Vec<ArgShape>>>,
}

/// One printf argument: its kind, and what a `%m`/`%M` reads for it.
type ArgShape = (ArgKind, Option<printf::MemoryArg>);

impl FormatShapes {
    fn get(&mut self, module: &Module, id: u32) -> Result<&[ArgShape], DecodeError> {
        let index = id as usize;
        let format = module
            .formats
            .get(index)
            .ok_or(DecodeError::UnknownFormat(id))?;
        if self.shapes.len() < module.formats.len() {
            self.shapes.resize(module.formats.len(), None);
        }
        let slot = &mut self.shapes[index];
        if slot.is_none() {
            let pieces = printf::parse(&format.text).map_err(|_| DecodeError::UnknownFormat(id))?;
            let memory = printf::memory_args(&pieces);
            *slot = Some(printf::arg_kinds(&pieces).into_iter().zip(memory).collect());
        }
        Ok(slot.as_deref().unwrap_or_default())
    }
}

/// Decodes one record as the emitter wrote it. `bytes` is the ring-buffer
/// sample; anything malformed is an error, never a panic.
pub fn decode<'a>(
    bytes: &'a [u8],
    module: &Module,
    max_string_len: u32,
) -> Result<Record<'a>, DecodeError> {
    decode_with(bytes, module, max_string_len, &mut FormatShapes::default())
}

/// [`decode`], with the formats' shapes kept in `shapes` across records.
pub fn decode_with<'a>(
    bytes: &'a [u8],
    module: &Module,
    max_string_len: u32,
    shapes: &mut FormatShapes,
) -> Result<Record<'a>, DecodeError> {
    let mut reader = Reader { bytes, at: 0 };
    let kind = reader.u32()? & KIND_MASK;
    let id = reader.u32()?;
    let probe = reader.u32()?;
    let len = reader.u32()?;
    let len = len as usize;
    if len < HEADER_BYTES as usize || len > bytes.len() {
        return Err(DecodeError::Truncated {
            needed: len.max(HEADER_BYTES as usize),
            have: bytes.len(),
        });
    }
    reader.bytes = &bytes[..len];
    let body = match kind {
        KIND_PRINTF => {
            let shape = shapes.get(module, id)?;
            let mut args = Vec::with_capacity(shape.len());
            for &(kind, memory) in shape {
                args.push(match kind {
                    ArgKind::Long if memory.is_some() => {
                        let tag = reader.u32()?;
                        if tag != TAG_MEMORY {
                            return Err(DecodeError::BadTag(tag));
                        }
                        let len = reader.u32()?;
                        if len > max_string_len {
                            return Err(DecodeError::BadLength(len));
                        }
                        Arg::Str(reader.padded(len)?)
                    }
                    ArgKind::Long => Arg::Long(reader.u64()? as i64),
                    ArgKind::String => {
                        let tag = reader.u32()?;
                        let len = reader.u32()?;
                        match tag {
                            TAG_TEXT => Arg::Str(reader.text(len, max_string_len)?),
                            TAG_CTIME | TAG_TZ_CTIME => Arg::Symbol {
                                addr: reader.u64()?,
                                how: SymbolText::Time {
                                    local: tag == TAG_TZ_CTIME,
                                },
                            },
                            TAG_SYMNAME | TAG_SYMDATA | TAG_MODNAME => {
                                let how = match tag {
                                    TAG_SYMNAME => SymbolText::Name,
                                    TAG_SYMDATA => SymbolText::Data,
                                    _ => SymbolText::Module,
                                };
                                Arg::Symbol {
                                    addr: reader.u64()?,
                                    how,
                                }
                            }
                            stack_tag
                                if (TAG_STACK_BASE..TAG_STACK_BASE + 4).contains(&stack_tag) =>
                            {
                                if len != STACK_BYTES {
                                    return Err(DecodeError::BadLength(len));
                                }
                                let body = reader.padded(len)?;
                                let word = |at: usize| {
                                    let mut w = [0u8; 8];
                                    w.copy_from_slice(&body[at..at + 8]);
                                    u64::from_le_bytes(w)
                                };
                                let used = (word(0) as usize).min(8 * MAX_FRAMES as usize);
                                Arg::Stack {
                                    user: (stack_tag - TAG_STACK_BASE) & 1 != 0,
                                    full: (stack_tag - TAG_STACK_BASE) & 2 != 0,
                                    tgid: word(8) as u32,
                                    frames: &body[16..16 + used - used % 8],
                                }
                            }
                            enum_tag if enum_tag >= TAG_ENUM_BASE => Arg::Symbol {
                                addr: reader.u64()?,
                                how: SymbolText::Enum(StrId(enum_tag - TAG_ENUM_BASE)),
                            },
                            other => return Err(DecodeError::BadTag(other)),
                        }
                    }
                });
            }
            RecordBody::Printf {
                format: FormatId(id),
                args,
            }
        }
        KIND_EXIT => RecordBody::Exit,
        KIND_ABORT => RecordBody::Abort,
        KIND_SYSTEM => {
            let _tag = reader.u32()?;
            let len = reader.u32()?;
            RecordBody::System(reader.text(len, max_string_len)?)
        }
        KIND_SPECULATION => {
            let spec = reader.u64()? as i64;
            let text = match id {
                SPECULATE_ADD => {
                    let _tag = reader.u32()?;
                    let len = reader.u32()?;
                    Some(reader.text(len, max_string_len)?)
                }
                _ => None,
            };
            RecordBody::Speculation {
                op: id,
                id: spec,
                text,
            }
        }
        KIND_ERROR => {
            let file = reader.u32()?;
            let start = reader.u32()?;
            let end = reader.u32()?;
            reader.u32()?;
            let span = Span {
                file: FileId(file),
                start,
                end,
            };
            let kind = match id {
                ERROR_DIVISION_BY_ZERO => ErrorKind::DivisionByZero,
                ERROR_MAXACTION => ErrorKind::MaxAction,
                ERROR_EMPTY_AGGREGATE => ErrorKind::EmptyAggregate,
                ERROR_TOO_MANY_CPUS => ErrorKind::TooManyCpus,
                ERROR_EXPLICIT | ERROR_WARNING => {
                    let _tag = reader.u32()?;
                    let len = reader.u32()?;
                    let text = reader.text(len, max_string_len)?;
                    if id == ERROR_WARNING {
                        ErrorKind::Warning(text)
                    } else {
                        ErrorKind::Explicit(text)
                    }
                }
                ERROR_ARRAY_OVERFLOW => ErrorKind::ArrayOverflow,
                ERROR_POSITION => ErrorKind::Position,
                ERROR_KERNEL_READ => ErrorKind::KernelRead(reader.u64()?),
                ERROR_USER_READ => ErrorKind::UserRead(reader.u64()?),
                ERROR_KERNEL_STRING => ErrorKind::KernelString(reader.u64()?),
                ERROR_USER_STRING => ErrorKind::UserString(reader.u64()?),
                other => return Err(DecodeError::UnknownError(other)),
            };
            RecordBody::Error { kind, span }
        }
        KIND_HIST => {
            let global = module.globals.get(id as usize);
            let types = match global.map(|g| &g.storage) {
                Some(crate::ir::Storage::Stats { keys, .. }) => keys.clone(),
                _ => return Err(DecodeError::UnknownGlobal(id)),
            };
            let linear = match reader.u32()? {
                HIST_LOG => false,
                HIST_LINEAR => true,
                other => return Err(DecodeError::BadTag(other)),
            };
            reader.u32()?;
            // The emitter's key layout: strings take at least 8 bytes.
            let n = global.map_or(8, |g| g.key_text_bytes(max_string_len.max(8)));
            let size = super::layout::key_size(&types, n);
            let key = reader.padded(size)?;
            let offsets = super::layout::key_offsets(&types, n);
            let keys = types
                .iter()
                .zip(offsets)
                .map(|(ty, at)| {
                    let at = at as usize;
                    match ty {
                        ValType::Long => {
                            let mut word = [0u8; 8];
                            word.copy_from_slice(&key[at..at + 8]);
                            Arg::Long(i64::from_le_bytes(word))
                        }
                        ValType::Str => {
                            let field = &key[at..at + n as usize];
                            let end = field.iter().position(|b| *b == 0).unwrap_or(field.len());
                            Arg::Str(&field[..end])
                        }
                    }
                })
                .collect();
            RecordBody::Hist {
                global: GlobalId(id),
                linear,
                keys,
            }
        }
        other => return Err(DecodeError::UnknownKind(other)),
    };
    Ok(Record { probe, body })
}
