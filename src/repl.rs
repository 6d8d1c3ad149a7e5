//! The interactive session (`stap-rs -i`, or no script).
//!
//! Two threads: a line-editor thread (rustyline) reads complete inputs and
//! hands each to the main thread, which owns every compiled program and the
//! running session, and answers when the input is handled, so the next
//! prompt comes after its output (see `repl/console.rs` for how output
//! reaches the terminal without breaking the line being typed).
//!
//! The kernel half is incremental (`session::KernelState`): an input's
//! kernel probes are loaded against the maps already there and attached
//! next to the running ones, which are never detached by an addition. The
//! host half (begin/end/timer probes, statements) is recompiled from the
//! whole accepted text each time and replaces the previous host program;
//! host-held globals are carried over by value. A bare statement runs once
//! as a one-off `probe begin` built against the same text.

mod complete;
mod console;
mod input;

use crate::cli::Args;
use crate::frontend::{self, Failed, Frontend, Tapsets, elab_options, fail};
use crate::out::{errln, out, outln};
use stap_lang::diag;
use stap_lang::ir::{self, GlobalId, ProbeKind, Storage};
use stap_lang::kernel::KernelFacts;
use stap_lang::pipeline::{self, Compiled};
use stap_lang::source::{FileId, SourceMap};
use stap_lang::{ast, bpf, sema};
use stap_runtime::host::globals::HostStats;
use stap_runtime::host::stats::Aggregate;
use stap_runtime::host::value::{ElementValue, Key, Value};
use stap_runtime::host::{HostRuntime, RuntimeError, hist};
use stap_runtime::jit::HostProgram;
use stap_runtime::load;
use stap_runtime::session::{self, Generation, KernelState};
use std::collections::BTreeMap;
use std::sync::mpsc::{Receiver, Sender, TryRecvError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One complete input from the line editor.
pub enum Request {
    Line(String),
    /// Ctrl-D or `:quit`.
    Quit,
}

/// A change to the running program.
enum Change {
    /// A global, function or probe (or a loaded file): kept.
    Item(String),
    /// A bare statement: runs once, not kept.
    Statement(String),
}

/// What the main loop does next.
enum Next {
    Rebuild(Change),
    Quit,
    /// The program ended by itself (`exit()`): wait for input.
    Ended,
}

/// A saved global value, carried from one host program to the next.
#[derive(Clone)]
enum Saved {
    Scalar(Value),
    Array(Vec<(Key, Value)>),
}

struct State {
    /// Every accepted item, in order: what `:save` writes.
    script: String,
    saved: BTreeMap<String, Saved>,
    /// Host-held statistics' samples, carried whole.
    stats: BTreeMap<String, HostStats>,
    /// Global names, shared with the completer.
    names: Arc<Mutex<Vec<String>>>,
}

const HELP: &str = "\
Type a global, function or probe to add it to the running script; type a
statement (e.g. printf(\"%d\\n\", 1+2)) to run it once. Input continues over
several lines while braces are open. Tab completes tracepoints, kernel
functions, struct members after ->, functions and globals.
  :probes          list the probes with their ids and hit counts
  :detach ID       detach probe ID (it stays loaded)
  :attach ID       attach probe ID again
  :globals         list the globals and their values
  :print NAME      print a global
  :clear NAME      clear a global
  :save FILE       write the script (stap-rs FILE runs it)
  :load FILE       add a script file
  :help            this text
  :quit            run end probes and leave (also Ctrl-D)
";

/// The kernel half and the programs whose records it may still carry.
struct Live {
    kernel: KernelState,
    /// By generation: the builds that added kernel probes, kept to decode
    /// their ring buffers.
    generations: Vec<Built>,
}

pub fn run(args: &Args, kernel: &dyn KernelFacts) -> Result<(), Failed> {
    let (request_tx, requests) = std::sync::mpsc::channel();
    let (acks, ack_rx) = std::sync::mpsc::channel();
    let names = Arc::new(Mutex::new(Vec::new()));
    let (console, output) = if console::interactive() {
        match console::Console::redirect() {
            Ok((console, read)) => (Some(console), Some(read)),
            Err(e) => {
                errln!("WARNING: probe output may break the line being typed: {e}");
                (None, None)
            }
        }
    } else {
        (None, None)
    };
    let end = input::EditorEnd {
        requests: request_tx,
        acks: ack_rx,
        ack_sender: acks.clone(),
        names: names.clone(),
        output,
    };
    let editor = std::thread::spawn(move || input::read_lines(end));
    let mut state = State {
        script: String::new(),
        saved: BTreeMap::new(),
        stats: BTreeMap::new(),
        names,
    };
    let link = Link {
        requests,
        acks,
        piped: console.is_some(),
    };
    let mut live = Live {
        kernel: KernelState::new(),
        generations: Vec::new(),
    };
    let mut change = None;
    loop {
        let next = match change.take() {
            None => idle(&mut state, &mut live.kernel, &link),
            Some(c) => run_program(args, kernel, &mut state, &mut live, &link, Some(c)),
        };
        match next {
            Next::Rebuild(c) => change = Some(c),
            Next::Ended => {}
            Next::Quit => break,
        }
    }
    // Every probe detached before the last answer.
    drop(live);
    // The editor thread waits for this answer before it leaves; with the
    // output pipe, the forwarder gives it once it has printed everything.
    match console {
        Some(console) => console.restore(),
        None => link.ack(),
    }
    let _ = editor.join();
    Ok(())
}

/// The two ends the main thread holds.
struct Link {
    requests: Receiver<Request>,
    acks: Sender<()>,
    /// Output goes through the pipe: answers too, to keep their order.
    piped: bool,
}

impl Link {
    fn ack(&self) {
        if self.piped {
            console::write_ack();
        } else {
            let _ = self.acks.send(());
        }
    }
}

/// No program runs: handles inputs until one changes the program.
fn idle(state: &mut State, kernel: &mut KernelState, link: &Link) -> Next {
    loop {
        let Ok(request) = link.requests.recv() else {
            return Next::Quit;
        };
        if let Some(next) = handle(request, state, None, Some(kernel)) {
            return next;
        }
        link.ack();
    }
}

/// The running host program, for commands that read it.
struct Running<'r> {
    runtime: &'r mut HostRuntime,
    module: &'r ir::Module,
}

/// Handles one input; `Some` when it changes or ends the program.
fn handle(
    request: Request,
    state: &mut State,
    running: Option<Running<'_>>,
    kernel: Option<&mut KernelState>,
) -> Option<Next> {
    let line = match request {
        Request::Quit => return Some(Next::Quit),
        Request::Line(line) => line,
    };
    let text = line.trim();
    let Some(command) = text.strip_prefix(':') else {
        return Some(Next::Rebuild(if is_item(text) {
            Change::Item(line)
        } else {
            Change::Statement(line)
        }));
    };
    let (name, arg) = command
        .split_once(char::is_whitespace)
        .map_or((command, ""), |(n, a)| (n, a.trim()));
    if let Some(running) = &running {
        state.saved = save_globals(running.runtime, &|_| true);
    }
    match name {
        "help" | "h" => out!("{HELP}"),
        "quit" | "q" => return Some(Next::Quit),
        "probes" => list_probes(kernel.as_deref(), running.as_ref().map(|r| r.module)),
        "detach" | "attach" => {
            let Some(kernel) = kernel else {
                errln!("ERROR: no probes yet");
                return None;
            };
            let Ok(id) = arg.parse::<usize>() else {
                errln!("ERROR: :{name} takes a probe id (:probes lists them)");
                return None;
            };
            let done = if name == "detach" {
                kernel.detach(id)
            } else {
                kernel.reattach(id)
            };
            match done {
                Ok(()) => {
                    let point = kernel.probes.iter().find(|p| p.id == id);
                    let point = point.map_or("", |p| p.point.as_str());
                    outln!("{name}ed probe {id}: {point}");
                }
                Err(e) => errln!("ERROR: {e}"),
            }
        }
        "globals" => match running {
            Some(running) => {
                for id in global_ids(running.runtime) {
                    print_live(running.runtime, id);
                }
            }
            None => {
                for (name, saved) in &state.saved {
                    print_saved(name, saved);
                }
            }
        },
        "print" | "p" => match running {
            Some(running) => match global_id(running.runtime, arg) {
                Some(id) => print_live(running.runtime, id),
                None => errln!("ERROR: no global '{arg}'"),
            },
            None => match state.saved.get(arg) {
                Some(saved) => print_saved(arg, saved),
                None => errln!("ERROR: no global '{arg}'"),
            },
        },
        "clear" => {
            let mut found = false;
            if let Some(running) = running
                && let Some(id) = global_id(running.runtime, arg)
            {
                found = true;
                if let Err(e) = running.runtime.globals.clear(id) {
                    errln!("ERROR: cannot clear '{arg}': {e}");
                }
            }
            if let Some(saved) = state.saved.get_mut(arg) {
                found = true;
                *saved = match saved {
                    Saved::Scalar(Value::Long(_)) => Saved::Scalar(Value::Long(0)),
                    Saved::Scalar(Value::Str(_)) => Saved::Scalar(Value::Str(Box::default())),
                    Saved::Array(_) => Saved::Array(Vec::new()),
                };
            }
            if !found {
                errln!("ERROR: no global '{arg}'");
            }
        }
        "save" if !arg.is_empty() => match std::fs::write(arg, &state.script) {
            Ok(()) => outln!("saved {} bytes to {arg}", state.script.len()),
            Err(e) => errln!("ERROR: cannot write '{arg}': {e}"),
        },
        "load" if !arg.is_empty() => match std::fs::read_to_string(arg) {
            Ok(text) => return Some(Next::Rebuild(Change::Item(text))),
            Err(e) => errln!("ERROR: cannot read '{arg}': {e}"),
        },
        _ => errln!("ERROR: unknown command ':{command}' (:help lists them)"),
    }
    None
}

/// `:probes`: kernel probes with id, hits and state, then host probes.
fn list_probes(kernel: Option<&KernelState>, module: Option<&ir::Module>) {
    let counting = kernel.is_some_and(KernelState::counting);
    outln!("{:>4}  {:>10}  {:<8}  probe", "id", "hits", "state");
    for probe in kernel.map_or(&[][..], |k| k.probes.as_slice()) {
        let hits = probe
            .hits(counting)
            .map_or_else(|| "?".to_string(), |n| n.to_string());
        let attached = if probe.attached() {
            "attached"
        } else {
            "detached"
        };
        outln!(
            "{:>4}  {hits:>10}  {attached:<8}  {}",
            probe.id,
            probe.point
        );
    }
    // Host probes of the session's script (not the one-off statements).
    for probe in module.map_or(&[][..], |m| m.probes.as_slice()) {
        if matches!(
            probe.kind,
            ProbeKind::HostTimer { .. } | ProbeKind::End { .. }
        ) {
            outln!("{:>4}  {:>10}  {:<8}  {}", "-", "-", "host", probe.point);
        }
    }
}

/// Whether an input declares something rather than being a statement.
fn is_item(text: &str) -> bool {
    let word = text
        .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '@'))
        .next()
        .unwrap_or("");
    matches!(word, "global" | "function" | "probe" | "private")
}

