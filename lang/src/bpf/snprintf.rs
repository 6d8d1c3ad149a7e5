//! `sprintf` in kernel probes through `bpf_snprintf`: stap formats are
//! rewritten into the kernel's dialect (every integer is 64-bit, so `%d`
//! becomes `%lld`). What the helper cannot do (`%o %p %b %m %M`, `#`, `*`)
//! is split out into [`Segment::Custom`] parts that emitted code formats.
//!
//! The helper accepts `d i u x X c s` and the `%p` family, flags `0 + -`
//! and space, a fixed width and precision, and at most
//! [`MAX_ARGS`] arguments; its format must be printable ASCII and live in a
//! frozen read-only map (`MapRole::Formats`).

use crate::printf::{self, Conversion, Count, Piece, Spec};

pub const MAX_ARGS: usize = 12;

/// The kernel format for stap format `text`, or the first directive (as
/// written) that `bpf_snprintf` cannot express.
pub fn kernel_format(text: &str) -> Result<String, String> {
    let pieces = printf::parse(text).map_err(|e| e.message)?;
    let mut out = String::new();
    let mut args = 0;
    for piece in &pieces {
        match piece {
            Piece::Literal(literal) => push_literal(&mut out, literal)?,
            Piece::Spec(spec) => {
                let written = &text[spec.offset..spec.offset + spec.len];
                out.push_str(&kernel_directive(spec).ok_or_else(|| written.to_string())?);
                args += 1;
            }
        }
    }
    if args > MAX_ARGS {
        return Err(format!("more than {MAX_ARGS} arguments"));
    }
    Ok(out)
}

/// One part of a format that `bpf_snprintf` cannot take whole: runs of
/// text and plain directives still go to the helper, and each directive it
/// lacks is formatted by emitted code (`emit/format.rs`). The parts write
/// one after another into the same buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    /// A kernel format and the number of arguments it consumes.
    Kernel { format: String, args: usize },
    /// One directive; it consumes `spec.arg_kinds().len()` arguments.
    Custom(Spec),
}

/// Splits stap format `text` into [`Segment`]s. Fails only on text the
/// kernel cannot carry (non-ASCII literals) or a directive no part can do.
pub fn segments(text: &str) -> Result<Vec<Segment>, String> {
    let pieces = printf::parse(text).map_err(|e| e.message)?;
    let mut out = Vec::new();
    let mut format = String::new();
    let mut args = 0;
    let flush = |out: &mut Vec<Segment>, format: &mut String, args: &mut usize| {
        if !format.is_empty() {
            out.push(Segment::Kernel {
                format: std::mem::take(format),
                args: std::mem::take(args),
            });
        }
    };
    for piece in &pieces {
        match piece {
            Piece::Literal(literal) => push_literal(&mut format, literal)?,
            Piece::Spec(spec) => match kernel_directive(spec) {
                Some(directive) => {
                    if args == MAX_ARGS {
                        flush(&mut out, &mut format, &mut args);
                    }
                    format.push_str(&directive);
                    args += 1;
                }
                None => {
                    if spec.conversion == Conversion::Binary && spec.width == Some(Count::Star) {
                        let written = &text[spec.offset..spec.offset + spec.len];
                        return Err(written.to_string());
                    }
                    flush(&mut out, &mut format, &mut args);
                    out.push(Segment::Custom(spec.clone()));
                }
            },
        }
    }
    flush(&mut out, &mut format, &mut args);
    Ok(out)
}

fn push_literal(out: &mut String, literal: &str) -> Result<(), String> {
    if let Some(bad) = literal
        .chars()
        .find(|c| !(c.is_ascii_graphic() || c.is_ascii_whitespace()))
    {
        return Err(format!("the non-ASCII character {bad:?}"));
    }
    out.push_str(&literal.replace('%', "%%"));
    Ok(())
}

/// `spec` in the kernel's dialect, or `None` when `bpf_snprintf` lacks it
/// (`%o %p %b %m %M`, the `#` flag, `*` counts) or would print it
/// differently from C (a precision on an integer).
fn kernel_directive(spec: &Spec) -> Option<String> {
    let length = match spec.conversion {
        Conversion::Decimal => "lld",
        Conversion::Unsigned => "llu",
        Conversion::HexLower => "llx",
        Conversion::HexUpper => "llX",
        Conversion::Char => "c",
        Conversion::String => "s",
        _ => return None,
    };
    if spec.flags.alternate
        || spec.width == Some(Count::Star)
        || spec.precision == Some(Count::Star)
    {
        return None;
    }
    // The kernel's vsnprintf prints zero as "0" under `%.0d` and keeps `0`
    // padding with a precision, where C (and the host formatter) do not.
    if spec.precision.is_some() && !matches!(spec.conversion, Conversion::String) {
        return None;
    }
    let mut out = String::from("%");
    for (on, flag) in [
        (spec.flags.left, '-'),
        (spec.flags.plus, '+'),
        (spec.flags.space, ' '),
        (spec.flags.zero, '0'),
    ] {
        if on {
            out.push(flag);
        }
    }
    if let Some(Count::Fixed(width)) = spec.width {
        out.push_str(&width.to_string());
    }
    if let Some(Count::Fixed(precision)) = spec.precision {
        out.push('.');
        out.push_str(&precision.to_string());
    }
    out.push_str(length);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_become_64_bit() {
        assert_eq!(
            kernel_format("%d|%-5u|%08x|%X|%c|%.3s 100%%").unwrap(),
            "%lld|%-5llu|%08llx|%llX|%c|%.3s 100%%"
        );
    }

    #[test]
    fn unsupported_directives_are_named() {
        assert_eq!(kernel_format("a %o b").unwrap_err(), "%o");
        assert_eq!(kernel_format("%#x").unwrap_err(), "%#x");
        assert_eq!(kernel_format("%*d").unwrap_err(), "%*d");
        assert_eq!(kernel_format("%p").unwrap_err(), "%p");
    }

    #[test]
    fn formats_split_around_what_the_helper_lacks() {
        let parts = segments("a=%d %#o|%*s|%5p!").unwrap();
        let kinds: Vec<String> = parts
            .iter()
            .map(|p| match p {
                Segment::Kernel { format, args } => format!("K({format},{args})"),
                Segment::Custom(spec) => format!("C({:?})", spec.conversion),
            })
            .collect();
        assert_eq!(
            kinds,
            [
                "K(a=%lld ,1)",
                "C(Octal)",
                "K(|,0)",
                "C(String)",
                "K(|,0)",
                "C(Pointer)",
                "K(!,0)"
            ]
        );
        assert_eq!(segments("%*b").unwrap_err(), "%*b");
        // More than the helper's 12 arguments: a second kernel part.
        let many = segments(&"%d".repeat(13)).unwrap();
        assert_eq!(many.len(), 2);
    }
}
