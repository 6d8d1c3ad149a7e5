//! The byte layout of script globals in BPF maps: the one definition that
//! the BPF emitter (which writes them from the kernel), the runtime's map
//! setup, and host code (which reads and writes them through syscalls) all
//! follow.
//!
//! - A long is 8 bytes, little-endian two's complement (the host's order;
//!   BPF runs in host byte order).
//! - A string is `max_string_len` bytes: the text, a NUL, then zeros to the
//!   end. Zero padding matters: strings inside hash keys compare bytewise.
//! - Scalar globals: one `BPF_MAP_TYPE_ARRAY` per global with one entry
//!   (key `0u32`), value a long or a string.
//! - Arrays: `BPF_MAP_TYPE_HASH`, key = the keys in order, each laid out as
//!   above with no padding between them; value a long or a string. A string
//!   key part is [`Global::key_text_bytes`] long: MAXSTRINGLEN, or less when
//!   no longer text can reach the key (`key_text.rs`).
//! - Statistics: `BPF_MAP_TYPE_PERCPU_HASH` (keyed) or
//!   `BPF_MAP_TYPE_PERCPU_ARRAY` with one entry (scalar), value = the
//!   [`StatLayout`] fields, each an `i64`, per CPU. The host combines CPUs.

use crate::ir::{Global, LinearHist, StatNeeds, Storage, ValType};

/// Number of `@hist_log` buckets: one for zero, 64 for each sign
/// (bucket for `v > 0` is `1 + floor(log2(v))`), as in stap's layout.
pub const HIST_LOG_BUCKETS: u32 = 128;

pub fn value_size(ty: ValType, max_string_len: u32) -> u32 {
    match ty {
        ValType::Long => 8,
        ValType::Str => max_string_len,
    }
}

/// Bytes of a packed key tuple whose string parts are `key_text` bytes.
pub fn key_size(keys: &[ValType], key_text: u32) -> u32 {
    keys.iter().map(|k| value_size(*k, key_text)).sum()
}

/// Byte offset of each key inside a packed key tuple.
pub fn key_offsets(keys: &[ValType], key_text: u32) -> Vec<u32> {
    let mut offset = 0;
    keys.iter()
        .map(|k| {
            let here = offset;
            offset += value_size(*k, key_text);
            here
        })
        .collect()
}

/// Where each part of a statistic lives in its per-CPU value, in `i64`
/// slots (multiply by 8 for bytes). Count and sum are always present.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatLayout {
    pub count: u32,
    pub sum: u32,
    /// `min`, then `max` at `min + 1`.
    pub min_max: Option<u32>,
    /// stap's integer Welford state: the running mean scaled by
    /// `2^shift` ... kept as two slots `(avg_s, m2)`.
    pub variance: Option<u32>,
    pub hist_log: Option<u32>,
    /// Linear buckets: `(hi - lo) / width + 1` in-range buckets, preceded
    /// by the underflow slot and followed by the overflow slot.
    pub hist_linear: Option<(u32, LinearHist)>,
    /// Total `i64` slots.
    pub slots: u32,
}

impl StatLayout {
    pub fn new(needs: &StatNeeds) -> StatLayout {
        let mut next = 2;
        let mut take = |n: u32| {
            let here = next;
            next += n;
            here
        };
        let min_max = needs.min_max.then(|| take(2));
        let variance = needs.variance.then(|| take(2));
        let hist_log = needs.hist_log.then(|| take(HIST_LOG_BUCKETS));
        let hist_linear = needs.hist_linear.map(|h| (take(linear_buckets(&h) + 2), h));
        StatLayout {
            count: 0,
            sum: 1,
            min_max,
            variance,
            hist_log,
            hist_linear,
            slots: next,
        }
    }

    pub fn value_size(&self) -> u32 {
        self.slots * 8
    }
}

