//! `=~` in kernel probes: the pattern is compiled here, at compile time, to
//! a dense DFA (regex-automata, the engine under the host's `regex` crate,
//! with the host's syntax options, so both sides accept the same patterns
//! and agree on match or no match), and flattened into a table the BPF
//! code walks one byte at a time (`emit/strfuncs.rs`).
//!
//! Table layout (little-endian, in the read-only formats map):
//! - 256 bytes: the class of each byte value (bytes no state tells apart
//!   share a class);
//! - then `u16` entries, `row` per state: the next state for each class.
//!   State [`DEAD`] and state [`MATCH`] lead only to themselves, and the
//!   NUL byte takes the end-of-text transition (strings end at their NUL
//!   and are NUL-padded), which leads to one of the two. So the walk needs
//!   no test per byte: after the string's NUL the state is the answer.
//!   The entries are padded with `DEAD` to a power of two, so an index
//!   masked with [`Table::mask`] is always inside.
//!
//! The search is unanchored and stops at the first match, which is all
//! `=~` needs; `matched()` (which group matched what) stays host-only.

use hashbrown::HashMap;
use regex_automata::dfa::{Automaton, StartKind, dense};
use regex_automata::nfa::thompson;
use regex_automata::util::primitives::StateID;
use regex_automata::util::{start, syntax};
use regex_automata::{Anchored, MatchKind};

/// The state the text has matched in.
pub const MATCH: u16 = 1;
/// The state nothing further can match from.
pub const DEAD: u16 = 0;
/// Bytes of the class table before the transitions.
pub const CLASS_BYTES: u32 = 256;
/// The largest table stap-rs puts in a map value.
const MAX_TABLE_BYTES: usize = 64 * 1024;

/// A compiled pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    pub bytes: Vec<u8>,
    /// Entries per state: one per class.
    pub row: u32,
    /// The number of entries less one (a power of two less one).
    pub mask: u32,
    /// The first state.
    pub start: u16,
}

/// Compiles `pattern` with the host's dialect (bytes, no Unicode classes,
/// `.` matching newline), or says why it cannot run in BPF.
pub fn compile(pattern: &str) -> Result<Table, String> {
    let dfa = dense::Builder::new()
        .configure(
            dense::DFA::config()
                .start_kind(StartKind::Unanchored)
                .match_kind(MatchKind::All)
                .dfa_size_limit(Some(1 << 20))
                .determinize_size_limit(Some(1 << 20)),
        )
        .syntax(
            syntax::Config::new()
                .unicode(false)
                .utf8(false)
                .dot_matches_new_line(true),
        )
        .thompson(thompson::Config::new().utf8(false))
        .build(pattern)
        .map_err(|e| {
            // The innermost cause names the problem (a syntax error spans
            // lines: pattern, caret, reason; keep the reason).
            let mut cause: &dyn std::error::Error = &e;
            while let Some(inner) = cause.source() {
                cause = inner;
            }
            let message = cause.to_string();
            let reason = message.lines().rev().find(|l| !l.trim().is_empty());
            reason
                .unwrap_or("invalid pattern")
                .trim()
                .trim_start_matches("error: ")
                .to_string()
        })?;
    let config = start::Config::new().anchored(Anchored::No);
    let first = dfa.start_state(&config).map_err(|e| e.to_string())?;

    // Number the states reachable from the start, breadth first, after
    // DEAD and MATCH; each gets its 256 byte transitions, the NUL's being
    // the end of the text.
    let mut index: HashMap<StateID, u16> = HashMap::new();
    let mut order: Vec<StateID> = Vec::new();
    let mut rows: Vec<Vec<u16>> = vec![vec![DEAD; 256], vec![MATCH; 256]];
    let mut code = |id: StateID, order: &mut Vec<StateID>| -> Result<u16, String> {
        if dfa.is_match_state(id) {
            return Ok(MATCH);
        }
        if dfa.is_dead_state(id) {
            return Ok(DEAD);
        }
        if dfa.is_quit_state(id) {
            return Err("the pattern needs look-around the DFA cannot decide".into());
        }
        if let Some(n) = index.get(&id) {
            return Ok(*n);
        }
        let n = order.len() + 2;
        if n > u16::MAX as usize {
            return Err("the DFA has too many states".into());
        }
        index.insert(id, n as u16);
        order.push(id);
        Ok(n as u16)
    };
    let start = code(first, &mut order)?;
    let mut next = 0;
    while next < order.len() {
        let id = order[next];
        let mut row = Vec::with_capacity(256);
        let end = dfa.next_eoi_state(id);
        row.push(if dfa.is_match_state(end) { MATCH } else { DEAD });
        for byte in 1..=255u8 {
            row.push(code(dfa.next_state(id, byte), &mut order)?);
        }
        rows.push(row);
        next += 1;
    }

    // Byte classes: bytes whose column is the same in every state; the
    // first byte of each class stands for it.
    let mut classes = [0u8; 256];
    let mut columns: Vec<Vec<u16>> = Vec::new();
    let mut representative: Vec<usize> = Vec::new();
    for (byte, class_of) in classes.iter_mut().enumerate() {
        let column: Vec<u16> = rows.iter().map(|r| r[byte]).collect();
        let class = match columns.iter().position(|c| *c == column) {
            Some(class) => class,
            None => {
                columns.push(column);
                representative.push(byte);
                columns.len() - 1
            }
        };
        *class_of = class as u8;
    }
    let row = columns.len();
    let entries = (row * rows.len()).next_power_of_two();
    let size = CLASS_BYTES as usize + 2 * entries;
    if size > MAX_TABLE_BYTES {
        return Err(format!(
            "its DFA needs {size} bytes ({} states), more than {MAX_TABLE_BYTES}",
            rows.len()
        ));
    }
    let mut bytes = classes.to_vec();
    for state in &rows {
        for byte in &representative {
            bytes.extend_from_slice(&state[*byte].to_le_bytes());
        }
    }
    bytes.resize(size, 0);
    Ok(Table {
        bytes,
        row: row as u32,
        mask: entries as u32 - 1,
        start,
    })
}

