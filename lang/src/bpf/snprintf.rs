//! `sprintf` in kernel probes through `bpf_snprintf`: stap formats are
//! rewritten into the kernel's dialect (every integer is 64-bit, so `%d`
//! becomes `%lld`), and what the helper cannot do is reported by directive.
//!
//! The helper accepts `d i u x X c s` and the `%p` family, flags `0 + -`
//! and space, a fixed width and precision, and at most
//! [`MAX_ARGS`] arguments; its format must be printable ASCII and live in a
//! frozen read-only map (`MapRole::Formats`).

use crate::printf::{self, Conversion, Count, Piece};

pub const MAX_ARGS: usize = 12;

/// The kernel format for stap format `text`, or the first directive (as
/// written) that `bpf_snprintf` cannot express.
pub fn kernel_format(text: &str) -> Result<String, String> {
    let pieces = printf::parse(text).map_err(|e| e.message)?;
    let mut out = String::new();
    let mut args = 0;
    for piece in &pieces {
        match piece {
            Piece::Literal(literal) => {
                if let Some(bad) = literal
                    .chars()
                    .find(|c| !(c.is_ascii_graphic() || c.is_ascii_whitespace()))
                {
                    return Err(format!("the non-ASCII character {bad:?}"));
                }
                out.push_str(&literal.replace('%', "%%"));
            }
            Piece::Spec(spec) => {
                let written = &text[spec.offset..spec.offset + spec.len];
                let length = match spec.conversion {
                    Conversion::Decimal => "lld",
                    Conversion::Unsigned => "llu",
                    Conversion::HexLower => "llx",
                    Conversion::HexUpper => "llX",
                    Conversion::Char => "c",
                    Conversion::String => "s",
                    _ => return Err(written.to_string()),
                };
                if spec.flags.alternate
                    || spec.width == Some(Count::Star)
                    || spec.precision == Some(Count::Star)
                {
                    return Err(written.to_string());
                }
                out.push('%');
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
                args += 1;
            }
        }
    }
    if args > MAX_ARGS {
        return Err(format!("more than {MAX_ARGS} arguments"));
    }
    Ok(out)
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
}