fn global_ids(runtime: &HostRuntime) -> impl Iterator<Item = GlobalId> + '_ {
    (0u32..)
        .map(GlobalId)
        .take_while(|id| runtime.globals.storage(*id).is_some())
        // Hidden globals (`@entry` saves, ...) have names no script can use.
        .filter(|id| {
            let name = runtime.globals.name(*id);
            name.starts_with(|c: char| c.is_alphabetic() || c == '_')
        })
}

fn global_id(runtime: &HostRuntime, name: &str) -> Option<GlobalId> {
    global_ids(runtime).find(|id| runtime.globals.name(*id) == name)
}

/// Every scalar and array global's value that `wanted` picks.
fn save_globals(
    runtime: &HostRuntime,
    wanted: &dyn Fn(GlobalId) -> bool,
) -> BTreeMap<String, Saved> {
    let globals = &runtime.globals;
    let mut saved = BTreeMap::new();
    for id in global_ids(runtime).filter(|id| wanted(*id)) {
        let value = match globals.storage(id) {
            Some(Storage::Scalar(_)) => globals.load(id).ok().map(Saved::Scalar),
            Some(Storage::Array { .. }) => globals.elements(id).ok().map(|elements| {
                Saved::Array(
                    elements
                        .into_iter()
                        .filter_map(|e| match e.value {
                            ElementValue::Plain(v) => Some((e.key, v)),
                            ElementValue::Stat(_) => None,
                        })
                        .collect(),
                )
            }),
            _ => None,
        };
        if let Some(value) = value {
            saved.insert(globals.name(id).to_string(), value);
        }
    }
    saved
}