/// Runs a table over `text` and its NUL as the BPF code does (for tests).
#[cfg(test)]
fn run(table: &Table, text: &[u8]) -> bool {
    let mut state = table.start as u32;
    for byte in text.iter().chain([&0u8]) {
        let class = table.bytes[*byte as usize] as u32;
        let at = (CLASS_BYTES + 2 * ((state * table.row + class) & table.mask)) as usize;
        state = u16::from_le_bytes([table.bytes[at], table.bytes[at + 1]]) as u32;
    }
    state == MATCH as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matches(pattern: &str, text: &str) -> bool {
        run(&compile(pattern).unwrap(), text.as_bytes())
    }

    #[test]
    fn agrees_with_the_search_it_stands_for() {
        let pattern = r"(\.tar\.(gz|bz2|xz)|\.zip|\.tgz|\.tbz)$";
        assert!(matches(pattern, "/tmp/a.tar.gz"));
        assert!(matches(pattern, "x.zip"));
        assert!(!matches(pattern, "x.zip.txt"));
        assert!(!matches(pattern, ""));
        assert!(matches("^ab", "abc"));
        assert!(!matches("^ab", "cab"));
        assert!(matches("b+c", "abbbc"));
        assert!(matches("", "anything"));
        assert!(matches("", ""));
        assert!(matches("[0-9]{3}", "a123"));
        assert!(!matches("[0-9]{3}", "a12b3"));
        assert!(matches(r"\bfoo\b", "a foo b"));
        assert!(!matches(r"\bfoo\b", "afoob"));
        assert!(matches("a.c", "a\nc"));
        assert!(matches("x$", "ax"));
        assert!(!matches("x$", "xa"));
    }

    #[test]
    fn a_bad_pattern_says_why() {
        let err = compile("a(b").unwrap_err();
        assert!(err.contains("unclosed group"), "{err}");
    }

    #[test]
    fn a_huge_dfa_is_refused() {
        // 2^13 states of 3 entries (padded to 4): past the table limit;
        // more states trip the builder's own limit first.
        let err = compile("[01]*1[01]{12}").unwrap_err();
        assert!(err.contains("more than"), "{err}");
        let err = compile("[01]*1[01]{16}").unwrap_err();
        assert!(err.contains("size limit"), "{err}");
    }
}
