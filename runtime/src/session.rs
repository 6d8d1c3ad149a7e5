//! The run (pass 5): load and attach the kernel half, run the host half,
//! and carry events between them until the session ends.
//!
//! Order, as in stap:
//! 1. `-c CMD` is forked first but held before `exec`, so `target()` is known.
//! 2. Maps and programs are loaded; the Control map is written with the run
//!    flag off, `target()` and the wall-clock offset.
//! 3. Every kernel probe is attached; its handler is inert (run flag 0).
//! 4. Begin probes run on the host, in `begin(N)` order.
//! 5. The run flag goes to 1 (kernel handlers go live), the ready callback
//!    fires (the driver prints `Pass 5: starting run.`), the command is
//!    released.
//! 6. The event loop: poll(2) over the ring buffer, one timerfd per host
//!    timer, a signalfd and the command's pidfd, until `exit()`, a signal,
//!    `-T`, the command's exit, or too many errors. A record written into
//!    an empty ring wakes the loop (the kernel's adaptive wakeup); after a
//!    drain that found records the ring is left out of the poll for
//!    [`RING_BATCH_MS`], so a busy ring is read in batches.
//! 7. The run flag goes back to 0, the ring buffer is drained, end probes run
//!    (skipped after an error ending, where error probes ran instead), every
//!    probe is detached, and the error/skip/loss warnings are printed.
//!
//! The interactive session runs the same steps through [`run_live`], against
//! a [`KernelState`] that outlives each host program: only the new input's
//! kernel probes are loaded and attached, the run flag stays set while one
//! host program replaces another, and every generation's ring buffer is
//! polled (see `session/live.rs`).
//!
//! The Control map's value layout is `stap_lang::bpf::maps` (`u64` slots:
//! the run flag, realtime minus monotonic in ns for `gettimeofday_*`, and
//! `target()`):
//! the session writes it, kernel handlers read it.

pub mod child;
pub mod live;
mod maps;
pub mod procfs;
mod signals;
mod timers;

use std::collections::BTreeMap;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;
use std::rc::Rc;
use std::time::Duration;

use stap_lang::bpf::maps as bpf_maps;
use stap_lang::bpf::records::{self, Arg, RecordBody, STANDALONE_STREAM};
use stap_lang::bpf::{MapRole, Object};
use stap_lang::ir::{self, FormatId, Op, PrintArg, ProbeHandler, SymbolText};
use stap_lang::ir::{GlobalId, ProbeKind};
use stap_lang::printf::{self, Piece};
use stap_lang::source::{SourceMap, Span};

use crate::attach::{self, AttachError};
use crate::host::value::Value;
use crate::host::{
    Format, HostRuntime, Level, Output, RuntimeError, Summary, builtins, hist, json,
};
use crate::load::{self, LoadError, Loaded};
use crate::ringbuf::RingBuf;
use crate::sys;
use child::TargetCommand;
pub use live::KernelState;
pub use procfs::HttpSettings;
use signals::StopSignals;
use timers::{HostTimer, clock_ns, monotonic_ns};

/// What the command line asks of the run.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    /// `-T SECONDS`.
    pub timeout: Option<Duration>,
    /// `-o FILE`; stdout otherwise.
    pub output: Option<PathBuf>,
    /// `-c CMD`.
    pub command: Option<String>,
    /// `-x PID`.
    pub target_pid: Option<i32>,
    /// Errors are counted but never end the session (the interactive
    /// session, `--suppress-handler-errors`).
    pub suppress_errors: bool,
    /// `--suppress-handler-errors`: errors are not printed either, as if
    /// every handler were in `try { } catch { }` (the count still shows
    /// at the end).
    pub quiet_errors: bool,
    /// `-v`: report what a multi-function probe attached and skipped.
    pub verbose: bool,
    /// `--http`: where procfs probes are served.
    pub http: Option<HttpSettings>,
    /// `--format`: stap's text or JSON lines.
    pub format: Format,
    /// Feed stdin to `input.char`/`input.line` (`procfs("__stdin").write`)
    /// probes; off in the interactive session, whose stdin is the prompt.
    pub stdin_input: bool,
}

/// The two compiled halves of one script.
pub struct Compiled<'a> {
    pub module: &'a ir::Module,
    pub object: &'a Object,
    /// Runs host probe N (the JIT-compiled `jit::HostProgram::run_probe`).
    pub host: &'a dyn Fn(usize, &mut HostRuntime) -> Result<(), RuntimeError>,
    /// For `near ... at file:line:col` in run-time error messages.
    pub sources: &'a SourceMap,
}

#[derive(Debug)]
pub enum SessionError {
    /// A step before the probes went live failed (output file, fork, ...).
    Setup(String),
    Load(LoadError),
    Attach(AttachError),
}

impl std::fmt::Display for SessionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SessionError::Setup(what) => f.write_str(what),
            SessionError::Load(e) => write!(f, "{e}"),
            SessionError::Attach(e) => write!(f, "{e}"),
        }
    }
}

/// Turns an I/O failure before the run into a [`SessionError::Setup`].
fn setup(what: &str) -> impl FnOnce(io::Error) -> SessionError + '_ {
    move |e| SessionError::Setup(format!("{what}: {e}"))
}

/// How a session that ran ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    pub errors: u64,
    /// The session ended because of run-time errors (exit status 1).
    pub failed: bool,
}

/// What an embedding driver (the interactive session) may do at fixed
/// points of a run. The defaults are a plain `stap-rs SCRIPT` run.
pub trait Hooks {
    /// The maps are loaded and attached to the globals, before any begin
    /// probe: the place to restore values kept from an earlier run into
    /// the globals `fresh` says are new (host tables and new maps; a shared
    /// map already holds its values).
    fn loaded(&mut self, _runtime: &mut HostRuntime, _fresh: &dyn Fn(GlobalId) -> bool) {}
    /// The programs are loaded; nothing is attached yet. An error stops
    /// the session here, with nothing attached: the place to wait for work
    /// that overlapped loading (the driver's host JIT).
    fn before_attach(&mut self) -> Result<(), String> {
        Ok(())
    }
    /// Whether begin probe N (an index into the module's probes) runs.
    fn run_begin(&self, _probe: usize) -> bool {
        true
    }
    /// How often [`Hooks::poll`] is called while the event loop waits.
    fn poll_every(&self) -> Option<Duration> {
        None
    }
    /// Called from the event loop; `true` ends the session. `kernel` is the
    /// interactive session's kernel half.
    fn poll(&mut self, _runtime: &mut HostRuntime, _kernel: Option<&mut KernelState>) -> bool {
        false
    }
    /// The session is ending; returns whether end probes run. The place to
    /// save global values. In a live run (see [`run_live`]) `false` also
    /// keeps the kernel probes running, for the host program that follows.
    fn ending(&mut self, _runtime: &mut HostRuntime) -> bool {
        true
    }
}