/// Writes saved values into the globals `fresh` picks (host tables and
/// newly created maps; a shared map kept its values) of the same name and
/// kind; a global whose kind changed starts afresh.
fn restore_globals(
    runtime: &mut HostRuntime,
    saved: &BTreeMap<String, Saved>,
    fresh: &dyn Fn(GlobalId) -> bool,
) {
    let ids: Vec<GlobalId> = global_ids(runtime).filter(|id| fresh(*id)).collect();
    for id in ids {
        let Some(value) = saved.get(runtime.globals.name(id)) else {
            continue;
        };
        let result: Result<(), RuntimeError> = match (runtime.globals.storage(id), value) {
            (Some(Storage::Scalar(_)), Saved::Scalar(v)) => runtime.globals.store(id, v.clone()),
            (Some(Storage::Array { .. }), Saved::Array(elements)) => elements
                .iter()
                .try_for_each(|(k, v)| runtime.globals.map_set(id, k.clone(), v.clone())),
            _ => Ok(()),
        };
        if let Err(e) = result {
            errln!(
                "WARNING: cannot restore '{}': {e}",
                runtime.globals.name(id)
            );
        }
    }
}

/// stap's end-of-run global listing: `name=value`, `name[key]=value`.
fn print_saved(name: &str, saved: &Saved) {
    match saved {
        Saved::Scalar(v) => outln!("{name}={}", show(v)),
        Saved::Array(elements) => {
            let mut lines: Vec<(&Key, &Value)> = elements.iter().map(|(k, v)| (k, v)).collect();
            lines.sort_by(|a, b| a.0.as_slice().cmp(b.0.as_slice()));
            for (key, value) in lines {
                outln!("{name}[{}]={}", show_key(key), show(value));
            }
        }
    }
}

