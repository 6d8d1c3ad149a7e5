//! `print(@hist_log(s))` and `print(@hist_linear(s, lo, hi, w))` in stap's
//! ASCII layout.
//!
//! The rules, derived from the language reference's two examples:
//! - Rows span the non-empty buckets plus up to two empty ones on each side
//!   (a log histogram does not reach below the zero bucket unless it holds
//!   negative values; a linear one shows its `<lo`/`>hi` slots only when
//!   they hold samples).
//! - The value column is right-aligned, at least as wide as `value`.
//! - Bars are 50 columns; a bucket gets `count / scale` `@`s where `scale`
//!   is `ceil(max / 50)` (1 when the largest count fits), and the count is
//!   right-aligned after the bar so that it ends `max(digits(max), 5)`
//!   columns past the bar's 50 (both reference examples agree on this:
//!   `@@…@ 1650` with 4-digit counts, ` 16689` after 49 `@` with 5).
//! - A row is elided when it and every row within two of it (inside the
//!   shown range) are empty; a run of elided rows prints as one `~` line.
//! - A blank line ends the histogram.

use std::fmt::Write;

use stap_lang::bpf::layout::{HIST_LOG_BUCKET0, hist_log_value};
use stap_lang::ir::LinearHist;

const WIDTH: usize = 50;
/// Empty rows kept next to data before the rest are elided.
const ELISION: usize = 2;

/// Renders a log histogram from its bucket counts (see `bpf::layout`).
pub fn print_log(buckets: &[i64]) -> String {
    let labels = |i: usize| (String::new(), hist_log_value(i as u32));
    // Do not go below the zero bucket when no value is negative.
    let floor = if buckets[..(HIST_LOG_BUCKET0 as usize).min(buckets.len())]
        .iter()
        .any(|c| *c > 0)
    {
        0
    } else {
        HIST_LOG_BUCKET0 as usize
    };
    render(buckets, floor, None, labels)
}

/// Renders a linear histogram from its slots: underflow, buckets, overflow.
pub fn print_linear(h: &LinearHist, slots: &[i64]) -> String {
    let last = slots.len().saturating_sub(1);
    let labels = |i: usize| {
        if i == 0 {
            ("<".to_string(), h.lo)
        } else if i == last {
            (
                ">".to_string(),
                h.lo.wrapping_add((i as i64 - 2).wrapping_mul(h.width)),
            )
        } else {
            (
                String::new(),
                h.lo.wrapping_add((i as i64 - 1).wrapping_mul(h.width)),
            )
        }
    };
    render(slots, 0, Some(h), labels)
}

fn render(
    counts: &[i64],
    floor: usize,
    linear: Option<&LinearHist>,
    label: impl Fn(usize) -> (String, i64),
) -> String {
    let mut out = String::new();
    let Some(first) = counts.iter().position(|c| *c > 0) else {
        // stap prints just the header for an empty histogram.
        header(&mut out, 5);
        out.push('\n');
        return out;
    };
    let last_data = counts.iter().rposition(|c| *c > 0).unwrap_or(first);
    let max = counts.iter().copied().max().unwrap_or(0);
    let mut low = first.saturating_sub(ELISION).max(floor.min(first));
    let mut high = (last_data + ELISION).min(counts.len() - 1);
    if linear.is_some() {
        // The underflow and overflow slots are shown only with samples.
        if low == 0 && counts[0] == 0 {
            low = 1;
        }
        if high == counts.len() - 1 && counts[high] == 0 {
            high -= 1;
        }
    }
    let scale = if max <= WIDTH as i64 {
        1
    } else {
        (max + WIDTH as i64 - 1) / WIDTH as i64
    };
    let count_width = digits(max);
    let rows: Vec<(String, i64)> = (low..=high).map(&label).collect();
    let value_width = match linear {
        // stap sizes a linear column from `lo` and `lo + width * high`
        // (one bucket past the last label), plus the `<`/`>` marks.
        Some(h) => (digits(h.lo) + usize::from(low == 0)).max(
            digits(h.lo.wrapping_add(h.width.wrapping_mul(high as i64)))
                + usize::from(high == counts.len() - 1),
        ),
        None => rows
            .iter()
            .map(|(prefix, v)| prefix.len() + digits(*v))
            .max()
            .unwrap_or(0),
    }
    .max(5);
    header(&mut out, value_width);
    let mut eliding = false;
    for (i, (prefix, value)) in (low..=high).zip(rows) {
        let near_lo = i.saturating_sub(ELISION).max(low);
        let near_hi = (i + ELISION).min(high);
        if counts[near_lo..=near_hi].iter().all(|c| *c == 0) {
            eliding = true;
            continue;
        }
        if eliding {
            let _ = writeln!(out, "{:value_width$} ~", "");
            eliding = false;
        }
        let bar = (counts[i] / scale).clamp(0, WIDTH as i64) as usize;
        let label = format!("{prefix}{value}");
        let _ = writeln!(
            out,
            "{label:>value_width$} |{}{:>pad$}",
            "@".repeat(bar),
            counts[i],
            pad = WIDTH - bar + count_width.max(5)
        );
    }
    out.push('\n');
    out
}

fn header(out: &mut String, value_width: usize) {
    let _ = writeln!(
        out,
        "{:>value_width$} |{} count",
        "value",
        "-".repeat(WIDTH)
    );
}

/// Characters `v` takes in decimal, sign included.
fn digits(v: i64) -> usize {
    let sign = usize::from(v < 0);
    sign + v
        .unsigned_abs()
        .checked_ilog10()
        .map_or(1, |d| d as usize + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digit_counts() {
        assert_eq!(
            [0, 9, 10, -1, -10, i64::MIN].map(digits),
            [1, 1, 2, 2, 3, 20]
        );
    }
}
