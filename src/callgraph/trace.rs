//! The records the generated script prints, turned into one call tree per
//! thread.
//!
//! Each record is one line (see `super::script`):
//! - `E TID NS ADDR COMM`: TID entered the function at ADDR at NS
//!   (monotonic nanoseconds);
//! - `R TID NS ADDR`: TID returned from it;
//! - `N COUNT`: from the end probe, how many call and return records the
//!   kernel side produced, so records lost on the way are counted.
//!
//! The stream of one thread is in program order: a thread runs on one CPU
//! at a time and every record goes through the one ring buffer. It can
//! still be unbalanced: recording starts and stops in the middle of calls,
//! records can be lost, and a return probe can miss. A return whose entry
//! is deeper in the stack closes the calls above it (their returns were
//! missed); a return whose entry is not on the stack at all is counted and
//! dropped.

use std::collections::BTreeMap;

/// One call: the function, when it started, when it returned (if seen),
/// and the calls it made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    pub func: u64,
    pub start: u64,
    pub end: Option<u64>,
    pub children: Vec<Call>,
}

impl Call {
    /// Nanoseconds from entry to return, when both were seen.
    pub fn duration(&self) -> Option<u64> {
        self.end.map(|end| end.saturating_sub(self.start))
    }
}

/// The calls of one thread, in the order they started.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Thread {
    pub comm: String,
    pub calls: Vec<Call>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Trace {
    pub threads: BTreeMap<u32, Thread>,
    /// Call and return records received.
    pub records: u64,
    /// Call and return records the kernel side produced (the `N` record),
    /// when the run got as far as its end probe.
    pub produced: Option<u64>,
    /// Returns whose call was not on the thread's stack.
    pub unmatched_returns: u64,
    /// Lines that are not records (they are reported, not silently skipped).
    pub malformed: Vec<String>,
}

impl Trace {
    /// Records produced in the kernel that never arrived.
    pub fn missed(&self) -> u64 {
        self.produced
            .map_or(0, |produced| produced.saturating_sub(self.records))
    }
}

/// Builds the per-thread trees from the generated script's output.
pub fn parse(text: &str) -> Trace {
    let mut trace = Trace::default();
    // The open calls of each thread, innermost last.
    let mut stacks: BTreeMap<u32, Vec<Call>> = BTreeMap::new();
    for line in text.lines() {
        let line = line.trim_end();
        if line.is_empty() {
            continue;
        }
        match Record::parse(line) {
            Some(Record::Entry {
                tid,
                ns,
                func,
                comm,
            }) => {
                trace.records += 1;
                let thread = trace.threads.entry(tid).or_default();
                if thread.comm.is_empty() {
                    thread.comm = comm.to_string();
                }
                stacks.entry(tid).or_default().push(Call {
                    func,
                    start: ns,
                    end: None,
                    children: Vec::new(),
                });
            }
            Some(Record::Return { tid, ns, func }) => {
                trace.records += 1;
                let stack = stacks.entry(tid).or_default();
                let Some(depth) = stack.iter().rposition(|call| call.func == func) else {
                    trace.unmatched_returns += 1;
                    continue;
                };
                // Calls above the returning one lost their returns.
                while stack.len() > depth + 1 {
                    let inner = stack.pop().expect("deeper than depth");
                    adopt(stack, &mut trace.threads, tid, inner);
                }
                let mut call = stack.pop().expect("found at depth");
                call.end = Some(ns);
                adopt(stack, &mut trace.threads, tid, call);
            }
            Some(Record::Produced(count)) => trace.produced = Some(count),
            None => trace.malformed.push(line.to_string()),
        }
    }
    // Calls still open when recording stopped keep `end: None`.
    for (tid, mut stack) in stacks {
        while let Some(call) = stack.pop() {
            adopt(&mut stack, &mut trace.threads, tid, call);
        }
    }
    trace
}

/// Hands a finished (or abandoned) call to its caller, or to the thread's
/// top level when it has none.
fn adopt(stack: &mut [Call], threads: &mut BTreeMap<u32, Thread>, tid: u32, call: Call) {
    match stack.last_mut() {
        Some(parent) => parent.children.push(call),
        None => threads.entry(tid).or_default().calls.push(call),
    }
}