/// The hooks of a plain run.
struct NoHooks;

impl Hooks for NoHooks {}

/// Runs the session to its end. `ready` is called once every probe is
/// attached and live.
pub fn run(
    compiled: &Compiled<'_>,
    settings: &Settings,
    ready: &mut dyn FnMut(),
) -> Result<Outcome, SessionError> {
    run_with_hooks(compiled, settings, ready, &mut NoHooks)
}

/// [`run`], with an embedding driver's [`Hooks`].
pub fn run_with_hooks(
    compiled: &Compiled<'_>,
    settings: &Settings,
    ready: &mut dyn FnMut(),
    hooks: &mut dyn Hooks,
) -> Result<Outcome, SessionError> {
    let output = match &settings.output {
        Some(path) => Output::file(path).map_err(setup(&format!(
            "cannot open output file '{}'",
            path.display()
        )))?,
        None => Output::stdout(),
    }
    .with_format(settings.format);
    let mut command = match &settings.command {
        Some(text) => Some(
            TargetCommand::spawn_held(text)
                .map_err(setup(&format!("cannot start the command '{text}'")))?,
        ),
        None => None,
    };
    let target = command
        .as_ref()
        .map(TargetCommand::pid)
        .or(settings.target_pid)
        .unwrap_or(0);

    let object = compiled.object;
    let loading = std::time::Instant::now();
    let loaded = load::load(object).map_err(SessionError::Load)?;
    let load_ms = loading.elapsed().as_millis();
    let control = match find_map(object, &loaded, |r| matches!(r, MapRole::Control)) {
        Some((fd, value_size)) => Some(Control::new(fd, value_size, target)?),
        None => None,
    };
    if let Some(control) = &control {
        control
            .write(false)
            .map_err(setup("cannot write the Control map"))?;
    }
    let mut feeds = Vec::new();
    if let Some((fd, _)) = find_map(object, &loaded, |r| matches!(r, MapRole::Events)) {
        feeds.push(Feed::new(
            fd,
            events_size(object),
            compiled.module,
            compiled.sources,
        )?);
    }
    let mut runtime = HostRuntime::new(compiled.module, output);
    runtime.target = i64::from(target);
    let ops = Rc::new(maps::SysMapOps::new());
    for (spec, fd) in object.maps.iter().zip(&loaded.maps) {
        if let MapRole::Global(id) = spec.role {
            runtime
                .globals
                .attach_kernel_map(id, fd.as_raw_fd(), ops.clone())
                .map_err(|e| SessionError::Setup(format!("cannot set up global: {e}")))?;
        }
    }
    // Blocked before any thread starts, so threads inherit the mask and
    // SIGINT/SIGTERM reach only the signalfd (else the default action
    // kills the process from whichever thread the kernel picks).
    let signals = StopSignals::block().map_err(setup("cannot block signals"))?;
    if uses_symbols(compiled.module) {
        // Reading /proc/kallsyms takes tens of milliseconds: overlap it
        // with attaching rather than delaying start-up or the first event.
        runtime.symbols.preload();
    }
    // After the signal mask, so its threads inherit it.
    let http = procfs::start(compiled.module, settings.http.as_ref())?;
    hooks.loaded(&mut runtime, &|_| true);
    hooks.before_attach().map_err(SessionError::Setup)?;
    let attaching = std::time::Instant::now();
    let mut attached = attach::attach(object, &loaded).map_err(SessionError::Attach)?;
    if settings.verbose {
        // Where start-up goes with hundreds of kprobes (docs/callgraph.md).
        crate::stop::stderr_line(&format!(
            "Pass 5: loaded {} BPF programs in {load_ms}real ms, attached them in {}real ms.",
            object.programs.len(),
            attaching.elapsed().as_millis()
        ));
    }
    report_function_sets(&attached, settings.verbose);

    let mut session = Session {
        compiled,
        settings,
        control,
        sampling: std::mem::take(&mut attached.sampling),
        runtime,
        feeds,
        errors: 0,
        error_ending: false,
        ending: false,
        hooks,
        kernel: None,
        hold_output: false,
        run_failed: false,
        output_failed: false,
        http,
        held: BTreeMap::new(),
        partial_lost: 0,
    };
    session.start(ready, command.as_mut(), &signals);
    session.finish();
    let counters = find_map(object, &loaded, |r| matches!(r, MapRole::Counters));
    let skipped = attached.skipped() + read_counter(counters, bpf_maps::COUNTER_SKIPPED);
    let lost = read_counter(counters, bpf_maps::COUNTER_LOST_EVENTS) + session.partial_lost;
    // The handlers are off and the output flushed: the kernel's part of
    // detaching need not delay the exit.
    attached.detach_in_background();
    let summary = Summary {
        errors: session.errors,
        skipped,
        lost,
        failed: session.error_ending || session.run_failed,
    };
    report_losses(&mut session.runtime.output, summary);
    drop(signals);
    Ok(Outcome {
        errors: session.errors,
        failed: session.error_ending || session.run_failed,
    })
}

/// A wildcard's functions that the kernel would not probe are skipped, not
/// fatal: always counted, named with `-v`.
fn report_function_sets(attached: &attach::Attached, verbose: bool) {
    for set in &attached.function_sets {
        if verbose {
            crate::stop::stderr_line(&format!(
                "{}: {} functions attached ({}), {} skipped",
                set.probe,
                set.attached,
                set.mechanism,
                set.skipped.len()
            ));
            for (function, reason) in &set.skipped {
                crate::stop::stderr_line(&format!("  skipped {function}: {reason}"));
            }
        } else if !set.skipped.is_empty() {
            crate::stop::stderr_line(&format!(
                "WARNING: {}: {} functions could not be probed (-v names them)",
                set.probe,
                set.skipped.len()
            ));
        }
    }
}

