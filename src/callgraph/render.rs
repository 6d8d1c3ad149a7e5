//! The output formats of `--callgraph`, from the per-thread call trees:
//! - text: an indented tree per thread with every call's duration, laid
//!   out like ftrace's function_graph tracer;
//! - dot: the aggregated graph (nodes with call counts, total and self
//!   time; edges with call counts), for graphviz;
//! - folded: `a;b;c COUNT` lines, for FlameGraph and speedscope.

use super::trace::{Call, Trace};
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;

/// Function names by address, resolved once for the whole trace.
pub type Names = HashMap<u64, String>;

fn name(names: &Names, func: u64) -> &str {
    names.get(&func).map_or("?", String::as_str)
}

/// function_graph's duration column: microseconds with three decimals.
fn micros(ns: u64) -> String {
    format!("{}.{:03} us", ns / 1000, ns % 1000)
}

pub fn text(trace: &Trace, names: &Names) -> String {
    let mut out = String::new();
    for (tid, thread) in &trace.threads {
        let _ = writeln!(out, "# thread {tid} ({})", thread.comm);
        let _ = writeln!(out, "#   DURATION     FUNCTION CALLS");
        for call in &thread.calls {
            text_call(&mut out, call, names, 1);
        }
        out.push('\n');
    }
    out
}

fn text_call(out: &mut String, call: &Call, names: &Names, depth: usize) {
    let indent = "  ".repeat(depth);
    let func = name(names, call.func);
    let duration = call.duration().map(micros).unwrap_or_default();
    if call.children.is_empty() {
        let end = if call.end.is_some() {
            ";"
        } else {
            "  /* unfinished */"
        };
        let _ = writeln!(out, "{duration:>14} | {indent}{func}(){end}");
        return;
    }
    let _ = writeln!(out, "{:>14} | {indent}{func}() {{", "");
    for child in &call.children {
        text_call(out, child, names, depth + 1);
    }
    let close = if call.end.is_some() {
        format!("}} /* {func} */")
    } else {
        format!("}} /* {func}, unfinished */")
    };
    let _ = writeln!(out, "{duration:>14} | {indent}{close}");
}

/// One function's totals over the whole trace.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct NodeStats {
    pub calls: u64,
    /// Sum of the durations of its finished calls.
    pub total_ns: u64,
    /// `total_ns` less the time of the finished calls they made.
    pub self_ns: u64,
}

/// The aggregated graph: per-function totals and caller -> callee counts,
/// keyed by name so that one function is one node.
#[derive(Debug, Default)]
pub struct Graph {
    pub nodes: BTreeMap<String, NodeStats>,
    pub edges: BTreeMap<(String, String), u64>,
}

pub fn graph(trace: &Trace, names: &Names) -> Graph {
    let mut graph = Graph::default();
    for thread in trace.threads.values() {
        for call in &thread.calls {
            add_call(&mut graph, call, None, names);
        }
    }
    graph
}

fn add_call(graph: &mut Graph, call: &Call, caller: Option<&str>, names: &Names) {
    let func = name(names, call.func);
    let children_ns: u64 = call.children.iter().filter_map(Call::duration).sum();
    let stats = graph.nodes.entry(func.to_string()).or_default();
    stats.calls += 1;
    if let Some(duration) = call.duration() {
        stats.total_ns += duration;
        stats.self_ns += duration.saturating_sub(children_ns);
    }
    if let Some(caller) = caller {
        *graph
            .edges
            .entry((caller.to_string(), func.to_string()))
            .or_default() += 1;
    }
    for child in &call.children {
        add_call(graph, child, Some(func), names);
    }
}

