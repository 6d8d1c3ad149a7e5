//! The interactive session (`stap-rs -i`, or no script).
//!
//! Two threads: a line-editor thread (rustyline) reads complete inputs and
//! hands each to the main thread, which owns every compiled program and the
//! running session, and answers when the input is handled, so the next
//! prompt comes after its output.
//!
//! The session keeps the accepted script text. A new global, function or
//! probe is checked by re-elaborating the whole text; when it passes, the
//! running program stops (its globals are saved, end probes do not run),
//! the new text is compiled and started, and the saved globals are written
//! into the new maps before any probe runs. A bare statement runs once as a
//! one-off `probe begin` built against the same text. See docs/repl.md for
//! what is not there yet.

mod input;

use crate::cli::Args;
use crate::driver::{Failed, Frontend, fail};
use stap_lang::diag;
use stap_lang::ir::{self, Storage};
use stap_lang::kernel::KernelFacts;
use stap_lang::sema::hir::GlobalId;
use stap_lang::source::{FileId, SourceMap};
use stap_lang::{bpf, sema};
use stap_runtime::host::globals::{ElementValue, Key, Value};
use stap_runtime::host::{HostRuntime, RuntimeError};
use stap_runtime::jit::HostProgram;
use stap_runtime::{load, session};
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

/// A saved global value, carried from one program to the next.
#[derive(Clone)]
enum Saved {
    Scalar(Value),
    Array(Vec<(Key, Value)>),
}

struct State {
    /// Every accepted item, in order: what `:save` writes.
    script: String,
    /// The probe items, for `:probes`.
    probes: Vec<String>,
    saved: BTreeMap<String, Saved>,
    /// Global names, shared with the completer.
    names: Arc<Mutex<Vec<String>>>,
}

const HELP: &str = "\
Type a global, function or probe to add it to the running script; type a
statement (e.g. printf(\"%d\\n\", 1+2)) to run it once. Input continues over
several lines while braces are open.
  :probes          list the probes added so far
  :globals         list the globals and their values
  :print NAME      print a global
  :clear NAME      clear a global
  :save FILE       write the script (stap-rs FILE runs it)
  :load FILE       add a script file
  :help            this text
  :quit            run end probes and leave (also Ctrl-D)
";

pub fn run(args: &Args, kernel: &dyn KernelFacts) -> Result<(), Failed> {
    let (request_tx, requests) = std::sync::mpsc::channel();
    let (acks, ack_rx) = std::sync::mpsc::channel();
    let names = Arc::new(Mutex::new(Vec::new()));
    let editor_names = names.clone();
    let editor = std::thread::spawn(move || input::read_lines(request_tx, ack_rx, editor_names));
    let mut state = State {
        script: String::new(),
        probes: Vec::new(),
        saved: BTreeMap::new(),
        names,
    };
    let link = Link { requests, acks };
    let mut change = None;
    loop {
        let next = match change.take() {
            None => idle(&mut state, &link),
            Some(c) => run_program(args, kernel, &mut state, &link, Some(c)),
        };
        match next {
            Next::Rebuild(c) => change = Some(c),
            Next::Ended => {}
            Next::Quit => break,
        }
    }
    // The editor thread waits for this answer before it leaves.
    link.ack();
    let _ = editor.join();
    Ok(())
}

/// The two ends the main thread holds.
struct Link {
    requests: Receiver<Request>,
    acks: Sender<()>,
}

impl Link {
    fn ack(&self) {
        let _ = self.acks.send(());
    }
}

/// No program runs: handles inputs until one changes the program.
fn idle(state: &mut State, link: &Link) -> Next {
    loop {
        let Ok(request) = link.requests.recv() else {
            return Next::Quit;
        };
        if let Some(next) = handle(request, state, None) {
            return next;
        }
        link.ack();
    }
}

/// Handles one input; `Some` when it changes or ends the program.
/// `runtime` is the running program's, if one runs.
fn handle(request: Request, state: &mut State, runtime: Option<&mut HostRuntime>) -> Option<Next> {
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
    if let Some(runtime) = &runtime {
        state.saved = save_globals(runtime);
    }
    match name {
        "help" | "h" => print!("{HELP}"),
        "quit" | "q" => return Some(Next::Quit),
        "probes" => {
            for (id, probe) in state.probes.iter().enumerate() {
                println!("{:3}  {}", id + 1, first_line(probe));
            }
        }
        "globals" => {
            for (name, saved) in &state.saved {
                print_global(name, saved);
            }
        }
        "print" | "p" => match state.saved.get(arg) {
            Some(saved) => print_global(arg, saved),
            None => eprintln!("ERROR: no global '{arg}'"),
        },
        "clear" => {
            if let Some(runtime) = runtime
                && let Some(id) = global_id(runtime, arg)
                && let Err(e) = runtime.globals.clear(id)
            {
                eprintln!("ERROR: cannot clear '{arg}': {e}");
            }
            if let Some(saved) = state.saved.get_mut(arg) {
                *saved = match saved {
                    Saved::Scalar(Value::Long(_)) => Saved::Scalar(Value::Long(0)),
                    Saved::Scalar(Value::Str(_)) => Saved::Scalar(Value::Str(Box::default())),
                    Saved::Array(_) => Saved::Array(Vec::new()),
                };
            } else {
                eprintln!("ERROR: no global '{arg}'");
            }
        }
        "save" if !arg.is_empty() => match std::fs::write(arg, &state.script) {
            Ok(()) => println!("saved {} bytes to {arg}", state.script.len()),
            Err(e) => eprintln!("ERROR: cannot write '{arg}': {e}"),
        },
        "load" if !arg.is_empty() => match std::fs::read_to_string(arg) {
            Ok(text) => return Some(Next::Rebuild(Change::Item(text))),
            Err(e) => eprintln!("ERROR: cannot read '{arg}': {e}"),
        },
        _ => eprintln!("ERROR: unknown command ':{command}' (:help lists them)"),
    }
    None
}

/// Whether an input declares something rather than being a statement.
fn is_item(text: &str) -> bool {
    let word = text
        .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '@'))
        .next()
        .unwrap_or("");
    matches!(word, "global" | "function" | "probe" | "private")
}