/// stap's closing warnings, then (JSON) the `end` event.
fn report_losses(output: &mut Output, s: Summary) {
    let dropped = crate::stop::dropped();
    if dropped > 0 {
        let message =
            format!("{dropped} bytes of output dropped: the output was not read after the stop");
        output.notice(
            Level::Warning,
            "output_dropped",
            &message,
            &[("dropped", dropped.to_string())],
        );
    }
    if s.errors > 0 || s.skipped > 0 {
        let message = format!(
            "Number of errors: {}, skipped probes: {}",
            s.errors, s.skipped
        );
        output.notice(
            Level::Warning,
            "errors_and_skipped",
            &message,
            &[
                ("errors", s.errors.to_string()),
                ("skipped", s.skipped.to_string()),
            ],
        );
    }
    if s.lost > 0 {
        let message = format!("{} events lost: the ring buffer was full", s.lost);
        output.notice(
            Level::Warning,
            "lost_events",
            &message,
            &[("lost", s.lost.to_string())],
        );
    }
    output.end(s);
}

/// A generation of the interactive session: the module and sources its
/// kernel records are decoded with.
#[derive(Clone, Copy)]
pub struct Generation<'a> {
    pub module: &'a ir::Module,
    pub sources: &'a SourceMap,
}

/// One host program of the interactive session, against its long-lived
/// kernel half: the programs `chosen` picks (the new input's kernel
/// probes) are loaded and attached next to those already running
/// ([`KernelState::add`]), which stay attached; then begin probes, the
/// event loop over every generation's ring buffer, and the ending. The
/// run is generation `older.len()`; `older[g]` decodes generation g's
/// records. No `-c`/`-x`/`-o`/`-T` here.
pub fn run_live(
    compiled: &Compiled<'_>,
    kernel: &mut KernelState,
    older: &[Generation<'_>],
    chosen: &dyn Fn(usize) -> bool,
    ready: &mut dyn FnMut(),
    hooks: &mut dyn Hooks,
) -> Result<(Outcome, live::Added), SessionError> {
    let generation = older.len();
    let added = kernel
        .add(compiled.object, compiled.module, generation, chosen)
        .map_err(|e| match e {
            live::AddError::Load(e) => SessionError::Load(e),
            live::AddError::Attach(e) => SessionError::Attach(e),
            live::AddError::Layout(what) => SessionError::Setup(what),
        })?;
    let control = match kernel.control() {
        Some((fd, value_size)) => Some(Control::new(fd, value_size, 0)?),
        None => None,
    };
    if let Some(control) = &control
        && !kernel.running
    {
        control
            .write(false)
            .map_err(setup("cannot write the Control map"))?;
    }
    let this = Generation {
        module: compiled.module,
        sources: compiled.sources,
    };
    let mut feeds = Vec::new();
    for ring in &kernel.rings {
        let decode = older.get(ring.generation).copied().unwrap_or(this);
        feeds.push(Feed::new(
            ring.fd.as_fd(),
            ring.size,
            decode.module,
            decode.sources,
        )?);
    }
    let mut runtime = HostRuntime::new(compiled.module, Output::stdout());
    let ops = Rc::new(maps::SysMapOps::new());
    for id in (0..compiled.module.globals.len()).map(|i| GlobalId(i as u32)) {
        if let Some(fd) = kernel.global_fd(&compiled.module.global(id).name)
            && compiled.module.global(id).kernel
        {
            let attached = if added.fresh.contains(&id) {
                runtime.globals.attach_kernel_map(id, fd, ops.clone())
            } else {
                runtime
                    .globals
                    .attach_shared_kernel_map(id, fd, ops.clone())
            };
            attached.map_err(|e| SessionError::Setup(format!("cannot set up global: {e}")))?;
        }
    }
    let signals = StopSignals::block().map_err(setup("cannot block signals"))?;
    if uses_symbols(compiled.module) || !older.is_empty() {
        runtime.symbols.preload();
    }
    let module = compiled.module;
    hooks.loaded(&mut runtime, &|id| {
        !module.global(id).kernel || added.fresh.contains(&id)
    });
    let mut session = Session {
        compiled,
        settings: &LIVE_SETTINGS,
        control,
        // The interactive kernel half enables its events as they attach.
        sampling: attach::SamplingEvents::default(),
        runtime,
        feeds,
        errors: 0,
        error_ending: false,
        ending: false,
        hooks,
        kernel: Some(kernel),
        hold_output: false,
        run_failed: false,
        output_failed: false,
        http: None,
        held: BTreeMap::new(),
        partial_lost: 0,
    };
    session.start(ready, None, &signals);
    let over = session.finish();
    let errors = session.errors;
    let failed = session.error_ending || session.run_failed;
    let mut output = std::mem::replace(&mut session.runtime.output, Output::buffer());
    let partial_lost = session.partial_lost;
    drop(session);
    kernel.running = !over;
    if over {
        let skipped = kernel.skipped() + read_counter(kernel.counters(), bpf_maps::COUNTER_SKIPPED);
        let lost = read_counter(kernel.counters(), bpf_maps::COUNTER_LOST_EVENTS) + partial_lost;
        let summary = Summary {
            errors,
            skipped,
            lost,
            failed,
        };
        report_losses(&mut output, summary);
    }
    drop(signals);
    Ok((Outcome { errors, failed }, added))
}

static LIVE_SETTINGS: Settings = Settings {
    timeout: None,
    output: None,
    command: None,
    target_pid: None,
    suppress_errors: true,
    quiet_errors: false,
    verbose: false,
    http: None,
    format: Format::Text,
    stdin_input: false,
};

/// One ring buffer and the module its records are decoded with.
struct Feed<'a> {
    ring: RingBuf,
    /// Its own duplicate of the map fd, to poll.
    fd: OwnedFd,
    module: &'a ir::Module,
    sources: &'a SourceMap,
    /// Parsed printf formats, by `FormatId`, parsed on first use.
    formats: Vec<Option<Vec<Piece>>>,
    /// The same formats' argument layouts, for the decoder.
    shapes: records::FormatShapes,
    /// Kept between drains so a busy ring's batches and formatted lines
    /// reuse their allocations (bench/analysis.md, "printing").
    batch: Vec<u8>,
    ends: Vec<usize>,
    text: Vec<u8>,
}