/// In-range buckets of a linear histogram.
pub fn linear_buckets(h: &LinearHist) -> u32 {
    if h.width <= 0 || h.hi < h.lo {
        return 1;
    }
    ((h.hi - h.lo) / h.width + 1).clamp(1, 1 << 16) as u32
}

/// The `@hist_log` bucket of zero; negative values use the buckets below
/// it, positive ones the buckets above (stap's layout).
pub const HIST_LOG_BUCKET0: u32 = 64;

/// The `@hist_log` bucket of `v`: `BUCKET0 ± (1 + floor(log2(|v|)))`, so 1
/// is bucket 65, 2..3 bucket 66, -1 bucket 63 and `i64::MIN` bucket 0.
pub fn hist_log_bucket(v: i64) -> u32 {
    if v == 0 {
        return HIST_LOG_BUCKET0;
    }
    let bits = 64 - v.unsigned_abs().leading_zeros();
    if v > 0 {
        (HIST_LOG_BUCKET0 + bits).min(HIST_LOG_BUCKETS - 1)
    } else {
        HIST_LOG_BUCKET0 - bits.min(HIST_LOG_BUCKET0)
    }
}

/// The smallest value of `@hist_log` bucket `bucket` (its row label).
pub fn hist_log_value(bucket: u32) -> i64 {
    match bucket.cmp(&HIST_LOG_BUCKET0) {
        std::cmp::Ordering::Equal => 0,
        std::cmp::Ordering::Less => i64::MIN >> bucket.min(63),
        std::cmp::Ordering::Greater => 1i64 << (bucket - HIST_LOG_BUCKET0 - 1).min(62),
    }
}

/// The linear-histogram slot of `v`, counted from the underflow slot (0):
/// in-range values go to `1 + (v - lo) / width`, values past the last
/// in-range bucket to the overflow slot `linear_buckets + 1`.
pub fn hist_linear_slot(h: &LinearHist, v: i64) -> u32 {
    let overflow = linear_buckets(h) + 1;
    if v < h.lo {
        return 0;
    }
    let width = h.width.max(1) as u64;
    let index = (v.wrapping_sub(h.lo) as u64) / width;
    (index.saturating_add(1)).min(overflow as u64) as u32
}

/// Key and value size of a global's map. String key parts are
/// [`Global::key_text_bytes`] long, string values MAXSTRINGLEN.
pub fn map_sizes(global: &Global, max_string_len: u32) -> (u32, u32) {
    let key_text = global.key_text_bytes(max_string_len);
    match &global.storage {
        Storage::Scalar(ty) => (4, value_size(*ty, max_string_len)),
        Storage::Array { keys, value, .. } => {
            (key_size(keys, key_text), value_size(*value, max_string_len))
        }
        Storage::Stats { keys, needs, .. } => {
            let key = if keys.is_empty() {
                4
            } else {
                key_size(keys, key_text)
            };
            (key, StatLayout::new(needs).value_size())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_layout_keeps_only_what_is_needed() {
        let plain = StatLayout::new(&StatNeeds::default());
        assert_eq!(plain.slots, 2);
        let all = StatLayout::new(&StatNeeds {
            min_max: true,
            variance: true,
            hist_log: true,
            hist_linear: Some(LinearHist {
                lo: 0,
                hi: 100,
                width: 10,
            }),
        });
        assert_eq!(all.min_max, Some(2));
        assert_eq!(all.variance, Some(4));
        assert_eq!(all.hist_log, Some(6));
        assert_eq!(all.hist_linear.map(|(at, _)| at), Some(6 + 128));
        assert_eq!(all.slots, 6 + 128 + 11 + 2);
    }

    #[test]
    fn keys_pack_without_padding() {
        let keys = [ValType::Long, ValType::Str, ValType::Long];
        assert_eq!(key_size(&keys, 64), 80);
        assert_eq!(key_offsets(&keys, 64), vec![0, 8, 72]);
    }
}
