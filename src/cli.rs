//! Command-line options, following stap(1)'s spelling where stap has one.

use clap::{Parser, ValueEnum};
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(
    name = "stap-rs",
    version,
    about = "A SystemTap-compatible tracer: runs stap scripts on the live kernel through eBPF",
    after_help = "Examples:\n  stap-rs -p2 examples/drops.stp\n  stap-rs -e 'probe begin { println(\"hi\") }' -p1\n  stap-rs -L 'kernel.trace(\"net:*\")'"
)]
pub struct Args {
    /// Script text to run instead of a script file.
    #[arg(short = 'e', value_name = "SCRIPT")]
    pub script_text: Option<String>,

    /// The script file (`-` reads stdin), then the script's arguments ($1, @1, ...).
    /// With -e, every positional is a script argument.
    #[arg(value_name = "SCRIPT [ARGS]", trailing_var_arg = true)]
    pub positional: Vec<String>,

    /// Stop after pass N: 1 parse, 2 elaborate, 3 lower to IR, 4 compile, 5 run.
    #[arg(short = 'p', value_name = "N", value_parser = clap::value_parser!(u8).range(1..=5))]
    pub pass: Option<u8>,

    /// Print one stage and stop.
    #[arg(long, value_enum, value_name = "STAGE")]
    pub dump: Option<DumpStage>,

    /// More output: pass lines and timings (repeat for more).
    #[arg(short = 'v', action = clap::ArgAction::Count)]
    pub verbose: u8,

    /// Set a global's initial value: -G name=value.
    #[arg(short = 'G', value_name = "NAME=VALUE", value_parser = parse_assignment)]
    pub globals: Vec<(String, String)>,

    /// Set a limit or macro: -D MAXSTRINGLEN=1024, -D MAXMAPENTRIES=10000, ...
    #[arg(short = 'D', value_name = "NAME=VALUE", value_parser = parse_define)]
    pub defines: Vec<(String, String)>,

    /// Also search DIR for tapsets.
    #[arg(short = 'I', value_name = "DIR")]
    pub include: Vec<PathBuf>,

    /// List the probe points that match PROBEPOINT.
    #[arg(short = 'l', value_name = "PROBEPOINT", conflicts_with = "list_vars")]
    pub list: Option<String>,

    /// List the probe points that match PROBEPOINT, with their variables and types.
    #[arg(short = 'L', value_name = "PROBEPOINT")]
    pub list_vars: Option<String>,

    /// Read kernel types from this BTF file instead of /sys/kernel/btf/vmlinux.
    #[arg(long, value_name = "FILE")]
    pub btf: Option<PathBuf>,

    /// How kernel.function probes attach: fentry/fexit or kprobes/kretprobes.
    #[arg(long, value_enum, default_value_t = KernelProbes::Auto)]
    pub kernel_probes: KernelProbes,

    /// How kernel.trace probes with BTF-typed arguments attach: raw
    /// tracepoints, or tp_btf (BTF-typed tracing programs).
    #[arg(long, value_enum, default_value_t = TracepointMechanism::RawTp)]
    pub tracepoint_mechanism: TracepointMechanism,

    /// Send the script's output to FILE.
    #[arg(short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// Run CMD, with target() set to its pid; exit when it exits.
    #[arg(short = 'c', value_name = "CMD")]
    pub command: Option<String>,

    /// Set target() to PID.
    #[arg(short = 'x', value_name = "PID")]
    pub target_pid: Option<i32>,

    /// Exit after SECONDS.
    #[arg(short = 'T', value_name = "SECONDS")]
    pub timeout: Option<f64>,

    /// Keep running after run-time errors in handlers.
    #[arg(long)]
    pub suppress_handler_errors: bool,

    /// Guru mode (writing kernel memory, embedded C): refused by stap-rs.
    #[arg(short = 'g')]
    pub guru: bool,

    /// Start the interactive session.
    #[arg(short = 'i')]
    pub interactive: bool,

    /// Test only: compile the first kernel probe with a deliberate
    /// out-of-bounds access so the verifier rejects it (the live tests use
    /// it to prove rejections name the script line). Hidden from --help.
    #[arg(long, hide = true)]
    pub test_verifier_reject: bool,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum DumpStage {
    /// The parsed program (same as -p1).
    Ast,
    /// The elaborated program with inferred types (same as -p2).
    Types,
    /// The IR (same as -p3).
    Ir,
    /// The BPF listing, annotated with script lines.
    Bpf,
    /// The Cranelift IR of host functions.
    Clif,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelProbes {
    /// fentry/fexit where the kernel allows it, kprobes otherwise.
    Auto,
    /// fentry/fexit only; an error where the kernel refuses them.
    Fentry,
    /// kprobes/kretprobes only; an error where the kernel has none.
    Kprobe,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum TracepointMechanism {
    /// BPF_PROG_TYPE_RAW_TRACEPOINT: no BTF needed at load time.
    #[value(name = "raw_tp")]
    RawTp,
    /// BPF_PROG_TYPE_TRACING attached to the btf_trace_NAME typedef.
    #[value(name = "tp_btf")]
    TpBtf,
}

fn parse_assignment(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((name, value)) if !name.is_empty() => Ok((name.to_string(), value.to_string())),
        _ => Err(format!("expected NAME=VALUE, got `{text}`")),
    }
}

/// `-D NAME` alone defines NAME as empty, as with a C compiler.
fn parse_define(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((name, value)) if !name.is_empty() => Ok((name.to_string(), value.to_string())),
        None if !text.is_empty() => Ok((text.to_string(), String::new())),
        _ => Err(format!("expected NAME[=VALUE], got `{text}`")),
    }
}
