//! Command-line options, following stap(1)'s spelling where stap has one.

use clap::{Parser, ValueEnum};
use std::path::PathBuf;

#[derive(Parser, Debug, Clone)]
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
    /// With -e, every positional is a script argument. As in stap (GNU
    /// getopt), options may follow them (`stap script.stp arg -T 1`);
    /// after `--`, everything is an argument.
    #[arg(value_name = "SCRIPT [ARGS]")]
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

    /// Exit after SECONDS (fractions allowed, at least 0.001).
    #[arg(short = 'T', value_name = "SECONDS", value_parser = parse_timeout)]
    pub timeout: Option<f64>,

    /// Ignore run-time errors in probe handlers, as if each handler were
    /// wrapped in `try { } catch { }`: the handler stops, nothing is
    /// printed or counted.
    #[arg(long)]
    pub suppress_handler_errors: bool,

    /// Guru mode. stap-rs still cannot run embedded C or write kernel
    /// memory, but then says so instead of asking for -g.
    #[arg(short = 'g')]
    pub guru: bool,

    /// Treat a context variable that cannot be resolved as 0 (or ""),
    /// with a warning, instead of failing.
    #[arg(long)]
    pub skip_badvars: bool,

    /// Suppress warnings.
    #[arg(short = 'w')]
    pub suppress_warnings: bool,

    /// Treat warnings as errors.
    #[arg(short = 'W')]
    pub warnings_as_errors: bool,

    /// stap(1)'s options that mean nothing for a BPF runtime: accepted,
    /// noted with -v (see `Ignored::notes`).
    #[command(flatten)]
    pub ignored: Ignored,

    /// Record the calls of the kernel functions PROBE matches, per thread,
    /// and write a call graph to -o FILE (.txt tree, .dot/.svg graph,
    /// .folded stacks), e.g. --callgraph 'kernel.function("tcp_*")'.
    #[arg(long, value_name = "PROBE")]
    pub callgraph: Option<String>,

    /// With --callgraph: record only calls made under this function probe.
    #[arg(long, value_name = "PROBE", requires = "callgraph")]
    pub trigger: Option<String>,

    /// Start the interactive session.
    #[arg(short = 'i')]
    pub interactive: bool,

    /// Output format: text (stap's, byte for byte) or json (one JSON
    /// object per line for every output event; docs/output.md).
    #[arg(short = 'f', long, value_enum, default_value_t = OutputFormat::Text)]
    pub format: OutputFormat,

    /// Serve the script's procfs probes (`probe prometheus`, `probe
    /// json_data`, `procfs("NAME")`) over HTTP at [ADDR:]PORT; the address
    /// defaults to 127.0.0.1.
    #[arg(long, value_name = "[ADDR:]PORT")]
    pub http: Option<String>,

    /// Allow PUT/POST to run procfs write probes (off by default).
    #[arg(long, requires = "http")]
    pub http_write: bool,

    /// Test only: compile the first kernel probe with a deliberate
    /// out-of-bounds access so the verifier rejects it (the live tests use
    /// it to prove rejections name the script line). Hidden from --help.
    #[arg(long, hide = true)]
    pub test_verifier_reject: bool,
}

