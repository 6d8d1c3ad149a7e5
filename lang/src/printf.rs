//! SystemTap printf format strings: parsing, and the formatter shared by
//! host-side code and the printing of kernel events.
//!
//! The grammar is the language reference's (section 9.2, "printf"):
//! `%[flags][width][.precision][length]specifier`, checked against the
//! arguments' types by the translator rather than trusted at run time.
//!
//! What each specifier consumes, per that section and stap(1):
//! - `d i u o x X` take a long, printed as in C (signed for `d`/`i`).
//! - `s` takes a string; a precision is the most bytes printed.
//! - `c` takes a long and prints it as one character.
//! - `p` takes a long and prints it as a pointer, `0x` and 16 hex digits.
//! - `b` takes a long and writes it as raw binary in the host's byte
//!   order; the width (1, 2, 4 or 8, default 8) is the number of bytes.
//! - `m` takes a long *address* and prints the memory there; the precision
//!   is how many bytes to read (default 1), the width is still a field
//!   width. `M` is the same printed as hex digits, two per byte.
//! - `%%` is a literal percent sign.
//!
//! A `*` width or precision takes a long argument before the value. Length
//! modifiers (`h`, `l`, `ll`) are accepted and ignored: every stap integer
//! is 64-bit.

use std::fmt;

/// A directive's flags (`- + space # 0`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Flags {
    /// `-`: pad on the right.
    pub left: bool,
    /// `+`: always print a sign for signed conversions.
    pub plus: bool,
    /// ` `: a space where a `+` would go.
    pub space: bool,
    /// `#`: `0` / `0x` / `0X` prefix for non-zero octal and hex values.
    pub alternate: bool,
    /// `0`: pad numbers with zeros instead of spaces.
    pub zero: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Conversion {
    /// `%d`, `%i`
    Decimal,
    /// `%u`
    Unsigned,
    /// `%o`
    Octal,
    /// `%x`
    HexLower,
    /// `%X`
    HexUpper,
    /// `%s`
    String,
    /// `%p`
    Pointer,
    /// `%c`
    Char,
    /// `%b`
    Binary,
    /// `%m`: memory at an address, raw.
    MemoryLower,
    /// `%M`: memory at an address, as hex.
    MemoryUpper,
}

/// A width or precision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Count {
    Fixed(u32),
    /// `*`: taken from a long argument.
    Star,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spec {
    pub flags: Flags,
    pub width: Option<Count>,
    pub precision: Option<Count>,
    pub conversion: Conversion,
    /// Byte offset of the `%` in the format text, for diagnostics.
    pub offset: usize,
    /// Length in bytes of the whole directive (`%-08.3lx` is 8).
    pub len: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// Text printed as is (`%%` already turned into `%`).
    Literal(String),
    Spec(Spec),
}

/// The type of one argument a directive consumes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArgKind {
    Long,
    String,
}

impl Spec {
    /// The arguments this directive consumes, in order: a `*` width, a `*`
    /// precision, then the value.
    pub fn arg_kinds(&self) -> Vec<ArgKind> {
        let mut kinds = Vec::new();
        if self.width == Some(Count::Star) {
            kinds.push(ArgKind::Long);
        }
        if self.precision == Some(Count::Star) {
            kinds.push(ArgKind::Long);
        }
        kinds.push(match self.conversion {
            Conversion::String => ArgKind::String,
            _ => ArgKind::Long,
        });
        kinds
    }
}

/// Every argument a whole format consumes, in order.
pub fn arg_kinds(pieces: &[Piece]) -> Vec<ArgKind> {
    pieces
        .iter()
        .flat_map(|piece| match piece {
            Piece::Spec(spec) => spec.arg_kinds(),
            Piece::Literal(_) => Vec::new(),
        })
        .collect()
}

/// How many bytes a `%m`/`%M` reads at its address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryLen {
    /// The fixed precision, or 1 without one (as stap).
    Fixed(u32),
    /// A `*` precision: the long argument at this index of the format's
    /// arguments (negative means the default, 1).
    Star(usize),
}

/// A `%m`/`%M` argument: what to read at the address it consumes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryArg {
    pub len: MemoryLen,
    /// `%#m`/`%#M`: user memory rather than kernel memory.
    pub user: bool,
}