impl<'a> Feed<'a> {
    fn new(
        fd: BorrowedFd<'_>,
        size: u32,
        module: &'a ir::Module,
        sources: &'a SourceMap,
    ) -> Result<Feed<'a>, SessionError> {
        Ok(Feed {
            ring: RingBuf::new(fd, size).map_err(setup("cannot map the ring buffer"))?,
            fd: fd
                .try_clone_to_owned()
                .map_err(setup("cannot duplicate the ring buffer fd"))?,
            module,
            sources,
            formats: vec![None; module.formats.len()],
            shapes: records::FormatShapes::default(),
            batch: Vec::new(),
            ends: Vec::new(),
            text: Vec::new(),
        })
    }
}

struct Session<'a> {
    compiled: &'a Compiled<'a>,
    settings: &'a Settings,
    /// The Control map, to start and stop kernel handlers.
    control: Option<Control>,
    /// Sampling perf events, switched on and off with the kernel handlers.
    sampling: attach::SamplingEvents,
    runtime: HostRuntime,
    feeds: Vec<Feed<'a>>,
    errors: u64,
    /// Ending because of errors: error probes run instead of end probes.
    error_ending: bool,
    ending: bool,
    hooks: &'a mut dyn Hooks,
    /// The interactive session's kernel half (a live run).
    kernel: Option<&'a mut KernelState>,
    /// Begin probes are running: their output waits for the kernel side.
    hold_output: bool,
    /// The output could not be written, or the `-c` command failed: the run
    /// fails (exit status 1) without being an error ending.
    run_failed: bool,
    /// A write to the output failed (reported once).
    output_failed: bool,
    /// Serves procfs probes (`--http`), if the script has any.
    http: Option<crate::http::Server>,
    /// Records of handler runs still going, by (feed, stream), with the
    /// run's number: a run's output is handled as one unit when its last
    /// record arrives (records.rs, "one unit per handler run").
    held: BTreeMap<(usize, u32), HeldUnit>,
    /// Records of units dropped whole because one of their records was
    /// lost (counted with the kernel's lost events).
    partial_lost: u64,
}

