//! `=~` and `matched()` on the host, with the `regex` crate standing in for
//! stap's POSIX extended regular expressions (docs/language.md lists where
//! the two flavours differ).

use std::collections::HashMap;

use regex::bytes::{Regex, RegexBuilder};

use super::RuntimeError;

/// Compiled patterns beyond this many are dropped, so a script building
/// patterns at run time cannot grow the cache without bound.
const MAX_CACHED: usize = 256;

/// The compiled patterns and the outcome of the last `=~`.
#[derive(Default)]
pub struct Regexes {
    cache: HashMap<Vec<u8>, Regex>,
    /// The groups of the last match (`None` for one that did not take
    /// part), or `None` when the last `=~` failed or none ran yet.
    last: Option<Vec<Option<Vec<u8>>>>,
}

impl Regexes {
    /// `text =~ pattern`: remembers the groups for `matched()`.
    pub fn is_match(&mut self, text: &[u8], pattern: &[u8]) -> Result<bool, RuntimeError> {
        let re = self.compiled(pattern)?;
        self.last = re.captures(text).map(|caps| {
            caps.iter()
                .map(|group| group.map(|m| m.as_bytes().to_vec()))
                .collect()
        });
        Ok(self.last.is_some())
    }

    /// `matched(n)`: group `n` of the last successful match, "" for a group
    /// that did not take part (stap: e.g. the other side of a `|`).
    pub fn group(&self, n: i64) -> Result<Vec<u8>, RuntimeError> {
        let Some(groups) = &self.last else {
            return Err(RuntimeError::Explicit(format!(
                "Attempted to get subexpression {n} from failed match"
            )));
        };
        match usize::try_from(n).ok().and_then(|i| groups.get(i)) {
            Some(group) => Ok(group.clone().unwrap_or_default()),
            None => Err(RuntimeError::Explicit(format!(
                "Attempted to get subexpression {n} of {}",
                groups.len() - 1
            ))),
        }
    }

    fn compiled(&mut self, pattern: &[u8]) -> Result<&Regex, RuntimeError> {
        if !self.cache.contains_key(pattern) {
            let re = compile(pattern)?;
            if self.cache.len() >= MAX_CACHED {
                self.cache.clear();
            }
            self.cache.insert(pattern.to_vec(), re);
        }
        self.cache
            .get(pattern)
            .ok_or_else(|| RuntimeError::Internal("regex cache lost a pattern".into()))
    }
}

/// Strings are bytes, so matching is byte-wise (no Unicode classes), and
/// `.` matches a newline as POSIX `regexec` without `REG_NEWLINE` does.
fn compile(pattern: &[u8]) -> Result<Regex, RuntimeError> {
    let fail = |why: &str| {
        RuntimeError::Explicit(format!(
            "regex compilation error: {why} in \"{}\"",
            String::from_utf8_lossy(pattern)
        ))
    };
    let text = std::str::from_utf8(pattern).map_err(|_| fail("invalid UTF-8"))?;
    RegexBuilder::new(text)
        .unicode(false)
        .dot_matches_new_line(true)
        .build()
        .map_err(|e| {
            // The crate's message spans lines (pattern, caret, reason): keep
            // the reason for a one-line ERROR.
            let message = e.to_string();
            let reason = message.lines().rev().find(|l| !l.trim().is_empty());
            let reason = reason.unwrap_or("invalid pattern").trim();
            fail(reason.strip_prefix("error: ").unwrap_or(reason))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_of_the_last_match() {
        let mut re = Regexes::default();
        assert!(re.is_match(b"tcp_v4_rcv", b"^tcp_(v[46])_(.*)$").unwrap());
        assert_eq!(re.group(0).unwrap(), b"tcp_v4_rcv");
        assert_eq!(re.group(1).unwrap(), b"v4");
        assert_eq!(re.group(2).unwrap(), b"rcv");
        assert_eq!(
            re.group(3).unwrap_err().to_string(),
            "Attempted to get subexpression 3 of 2"
        );
    }

    #[test]
    fn unmatched_alternative_is_empty_and_failure_forgets() {
        let mut re = Regexes::default();
        assert!(re.is_match(b"b", b"(a)|(b)").unwrap());
        assert_eq!(re.group(1).unwrap(), b"");
        assert_eq!(re.group(2).unwrap(), b"b");
        assert!(!re.is_match(b"c", b"(a)|(b)").unwrap());
        assert!(re.group(0).is_err());
    }

    #[test]
    fn posix_classes_and_bytes() {
        let mut re = Regexes::default();
        assert!(re.is_match(b"eth0", b"^[[:alpha:]]+[[:digit:]]$").unwrap());
        assert!(re.is_match(b"a\nb", b"a.b").unwrap());
        assert!(re.is_match(b"\xff\xfe", b"^..$").unwrap());
        // Leftmost-first, unlike POSIX (docs/language.md, Known gaps).
        assert!(re.is_match(b"ab", b"a|ab").unwrap());
        assert_eq!(re.group(0).unwrap(), b"a");
    }

    #[test]
    fn bad_pattern_is_one_line() {
        let mut re = Regexes::default();
        let err = re.is_match(b"x", b"(ab").unwrap_err().to_string();
        assert!(err.starts_with("regex compilation error: "), "{err}");
        assert!(err.ends_with(" in \"(ab\""), "{err}");
        assert!(!err.contains('\n'), "{err}");
    }
}
