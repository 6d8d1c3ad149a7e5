//! `$value` of the procfs probe being served (see `crate::http`): what a
//! read probe builds up to answer, or the body a write probe received.
//! Bounded by the probe's maxsize rather than MAXSTRINGLEN, as in stap.

#[derive(Debug, Default)]
pub struct ProcfsValue {
    bytes: Vec<u8>,
    max: usize,
    /// A read probe wrote more than maxsize; the rest was dropped.
    truncated: bool,
}

impl ProcfsValue {
    /// Before a procfs probe runs: `$value` starts as `initial` (a write's
    /// body, empty for a read).
    pub fn start(&mut self, initial: Vec<u8>, max: usize) {
        self.bytes = initial;
        self.bytes.truncate(max);
        self.max = max;
        self.truncated = false;
    }

    pub fn get(&self) -> &[u8] {
        &self.bytes
    }

    /// `$value = s`.
    pub fn set(&mut self, s: &[u8]) {
        self.bytes.clear();
        self.append(s);
    }

    /// `$value .= s`.
    pub fn append(&mut self, s: &[u8]) {
        let room = self.max.saturating_sub(self.bytes.len());
        if s.len() > room {
            self.truncated = true;
        }
        self.bytes.extend_from_slice(&s[..s.len().min(room)]);
    }

    /// After the probe: the value, and whether it was cut at maxsize.
    pub fn take(&mut self) -> (Vec<u8>, bool) {
        self.max = 0;
        (std::mem::take(&mut self.bytes), self.truncated)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_is_bounded_by_maxsize() {
        let mut v = ProcfsValue::default();
        v.start(b"abcdef".to_vec(), 4);
        assert_eq!(v.get(), b"abcd");
        v.set(b"xy");
        v.append(b"z");
        assert_eq!(v.get(), b"xyz");
        v.append(b"12");
        assert_eq!(v.take(), (b"xyz1".to_vec(), true));
        v.append(b"late");
        assert_eq!(v.get(), b"");
    }
}