/// A global of the running program, read now (maps included): values as
/// [`print_saved`], statistics as stap's listing (`name @count=.. ...`)
/// followed by their histograms.
fn print_live(runtime: &HostRuntime, id: GlobalId) {
    let globals = &runtime.globals;
    let name = globals.name(id);
    let result = match globals.storage(id) {
        Some(Storage::Scalar(_)) => globals
            .load(id)
            .map(|v| print_saved(name, &Saved::Scalar(v))),
        Some(Storage::Array { .. }) => globals.elements(id).map(|elements| {
            let elements = elements
                .into_iter()
                .filter_map(|e| match e.value {
                    ElementValue::Plain(v) => Some((e.key, v)),
                    ElementValue::Stat(_) => None,
                })
                .collect();
            print_saved(name, &Saved::Array(elements));
        }),
        Some(Storage::Stats { keys, needs, .. }) if keys.is_empty() => globals
            .stat(id, &[])
            .map(|aggregate| print_stat(name, &aggregate, needs.min_max)),
        Some(Storage::Stats { needs, .. }) => globals.elements(id).map(|mut elements| {
            elements.sort_by(|a, b| a.key.as_slice().cmp(b.key.as_slice()));
            for element in elements {
                if let ElementValue::Stat(aggregate) = element.value {
                    let shown = if element.key.as_slice().is_empty() {
                        name.to_string()
                    } else {
                        format!("{name}[{}]", show_key(&element.key))
                    };
                    print_stat(&shown, &aggregate, needs.min_max);
                }
            }
        }),
        None => Ok(()),
    };
    if let Err(e) = result {
        errln!("ERROR: cannot read '{name}': {e}");
    }
}