/// For each argument a whole format consumes (as [`arg_kinds`]), the memory
/// read at it when a `%m`/`%M` takes it as its address.
pub fn memory_args(pieces: &[Piece]) -> Vec<Option<MemoryArg>> {
    let mut out = Vec::new();
    for piece in pieces {
        let Piece::Spec(spec) = piece else { continue };
        if spec.width == Some(Count::Star) {
            out.push(None);
        }
        let mut len = MemoryLen::Fixed(spec.precision.map_or(1, |p| match p {
            Count::Fixed(n) => n,
            Count::Star => 0,
        }));
        if spec.precision == Some(Count::Star) {
            len = MemoryLen::Star(out.len());
            out.push(None);
        }
        let memory = matches!(
            spec.conversion,
            Conversion::MemoryLower | Conversion::MemoryUpper
        );
        out.push(memory.then_some(MemoryArg {
            len,
            user: spec.flags.alternate,
        }));
    }
    out
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FormatError {
    /// Byte offset into the format text.
    pub offset: usize,
    pub message: String,
}

impl FormatError {
    fn new(offset: usize, message: impl Into<String>) -> Self {
        FormatError {
            offset,
            message: message.into(),
        }
    }
}

impl fmt::Display for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} (at byte {} of the format)",
            self.message, self.offset
        )
    }
}

impl std::error::Error for FormatError {}

/// The widths `%b` accepts (language reference 9.2: `%b`, `%1b`, `%2b`,
/// `%4b`, `%8b`).
const BINARY_WIDTHS: [u32; 4] = [1, 2, 4, 8];

/// Parses a format string into literal text and directives.
pub fn parse(fmt: &str) -> Result<Vec<Piece>, FormatError> {
    let bytes = fmt.as_bytes();
    let mut pieces = Vec::new();
    let mut literal = String::new();
    let mut pos = 0;
    while pos < bytes.len() {
        let Some(rel) = fmt[pos..].find('%') else {
            literal.push_str(&fmt[pos..]);
            break;
        };
        literal.push_str(&fmt[pos..pos + rel]);
        let start = pos + rel;
        if bytes.get(start + 1) == Some(&b'%') {
            literal.push('%');
            pos = start + 2;
            continue;
        }
        let spec = parse_directive(fmt, start)?;
        pos = start + spec.len;
        if !literal.is_empty() {
            pieces.push(Piece::Literal(std::mem::take(&mut literal)));
        }
        pieces.push(Piece::Spec(spec));
    }
    if !literal.is_empty() {
        pieces.push(Piece::Literal(literal));
    }
    Ok(pieces)
}

/// Parses the directive whose `%` is at `start`.
fn parse_directive(fmt: &str, start: usize) -> Result<Spec, FormatError> {
    let bytes = fmt.as_bytes();
    let mut pos = start + 1;
    let mut flags = Flags::default();
    while let Some(&c) = bytes.get(pos) {
        match c {
            b'-' => flags.left = true,
            b'+' => flags.plus = true,
            b' ' => flags.space = true,
            b'#' => flags.alternate = true,
            b'0' => flags.zero = true,
            _ => break,
        }
        pos += 1;
    }
    let width = parse_count(fmt, &mut pos)?;
    let precision = if bytes.get(pos) == Some(&b'.') {
        pos += 1;
        // A bare `.` means precision 0, as in C.
        Some(parse_count(fmt, &mut pos)?.unwrap_or(Count::Fixed(0)))
    } else {
        None
    };
    // Length modifiers: accepted and ignored (at most two, as in `ll`).
    for _ in 0..2 {
        if matches!(bytes.get(pos), Some(b'h' | b'l')) {
            pos += 1;
        }
    }
    let conversion = match bytes.get(pos) {
        Some(b'd' | b'i') => Conversion::Decimal,
        Some(b'u') => Conversion::Unsigned,
        Some(b'o') => Conversion::Octal,
        Some(b'x') => Conversion::HexLower,
        Some(b'X') => Conversion::HexUpper,
        Some(b's') => Conversion::String,
        Some(b'p') => Conversion::Pointer,
        Some(b'c') => Conversion::Char,
        Some(b'b') => Conversion::Binary,
        Some(b'm') => Conversion::MemoryLower,
        Some(b'M') => Conversion::MemoryUpper,
        None => {
            return Err(FormatError::new(
                start,
                "incomplete format directive at the end of the format",
            ));
        }
        Some(_) => {
            let c = fmt[pos..].chars().next().unwrap_or('?');
            return Err(FormatError::new(
                pos,
                format!(
                    "unknown format directive `%{c}`: expected one of d i u o x X s p c b m M %"
                ),
            ));
        }
    };
    pos += 1;
    if conversion == Conversion::Binary
        && let Some(Count::Fixed(w)) = width
        && !BINARY_WIDTHS.contains(&w)
    {
        return Err(FormatError::new(
            start,
            format!("`%{w}b` is not a binary width: use %b, %1b, %2b, %4b or %8b"),
        ));
    }
    Ok(Spec {
        flags,
        width,
        precision,
        conversion,
        offset: start,
        len: pos - start,
    })
}

