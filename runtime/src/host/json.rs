//! `--format json`: every output event as one JSON object on its own line
//! (NDJSON). The schema is docs/output.md; keep the two in step.

use std::fmt::Write;

use stap_lang::bpf::layout::hist_log_value;

use super::stats::Aggregate;

/// `bytes` as a JSON string literal. Script output is bytes: invalid UTF-8
/// becomes U+FFFD, as any JSON consumer would need.
pub fn string(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// One event: `{"type":TYPE,...fields}` and a newline. Field values are
/// JSON text already (use [`string`] for strings).
pub fn event(kind: &str, fields: &[(&str, String)]) -> String {
    let mut out = format!("{{\"type\":{}", string(kind.as_bytes()));
    for (name, value) in fields {
        let _ = write!(out, ",{}:{value}", string(name.as_bytes()));
    }
    out.push_str("}\n");
    out
}

/// `print(@hist_log(s))`/`print(@hist_linear(...))` as a `histogram`
/// event: the aggregate's totals and every non-empty bucket, by the lower
/// bound stap prints in its value column. `None` without the buckets.
pub fn histogram(agg: &Aggregate, linear: bool) -> Option<String> {
    let mut buckets = Vec::new();
    let mut fields = vec![
        ("count", agg.count.to_string()),
        ("sum", agg.sum.to_string()),
    ];
    // `--format json` keeps them for every histogram (pipeline's
    // `histogram_extremes`); an empty statistic has none.
    if agg.has_extremes && agg.count > 0 {
        fields.push(("min", agg.min.to_string()));
        fields.push(("max", agg.max.to_string()));
    }
    if linear {
        let (h, slots) = agg.hist_linear.as_ref()?;
        let last = slots.len().saturating_sub(1);
        for (i, count) in slots.iter().enumerate().filter(|(_, c)| **c > 0) {
            let (value, range) = if i == 0 {
                (h.lo, ",\"range\":\"under\"")
            } else if i == last {
                (
                    h.lo.wrapping_add((i as i64 - 2).wrapping_mul(h.width)),
                    ",\"range\":\"over\"",
                )
            } else {
                (h.lo.wrapping_add((i as i64 - 1).wrapping_mul(h.width)), "")
            };
            buckets.push(format!("{{\"value\":{value},\"count\":{count}{range}}}"));
        }
        fields.insert(0, ("scale", string(b"linear")));
        fields.push(("lo", h.lo.to_string()));
        fields.push(("hi", h.hi.to_string()));
        fields.push(("width", h.width.to_string()));
    } else {
        let counts = agg.hist_log.as_ref()?;
        for (i, count) in counts.iter().enumerate().filter(|(_, c)| **c > 0) {
            let value = hist_log_value(i as u32);
            buckets.push(format!("{{\"value\":{value},\"count\":{count}}}"));
        }
        fields.insert(0, ("scale", string(b"log")));
    }
    fields.push(("buckets", format!("[{}]", buckets.join(","))));
    Some(event("histogram", &fields))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_escaped() {
        assert_eq!(string(b"a\"b\\c\n\x01"), r#""a\"b\\c\n\u0001""#);
        assert_eq!(string(b"\xff"), "\"\u{fffd}\"");
        assert_eq!(
            event("output", &[("data", string(b"hi\n"))]),
            "{\"type\":\"output\",\"data\":\"hi\\n\"}\n"
        );
    }
}
