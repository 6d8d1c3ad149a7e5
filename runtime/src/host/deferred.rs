//! Deferred stacks: a kernel probe's `sprint_backtrace()`,
//! `sprint_stack(s)`, `print_syms(s)`, ... are string values whose frames
//! only the host can name, so the BPF code builds them as
//! `ESC kind [tgid ':'] hex-addresses ESC` (`lang/src/ir/lower/builtin.rs`,
//! `deferred_stack`): `k`/`K` a kernel stack, `u`/`U` a user stack (the
//! capital letter the full form), `b` a brief user stack, and `n`, `d`,
//! `m` one user address as `usymname`, `usymdata` and `umodname` name it.
//! They can be stored, used as keys and compared as any string; the host
//! replaces each such span by the named frames when the string is printed
//! (kernel printf records and host output alike), against the process's
//! mappings at that moment: a process that has exited by then prints the
//! addresses.

use std::borrow::Cow;

use super::HostRuntime;
use super::builtins::stack_addresses;
use super::usymbols::AddressText;

const ESC: u8 = 0x1b;

impl HostRuntime {
    /// `bytes` with every deferred stack in it named; borrowed when there
    /// is none (the common case: one scan for the escape byte).
    pub(crate) fn name_stacks<'a>(&mut self, bytes: &'a [u8]) -> Cow<'a, [u8]> {
        if !bytes.contains(&ESC) {
            return Cow::Borrowed(bytes);
        }
        let mut out = Vec::with_capacity(bytes.len() * 2);
        let mut rest = bytes;
        while let Some(at) = rest.iter().position(|&b| b == ESC) {
            out.extend_from_slice(&rest[..at]);
            let after = &rest[at + 1..];
            match self.named(after) {
                Some((text, used)) => {
                    out.extend_from_slice(text.as_bytes());
                    rest = &after[used..];
                }
                // Not ours: the byte stays.
                None => {
                    out.push(ESC);
                    rest = after;
                }
            }
        }
        out.extend_from_slice(rest);
        Cow::Owned(out)
    }

    /// The frames of the deferred stack that `span` (after its first ESC)
    /// starts with, and how many bytes of `span` it took (through its
    /// closing ESC). Anything else that starts with ESC (a terminal
    /// escape sequence the script prints, a deferred stack that a
    /// MAXSTRINGLEN cut left without its closing ESC) is not one.
    fn named(&mut self, span: &[u8]) -> Option<(String, usize)> {
        let (&kind, body) = span.split_first()?;
        let full = kind.is_ascii_uppercase();
        let end = body.iter().position(|&b| b == ESC)?;
        let used = end + 2;
        let body = &body[..end];
        let address_text = |b: &u8| b.is_ascii_hexdigit() || *b == b'x' || *b == b' ' || *b == b':';
        if !body.iter().all(address_text) {
            return None;
        }
        let text = match kind {
            b'k' | b'K' => {
                let mut text = String::new();
                for addr in stack_addresses(body) {
                    text.push_str(&self.symbols.frame(addr, full));
                }
                if !full {
                    text.pop();
                }
                text
            }
            b'u' | b'U' => {
                let (tgid, addrs) = user_addresses(body)?;
                self.usymbols.frames(tgid, &addrs, full)
            }
            // One user address (`usymname`, `usymdata`, `umodname`) or a
            // brief user stack (`print_ubacktrace_brief`), one frame a line.
            b'n' | b'd' | b'm' | b'b' => {
                let (tgid, addrs) = user_addresses(body)?;
                let how = match kind {
                    b'n' => AddressText::Name,
                    b'd' => AddressText::Data,
                    b'm' => AddressText::Module,
                    _ => AddressText::Brief,
                };
                let mut text = String::new();
                for addr in addrs {
                    text.push_str(&self.usymbols.describe(tgid, addr, how));
                    if how == AddressText::Brief {
                        text.push('\n');
                    }
                }
                text
            }
            _ => return None,
        };
        Some((text, used))
    }
}

/// `tgid ':' addresses` of a user span.
fn user_addresses(body: &[u8]) -> Option<(u32, Vec<u64>)> {
    let colon = body.iter().position(|&b| b == b':')?;
    let tgid = std::str::from_utf8(&body[..colon]).ok()?.parse().ok()?;
    Some((tgid, stack_addresses(&body[colon + 1..])))
}
