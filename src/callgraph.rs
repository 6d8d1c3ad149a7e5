//! `--callgraph PROBE`: which kernel functions run, in what order, per
//! thread; written as a function_graph-style tree, a graphviz graph (or an
//! SVG of it) or folded stacks.
//!
//! This is not a second tracer. It generates a stap-rs script (`-p2` shows
//! it), runs it like any other with its output in a temporary file, then
//! reads the records back and builds the trees (`callgraph/trace.rs`) and
//! the output (`callgraph/render.rs`).

mod render;
mod trace;

use crate::cli::Args;
use crate::frontend::{Failed, fail};
use crate::out::{errln, outln};
use std::path::{Path, PathBuf};
use std::process::Command;

/// What `-o FILE`'s extension asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Text,
    Dot,
    Svg,
    Folded,
}

impl Format {
    fn of(path: &Path) -> Option<Format> {
        match path.extension()?.to_str()? {
            "txt" => Some(Format::Text),
            "dot" | "gv" => Some(Format::Dot),
            "svg" => Some(Format::Svg),
            "folded" => Some(Format::Folded),
            _ => None,
        }
    }
}

pub fn run(args: &Args, pattern: &str) -> Result<(), Failed> {
    let probe = function_probe(pattern)?;
    check_function_probes(args)?;
    let trigger = args.trigger.as_deref().map(function_probe).transpose()?;
    let has_target = args.command.is_some() || args.target_pid.is_some();
    let script = generate(&probe, trigger.as_deref(), has_target);

    let mut inner = args.clone();
    inner.callgraph = None;
    inner.trigger = None;
    inner.script_text = Some(script.clone());
    if args.pass.is_some() || args.dump.is_some() {
        // Show what would run, then the pass the user asked for.
        outln!("# the script stap-rs --callgraph runs:\n{script}");
        inner.output = None;
        return crate::driver::run(&inner);
    }
    let out = args.output.clone().ok_or_else(|| {
        fail("--callgraph needs -o FILE: .txt (call tree), .dot or .svg (call graph), or .folded (folded stacks)")
    })?;
    let format = Format::of(&out).ok_or_else(|| {
        fail(format!(
            "--callgraph: cannot tell the format of `{}` from its extension: use .txt, .dot, .svg or .folded",
            out.display()
        ))
    })?;
    let records = TempFile::new("records");
    inner.output = Some(records.0.clone());
    crate::driver::run(&inner)?;

    let text = std::fs::read_to_string(&records.0)
        .map_err(|e| fail(format!("--callgraph: cannot read the recorded calls: {e}")))?;
    let trace = trace::parse(&text);
    let names = symbolize(&trace);
    write_output(&trace, &names, format, &out)?;
    report(&trace);
    Ok(())
}

/// One clear error up front when the kernel can probe no function at all,
/// instead of one per probe of the generated script.
fn check_function_probes(args: &Args) -> Result<(), Failed> {
    use stap_lang::kernel::{KernelFacts, Mechanism};
    use stap_runtime::kernel::BtfKernel;
    let kernel = match &args.btf {
        Some(path) => BtfKernel::open(path),
        None => BtfKernel::open_default(),
    };
    let Ok(kernel) = kernel else {
        // The run itself reports what is wrong with the kernel's BTF.
        return Ok(());
    };
    let mechanisms = kernel.mechanisms();
    if mechanisms.fentry || mechanisms.kprobes {
        return Ok(());
    }
    let reason = |m| {
        kernel
            .unavailable_reason(m)
            .unwrap_or_else(|| "not available".to_string())
    };
    Err(fail(format!(
        "--callgraph needs kernel function probes, and this kernel has neither mechanism: fentry/fexit: {}; kprobes: {}",
        reason(Mechanism::Fentry),
        reason(Mechanism::Kprobes)
    )))
}