impl Session<'_> {
    /// Begin probes, kernel handlers live, the event loop.
    fn start(
        &mut self,
        ready: &mut dyn FnMut(),
        mut command: Option<&mut TargetCommand>,
        signals: &StopSignals,
    ) {
        let begins: Vec<bool> = (0..self.compiled.module.probes.len())
            .map(|i| self.hooks.run_begin(i))
            .collect();
        // Begin output (often a READY line) is held until the kernel
        // handlers are live, so a reader that acts on it misses no event.
        self.hold_output = true;
        self.run_probes(|i, kind| matches!(kind, ProbeKind::Begin { .. }) && begins[i]);
        // Every sampling event starts its period now, together.
        if let Err(e) = self.sampling.enable() {
            self.stop_with_warning(&format!("cannot start the perf events: {e}"));
        }
        if let Some(control) = &self.control
            && let Err(e) = control.write(true)
        {
            self.stop_with_warning(&format!("cannot start the kernel probes: {e}"));
        }
        self.hold_output = false;
        self.flush_output();
        // After the begin output they follow.
        self.start_commands();
        ready();
        if let Some(command) = command.as_deref_mut() {
            command.release();
        }
        if !self.ending {
            self.event_loop(signals, command);
        }
    }

    /// Handlers off, then whatever they wrote before that, then end (or
    /// error) probes. A live run whose [`Hooks::ending`] says no leaves the
    /// handlers running. Returns whether the run is over.
    fn finish(&mut self) -> bool {
        let live = self.kernel.is_some();
        if !live {
            self.stop_kernel();
        }
        self.drain_all();
        self.flush_held();
        let run_end = self.hooks.ending(&mut self.runtime);
        let over = run_end || self.error_ending;
        if live && over {
            self.stop_kernel();
            self.drain_all();
            self.flush_held();
        }
        // End probes run in full after a first stop signal or `-T`.
        crate::stop::ending();
        if self.error_ending {
            self.run_probes(|_, kind| matches!(kind, ProbeKind::Error { .. }));
        } else if run_end && !self.runtime.aborted {
            // abort() ends the session without end probes.
            self.run_probes(|_, kind| matches!(kind, ProbeKind::End { .. }));
        }
        self.flush_output();
        over
    }

    fn stop_kernel(&self) {
        if let Some(control) = &self.control {
            let _ = control.write(false);
        }
        self.sampling.disable();
    }

    fn drain_all(&mut self) {
        for feed in 0..self.feeds.len() {
            self.drain(feed);
        }
    }

    /// Runs the host probes of one family in stap's order (`begin(N)`,
    /// `end(N)`, `error(N)` by N, then by position in the script).
    fn run_probes(&mut self, family: impl Fn(usize, &ProbeKind) -> bool) {
        let mut chosen: Vec<(i64, usize)> = self
            .compiled
            .module
            .probes
            .iter()
            .enumerate()
            .filter(|(i, p)| family(*i, &p.kind))
            .map(|(i, p)| (order_of(p), i))
            .collect();
        chosen.sort();
        let errors_before = self.error_ending;
        for (_, probe) in chosen {
            // A begin or end probe that fails past MAXERRORS stops the
            // rest of its family; error probes all run.
            if self.error_ending && !errors_before {
                break;
            }
            // A third stop signal abandons the ending (staprun's forced
            // exit): no further end probe starts.
            if self.ending && crate::stop::cut_requested() {
                break;
            }
            self.run_host_probe(probe);
        }
    }

    fn run_host_probe(&mut self, probe: usize) {
        if let Err(error) = (self.compiled.host)(probe, &mut self.runtime)
            && error != RuntimeError::Stopped
        {
            // Where the failing operation is, else the probe.
            let sources = self.compiled.sources;
            let span = match self.runtime.error_span.take() {
                Some(span) if error == RuntimeError::DivisionByZero => {
                    division_operator(sources, span)
                }
                Some(span) => span,
                None => self.compiled.module.probes[probe].span,
            };
            self.report_error(&error.to_string(), Some((sources, span)));
        }
        if !self.hold_output {
            self.flush_output();
            self.start_commands();
        }
        if self.runtime.exit_requested {
            self.ending = true;
        }
    }

    /// Prints a run-time error in stap's wording and counts it; past
    /// MAXERRORS the session ends with error probes instead of end probes.
    fn report_error(&mut self, message: &str, at: Option<(&SourceMap, Span)>) {
        let _ = self.runtime.output.flush();
        self.errors += 1;
        // Past MAXERRORS the run is ending: errors still in flight (other
        // CPUs, events already in the ring buffer) are counted in the final
        // "Number of errors", not printed one by one.
        let past_limit = self.errors > self.compiled.module.limits.max_errors.saturating_add(1);
        // --suppress-handler-errors: quiet, as if in `try { } catch { }`;
        // the count still shows at the end.
        if !self.settings.quiet_errors && (self.settings.suppress_errors || !past_limit) {
            match at {
                Some((sources, span)) => {
                    let near = near(sources, span);
                    let line = format!("{message} {near}");
                    let extra = [
                        ("error", json::string(message.as_bytes())),
                        ("location", json::string(sources.location(span).as_bytes())),
                    ];
                    self.runtime
                        .output
                        .notice(Level::Error, "runtime", &line, &extra);
                }
                None => self
                    .runtime
                    .output
                    .notice(Level::Error, "runtime", message, &[]),
            }
        }
        if !self.settings.suppress_errors && self.errors > self.compiled.module.limits.max_errors {
            self.error_ending = true;
            self.ending = true;
        }
    }

    /// Output that cannot be written is lost data: the run ends, and fails.
    fn output_error(&mut self, error: &io::Error) {
        // The reader of stdout has gone (`stap-rs ... | head`): it wants no
        // more output, so the run ends as a stop signal would end it,
        // quietly and successfully, as a C program killed by SIGPIPE does.
        if error.kind() == io::ErrorKind::BrokenPipe {
            self.output_failed = true;
            self.ending = true;
            return;
        }
        if !self.output_failed {
            if error.kind() == io::ErrorKind::WouldBlock {
                crate::stop::stderr_line(&format!("WARNING: output dropped from here on: {error}"));
            } else {
                crate::stop::stderr_line(&format!("ERROR: cannot write output: {error}"));
            }
        }
        self.output_failed = true;
        self.run_failed = true;
        self.ending = true;
    }

    fn stop_with_warning(&mut self, message: &str) {
        self.runtime
            .output
            .notice(Level::Warning, "session", message, &[]);
        self.ending = true;
    }

    fn event_loop(&mut self, signals: &StopSignals, mut command: Option<&mut TargetCommand>) {
        let start = monotonic_ns();
        let deadline = self
            .settings
            .timeout
            .map(|t| start.saturating_add(u64::try_from(t.as_nanos()).unwrap_or(u64::MAX)));
        let mut timers = Vec::new();
        for (i, probe) in self.compiled.module.probes.iter().enumerate() {
            if let ProbeKind::HostTimer {
                period_ns,
                randomize_ns,
            } = probe.kind
            {
                match HostTimer::new(i, period_ns, randomize_ns, start) {
                    Ok(timer) => timers.push(timer),
                    Err(e) => {
                        return self.stop_with_warning(&format!("cannot create a timer: {e}"));
                    }
                }
            }
        }
        // Fixed slots first, then one per ring buffer, then one per timer;
        // absent ones get fd -1, which poll(2) ignores.
        const SIGNALS: usize = 0;
        const COMMAND: usize = 1;
        const HTTP: usize = 2;
        const STDIN: usize = 3;
        const RINGS: usize = 4;
        let stdin_probes = match self.settings.stdin_input {
            true => procfs::stdin_probes(self.compiled.module),
            false => Vec::new(),
        };
        let mut stdin_open = !stdin_probes.is_empty();
        let stdin = io::stdin();
        let timers_at = RINGS + self.feeds.len();
        if let Some(deadline) = deadline {
            // Enforced by the signal watcher too, should a handler or a
            // blocked write keep this loop from polling.
            signals.set_deadline(deadline);
        }
        // When the ring buffers are next polled (see RING_BATCH_MS).
        let mut rings_from: u64 = 0;
        while !self.ending {
            let rings_wait_ns = rings_from.saturating_sub(monotonic_ns());
            let poll_rings = rings_wait_ns == 0;
            let mut fds = vec![
                poll_entry(Some(signals.fd())),
                poll_entry(command.as_ref().map(|c| c.exit_fd())),
                poll_entry(self.http.as_ref().map(|h| h.wake_fd())),
                poll_entry(stdin_open.then(|| stdin.as_fd())),
            ];
            fds.extend(
                self.feeds
                    .iter()
                    .map(|f| poll_entry(poll_rings.then(|| f.fd.as_fd()))),
            );
            fds.extend(timers.iter().map(|t| poll_entry(Some(t.fd()))));
            let timeout_ms = match deadline {
                Some(deadline) => {
                    let left = deadline.saturating_sub(monotonic_ns());
                    if left == 0 {
                        break;
                    }
                    // Rounded up so the loop never wakes just short of it.
                    i32::try_from(left.div_ceil(1_000_000)).unwrap_or(i32::MAX)
                }
                None => -1,
            };
            let timeout_ms = match self.hooks.poll_every() {
                Some(every) => {
                    let every = i32::try_from(every.as_millis()).unwrap_or(i32::MAX);
                    if timeout_ms < 0 {
                        every
                    } else {
                        timeout_ms.min(every)
                    }
                }
                None => timeout_ms,
            };
            // Within a batch gap, wake when it ends to poll the rings again.
            let timeout_ms = match (poll_rings || self.feeds.is_empty(), timeout_ms) {
                (true, t) => t,
                (false, t) => {
                    let gap = i32::try_from(rings_wait_ns.div_ceil(1_000_000)).unwrap_or(1);
                    if t < 0 { gap } else { t.min(gap) }
                }
            };
            // SAFETY: `fds` is a live array of initialised pollfds.
            let woken =
                unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
            if woken < 0 {
                let err = io::Error::last_os_error();
                if err.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return self.stop_with_warning(&format!("poll failed: {err}"));
            }
            // Every wakeup drains, so kernel output that came before a
            // timer's or a signal's stays ahead of what its handling prints.
            let mut records = 0;
            for feed in 0..self.feeds.len() {
                records += self.drain(feed);
            }
            if records > 0 {
                rings_from = monotonic_ns() + RING_BATCH_MS * 1_000_000;
            }
            if fds[HTTP].revents != 0 {
                self.serve_http();
            }
            if fds[STDIN].revents != 0 && !self.ending {
                stdin_open = self.feed_stdin(&stdin_probes);
            }
            if fds[SIGNALS].revents != 0 && signals.take().is_some() {
                self.ending = true;
            }
            if fds[COMMAND].revents != 0 {
                if let Some(command) = command.as_deref_mut() {
                    command.try_reap();
                    // As staprun: a failed command is a warning, and fails
                    // the run once it ended.
                    if let Some(failure) = command.failure() {
                        crate::stop::stderr_line(&format!("WARNING: {failure}"));
                        self.run_failed = true;
                    }
                }
                self.ending = true;
            }
            if !self.ending
                && self
                    .hooks
                    .poll(&mut self.runtime, self.kernel.as_deref_mut())
            {
                self.ending = true;
            }
            for (slot, timer) in fds[timers_at..].iter().zip(timers.iter_mut()) {
                if slot.revents == 0 || self.ending {
                    continue;
                }
                match timer.fired(monotonic_ns()) {
                    Ok(true) => self.run_host_probe(timer.probe),
                    Ok(false) => {}
                    Err(e) => return self.stop_with_warning(&format!("timer failed: {e}")),
                }
            }
        }
    }

    /// Handles every record waiting in one ring buffer; returns how many.
    fn drain(&mut self, feed: usize) -> usize {
        // Batches of up to DRAIN_BATCH_BYTES: one copy out of the ring (its
        // space is given back as it is read), then one formatting pass and
        // one write each. The cap keeps a backlog (a ring filled while the
        // host was not running) from being copied whole into the heap.
        let this = &mut self.feeds[feed];
        let mut batch = std::mem::take(&mut this.batch);
        let mut ends = std::mem::take(&mut this.ends);
        let mut records = 0;
        loop {
            batch.clear();
            ends.clear();
            let consumed = self.feeds[feed].ring.consume(DRAIN_BATCH_BYTES, |bytes| {
                batch.extend_from_slice(bytes);
                ends.push(batch.len());
            });
            let mut start = 0;
            for &end in &ends {
                self.take_record(feed, &batch[start..end]);
                start = end;
            }
            self.flush_output();
            match consumed {
                Ok(0) => break,
                Ok(n) => records += n,
                Err(e) => {
                    // The rest stays in the ring, unread: say so and end.
                    self.stop_with_warning(&format!("cannot map the ring buffer: {e}"));
                    break;
                }
            }
            if (batch.len() as u64) < DRAIN_BATCH_BYTES {
                break;
            }
        }
        let this = &mut self.feeds[feed];
        this.batch = batch;
        this.ends = ends;
        records
    }

    /// Handles a record now, or holds it until its handler run's unit is
    /// complete (records.rs: framing).
    fn take_record(&mut self, feed: usize, bytes: &[u8]) {
        let Some(framing) = records::framing(bytes) else {
            return self.handle_record(feed, bytes);
        };
        if framing.stream == STANDALONE_STREAM {
            return self.handle_record(feed, bytes);
        }
        let key = (feed, framing.stream);
        // A unit is whole when its records all carry one run number and
        // the last one came; else a record was lost and the rest is
        // dropped (records.rs), never printed in part.
        let mut unit = match self.held.remove(&key) {
            Some((seq, records)) if seq == framing.seq => records,
            Some((_, orphans)) => {
                self.partial_lost += orphans.len() as u64;
                Vec::new()
            }
            None => Vec::new(),
        };
        if unit.is_empty() && !framing.more {
            // The last record of a unit whose earlier records were lost.
            self.partial_lost += u64::from(!framing.end);
            return;
        }
        unit.push(bytes.to_vec());
        if framing.more {
            self.held.insert(key, (framing.seq, unit));
            return;
        }
        if framing.end {
            unit.pop();
        }
        for record in unit {
            self.handle_record(feed, &record);
        }
    }

    /// At the end: units whose last record never came (lost to a full
    /// ring buffer, or a run cut short by the end) are dropped and counted.
    fn flush_held(&mut self) {
        for (_, (_, records)) in std::mem::take(&mut self.held) {
            self.partial_lost += records.len() as u64;
        }
    }

    /// `system(cmd)`: starts what the probe queued.
    fn start_commands(&mut self) {
        for message in self.runtime.commands.start() {
            builtins::warn(&mut self.runtime.output, message.as_bytes());
        }
    }

    /// Ships what the last handler or batch of events printed.
    fn flush_output(&mut self) {
        if let Err(e) = self.runtime.output.flush() {
            self.output_error(&e);
        }
    }

    fn handle_record(&mut self, feed: usize, bytes: &[u8]) {
        let module = self.feeds[feed].module;
        let sources = self.feeds[feed].sources;
        let max_string_len = u32::try_from(module.limits.max_string_len).unwrap_or(u32::MAX);
        let shapes = &mut self.feeds[feed].shapes;
        let record = match records::decode_with(bytes, module, max_string_len, shapes) {
            Ok(record) => record,
            Err(e) => {
                let message = format!("dropped a malformed event from the kernel: {e}");
                self.runtime
                    .output
                    .notice(Level::Warning, "malformed_event", &message, &[]);
                return;
            }
        };
        match record.body {
            RecordBody::Printf { format, args } => self.print(feed, format, &args),
            RecordBody::Exit => {
                // No new kernel handler runs once exit() was called: stop
                // them now rather than after the loop notices.
                self.stop_kernel();
                self.ending = true;
            }
            RecordBody::Abort => {
                self.stop_kernel();
                self.runtime.aborted = true;
                self.ending = true;
            }
            RecordBody::Speculation { op, id, text } => match (op, text) {
                (records::SPECULATE_ADD, Some(text)) => self.runtime.speculation.add(id, text),
                (records::SPECULATE_COMMIT, _) => {
                    let text = self.runtime.speculation.take(id);
                    self.runtime.write_output(&text);
                }
                _ => self.runtime.speculation.discard(id),
            },
            RecordBody::System(command) => {
                self.runtime.commands.queue(command);
                self.flush_output();
                self.start_commands();
            }
            RecordBody::Error {
                kind: records::ErrorKind::Warning(text),
                ..
            } => {
                builtins::warn(&mut self.runtime.output, text);
            }
            // Handlers that failed before the run flag went down: the
            // session already ends on an error, as stap's stops at its first.
            RecordBody::Error { .. } if self.error_ending => {}
            RecordBody::Error { kind, span } => {
                let span = match kind {
                    // stap points at the operator, not the whole expression.
                    records::ErrorKind::DivisionByZero => division_operator(sources, span),
                    _ => span,
                };
                self.report_error(&kind.message(), Some((sources, span)));
            }
            RecordBody::Hist {
                global,
                linear,
                keys,
            } => self.print_hist(feed, global, linear, &keys),
        }
    }

    /// A kernel `print(@hist_*(s[k]))`: the statistic as it is in its map
    /// now, through the host's histogram printer.
    fn print_hist(&mut self, feed: usize, global: GlobalId, linear: bool, keys: &[Arg<'_>]) {
        // An older generation's ids (interactive sessions): by name.
        let name = &self.feeds[feed].module.global(global).name;
        let module = self.compiled.module;
        let Some(id) = (0..module.globals.len()).find(|i| module.globals[*i].name == *name) else {
            return;
        };
        let key: Vec<Value> = keys
            .iter()
            .map(|arg| match arg {
                Arg::Long(v) => Value::Long(*v),
                Arg::Str(bytes) => Value::Str((*bytes).into()),
                Arg::Symbol { addr, .. } => Value::Long(*addr as i64),
                Arg::Stack { .. } => Value::Long(0),
            })
            .collect();
        let agg = match self.runtime.globals.stat(GlobalId(id as u32), &key) {
            Ok(agg) => agg,
            Err(e) => {
                crate::stop::stderr_line(&format!("WARNING: cannot print a kernel histogram: {e}"));
                return;
            }
        };
        let text = match (linear, &agg.hist_log, &agg.hist_linear) {
            (false, Some(buckets), _) => hist::print_log(buckets),
            (true, _, Some((h, slots))) => hist::print_linear(h, slots),
            _ => {
                crate::stop::stderr_line("WARNING: a kernel histogram printed without its buckets");
                return;
            }
        };
        let written = self
            .runtime
            .output
            .histogram(|| text, || json::histogram(&agg, linear));
        if let Err(e) = written {
            self.output_error(&e);
        }
    }

    /// A kernel printf: symbols resolved here, then the shared formatter.
    fn print(&mut self, feed: usize, format: FormatId, args: &[Arg<'_>]) {
        let index = format.0 as usize;
        let module = self.feeds[feed].module;
        let Some(slot) = self.feeds[feed].formats.get_mut(index) else {
            return;
        };
        if slot.is_none() {
            let text = &module.format(format).text;
            *slot = Some(printf::parse(text).unwrap_or_default());
        }
        let symbols: Vec<String> = args
            .iter()
            .filter_map(|arg| match *arg {
                Arg::Symbol { addr, how } => Some(match how {
                    SymbolText::Name => self.runtime.symbols.name(addr),
                    SymbolText::Data => self.runtime.symbols.data(addr),
                    SymbolText::Module => self.runtime.symbols.module(addr),
                    SymbolText::Enum(name) => {
                        let enum_type = module.string(name);
                        self.runtime.enums.name(enum_type, addr as i64)
                    }
                    SymbolText::Time { local } => builtins::ctime(addr as i64, local),
                    // Only `Arg::Stack` carries stacks.
                    SymbolText::Stack { .. } => String::new(),
                }),
                Arg::Stack {
                    user,
                    full,
                    tgid,
                    frames,
                } => {
                    // A user stack ends at a zero frame, as `ubacktrace()`'s.
                    let frames: Vec<u64> = frames
                        .chunks_exact(8)
                        .map(|w| u64::from_le_bytes(w.try_into().unwrap_or_default()))
                        .take_while(|&addr| !user || addr != 0)
                        .collect();
                    Some(if user {
                        self.runtime.usymbols.frames(tgid, &frames, full)
                    } else {
                        self.runtime.symbols.kernel_stack(&frames, full)
                    })
                }
                _ => None,
            })
            .collect();
        let mut resolved = symbols.iter();
        let each_value = args.iter().map(|arg| match arg.as_value() {
            Some(value) => value,
            None => printf::Value::Str(resolved.next().map_or(&[][..], |s| s.as_bytes())),
        });
        // A typical printf's arguments fit on the stack: no allocation per
        // line (bench/analysis.md, "printing").
        let mut inline = [printf::Value::Long(0); 8];
        let spilled: Vec<printf::Value<'_>>;
        let values: &[printf::Value<'_>] = if args.len() <= inline.len() {
            for (slot, value) in inline.iter_mut().zip(each_value) {
                *slot = value;
            }
            &inline[..args.len()]
        } else {
            spilled = each_value.collect();
            &spilled
        };
        let mut text = std::mem::take(&mut self.feeds[feed].text);
        text.clear();
        let pieces = self.feeds[feed].formats[index]
            .as_deref()
            .unwrap_or_default();
        if let Err(e) = printf::format(pieces, values, &mut text) {
            crate::stop::stderr_line(&format!(
                "WARNING: cannot format a kernel printf: {}",
                e.message
            ));
            return;
        }
        let named = self.runtime.name_stacks(&text);
        if let Err(e) = self.runtime.output.write(&named) {
            self.output_error(&e);
        }
        drop(named);
        self.feeds[feed].text = text;
    }
}

/// `near identifier 'x' at file:line:col`, stap's location of a run-time
/// error, from the span of the failing statement or expression.
fn near(sources: &SourceMap, span: Span) -> String {
    let text = sources.text(span);
    let token = first_token(text);
    let what = match token.chars().next() {
        Some(c) if c.is_ascii_digit() => "number",
        Some('"') => "string",
        Some(c) if c.is_alphabetic() || c == '_' || c == '$' || c == '@' => "identifier",
        _ => "operator",
    };
    format!("near {what} '{token}' at {}", sources.location(span))
}

/// The span of the first `/` or `%` in a division's span (the whole span
/// if there is none outside string literals).
fn division_operator(sources: &SourceMap, span: Span) -> Span {
    let mut in_string = false;
    let mut escaped = false;
    for (i, c) in sources.text(span).char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if in_string => escaped = true,
            '"' => in_string = !in_string,
            '/' | '%' if !in_string => {
                let start = span.start as usize + i;
                return Span::new(span.file, start, start + 1);
            }
            _ => {}
        }
    }
    span
}