/// Parses a decimal count or `*` at `*pos`, if there is one.
fn parse_count(fmt: &str, pos: &mut usize) -> Result<Option<Count>, FormatError> {
    let bytes = fmt.as_bytes();
    if bytes.get(*pos) == Some(&b'*') {
        *pos += 1;
        return Ok(Some(Count::Star));
    }
    let digits_start = *pos;
    while bytes.get(*pos).is_some_and(u8::is_ascii_digit) {
        *pos += 1;
    }
    if *pos == digits_start {
        return Ok(None);
    }
    fmt[digits_start..*pos]
        .parse()
        .map(|n| Some(Count::Fixed(n)))
        .map_err(|_| FormatError::new(digits_start, "width or precision is too large"))
}

// ---------------------------------------------------------------------------
// Formatting
// ---------------------------------------------------------------------------

/// One argument, as the formatter receives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Value<'a> {
    Long(i64),
    /// A string, or for `%m`/`%M` the bytes the caller read at the address
    /// (the formatter cannot read memory itself: the kernel side copies the
    /// bytes into the event, the host side reads them before formatting).
    Str(&'a [u8]),
}

/// The largest width or precision honoured, so a `*` argument from a script
/// cannot ask for gigabytes of padding. MAXSTRINGLEN is 512; this is
/// generous beyond it.
const MAX_COUNT: usize = 4096;

/// Formats `args` under `pieces`, appending to `out`. Arguments are
/// matched to directives in order, `*` counts first (see
/// [`Spec::arg_kinds`]).
pub fn format(pieces: &[Piece], args: &[Value], out: &mut Vec<u8>) -> Result<(), FormatError> {
    let mut args = args.iter();
    for piece in pieces {
        match piece {
            Piece::Literal(text) => out.extend_from_slice(text.as_bytes()),
            Piece::Spec(spec) => format_one(spec, &mut args, out)?,
        }
    }
    Ok(())
}