/// stap(1)'s options that configure its kernel-module build, its
/// compile server or its caches. stap-rs builds no module and has no
/// server or cache, so they are accepted (a stap command line works
/// unchanged) and have no effect.
#[derive(clap::Args, Debug, Default, Clone)]
pub struct Ignored {
    /// Keep the build directory (stap -k): there is none.
    #[arg(short = 'k', hide = true)]
    keep_tmpdir: bool,
    /// Unoptimized translation (stap -u).
    #[arg(short = 'u', hide = true)]
    unoptimized: bool,
    /// Bulk per-CPU output files (stap -b).
    #[arg(short = 'b', hide = true)]
    bulk: bool,
    /// Per-probe timing statistics (stap -t).
    #[arg(short = 't', hide = true)]
    timing: bool,
    /// Prologue searching (stap -P).
    #[arg(short = 'P', hide = true)]
    prologue: bool,
    /// Flight-recorder mode (stap -F).
    #[arg(short = 'F', hide = true)]
    flight_recorder: bool,
    /// Trace buffer size in MB (stap -s NUM).
    #[arg(short = 's', value_name = "MB", hide = true)]
    buffer_mb: Option<String>,
    /// Output file switching (stap -S SIZE[,N]).
    #[arg(short = 'S', value_name = "SIZE[,N]", hide = true)]
    switch_size: Option<String>,
    /// Kernel module name (stap -m NAME).
    #[arg(short = 'm', value_name = "NAME", hide = true)]
    module_name: Option<String>,
    /// Kernel release or build tree (stap -r).
    #[arg(short = 'r', value_name = "RELEASE", hide = true)]
    release: Option<String>,
    /// Target architecture (stap -a).
    #[arg(short = 'a', value_name = "ARCH", hide = true)]
    arch: Option<String>,
    /// Runtime directory (stap -R).
    #[arg(short = 'R', value_name = "DIR", hide = true)]
    runtime_dir: Option<String>,
    /// Kbuild options (stap -B NAME=VALUE).
    #[arg(short = 'B', value_name = "NAME=VALUE", hide = true)]
    kbuild: Vec<String>,
    /// Extra objects whose symbols the module carries (stap -d OBJECT):
    /// stap-rs reads symbols on demand.
    #[arg(short = 'd', value_name = "OBJECT", hide = true)]
    symbols_of: Vec<String>,
    /// Symbols of shared libraries (stap --ldd).
    #[arg(long, hide = true)]
    ldd: bool,
    /// Symbols of every kernel module (stap --all-modules).
    #[arg(long, hide = true)]
    all_modules: bool,
    /// Lift stap's time limits on probe handlers.
    #[arg(long, hide = true)]
    suppress_time_limits: bool,
    /// The runtime (stap --runtime=kernel|dyninst|bpf): stap-rs always uses BPF.
    #[arg(long, value_name = "MODE", hide = true)]
    runtime: Option<String>,
    /// stap --bpf.
    #[arg(long, hide = true)]
    bpf: bool,
    /// stap --dyninst.
    #[arg(long, hide = true)]
    dyninst: bool,
    /// stap --compatible=VERSION.
    #[arg(long, value_name = "VERSION", hide = true)]
    compatible: Option<String>,
    /// stap --check-version.
    #[arg(long, hide = true)]
    check_version: bool,
    /// stap --clean-cache.
    #[arg(long, hide = true)]
    clean_cache: bool,
    /// stap --disable-cache.
    #[arg(long, hide = true)]
    disable_cache: bool,
    /// stap --poison-cache.
    #[arg(long, hide = true)]
    poison_cache: bool,
    /// stap --color[=WHEN] / --colour[=WHEN].
    #[arg(long, alias = "colour", value_name = "WHEN", num_args = 0..=1, require_equals = true, hide = true)]
    color: Option<Option<String>>,
    /// stap --privilege=stapdev|stapsys|stapusr.
    #[arg(long, value_name = "LEVEL", hide = true)]
    privilege: Option<String>,
    /// stap --unprivileged.
    #[arg(long, hide = true)]
    unprivileged: bool,
    /// stap --use-server[=HOST].
    #[arg(long, value_name = "HOST", num_args = 0..=1, require_equals = true, hide = true)]
    use_server: Option<Option<String>>,
    /// stap --use-server-on-error[=yes|no].
    #[arg(long, value_name = "WHEN", num_args = 0..=1, require_equals = true, hide = true)]
    use_server_on_error: Option<Option<String>>,
    /// stap --list-servers[=WHICH].
    #[arg(long, value_name = "WHICH", num_args = 0..=1, require_equals = true, hide = true)]
    list_servers: Option<Option<String>>,
    /// stap --trust-servers[=...].
    #[arg(long, value_name = "WHICH", num_args = 0..=1, require_equals = true, hide = true)]
    trust_servers: Option<Option<String>>,
    /// stap --remote=URL.
    #[arg(long, value_name = "URL", hide = true)]
    remote: Vec<String>,
    /// stap --remote-prefix.
    #[arg(long, hide = true)]
    remote_prefix: bool,
    /// stap --tmpdir=DIR.
    #[arg(long, value_name = "DIR", hide = true)]
    tmpdir: Option<String>,
    /// stap --download-debuginfo[=...].
    #[arg(long, value_name = "HOW", num_args = 0..=1, require_equals = true, hide = true)]
    download_debuginfo: Option<Option<String>>,
    /// stap --rlimit-as/cpu/nproc/stack/fsize=N.
    #[arg(long, value_name = "N", hide = true)]
    rlimit_as: Option<String>,
    #[arg(long, value_name = "N", hide = true)]
    rlimit_cpu: Option<String>,
    #[arg(long, value_name = "N", hide = true)]
    rlimit_nproc: Option<String>,
    #[arg(long, value_name = "N", hide = true)]
    rlimit_stack: Option<String>,
    #[arg(long, value_name = "N", hide = true)]
    rlimit_fsize: Option<String>,
    /// stap --sysroot=DIR.
    #[arg(long, value_name = "DIR", hide = true)]
    sysroot: Option<String>,
    /// stap --sysenv=VAR=VALUE.
    #[arg(long, value_name = "VAR=VALUE", hide = true)]
    sysenv: Vec<String>,
    /// stap --save-uprobes.
    #[arg(long, hide = true)]
    save_uprobes: bool,
    /// stap --target-namespaces=PID.
    #[arg(long, value_name = "PID", hide = true)]
    target_namespaces: Option<String>,
    /// stap --monitor[=INTERVAL].
    #[arg(long, value_name = "INTERVAL", num_args = 0..=1, require_equals = true, hide = true)]
    monitor: Option<Option<String>>,
    /// stap --prologue-searching[=WHEN].
    #[arg(long, value_name = "WHEN", num_args = 0..=1, require_equals = true, hide = true)]
    prologue_searching: Option<Option<String>>,
    /// stap --no-prologue-searching... and the module signing options.
    #[arg(long, value_name = "KEY", num_args = 0..=1, require_equals = true, hide = true)]
    sign_module: Option<Option<String>>,
    /// stap --modinfo NAME=VALUE.
    #[arg(long, value_name = "NAME=VALUE", hide = true)]
    modinfo: Vec<String>,
    /// stap --benchmark-sdt(-loops|-threads)=N.
    #[arg(long, value_name = "N", hide = true)]
    benchmark_sdt_loops: Option<String>,
    #[arg(long, value_name = "N", hide = true)]
    benchmark_sdt_threads: Option<String>,
    /// stap --dump-probe-types, --dump-probe-aliases, --dump-functions.
    #[arg(long, hide = true)]
    dump_probe_types: bool,
    #[arg(long, hide = true)]
    dump_probe_aliases: bool,
    #[arg(long, hide = true)]
    dump_functions: bool,
}