fn print_stat(shown: &str, aggregate: &Aggregate, min_max: bool) {
    if aggregate.count == 0 {
        outln!("{shown} @count=0");
        return;
    }
    // @min/@max are kept only when the script asks for them.
    let extremes = if min_max {
        format!(" @min={} @max={}", aggregate.min, aggregate.max)
    } else {
        String::new()
    };
    outln!(
        "{shown} @count={}{extremes} @sum={} @avg={}",
        aggregate.count,
        aggregate.sum,
        aggregate.sum / aggregate.count
    );
    if let Some(buckets) = &aggregate.hist_log {
        out!("{}", hist::print_log(buckets));
    }
    if let Some((layout, slots)) = &aggregate.hist_linear {
        out!("{}", hist::print_linear(layout, slots));
    }
}

fn show_key(key: &Key) -> String {
    let parts: Vec<String> = key.as_slice().iter().map(show).collect();
    parts.join(",")
}

fn show(value: &Value) -> String {
    match value {
        Value::Long(n) => n.to_string(),
        Value::Str(s) => format!("\"{}\"", String::from_utf8_lossy(s)),
    }
}

/// One compiled program: the kept script plus, maybe, the new input.
struct Built {
    map: SourceMap,
    module: ir::Module,
    object: bpf::Object,
    host: HostProgram,
    /// The file holding the new input; its begin and kernel probes are the
    /// ones that start now.
    new_file: Option<FileId>,
}

/// An always-present empty probe, so a script of only globals and
/// functions elaborates (stap refuses a script without probes).
const IDLE_PROBE: &str = "probe begin {}\n";

fn build(
    args: &Args,
    kernel: &dyn KernelFacts,
    script: &str,
    new: Option<&str>,
) -> Result<Built, Failed> {
    let mut map = SourceMap::new();
    let kept = map.add("<repl>", script.to_string());
    let idle = map.add("<repl-idle>", IDLE_PROBE.to_string());
    let new_file = new.map(|text| map.add("<input>", text.to_string()));
    let front = Frontend::new(kernel, &[]);
    let mut user = vec![front.parse_one(&map, kept)?, front.parse_one(&map, idle)?];
    if let Some(file) = new_file {
        user.push(front.parse_one(&map, file)?);
    }
    let library = front.load_tapsets(args, &mut map)?;
    let program = elaborate(&front, &map, kept, &user, &library, args)?;
    if let Some(file) = new_file {
        // What the new input's wildcards skip, named as `-v` names a
        // script's (the kept inputs' were reported when they were typed).
        let typed: Vec<_> = program
            .skipped_functions
            .iter()
            .filter(|point| point.span.file == file)
            .cloned()
            .collect();
        let report = frontend::skipped_report(&typed, true, Some(frontend::REPL_SKIPPED_NAMES));
        for line in report {
            errln!("{line}");
        }
    }
    // The session's maps outlive this program: string keys keep their full
    // size, so a later program's longer keys still fit.
    let options = pipeline::Options {
        full_string_keys: true,
        ..frontend::compile_options(args)
    };
    let Some(Compiled { module, object }) =
        frontend::compile_with(&options, &map, &program, kernel, &mut |_| {
            pipeline::Next::Emit
        })?
    else {
        return Err(fail("internal error: compilation stopped after the IR"));
    };
    let host = HostProgram::compile(&module).map_err(fail)?;
    Ok(Built {
        map,
        module,
        object,
        host,
        new_file,
    })
}