/// The first token of a span's text: an identifier (with `$`/`@`), a
/// number, a string literal, or an operator character.
fn first_token(text: &str) -> &str {
    let text = text.trim_start();
    let mut chars = text.char_indices();
    let Some((_, first)) = chars.next() else {
        return text;
    };
    let end = if first == '"' {
        text[1..].find('"').map_or(text.len(), |i| i + 2)
    } else if first.is_alphanumeric() || matches!(first, '_' | '$' | '@') {
        chars
            .find(|(_, c)| !(c.is_alphanumeric() || *c == '_'))
            .map_or(text.len(), |(i, _)| i)
    } else {
        first.len_utf8()
    };
    &text[..end]
}

/// Whether any code turns addresses into symbol names.
fn uses_symbols(module: &ir::Module) -> bool {
    let symbolic = |op: &Op| match op {
        Op::Printf { args, .. } => args.iter().any(|a| matches!(a, PrintArg::Symbol { .. })),
        Op::Builtin { name, .. } => matches!(
            name.as_str(),
            "symname" | "symdata" | "modname" | "print_stack" | "sprint_stack"
        ),
        _ => false,
    };
    module
        .functions
        .iter()
        .flat_map(|f| &f.blocks)
        .flat_map(|b| &b.insts)
        .any(|inst| symbolic(&inst.op))
}