/// Graphviz source. Node labels carry calls, total and self time; edge
/// labels the number of calls; heavier edges are drawn thicker.
pub fn dot(graph: &Graph) -> String {
    let mut out = String::from(
        "digraph callgraph {\n  rankdir=LR;\n  node [shape=box, fontname=\"monospace\", fontsize=10];\n  edge [fontname=\"monospace\", fontsize=9];\n",
    );
    let heaviest = graph.edges.values().copied().max().unwrap_or(1).max(1);
    for (func, stats) in &graph.nodes {
        let _ = writeln!(
            out,
            "  {} [label=\"{}\\ncalls {}\\ntotal {}\\nself {}\"];",
            dot_id(func),
            dot_escape(func),
            stats.calls,
            micros(stats.total_ns),
            micros(stats.self_ns)
        );
    }
    for ((from, to), count) in &graph.edges {
        // 1 to 4 points wide, by the edge's share of the heaviest edge.
        let width = 1.0 + 3.0 * (*count as f64) / (heaviest as f64);
        let _ = writeln!(
            out,
            "  {} -> {} [label=\"{count}\", penwidth={width:.1}];",
            dot_id(from),
            dot_id(to)
        );
    }
    out.push_str("}\n");
    out
}

fn dot_id(func: &str) -> String {
    format!("\"{}\"", dot_escape(func))
}

fn dot_escape(text: &str) -> String {
    text.replace('\\', "\\\\").replace('"', "\\\"")
}

/// Folded stacks: each call counts once at its own stack, so a frame's
/// width in a flame graph is the number of calls made at or under it.
pub fn folded(trace: &Trace, names: &Names) -> String {
    let mut stacks: BTreeMap<String, u64> = BTreeMap::new();
    for thread in trace.threads.values() {
        for call in &thread.calls {
            fold(&mut stacks, call, "", names);
        }
    }
    let mut out = String::new();
    for (stack, count) in stacks {
        let _ = writeln!(out, "{stack} {count}");
    }
    out
}

fn fold(stacks: &mut BTreeMap<String, u64>, call: &Call, prefix: &str, names: &Names) {
    let func = name(names, call.func);
    let stack = if prefix.is_empty() {
        func.to_string()
    } else {
        format!("{prefix};{func}")
    };
    for child in &call.children {
        fold(stacks, child, &stack, names);
    }
    *stacks.entry(stack).or_default() += 1;
}

#[cfg(test)]
mod tests {
    use super::super::trace::parse;
    use super::*;

    fn names() -> Names {
        [
            (1, "tcp_sendmsg"),
            (2, "tcp_sendmsg_locked"),
            (3, "tcp_push"),
        ]
        .into_iter()
        .map(|(a, n)| (a, n.to_string()))
        .collect()
    }

    /// tcp_sendmsg calls tcp_sendmsg_locked, which calls tcp_push twice.
    const TRACE: &str = "E 9 1000 1 nc\nE 9 1100 2 nc\nE 9 1200 3 nc\nR 9 1300 3\nE 9 1400 3 nc\nR 9 1450 3\nR 9 1900 2\nR 9 2500 1\nN 8\n";

    #[test]
    fn text_is_an_indented_tree_with_durations() {
        insta::assert_snapshot!(text(&parse(TRACE), &names()));
    }

    #[test]
    fn graph_counts_calls_and_times() {
        let graph = graph(&parse(TRACE), &names());
        assert_eq!(
            graph.nodes["tcp_push"],
            NodeStats {
                calls: 2,
                total_ns: 150,
                self_ns: 150
            }
        );
        assert_eq!(
            graph.nodes["tcp_sendmsg_locked"],
            NodeStats {
                calls: 1,
                total_ns: 800,
                self_ns: 650
            }
        );
        assert_eq!(
            graph.edges[&("tcp_sendmsg_locked".into(), "tcp_push".into())],
            2
        );
        insta::assert_snapshot!(dot(&graph));
    }

    #[test]
    fn folded_stacks_count_each_call_once() {
        assert_eq!(
            folded(&parse(TRACE), &names()),
            "tcp_sendmsg 1\ntcp_sendmsg;tcp_sendmsg_locked 1\ntcp_sendmsg;tcp_sendmsg_locked;tcp_push 2\n"
        );
    }
}