/// The probe point without a `.call`/`.return` suffix, checked to be a
/// kernel function probe (the generated script adds both suffixes).
fn function_probe(point: &str) -> Result<String, Failed> {
    let point = point.trim();
    let base = point
        .strip_suffix(".call")
        .or_else(|| point.strip_suffix(".return"))
        .unwrap_or(point);
    let is_function = (base.starts_with("kernel.function(")
        || base.starts_with("module(")
        || base.starts_with("kprobe.function(")
        || base.starts_with("kprobe.module("))
        && base.ends_with(')');
    if !is_function {
        return Err(fail(format!(
            "--callgraph: `{point}` is not a kernel function probe point; use e.g. 'kernel.function(\"tcp_*\")' or 'module(\"ext4\").function(\"*\")'"
        )));
    }
    Ok(base.to_string())
}

/// The recording script. Every call and every return of `probe` prints a
/// record; `cg_records` counts them in the kernel so the end probe can say
/// how many were produced, and the host how many never arrived.
///
/// With a trigger, a per-thread depth counts the trigger calls that are
/// open, and only calls under one are recorded. The trigger's own probes
/// record its call and return, and the pattern's probes leave that
/// function out while it is the open trigger: probes on one function run in
/// no promised order (an fentry trigger and a kprobe_multi pattern, say),
/// so nothing may depend on which runs first.
fn generate(probe: &str, trigger: Option<&str>, has_target: bool) -> String {
    const ENTRY: &str =
        "cg_records++; printf(\"E %d %d %d %s\\n\", tid(), ktime_get_ns(), addr(), execname())";
    const RETURN: &str = "cg_records++; printf(\"R %d %d %d\\n\", tid(), ktime_get_ns(), addr())";
    let target = has_target.then_some("pid() == target()");
    // The body's lines, under an `if` when there are conditions.
    let guarded = |conditions: &[Option<&str>], body: &str| {
        let conditions: Vec<&str> = conditions.iter().flatten().copied().collect();
        let indent = if conditions.is_empty() { "  " } else { "    " };
        let lines: String = body.lines().map(|l| format!("{indent}{l}\n")).collect();
        match conditions.is_empty() {
            true => lines,
            false => format!("  if ({}) {{\n{lines}  }}\n", conditions.join(" && ")),
        }
    };
    let mut script = String::from("global cg_records\n");
    let mut under_trigger = None;
    if let Some(trigger) = trigger {
        script.push_str("global cg_depth, cg_trigger\n");
        script.push_str(&format!(
            "probe {trigger}.call {{\n{}}}\n",
            guarded(
                &[target],
                &format!("cg_depth[tid()]++; cg_trigger[tid()] = addr()\n{ENTRY}")
            )
        ));
        under_trigger = Some("cg_depth[tid()] > 0 && addr() != cg_trigger[tid()]");
    }
    script.push_str(&format!(
        "probe {probe}.call {{\n{}}}\n",
        guarded(&[target, under_trigger], ENTRY)
    ));
    script.push_str(&format!(
        "probe {probe}.return {{\n{}}}\n",
        guarded(&[target, under_trigger], RETURN)
    ));
    if let Some(trigger) = trigger {
        script.push_str(&format!(
            "probe {trigger}.return {{\n{}}}\n",
            guarded(
                &[Some("cg_depth[tid()] > 0")],
                &format!(
                    "{RETURN}\nif (cg_depth[tid()] > 1) cg_depth[tid()]--\nelse {{ delete cg_depth[tid()]; delete cg_trigger[tid()] }}"
                )
            )
        ));
    }
    script.push_str("probe end {\n  printf(\"N %d\\n\", cg_records)\n}\n");
    script
}

fn symbolize(trace: &trace::Trace) -> render::Names {
    fn collect(calls: &[trace::Call], out: &mut Vec<u64>) {
        for call in calls {
            out.push(call.func);
            collect(&call.children, out);
        }
    }
    let mut funcs = Vec::new();
    for thread in trace.threads.values() {
        collect(&thread.calls, &mut funcs);
    }
    funcs.sort_unstable();
    funcs.dedup();
    let mut symbols = stap_runtime::host::symbols::Symbols::new();
    funcs
        .into_iter()
        .map(|addr| (addr, symbols.name(addr)))
        .collect()
}