fn order_of(probe: &ProbeHandler) -> i64 {
    match probe.kind {
        ProbeKind::Begin { order } | ProbeKind::End { order } | ProbeKind::Error { order } => order,
        _ => 0,
    }
}

fn poll_entry(fd: Option<BorrowedFd<'_>>) -> libc::pollfd {
    libc::pollfd {
        fd: fd.map_or(-1, |fd| fd.as_raw_fd()),
        events: libc::POLLIN,
        revents: 0,
    }
}

/// The fd and value size of the first map with a role.
fn find_map<'l>(
    object: &Object,
    loaded: &'l Loaded,
    role: impl Fn(&MapRole) -> bool,
) -> Option<(BorrowedFd<'l>, u32)> {
    object
        .maps
        .iter()
        .zip(&loaded.maps)
        .find(|(spec, _)| role(&spec.role))
        .map(|(spec, fd)| (fd.as_fd(), spec.value_size))
}

/// The run number and the records so far of a unit being reassembled.
type HeldUnit = (u32, Vec<Vec<u8>>);

/// After a drain that found records, the ring buffers stay out of the
/// event loop's poll for this long. Kernel handlers send records with the
/// kernel's adaptive wakeup, which wakes the reader only for a record
/// written into an empty ring: a quiet ring's first record is read at once
/// (a fixed 10 ms poll made every first event up to 10 ms late), and
/// while the loop sleeps out this gap the ring fills without further
/// wakeups, so a busy ring costs one irq_work and one wakeup per batch,
/// not per record (bench/analysis.md, "Start-up: the first event").
const RING_BATCH_MS: u64 = 1;