/// Pass 2, as `Frontend::elaborate`, less the warnings a session would
/// repeat: those in the kept text (shown when it was typed) and "never
/// used" (a global is declared before the probes that use it).
fn elaborate(
    front: &Frontend,
    map: &SourceMap,
    kept: FileId,
    user: &[ast::File],
    library: &Tapsets,
    args: &Args,
) -> Result<sema::Program, Failed> {
    let (program, diags) = front.with_library(map, library, |library| {
        // Each input runs as its own session: printing the globals it
        // leaves unread after every one would bury the answers.
        let options = sema::ElabOptions {
            display_unread_globals: false,
            ..elab_options(args)
        };
        sema::elaborate_with(user, library, front.kernel(), &options)
    })?;
    let shown: Vec<diag::Diagnostic> = diags
        .into_iter()
        .filter(|d| {
            let in_kept = d
                .primary
                .as_ref()
                .is_some_and(|(span, _)| span.file == kept);
            d.is_error() || !(in_kept || d.message.ends_with("is never used"))
        })
        .collect();
    diag::emit_stderr(map, &shown);
    if shown.iter().any(diag::Diagnostic::is_error) {
        return Err(Failed);
    }
    program.ok_or_else(|| fail("elaboration failed"))
}

/// Builds the kept script with `change` and runs it; on an error, says so
/// and runs the kept script as it was.
fn run_program(
    args: &Args,
    kernel: &dyn KernelFacts,
    state: &mut State,
    live: &mut Live,
    link: &Link,
    change: Option<Change>,
) -> Next {
    let new = match &change {
        Some(Change::Item(text)) => Some(text.clone()),
        Some(Change::Statement(text)) => Some(format!("probe begin {{\n{text}\n}}\n")),
        None => None,
    };
    let retry = |state: &mut State, live: &mut Live| {
        // The input was refused; the kept script runs on (and that run
        // answers the editor).
        if change.is_some() && !state.script.is_empty() {
            return run_program(args, kernel, state, live, link, None);
        }
        link.ack();
        Next::Ended
    };
    let built = match build(args, kernel, &state.script, new.as_deref()) {
        Ok(built) => built,
        Err(Failed) => return retry(state, live),
    };
    let before = state.script.len();
    if let Some(Change::Item(text)) = &change {
        accept(state, text);
    }
    let mut pending_ack = true;
    let outcome = run_built(&built, state, live, link, &mut pending_ack);
    let Some((next, added_programs)) = outcome else {
        // The kernel refused the new program: forget the item.
        state.script.truncate(before);
        return retry(state, live);
    };
    if added_programs {
        live.generations.push(built);
    }
    if pending_ack {
        link.ack();
    }
    next
}

/// Adds an accepted item to the kept script.
fn accept(state: &mut State, text: &str) {
    let text = text.trim();
    state.script.push_str(text);
    state.script.push('\n');
    if let Ok(mut names) = state.names.lock() {
        for line in text.lines() {
            if let Some(rest) = line.trim().strip_prefix("global ") {
                names.extend(
                    rest.split(',')
                        .filter_map(|n| n.split(['[', '=', '%', ';']).next())
                        .map(|n| n.trim().to_string())
                        .filter(|n| !n.is_empty()),
                );
            }
        }
    }
}