fn write_output(
    trace: &trace::Trace,
    names: &render::Names,
    format: Format,
    out: &Path,
) -> Result<(), Failed> {
    let write = |path: &Path, text: String| {
        std::fs::write(path, text)
            .map_err(|e| fail(format!("cannot write {}: {e}", path.display())))
    };
    match format {
        Format::Text => write(out, render::text(trace, names)),
        Format::Folded => write(out, render::folded(trace, names)),
        Format::Dot => write(out, render::dot(&render::graph(trace, names))),
        Format::Svg => {
            let dot_path = out.with_extension("dot");
            write(&dot_path, render::dot(&render::graph(trace, names)))?;
            match Command::new("dot")
                .arg("-Tsvg")
                .arg("-o")
                .arg(out)
                .arg(&dot_path)
                .status()
            {
                Ok(status) if status.success() => Ok(()),
                Ok(status) => Err(fail(format!(
                    "graphviz's dot failed ({status}) rendering {}; the graph is in {}",
                    out.display(),
                    dot_path.display()
                ))),
                Err(_) => {
                    errln!(
                        "WARNING: graphviz's `dot` is not installed: wrote {} instead; render it with `dot -Tsvg -o {} {}` (Debian package graphviz)",
                        dot_path.display(),
                        out.display(),
                        dot_path.display()
                    );
                    Ok(())
                }
            }
        }
    }
}

/// The summary on stderr, with the seed tools' "N events missed".
fn report(trace: &trace::Trace) {
    let calls: usize = trace.threads.values().map(|t| count(&t.calls)).sum();
    errln!(
        "callgraph: {calls} calls in {} threads; {} events missed",
        trace.threads.len(),
        trace.missed()
    );
    if trace.produced.is_none() {
        errln!(
            "WARNING: the run ended before its end probe: the number of missed events is unknown"
        );
    }
    if trace.unmatched_returns > 0 {
        errln!(
            "callgraph: {} returns from calls that began before recording (or whose entry was missed)",
            trace.unmatched_returns
        );
    }
    for line in trace.malformed.iter().take(5) {
        errln!("WARNING: not a call record: {line}");
    }
}

fn count(calls: &[trace::Call]) -> usize {
    calls.iter().map(|c| 1 + count(&c.children)).sum()
}

/// A file in the temporary directory, removed when dropped.
struct TempFile(PathBuf);

impl TempFile {
    fn new(what: &str) -> TempFile {
        TempFile(
            std::env::temp_dir().join(format!("stap-rs-callgraph-{}-{what}", std::process::id())),
        )
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generated_script_with_a_trigger_and_a_target() {
        let (Ok(probe), Ok(trigger)) = (
            function_probe("kernel.function(\"tcp_*\").call"),
            function_probe("kernel.function(\"tcp_sendmsg\")"),
        ) else {
            panic!("function probes are taken");
        };
        insta::assert_snapshot!(generate(&probe, Some(&trigger), true));
    }

    #[test]
    fn the_generated_script_records_everything_without_filters() {
        let Ok(probe) = function_probe("module(\"ext4\").function(\"*\")") else {
            panic!("module function probes are taken");
        };
        insta::assert_snapshot!(generate(&probe, None, false));
    }

    #[test]
    fn only_function_probes_are_taken() {
        assert!(function_probe("kernel.trace(\"sched_switch\")").is_err());
        assert!(function_probe("timer.s(1)").is_err());
    }

    #[test]
    fn the_format_comes_from_the_extension() {
        assert_eq!(Format::of(Path::new("g.svg")), Some(Format::Svg));
        assert_eq!(Format::of(Path::new("out.folded")), Some(Format::Folded));
        assert_eq!(Format::of(Path::new("g.txt")), Some(Format::Text));
        assert_eq!(Format::of(Path::new("g")), None);
    }
}