/// The most payload bytes one drain pass copies out of a ring buffer
/// before formatting and writing them (see `Session::drain`).
const DRAIN_BATCH_BYTES: u64 = 256 << 10;

fn events_size(object: &Object) -> u32 {
    object
        .maps
        .iter()
        .find(|spec| matches!(spec.role, MapRole::Events))
        .map_or(0, |spec| spec.max_entries)
}

/// The Control map (see `stap_lang::bpf::maps`) and what goes in it
/// besides the run flag.
struct Control {
    /// A duplicate of the map's fd (the map may belong to a longer-lived
    /// `KernelState`).
    fd: OwnedFd,
    value_size: u32,
    /// `target()`: the `-c` command's pid or `-x PID`, 0 without either.
    target: i32,
}

impl Control {
    fn new(fd: BorrowedFd<'_>, value_size: u32, target: i32) -> Result<Control, SessionError> {
        Ok(Control {
            fd: fd
                .try_clone_to_owned()
                .map_err(setup("cannot duplicate the Control map fd"))?,
            value_size,
            target,
        })
    }

    /// Writes the Control value: the run flag, the wall-clock offset and
    /// `target()`.
    fn write(&self, run: bool) -> io::Result<()> {
        write_control(self.fd.as_fd(), self.value_size, run, self.target)
    }
}

fn write_control(fd: BorrowedFd<'_>, value_size: u32, run: bool, target: i32) -> io::Result<()> {
    let mut value = vec![0u8; value_size as usize];
    // Slots the kernel writes (`speculation()`'s counter) keep their value.
    sys::map_lookup(fd, &0u32.to_ne_bytes(), &mut value)?;
    let mut put = |slot: u32, v: u64| {
        let at = slot as usize * 8;
        if let Some(bytes) = value.get_mut(at..at + 8) {
            bytes.copy_from_slice(&v.to_le_bytes());
        }
    };
    put(bpf_maps::CONTROL_RUN, u64::from(run));
    let offset = clock_ns(libc::CLOCK_REALTIME).wrapping_sub(monotonic_ns());
    put(bpf_maps::CONTROL_TIME_OFFSET, offset);
    // Sign-extended, as the kernel half reads it as a long.
    put(bpf_maps::CONTROL_TARGET, i64::from(target) as u64);
    put(bpf_maps::CONTROL_STP_PID, u64::from(std::process::id()));
    sys::map_update(fd, &0u32.to_ne_bytes(), &value, 0)
}

/// A Counters slot summed over every CPU (0 if unreadable).
fn read_counter(counters: Option<(BorrowedFd<'_>, u32)>, slot: u32) -> u64 {
    let Some((fd, value_size)) = counters else {
        return 0;
    };
    let cpus = sys::possible_cpus().unwrap_or(1).max(1);
    let stride = (value_size as usize).next_multiple_of(8);
    let mut values = vec![0u8; stride * cpus];
    if !matches!(
        sys::map_lookup(fd, &0u32.to_ne_bytes(), &mut values),
        Ok(true)
    ) {
        return 0;
    }
    let at = slot as usize * 8;
    values
        .chunks(stride)
        .filter_map(|cpu| cpu.get(at..at + 8))
        .map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
        .fold(0u64, u64::wrapping_add)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_locations_name_the_first_token_as_stap_does() {
        let mut map = SourceMap::new();
        let file = map.add("<input>", "probe begin { x = 1 / y; error(\"boom\") }");
        let at = |text: &str| {
            let start = map.get(file).text.find(text).unwrap();
            Span::new(file, start, start + text.len())
        };
        assert_eq!(near(&map, at("/ y")), "near operator '/' at <input>:1:21");
        assert_eq!(
            near(&map, at("error(\"boom\")")),
            "near identifier 'error' at <input>:1:26"
        );
        assert_eq!(near(&map, at("1 / y")), "near number '1' at <input>:1:19");
        assert_eq!(
            near(&map, division_operator(&map, at("1 / y"))),
            "near operator '/' at <input>:1:21"
        );
    }
}