fn format_one<'v, 'a: 'v>(
    spec: &Spec,
    args: &mut impl Iterator<Item = &'v Value<'a>>,
    out: &mut Vec<u8>,
) -> Result<(), FormatError> {
    let mut next = || {
        args.next()
            .copied()
            .ok_or_else(|| FormatError::new(spec.offset, "too few arguments for the format"))
    };
    let mut flags = spec.flags;
    let width = match spec.width {
        None => None,
        Some(Count::Fixed(n)) => Some(n as usize),
        Some(Count::Star) => {
            let n = expect_long(spec, next()?)?;
            // C: a negative `*` width means `-` with its absolute value.
            if n < 0 {
                flags.left = true;
            }
            Some(n.unsigned_abs() as usize)
        }
    };
    let precision = match spec.precision {
        None => None,
        Some(Count::Fixed(n)) => Some(n as usize),
        // C: a negative `*` precision is as if none was given.
        Some(Count::Star) => usize::try_from(expect_long(spec, next()?)?).ok(),
    };
    let width = width.map(|w| w.min(MAX_COUNT));
    let precision = precision.map(|p| p.min(MAX_COUNT));
    let value = next()?;

    match spec.conversion {
        Conversion::Decimal => {
            let n = expect_long(spec, value)?;
            let sign = if n < 0 {
                "-"
            } else if flags.plus {
                "+"
            } else if flags.space {
                " "
            } else {
                ""
            };
            let digits = Digits::new(n.unsigned_abs(), 10, false, precision);
            pad_number(out, sign, &digits, width, flags, precision.is_some());
        }
        Conversion::Unsigned | Conversion::Octal | Conversion::HexLower | Conversion::HexUpper => {
            let n = expect_long(spec, value)? as u64;
            let (base, upper) = match spec.conversion {
                Conversion::Unsigned => (10, false),
                Conversion::Octal => (8, false),
                Conversion::HexLower => (16, false),
                _ => (16, true),
            };
            let mut digits = Digits::new(n, base, upper, precision);
            let mut prefix = "";
            if flags.alternate {
                // stap's runtime, not C: `#` always adds the prefix, so zero
                // is `0x0` and `00`, and `%#.3o` of 8 is `0010`.
                match base {
                    8 => digits.zeros += 1,
                    16 => prefix = if upper { "0X" } else { "0x" },
                    _ => {}
                }
            }
            pad_number(out, prefix, &digits, width, flags, precision.is_some());
        }
        Conversion::Pointer => {
            let n = expect_long(spec, value)? as u64;
            let text = format!("0x{n:016x}");
            pad(out, text.as_bytes(), width, flags.left);
        }
        Conversion::Char => {
            let n = expect_long(spec, value)?;
            // The low byte, as C's `%c` converts to unsigned char.
            pad(out, &[n as u8], width, flags.left);
        }
        Conversion::String => {
            let s = expect_str(spec, value)?;
            let s = match precision {
                Some(p) if p < s.len() => &s[..p],
                _ => s,
            };
            pad(out, s, width, flags.left);
        }
        Conversion::Binary => {
            let n = expect_long(spec, value)?;
            let bytes = n.to_ne_bytes();
            let count = width.unwrap_or(8);
            // Little-endian hosts keep the low bytes first; big-endian the
            // last ones.
            let written = match count {
                1 | 2 | 4 | 8 if cfg!(target_endian = "little") => &bytes[..count],
                1 | 2 | 4 | 8 => &bytes[8 - count..],
                _ => {
                    return Err(FormatError::new(
                        spec.offset,
                        format!("%b width {count} is not 1, 2, 4 or 8"),
                    ));
                }
            };
            out.extend_from_slice(written);
        }
        Conversion::MemoryLower | Conversion::MemoryUpper => {
            let Value::Str(memory) = value else {
                return Err(FormatError::new(
                    spec.offset,
                    "%m/%M needs the memory read at the address, not the address",
                ));
            };
            let len = precision.unwrap_or(1).min(memory.len());
            let memory = &memory[..len];
            if spec.conversion == Conversion::MemoryLower {
                pad(out, memory, width, flags.left);
            } else {
                let hex: String = memory.iter().map(|b| format!("{b:02x}")).collect();
                pad(out, hex.as_bytes(), width, flags.left);
            }
        }
    }
    Ok(())
}

fn expect_long(spec: &Spec, value: Value) -> Result<i64, FormatError> {
    match value {
        Value::Long(n) => Ok(n),
        Value::Str(_) => Err(FormatError::new(
            spec.offset,
            "a string was given where the format expects a long",
        )),
    }
}

fn expect_str<'a>(spec: &Spec, value: Value<'a>) -> Result<&'a [u8], FormatError> {
    match value {
        Value::Str(s) => Ok(s),
        Value::Long(_) => Err(FormatError::new(
            spec.offset,
            "a long was given where the format expects a string",
        )),
    }
}

/// The digits of an integer in a fixed buffer (a u64 has at most 22 octal
/// digits), with the leading zeros a precision asks for kept as a count:
/// the host formats every kernel printf line, so no allocation per number
/// (bench/analysis.md, "printing").
struct Digits {
    buf: [u8; 22],
    /// Where the digits start in `buf`.
    start: usize,
    /// Zeros written before them.
    zeros: usize,
}

impl Digits {
    /// The digits of `n` in `base`, left-padded with zeros to `precision`
    /// digits. As in C, precision 0 prints zero as no digits at all.
    fn new(mut n: u64, base: u32, upper: bool, precision: Option<usize>) -> Digits {
        let alphabet: &[u8; 16] = match upper {
            true => b"0123456789ABCDEF",
            false => b"0123456789abcdef",
        };
        let mut buf = [0u8; 22];
        let mut start = buf.len();
        if precision != Some(0) || n != 0 {
            loop {
                start -= 1;
                buf[start] = alphabet[(n % u64::from(base)) as usize];
                n /= u64::from(base);
                if n == 0 {
                    break;
                }
            }
        }
        let count = buf.len() - start;
        let zeros = precision.map_or(0, |p| p.saturating_sub(count));
        Digits { buf, start, zeros }
    }

    fn len(&self) -> usize {
        self.zeros + self.buf.len() - self.start
    }