fn first_line(text: &str) -> &str {
    text.trim().lines().next().unwrap_or("")
}

fn global_id(runtime: &HostRuntime, name: &str) -> Option<GlobalId> {
    (0u32..)
        .map(GlobalId)
        .take_while(|id| runtime.globals.storage(*id).is_some())
        .find(|id| runtime.globals.name(*id) == name)
}

/// Every scalar and array global's value. Statistics are not kept (yet).
fn save_globals(runtime: &HostRuntime) -> BTreeMap<String, Saved> {
    let globals = &runtime.globals;
    let mut saved = BTreeMap::new();
    for id in (0u32..).map(GlobalId) {
        let Some(storage) = globals.storage(id) else {
            break;
        };
        let value = match storage {
            Storage::Scalar(_) => globals.load(id).ok().map(Saved::Scalar),
            Storage::Array { .. } => globals.elements(id).ok().map(|elements| {
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
            Storage::Stats { .. } => None,
        };
        if let Some(value) = value {
            saved.insert(globals.name(id).to_string(), value);
        }
    }
    saved
}

/// Writes saved values into a new program's globals of the same name and
/// kind; a global whose kind changed starts afresh.
fn restore_globals(runtime: &mut HostRuntime, saved: &BTreeMap<String, Saved>) {
    for id in (0u32..).map(GlobalId) {
        let Some(storage) = runtime.globals.storage(id) else {
            break;
        };
        let Some(value) = saved.get(runtime.globals.name(id)) else {
            continue;
        };
        let result: Result<(), RuntimeError> = match (storage, value) {
            (Storage::Scalar(_), Saved::Scalar(v)) => runtime.globals.store(id, v.clone()),
            (Storage::Array { .. }, Saved::Array(elements)) => elements
                .iter()
                .try_for_each(|(k, v)| runtime.globals.map_set(id, k.clone(), v.clone())),
            _ => Ok(()),
        };
        if let Err(e) = result {
            eprintln!(
                "WARNING: cannot restore '{}': {e}",
                runtime.globals.name(id)
            );
        }
    }
}

/// stap's end-of-run global listing: `name=value`, `name[key]=value`.
fn print_global(name: &str, saved: &Saved) {
    match saved {
        Saved::Scalar(v) => println!("{name}={}", show(v)),
        Saved::Array(elements) => {
            let mut lines: Vec<(&Key, &Value)> = elements.iter().map(|(k, v)| (k, v)).collect();
            lines.sort_by(|a, b| a.0.as_slice().cmp(b.0.as_slice()));
            for (key, value) in lines {
                let key: Vec<String> = key.as_slice().iter().map(show).collect();
                println!("{name}[{}]={}", key.join(","), show(value));
            }
        }
    }
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
    /// The file holding the new input; its begin probes run.
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
    let library = front.parse_tapsets(args, &mut map)?;
    let program: sema::Program = front.elaborate(&map, &user, &library, args)?;
    let module = ir::lower::lower(&program).map_err(|diags| emit(&map, &diags))?;
    let options = bpf::Options::from_limits(&module.limits);
    let object = bpf::compile(&module, &options).map_err(|diags| emit(&map, &diags))?;
    let host = HostProgram::compile(&module).map_err(fail)?;
    Ok(Built {
        map,
        module,
        object,
        host,
        new_file,
    })
}

fn emit(map: &SourceMap, diags: &[diag::Diagnostic]) -> Failed {
    diag::emit_stderr(map, diags);
    Failed
}

/// Builds and runs the kept script with `change`; on a build error, says
/// so and runs the kept script as it was.
fn run_program(
    args: &Args,
    kernel: &dyn KernelFacts,
    state: &mut State,
    link: &Link,
    change: Option<Change>,
) -> Next {
    let new = match &change {
        Some(Change::Item(text)) => Some(text.clone()),
        Some(Change::Statement(text)) => Some(format!("probe begin {{\n{text}\n}}\n")),
        None => None,
    };
    let built = match build(args, kernel, &state.script, new.as_deref()) {
        Ok(built) => built,
        Err(Failed) if change.is_some() => {
            // The input was refused; the kept script runs on (and that
            // run answers the editor).
            if state.script.is_empty() {
                link.ack();
                return Next::Ended;
            }
            return run_program(args, kernel, state, link, None);
        }
        Err(Failed) => return Next::Ended,
    };
    let before = (state.script.len(), state.probes.len());
    if let Some(Change::Item(text)) = &change {
        accept(state, text);
    }
    let mut pending_ack = true;
    let Some(outcome) = run_built(&built, state, link, &mut pending_ack) else {
        // The kernel refused the new program: forget the item and run the
        // kept script as it was (that run answers the editor).
        if matches!(change, Some(Change::Item(_))) {
            state.script.truncate(before.0);
            state.probes.truncate(before.1);
        }
        if change.is_some() && !state.script.is_empty() {
            return run_program(args, kernel, state, link, None);
        }
        link.ack();
        return Next::Ended;
    };
    if pending_ack {
        link.ack();
    }
    outcome
}

/// Adds an accepted item to the kept script.
fn accept(state: &mut State, text: &str) {
    let text = text.trim();
    state.script.push_str(text);
    state.script.push('\n');
    if is_item(text) && first_word(text) == "probe" {
        state.probes.push(text.to_string());
    }
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

fn first_word(text: &str) -> &str {
    text.split(|c: char| !c.is_alphanumeric())
        .next()
        .unwrap_or("")
}

/// Runs one program until an input replaces or ends it; `None` when it
/// could not start.
fn run_built(
    built: &Built,
    state: &mut State,
    link: &Link,
    pending_ack: &mut bool,
) -> Option<Next> {
    let run_host = |probe: usize, rt: &mut HostRuntime| -> Result<(), RuntimeError> {
        built.host.run_probe(probe, rt)
    };
    let compiled = session::Compiled {
        module: &built.module,
        object: &built.object,
        host: &run_host,
        sources: &built.map,
    };
    let mut hooks = Hooks {
        state,
        link,
        begins: built
            .module
            .probes
            .iter()
            .map(|p| Some(p.span.file) == built.new_file)
            .collect(),
        next: None,
    };
    let settings = session::Settings::default();
    // Answered once the new begin probes have printed.
    let mut ready = || {
        link.ack();
        *pending_ack = false;
    };
    match session::run_with_hooks(&compiled, &settings, &mut ready, &mut hooks) {
        Ok(_) => Some(hooks.next.unwrap_or(Next::Ended)),
        Err(session::SessionError::Load(error)) => {
            let diag = load::describe(&error, &built.object, &built.map, false);
            diag::emit_stderr(&built.map, &[diag]);
            None
        }
        Err(error) => {
            eprintln!("ERROR: {error}");
            None
        }
    }
}

struct Hooks<'s> {
    state: &'s mut State,
    link: &'s Link,
    /// Per module probe: whether it is a begin probe of the new input.
    begins: Vec<bool>,
    next: Option<Next>,
}

impl session::Hooks for Hooks<'_> {
    fn loaded(&mut self, runtime: &mut HostRuntime) {
        restore_globals(runtime, &self.state.saved);
    }

    fn run_begin(&self, probe: usize) -> bool {
        self.begins.get(probe).copied().unwrap_or(false)
    }

    fn poll_every(&self) -> Option<Duration> {
        Some(Duration::from_millis(50))
    }

    fn poll(&mut self, runtime: &mut HostRuntime) -> bool {
        loop {
            let request = match self.link.requests.try_recv() {
                Ok(request) => request,
                Err(TryRecvError::Empty) => return false,
                Err(TryRecvError::Disconnected) => Request::Quit,
            };
            let _ = runtime.output.flush();
            match handle(request, self.state, Some(runtime)) {
                Some(next) => {
                    self.next = Some(next);
                    return true;
                }
                None => self.link.ack(),
            }
        }
    }

    fn ending(&mut self, runtime: &mut HostRuntime) -> bool {
        self.state.saved = save_globals(runtime);
        // End probes run when leaving or when the script ended itself, not
        // when the program is only being replaced.
        !matches!(self.next, Some(Next::Rebuild(_)))
    }
}