/// Runs one host program until an input replaces or ends it, after adding
/// its new kernel probes; `None` when they could not be added. The flag
/// says whether kernel programs were added (the build must be kept).
fn run_built(
    built: &Built,
    state: &mut State,
    live: &mut Live,
    link: &Link,
    pending_ack: &mut bool,
) -> Option<(Next, bool)> {
    let run_host = |probe: usize, rt: &mut HostRuntime| -> Result<(), RuntimeError> {
        built.host.run_probe(probe, rt)
    };
    let compiled = session::Compiled {
        module: &built.module,
        object: &built.object,
        host: &run_host,
        sources: &built.map,
    };
    let is_new = |probe: usize| {
        built
            .module
            .probes
            .get(probe)
            .is_some_and(|p| Some(p.span.file) == built.new_file)
    };
    let chosen = |program: usize| is_new(built.object.programs[program].probe);
    let mut hooks = Hooks {
        state,
        link,
        module: &built.module,
        begins: (0..built.module.probes.len()).map(is_new).collect(),
        next: None,
    };
    let older: Vec<Generation<'_>> = live
        .generations
        .iter()
        .map(|b| Generation {
            module: &b.module,
            sources: &b.map,
        })
        .collect();
    // Answered once the new begin probes have printed.
    let mut ready = || {
        link.ack();
        *pending_ack = false;
    };
    match session::run_live(
        &compiled,
        &mut live.kernel,
        &older,
        &chosen,
        &mut ready,
        &mut hooks,
    ) {
        Ok((_, added)) => Some((hooks.next.unwrap_or(Next::Ended), added.programs > 0)),
        Err(session::SessionError::Load(error)) => {
            let diag = load::describe(&error, &built.object, &built.map, false);
            diag::emit_stderr(&built.map, &[diag]);
            None
        }
        Err(error) => {
            errln!("ERROR: {error}");
            None
        }
    }
}

struct Hooks<'s> {
    state: &'s mut State,
    link: &'s Link,
    module: &'s ir::Module,
    /// Per module probe: whether it is a begin probe of the new input.
    begins: Vec<bool>,
    next: Option<Next>,
}

impl session::Hooks for Hooks<'_> {
    fn loaded(&mut self, runtime: &mut HostRuntime, fresh: &dyn Fn(GlobalId) -> bool) {
        restore_globals(runtime, &self.state.saved, fresh);
        let ids: Vec<GlobalId> = global_ids(runtime).collect();
        for id in ids {
            let name = runtime.globals.name(id).to_string();
            if let Some(stats) = self.state.stats.remove(&name)
                && !runtime.globals.put_host_stats(id, stats)
            {
                errln!(
                    "WARNING: statistic '{name}' starts empty: it moved to the kernel \
                     or needs other aggregates now"
                );
            }
        }
    }

    fn run_begin(&self, probe: usize) -> bool {
        self.begins.get(probe).copied().unwrap_or(false)
    }

    fn poll_every(&self) -> Option<Duration> {
        Some(Duration::from_millis(50))
    }

    fn poll(&mut self, runtime: &mut HostRuntime, mut kernel: Option<&mut KernelState>) -> bool {
        loop {
            let request = match self.link.requests.try_recv() {
                Ok(request) => request,
                Err(TryRecvError::Empty) => return false,
                Err(TryRecvError::Disconnected) => Request::Quit,
            };
            let _ = runtime.output.flush();
            let running = Running {
                runtime: &mut *runtime,
                module: self.module,
            };
            match handle(request, self.state, Some(running), kernel.as_deref_mut()) {
                Some(next) => {
                    self.next = Some(next);
                    return true;
                }
                None => self.link.ack(),
            }
        }
    }

    fn ending(&mut self, runtime: &mut HostRuntime) -> bool {
        // End probes run when leaving or when the script ended itself, not
        // when the program is only being replaced.
        let replaced = matches!(self.next, Some(Next::Rebuild(_)));
        // A replacement shares the maps: only host-held values are carried.
        let module = self.module;
        self.state.saved = save_globals(runtime, &|id| !replaced || !module.global(id).kernel);
        if replaced {
            let ids: Vec<GlobalId> = global_ids(runtime).collect();
            for id in ids {
                if let Some(stats) = runtime.globals.take_host_stats(id) {
                    let name = runtime.globals.name(id).to_string();
                    self.state.stats.insert(name, stats);
                }
            }
        }
        !replaced
    }
}