enum Record<'a> {
    Entry {
        tid: u32,
        ns: u64,
        func: u64,
        comm: &'a str,
    },
    Return {
        tid: u32,
        ns: u64,
        func: u64,
    },
    Produced(u64),
}

impl<'a> Record<'a> {
    fn parse(line: &'a str) -> Option<Record<'a>> {
        let mut fields = line.splitn(5, ' ');
        let kind = fields.next()?;
        if kind == "N" {
            return Some(Record::Produced(fields.next()?.parse().ok()?));
        }
        let tid = fields.next()?.parse().ok()?;
        let ns = fields.next()?.parse().ok()?;
        // Addresses are printed with %d: kernel addresses are negative.
        let func = fields.next()?.parse::<i64>().ok()? as u64;
        match kind {
            "E" => Some(Record::Entry {
                tid,
                ns,
                func,
                comm: fields.next().unwrap_or(""),
            }),
            "R" => Some(Record::Return { tid, ns, func }),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: u64 = 0xffff_ffff_8100_0000;
    const B: u64 = 0xffff_ffff_8100_0100;
    const C: u64 = 0xffff_ffff_8100_0200;

    fn e(tid: u32, ns: u64, func: u64) -> String {
        format!("E {tid} {ns} {} nc\n", func as i64)
    }
    fn r(tid: u32, ns: u64, func: u64) -> String {
        format!("R {tid} {ns} {}\n", func as i64)
    }

    #[test]
    fn nested_calls_become_a_tree_with_durations() {
        let text = [
            e(7, 100, A),
            e(7, 110, B),
            r(7, 150, B),
            e(7, 160, C),
            r(7, 170, C),
            r(7, 200, A),
            "N 6\n".into(),
        ]
        .concat();
        let trace = parse(&text);
        let thread = &trace.threads[&7];
        assert_eq!(thread.comm, "nc");
        assert_eq!(thread.calls.len(), 1);
        let a = &thread.calls[0];
        assert_eq!((a.func, a.duration()), (A, Some(100)));
        let children: Vec<_> = a.children.iter().map(|c| (c.func, c.duration())).collect();
        assert_eq!(children, [(B, Some(40)), (C, Some(10))]);
        assert_eq!((trace.records, trace.missed()), (6, 0));
    }

    #[test]
    fn threads_interleave_without_mixing() {
        let text = [
            e(1, 1, A),
            e(2, 2, A),
            r(1, 3, A),
            e(2, 4, B),
            r(2, 5, B),
            r(2, 6, A),
        ]
        .concat();
        let trace = parse(&text);
        assert_eq!(trace.threads[&1].calls[0].duration(), Some(2));
        assert_eq!(trace.threads[&2].calls[0].children[0].func, B);
    }

    #[test]
    fn a_missed_return_closes_at_its_callers_return() {
        // B's return was lost: A's return closes both; B keeps no end.
        let text = [e(1, 10, A), e(1, 20, B), r(1, 40, A), "N 4\n".into()].concat();
        let trace = parse(&text);
        let a = &trace.threads[&1].calls[0];
        assert_eq!(a.end, Some(40));
        assert_eq!(a.children[0].end, None);
        assert_eq!(trace.missed(), 1);
    }

    #[test]
    fn a_return_from_before_recording_is_counted_and_dropped() {
        let text = [r(1, 5, C), e(1, 10, A), r(1, 20, A)].concat();
        let trace = parse(&text);
        assert_eq!(trace.unmatched_returns, 1);
        assert_eq!(trace.threads[&1].calls.len(), 1);
    }

    #[test]
    fn calls_open_at_the_end_are_kept_unfinished() {
        let trace = parse(&[e(1, 10, A), e(1, 20, B)].concat());
        let a = &trace.threads[&1].calls[0];
        assert_eq!((a.end, a.children[0].end), (None, None));
    }

    #[test]
    fn recursion_matches_the_innermost_call() {
        let text = [e(1, 1, A), e(1, 2, A), r(1, 3, A), r(1, 9, A)].concat();
        let a = &parse(&text).threads[&1].calls[0];
        assert_eq!(a.duration(), Some(8));
        assert_eq!(a.children[0].duration(), Some(1));
    }

    #[test]
    fn malformed_lines_are_kept_for_the_report() {
        let trace = parse("hello\nE 1 2\n");
        assert_eq!(trace.malformed, ["hello", "E 1 2"]);
    }
}
