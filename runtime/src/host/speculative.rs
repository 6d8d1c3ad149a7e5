//! Speculative output (`speculation`, `speculate`, `commit`, `discard`):
//! text held per speculation id until the script commits it (printed, in
//! the order it was added) or discards it. Kernel probes send each
//! operation up as a record, so the host keeps every buffer and a commit
//! prints in order with the rest of the output, wherever it was called.
//!
//! Bounds, as stap's tapset (speculative.stp) has them: the held pieces,
//! over all ids, are one wrap-around array of MAXMAPENTRIES entries (`%`):
//! adding one more drops the oldest piece; each piece is a string of at
//! most MAXSTRINGLEN - 1 bytes. An id committed or discarded may be used
//! again.

use std::collections::VecDeque;

pub struct Speculation {
    /// `(id, text)` in the order `speculate` added them.
    pieces: VecDeque<(i64, Vec<u8>)>,
    max_pieces: usize,
    /// The last id a host probe's `speculation()` gave out.
    last_host_id: i64,
}

/// Host probes number their speculations from here, so their ids never
/// meet those of kernel probes (1, 2, ... from the kernel's counter).
const FIRST_HOST_ID: i64 = 1 << 32;

impl Speculation {
    pub fn new(max_map_entries: u64) -> Speculation {
        Speculation {
            pieces: VecDeque::new(),
            max_pieces: usize::try_from(max_map_entries)
                .unwrap_or(usize::MAX)
                .max(1),
            last_host_id: FIRST_HOST_ID,
        }
    }

    /// `speculation()` in a host probe.
    pub fn next_host_id(&mut self) -> i64 {
        self.last_host_id += 1;
        self.last_host_id
    }

    pub fn add(&mut self, id: i64, text: &[u8]) {
        if self.pieces.len() == self.max_pieces {
            self.pieces.pop_front();
        }
        self.pieces.push_back((id, text.to_vec()));
    }

    /// `commit(id)`: the pieces of `id`, joined, now removed.
    pub fn take(&mut self, id: i64) -> Vec<u8> {
        let mut text = Vec::new();
        self.pieces.retain(|(owner, piece)| {
            if *owner == id {
                text.extend_from_slice(piece);
            }
            *owner != id
        });
        text
    }

    pub fn discard(&mut self, id: i64) {
        self.pieces.retain(|(owner, _)| *owner != id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commit_joins_in_order_discard_drops_and_the_oldest_wraps() {
        let mut s = Speculation::new(3);
        s.add(1, b"a");
        s.add(2, b"x");
        s.add(1, b"b");
        assert_eq!(s.take(1), b"ab");
        assert_eq!(s.take(1), b"");
        s.add(3, b"c");
        s.discard(2);
        assert_eq!(s.take(2), b"");
        // Full at three: the fourth drops the oldest ("c").
        s.add(4, b"d");
        s.add(4, b"e");
        s.add(4, b"f");
        assert_eq!(s.take(3), b"");
        assert_eq!(s.take(4), b"def");
        assert_eq!(s.next_host_id(), FIRST_HOST_ID + 1);
    }
}