impl Ignored {
    /// One line per given option that has no effect here, for `-v`.
    pub fn notes(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut note = |given: bool, option: &str, why: &str| {
            if given {
                out.push(format!("{option} has no effect: {why}"));
            }
        };
        let module = "stap-rs builds no kernel module";
        note(self.keep_tmpdir, "-k", module);
        note(
            self.unoptimized,
            "-u",
            "stap-rs always optimizes the same way",
        );
        note(self.bulk, "-b", "output goes through one BPF ring buffer");
        note(self.timing, "-t", "per-probe timing is not collected");
        note(
            self.prologue || self.prologue_searching.is_some(),
            "-P/--prologue-searching",
            "probes use BTF, not DWARF prologues",
        );
        note(
            self.flight_recorder,
            "-F",
            "there is no flight-recorder mode",
        );
        note(
            self.buffer_mb.is_some(),
            "-s",
            "the ring buffer has a fixed size",
        );
        note(
            self.switch_size.is_some(),
            "-S",
            "output files are not switched",
        );
        note(self.module_name.is_some(), "-m", module);
        note(
            self.release.is_some(),
            "-r",
            "stap-rs compiles for the running kernel (use --btf FILE for other types)",
        );
        note(
            self.arch.is_some(),
            "-a",
            "stap-rs compiles for this machine",
        );
        note(self.runtime_dir.is_some(), "-R", module);
        note(!self.kbuild.is_empty(), "-B", module);
        note(
            !self.symbols_of.is_empty(),
            "-d",
            "symbols are read when needed",
        );
        note(self.ldd, "--ldd", "symbols are read when needed");
        note(
            self.all_modules,
            "--all-modules",
            "kernel symbols come from /proc/kallsyms",
        );
        note(
            self.suppress_time_limits,
            "--suppress-time-limits",
            "the BPF verifier bounds handlers, not a timer",
        );
        note(
            self.runtime.is_some() || self.bpf || self.dyninst,
            "--runtime/--bpf/--dyninst",
            "stap-rs always runs kernel probes as BPF",
        );
        note(
            self.compatible.is_some(),
            "--compatible",
            "stap-rs speaks one language version",
        );
        let cache = "stap-rs has no cache";
        note(
            self.check_version,
            "--check-version",
            "stap-rs speaks one language version",
        );
        note(
            self.clean_cache || self.disable_cache || self.poison_cache,
            "--*-cache",
            cache,
        );
        note(
            self.color.is_some(),
            "--color",
            "diagnostics are colored when stderr is a terminal",
        );
        note(
            self.privilege.is_some() || self.unprivileged,
            "--privilege/--unprivileged",
            "stap-rs runs as the user that starts it",
        );
        let server = "stap-rs has no compile server";
        note(
            self.use_server.is_some()
                || self.use_server_on_error.is_some()
                || self.list_servers.is_some()
                || self.trust_servers.is_some(),
            "--*-server*",
            server,
        );
        note(
            !self.remote.is_empty() || self.remote_prefix,
            "--remote",
            "stap-rs runs only on this machine",
        );
        note(self.tmpdir.is_some(), "--tmpdir", module);
        note(
            self.download_debuginfo.is_some(),
            "--download-debuginfo",
            "types come from BTF",
        );
        let rlimit = self.rlimit_as.is_some()
            || self.rlimit_cpu.is_some()
            || self.rlimit_nproc.is_some()
            || self.rlimit_stack.is_some()
            || self.rlimit_fsize.is_some();
        note(rlimit, "--rlimit-*", "they limit stap's compiler processes");
        note(
            self.sysroot.is_some() || !self.sysenv.is_empty(),
            "--sysroot/--sysenv",
            "stap-rs probes this system",
        );
        note(self.save_uprobes, "--save-uprobes", module);
        note(
            self.target_namespaces.is_some(),
            "--target-namespaces",
            "not implemented",
        );
        note(
            self.monitor.is_some(),
            "--monitor",
            "there is no monitor mode",
        );
        note(
            self.sign_module.is_some() || !self.modinfo.is_empty(),
            "--sign-module/--modinfo",
            module,
        );
        note(
            self.benchmark_sdt_loops.is_some() || self.benchmark_sdt_threads.is_some(),
            "--benchmark-sdt-*",
            "not implemented",
        );
        note(
            self.dump_probe_types || self.dump_probe_aliases || self.dump_functions,
            "--dump-*",
            "use -l/-L and docs/tapsets.md",
        );
        out
    }
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
pub enum OutputFormat {
    /// stap's text.
    Text,
    /// Newline-delimited JSON: one object per output event.
    Json,
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

/// `-T`: as stap, a number of seconds of at least one millisecond (`-T 0`
/// is refused, not "no timeout").
fn parse_timeout(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(seconds) if seconds.is_finite() && seconds * 1000.0 >= 1.0 && seconds <= 1e9 => {
            Ok(seconds)
        }
        _ => Err(format!(
            "invalid timeout interval `{text}`: expected seconds, at least 0.001"
        )),
    }
}