    fn write(&self, out: &mut Vec<u8>) {
        out.resize(out.len() + self.zeros, b'0');
        out.extend_from_slice(&self.buf[self.start..]);
    }
}

/// Writes `prefix` (sign or `0x`) and `digits`, padded to `width`. The `0`
/// flag pads between prefix and digits, unless `-` or a precision is given
/// (C's rules).
fn pad_number(
    out: &mut Vec<u8>,
    prefix: &str,
    digits: &Digits,
    width: Option<usize>,
    flags: Flags,
    has_precision: bool,
) {
    let fill = width
        .unwrap_or(0)
        .saturating_sub(prefix.len() + digits.len());
    let zero_fill = flags.zero && !flags.left && !has_precision;
    if !zero_fill && !flags.left {
        out.resize(out.len() + fill, b' ');
    }
    out.extend_from_slice(prefix.as_bytes());
    if zero_fill {
        out.resize(out.len() + fill, b'0');
    }
    digits.write(out);
    if flags.left {
        out.resize(out.len() + fill, b' ');
    }
}

/// Writes `text` padded with spaces to `width`, on the left unless `left`.
fn pad(out: &mut Vec<u8>, text: &[u8], width: Option<usize>, left: bool) {
    let fill = width.unwrap_or(0).saturating_sub(text.len());
    if !left {
        out.resize(out.len() + fill, b' ');
    }
    out.extend_from_slice(text);
    if left {
        out.resize(out.len() + fill, b' ');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(fmt: &str) -> Spec {
        match parse(fmt).unwrap().as_slice() {
            [Piece::Spec(spec)] => spec.clone(),
            other => panic!("expected one directive, got {other:?}"),
        }
    }

    fn render(fmt: &str, args: &[Value]) -> Vec<u8> {
        let pieces = parse(fmt).unwrap();
        let mut out = Vec::new();
        format(&pieces, args, &mut out).unwrap();
        out
    }

    /// Formats and returns text, for the cases that print text.
    fn text(fmt: &str, args: &[Value]) -> String {
        String::from_utf8(render(fmt, args)).unwrap()
    }

    fn format_error(fmt: &str, args: &[Value]) -> FormatError {
        let pieces = parse(fmt).unwrap();
        format(&pieces, args, &mut Vec::new()).unwrap_err()
    }

    use Value::{Long, Str};

    #[test]
    fn parses_literals_and_directives() {
        let pieces = parse("pid %d: %s\n").unwrap();
        assert_eq!(pieces.len(), 5);
        assert_eq!(pieces[0], Piece::Literal("pid ".into()));
        assert_eq!(pieces[4], Piece::Literal("\n".into()));
        let Piece::Spec(d) = &pieces[1] else {
            panic!("directive expected")
        };
        assert_eq!((d.conversion, d.offset, d.len), (Conversion::Decimal, 4, 2));
        assert_eq!(
            parse("100%% sure").unwrap(),
            [Piece::Literal("100% sure".into())]
        );
        assert_eq!(parse("").unwrap(), []);
    }

    #[test]
    fn parses_flags_width_precision_and_length() {
        let s = spec("%-+ #012.5lld");
        assert_eq!(
            s.flags,
            Flags {
                left: true,
                plus: true,
                space: true,
                alternate: true,
                zero: true
            }
        );
        assert_eq!(s.width, Some(Count::Fixed(12)));
        assert_eq!(s.precision, Some(Count::Fixed(5)));
        assert_eq!((s.conversion, s.len), (Conversion::Decimal, 13));
        assert_eq!(spec("%hx").conversion, Conversion::HexLower);
        assert_eq!(spec("%lu").conversion, Conversion::Unsigned);
        assert_eq!(spec("%.s").precision, Some(Count::Fixed(0)));
        let star = spec("%*.*s");
        assert_eq!(
            (star.width, star.precision),
            (Some(Count::Star), Some(Count::Star))
        );
        let every: Vec<_> = ["%i", "%o", "%X", "%p", "%c", "%b", "%m", "%M"]
            .iter()
            .map(|f| spec(f).conversion)
            .collect();
        use Conversion::*;
        assert_eq!(
            every,
            [
                Decimal,
                Octal,
                HexUpper,
                Pointer,
                Char,
                Binary,
                MemoryLower,
                MemoryUpper
            ]
        );
    }

    #[test]
    fn arg_kinds_put_star_counts_first() {
        use ArgKind::{Long as L, String as S};
        assert_eq!(spec("%*.*s").arg_kinds(), [L, L, S]);
        assert_eq!(spec("%.*d").arg_kinds(), [L, L]);
        assert_eq!(spec("%s").arg_kinds(), [S]);
        // %m/%M take the address; %c, %p and %b a long.
        for f in ["%m", "%5.4M", "%c", "%p", "%b", "%x"] {
            assert_eq!(spec(f).arg_kinds(), [L], "{f}");
        }
        assert_eq!(arg_kinds(&parse("%s=%d %%").unwrap()), [S, L]);
    }

    #[test]
    fn memory_args_line_up_with_arg_kinds() {
        let pieces = parse("%s %m %*.*M %#.3m %.*m %d").unwrap();
        let memory = memory_args(&pieces);
        assert_eq!(memory.len(), arg_kinds(&pieces).len());
        let kernel = |len| Some(MemoryArg { len, user: false });
        assert_eq!(
            memory,
            [
                None,
                kernel(MemoryLen::Fixed(1)),
                None,
                None,
                kernel(MemoryLen::Star(3)),
                Some(MemoryArg {
                    len: MemoryLen::Fixed(3),
                    user: true,
                }),
                None,
                kernel(MemoryLen::Star(6)),
                None,
            ]
        );
    }

    #[test]
    fn parse_errors_point_at_the_problem() {
        let e = parse("ab %q").unwrap_err();
        assert_eq!(e.offset, 4);
        assert!(e.message.contains("`%q`"), "{}", e.message);
        assert_eq!(parse("abc%").unwrap_err().offset, 3);
        assert_eq!(parse("x %-5").unwrap_err().offset, 2);
        assert_eq!(parse("%3b").unwrap_err().offset, 0);
        assert!(parse("%4b%2b%1b%8b%b").is_ok());
        // Multi-byte text before a bad directive: offsets are in bytes.
        assert_eq!(parse("é%é").unwrap_err().offset, 3);
    }

    #[test]
    fn integer_extremes_fill_the_digit_buffer() {
        assert_eq!(text("%d", &[Long(i64::MIN)]), "-9223372036854775808");
        assert_eq!(text("%u", &[Long(-1)]), "18446744073709551615");
        assert_eq!(text("%o", &[Long(-1)]), "1777777777777777777777");
        assert_eq!(text("%#o", &[Long(-1)]), "01777777777777777777777");
        assert_eq!(text("%X|%#x", &[Long(-1), Long(0)]), "FFFFFFFFFFFFFFFF|0x0");
        assert_eq!(text("%#.0o|%#o", &[Long(0), Long(0)]), "0|00");
        assert_eq!(
            text("%#010x|%-#6x|", &[Long(255), Long(255)]),
            "0x000000ff|0xff  |"
        );
    }

    #[test]
    fn integers_follow_c() {
        assert_eq!(text("%d|%i", &[Long(-42), Long(7)]), "-42|7");
        assert_eq!(text("%5d|%-5d|", &[Long(42), Long(42)]), "   42|42   |");
        assert_eq!(text("%05d", &[Long(-42)]), "-0042");
        assert_eq!(
            text("%+d % d %+d", &[Long(5), Long(5), Long(-5)]),
            "+5  5 -5"
        );
        assert_eq!(
            text("%.3d|%8.3d|%08.3d", &[Long(7), Long(7), Long(7)]),
            "007|     007|     007"
        );
        assert_eq!(text("%-05d|", &[Long(3)]), "3    |");
        assert_eq!(text("%.0d|", &[Long(0)]), "|");
        assert_eq!(text("%d", &[Long(i64::MIN)]), "-9223372036854775808");
        assert_eq!(text("%u", &[Long(-1)]), "18446744073709551615");
        assert_eq!(
            text("%x %X %o", &[Long(2042), Long(2042), Long(392)]),
            "7fa 7FA 610"
        );
        assert_eq!(text("%x", &[Long(-1)]), "ffffffffffffffff");
        assert_eq!(
            text("%#x %#X %#o", &[Long(255), Long(255), Long(8)]),
            "0xff 0XFF 010"
        );
        // As stap's runtime (C differs): `#` adds the prefix to zero too,
        // and `o`'s zero even before precision zeros.
        assert_eq!(
            text("%#x %#X %#o", &[Long(0), Long(0), Long(0)]),
            "0x0 0X0 00"
        );
        assert_eq!(text("%#.3o %#5x", &[Long(8), Long(0)]), "0010   0x0");
        assert_eq!(text("%#08x", &[Long(255)]), "0x0000ff");
        assert_eq!(text("%+u", &[Long(3)]), "3");
    }

    #[test]
    fn strings_chars_and_pointers() {
        assert_eq!(text("%s", &[Str(b"sample")]), "sample");
        assert_eq!(text("%-5s|%5s|", &[Str(b"ab"), Str(b"ab")]), "ab   |   ab|");
        assert_eq!(
            text("%.3s|%6.2s|", &[Str(b"abcdef"), Str(b"xyz")]),
            "abc|    xy|"
        );
        assert_eq!(
            text("%c%c%3c|%-3c|", &[Long(72), Long(105), Long(65), Long(66)]),
            "Hi  A|B  |"
        );
        // The language reference's example for %p.
        assert_eq!(text("%p", &[Long(12345678)]), "0x0000000000bc614e");
        assert_eq!(text("%20p|", &[Long(1)]), "  0x0000000000000001|");
    }

    #[test]
    fn star_counts_come_from_arguments() {
        assert_eq!(text("%*d|", &[Long(5), Long(42)]), "   42|");
        assert_eq!(text("%-*d|", &[Long(4), Long(1)]), "1   |");
        assert_eq!(text("%*d|", &[Long(-4), Long(1)]), "1   |");
        assert_eq!(text("%.*s|", &[Long(2), Str(b"abc")]), "ab|");
        assert_eq!(text("%.*s|", &[Long(-1), Str(b"abc")]), "abc|");
        assert_eq!(text("%*.*d|", &[Long(6), Long(3), Long(5)]), "   005|");
    }

    #[test]
    fn binary_writes_native_order_bytes() {
        // The language reference's examples (x86_64 is little-endian).
        assert_eq!(
            render("%b%b", &[Long(0xc0de_dbad), Long(0x1234_5678)]),
            [
                0xad, 0xdb, 0xde, 0xc0, 0, 0, 0, 0, 0x78, 0x56, 0x34, 0x12, 0, 0, 0, 0
            ]
        );
        let hello = [72, 101, 108, 87, 111].map(Long);
        assert_eq!(text("%1b%1b%1blo %1b%1brld\n", &hello), "Hello World\n");
        assert_eq!(
            text(
                "%3d: %1b%1b%1b\n",
                &[Long(97), Long(97), Long(65), Long(33)]
            ),
            " 97: aA!\n"
        );
        assert_eq!(
            render("%2b%4b", &[Long(0x0102), Long(0x0a0b0c0d)]),
            [2, 1, 0x0d, 0x0c, 0x0b, 0x0a]
        );
        let e = format_error("%*b", &[Long(3), Long(1)]);
        assert!(e.message.contains("width 3"), "{}", e.message);
    }

    #[test]
    fn memory_prints_the_bytes_read() {
        // Default precision: one byte.
        assert_eq!(text("%m|", &[Str(b"hello")]), "h|");
        assert_eq!(
            text("%.3m|%6.2m|", &[Str(b"hello"), Str(b"hi there")]),
            "hel|    hi|"
        );
        assert_eq!(
            text(
                "%.2M|%6.2M|",
                &[Str(&[0x01, 0xab, 0xff]), Str(&[0x01, 0xab])]
            ),
            "01ab|  01ab|"
        );
        // Asking for more than was read prints what there is.
        assert_eq!(text("%.8M", &[Str(&[0xfe])]), "fe");
        assert!(
            format_error("%m", &[Long(0xffff_8000)])
                .message
                .contains("memory")
        );
    }

    #[test]
    fn argument_mismatches_are_errors() {
        let e = format_error("ab %d %d", &[Long(1)]);
        assert_eq!(
            (e.offset, e.message.as_str()),
            (6, "too few arguments for the format")
        );
        assert!(
            format_error("%d", &[Str(b"x")])
                .message
                .contains("expects a long")
        );
        assert!(
            format_error("%s", &[Long(1)])
                .message
                .contains("expects a string")
        );
        assert!(
            format_error("%*s", &[Str(b"x"), Str(b"y")])
                .message
                .contains("expects a long")
        );
    }

    #[test]
    fn huge_star_widths_are_capped() {
        let out = render("%*d", &[Long(i64::MAX), Long(1)]);
        assert_eq!(out.len(), MAX_COUNT);
    }
}
