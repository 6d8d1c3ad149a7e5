//! The interactive session, driven through a real pty: `stap-rs -i` runs
//! in a detached tmux session, the test types into it with `send-keys` and
//! reads the screen with `capture-pane`. Needs root (a kernel probe is
//! added) and tmux (tests/setup.sh installs it).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// A tmux server of its own (`-L`), so tests never touch a user's.
struct Tmux {
    socket: String,
    dir: PathBuf,
}

impl Tmux {
    fn start(command: &str) -> Tmux {
        // One server per test: tests run in parallel.
        static STARTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let socket = format!("stap-rs-repl-{}-{n}", std::process::id());
        let dir = std::env::temp_dir().join(&socket);
        std::fs::create_dir_all(&dir).unwrap();
        let tmux = Tmux { socket, dir };
        // HOME is the test's directory: history goes there, not to ~.
        let shell = format!("HOME={} {command}", tmux.dir.display());
        tmux.run(&["new-session", "-d", "-x", "160", "-y", "60", &shell]);
        // The pane stays after stap-rs exits, to read its last words.
        tmux.run(&["set-option", "-g", "remain-on-exit", "on"]);
        tmux
    }

    fn run(&self, args: &[&str]) -> Output {
        let out = Command::new("tmux")
            .args(["-L", &self.socket])
            .args(args)
            .output()
            .expect("tmux runs");
        assert!(out.status.success(), "tmux {args:?}: {out:?}");
        out
    }

    fn screen(&self) -> String {
        let out = self.run(&["capture-pane", "-p", "-S", "-200"]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Types one line (literally) and Enter.
    fn type_line(&self, line: &str) {
        self.type_text(line);
        self.run(&["send-keys", "Enter"]);
    }

    /// Types text (literally), no Enter.
    fn type_text(&self, text: &str) {
        self.run(&["send-keys", "-l", text]);
    }

    /// Presses one key (`Tab`, `C-c`).
    fn press(&self, key: &str) {
        self.run(&["send-keys", key]);
    }

    /// Ctrl-C, then waits for the fresh prompt (keys typed before it
    /// would be flushed when the editor takes the terminal again).
    fn cancel(&self) {
        let prompts = self.screen().matches("stap>").count();
        self.press("C-c");
        self.wait_for("stap>", prompts + 1);
    }

    /// Waits until the screen shows `text` `times` times.
    fn wait_for(&self, text: &str, times: usize) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let screen = self.screen();
            if screen.matches(text).count() >= times {
                return screen;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {text:?} (x{times}); screen:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Types a line and waits for the prompt that follows its output.
    fn enter(&self, line: &str) -> String {
        let prompts = self.screen().matches("stap>").count();
        self.type_line(line);
        self.wait_for("stap>", prompts + 1)
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn skip_reason() -> Option<&'static str> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc_geteuid() } != 0 {
        return Some("the REPL test adds a kernel probe: run as root");
    }
    if Command::new("tmux").arg("-V").output().is_err() {
        return Some("tmux is not installed (tests/setup.sh installs it)");
    }
    None
}

unsafe extern "C" {
    #[link_name = "geteuid"]
    fn libc_geteuid() -> u32;
}

/// Refused connections to a closed loopback port: each RST frees the SYN
/// in tcp_v4_rcv, which fires skb:kfree_skb.
fn make_drops() {
    for _ in 0..5 {
        let _ = std::net::TcpStream::connect(("127.0.0.1", 1));
    }
}

fn stap(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_stap-rs"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn probes_are_added_without_a_restart_detached_reattached_and_saved() {
    if let Some(reason) = skip_reason() {
        eprintln!("stap-rs-skip: {reason}");
        return;
    }
    let tmux = Tmux::start(&format!("{} -i", env!("CARGO_BIN_EXE_stap-rs")));
    tmux.wait_for("stap>", 1);

    // A bare statement runs once, on the host.
    let screen = tmux.enter(r#"printf("%d\n", 1+2)"#);
    assert!(screen.contains("\n3\n"), "{screen}");

    // Multi-line input: the probe is read until its braces close.
    tmux.enter("global funcs");
    tmux.type_line(r#"probe kernel.trace("kfree_skb") {"#);
    tmux.type_line("  funcs[symname($location)]++");
    tmux.enter("}");
    make_drops();
    let screen = tmux.enter(":print funcs");
    assert!(screen.contains(r#"funcs["tcp_v4_rcv"]="#), "{screen}");

    // An error leaves the session (and its global's value) alone.
    let screen = tmux.enter("no_such_function()");
    assert!(screen.contains("error"), "{screen}");
    let counted = drops_counted(&tmux.enter(":print funcs"));
    assert!(counted >= 5, "{counted}");
    let hits = probe_hits(&tmux.enter(":probes"), 1, "kfree_skb");
    assert!(hits >= 5, "{hits}");

    // A second probe and a global of its own: the first probe is not
    // restarted. Its program's run count (BPF run statistics) would start
    // again from 0 if it had been reloaded, and its global keeps counting.
    tmux.enter("global ticks, tick_stats");
    tmux.enter("probe timer.ms(50) { ticks++; tick_stats <<< 1 }");
    std::thread::sleep(Duration::from_millis(300));
    let host_samples = stat_count(&tmux.enter(":print tick_stats"), "tick_stats");
    assert!(host_samples > 0, "{host_samples}");
    tmux.enter("global opens");
    tmux.enter(r#"probe kernel.trace("syscalls:sys_enter_openat") { opens <<< 1 }"#);
    let screen = tmux.enter(":probes");
    assert!(probe_hits(&screen, 1, "kfree_skb") >= hits, "{screen}");
    assert!(screen.contains("sys_enter_openat"), "{screen}");
    assert!(screen.contains("timer.ms(50)"), "{screen}");
    let kept = drops_counted(&tmux.enter(":print funcs"));
    assert!(kept >= counted, "{kept} < {counted}");
    // Statistics keep their samples too: host-held ones are carried to the
    // next host program, map-held ones stay in their map.
    // The timer adds one sample per tick: had its statistic restarted with
    // a host program, it would hold fewer samples than `ticks` counted.
    let screen = tmux.enter(":globals");
    let carried = stat_count(&screen, "tick_stats");
    assert!(carried >= host_samples, "{carried} < {host_samples}");
    let ticks: i64 = screen
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("ticks="))
        .unwrap_or_else(|| panic!("no ticks:\n{screen}"))
        .trim()
        .parse()
        .unwrap();
    assert_eq!(carried, ticks, "{screen}");
    let opens = stat_count(&tmux.enter(":print opens"), "opens");
    tmux.enter(r#"probe end { printf("%d opens\n", @count(opens)) }"#);
    let more_opens = stat_count(&tmux.enter(":print opens"), "opens");
    assert!(more_opens >= opens, "{more_opens} < {opens}");

    // Detached, the probe no longer counts; attached again, it does.
    let screen = tmux.enter(":detach 1");
    assert!(screen.contains("detached probe 1"), "{screen}");
    let before = drops_counted(&tmux.enter(":print funcs"));
    make_drops();
    std::thread::sleep(Duration::from_millis(300));
    let after = drops_counted(&tmux.enter(":print funcs"));
    assert_eq!(after, before, "a detached probe counted drops");
    let screen = tmux.enter(":probes");
    assert!(screen.contains("detached  kernel.trace"), "{screen}");
    tmux.enter(":attach 1");
    make_drops();
    let again = drops_counted(&tmux.enter(":print funcs"));
    assert!(
        again >= after + 5,
        "{again} after re-attaching, {after} before"
    );

    let script = tmux.dir.join("saved.stp");
    let screen = tmux.enter(&format!(":save {}", script.display()));
    assert!(screen.contains("saved "), "{screen}");
    check_saved_script_runs(&script);

    let screen = tmux.enter(":help");
    assert!(screen.contains(":detach ID"), "{screen}");

    // :quit runs end probes.
    tmux.enter(r#"probe end { printf("bye %d\n", funcs["tcp_v4_rcv"]) }"#);
    tmux.type_line(":quit");
    let screen = tmux.wait_for("\nbye ", 1);
    eprintln!("{screen}");
}

#[test]
fn tab_completes_kernel_names_output_spares_the_typed_line_and_history_is_kept() {
    if let Some(reason) = skip_reason() {
        eprintln!("stap-rs-skip: {reason}");
        return;
    }
    let tmux = Tmux::start(&format!("{} -i", env!("CARGO_BIN_EXE_stap-rs")));
    tmux.wait_for("stap>", 1);

    // A tracepoint name, from tracefs.
    tmux.type_text(r#"probe kernel.trace("net:net_dev_que"#);
    tmux.press("Tab");
    tmux.wait_for(r#"probe kernel.trace("net:net_dev_queue"#, 1);
    tmux.cancel();

    // A member of the tracepoint argument's struct, from BTF.
    tmux.type_text(r#"probe kernel.trace("kfree_skb") { printf("%d\n", $skb->protoc"#);
    tmux.press("Tab");
    tmux.wait_for("$skb->protocol", 1);
    tmux.cancel();

    // Through @cast, and a second level.
    tmux.type_text(r#"printf("%d\n", @cast(0, "struct sk_buff")->dev->ifind"#);
    tmux.press("Tab");
    tmux.wait_for(r#""struct sk_buff")->dev->ifindex"#, 1);
    tmux.cancel();

    // A kernel function, from BTF: two candidates, listed on a second Tab.
    tmux.type_text(r#"probe kernel.function("tcp_v4_conn"#);
    tmux.press("Tab");
    tmux.press("Tab");
    tmux.wait_for("tcp_v4_connect", 1);
    tmux.cancel();

    // Probe output arriving while a line is typed goes above it (rustyline's
    // external printer): the half-typed line stays whole, last on screen.
    tmux.enter(r#"probe timer.ms(100) { printf("tick\n") }"#);
    tmux.type_text(r#"printf("half typed"#);
    let ticks = tmux.screen().matches("tick\n").count();
    let screen = tmux.wait_for("tick\n", ticks + 3);
    let last = screen.lines().rev().find(|l| !l.trim().is_empty()).unwrap();
    assert_eq!(last.trim_end(), r#"stap> printf("half typed"#, "{screen}");
    tmux.cancel();

    // History goes to $HOME/.stap-rs_history.
    tmux.enter(r#"printf("%d\n", 6*7)"#);
    let history = std::fs::read_to_string(tmux.dir.join(".stap-rs_history")).unwrap();
    assert!(history.contains("6*7"), "{history}");
    tmux.type_line(":quit");
}

/// The hit count `:probes` shows for probe `id`, checking its point.
fn probe_hits(screen: &str, id: usize, point: &str) -> u64 {
    let table = &screen[screen.rfind("id        hits").unwrap_or(0)..];
    let row = table
        .lines()
        .find(|l| l.split_whitespace().next() == Some(&id.to_string()))
        .unwrap_or_else(|| panic!("no probe {id}:\n{screen}"));
    assert!(row.contains(point), "{row}");
    row.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// N from the last `NAME @count=N ...` line on the screen.
fn stat_count(screen: &str, name: &str) -> i64 {
    let prefix = format!("{name} @count=");
    let line = screen
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no {prefix}:\n{screen}"));
    line.split_whitespace().next().unwrap().parse().unwrap()
}

/// The last `funcs["tcp_v4_rcv"]=N` on the screen.
fn drops_counted(screen: &str) -> i64 {
    let line = screen
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix(r#"funcs["tcp_v4_rcv"]="#))
        .unwrap_or_else(|| panic!("no count of tcp_v4_rcv drops:\n{screen}"));
    line.trim().parse().unwrap()
}

/// The REPL compiles through the same pipeline as a script run: its
/// programs carry line_info and honour the compile options, so a verifier
/// rejection (forced by `--test-verifier-reject`) names the line of the
/// input, and the session goes on.
#[test]
fn a_verifier_rejection_names_the_input_line() {
    if let Some(reason) = skip_reason() {
        eprintln!("stap-rs-skip: {reason}");
        return;
    }
    let tmux = Tmux::start(&format!(
        "{} -i --test-verifier-reject",
        env!("CARGO_BIN_EXE_stap-rs")
    ));
    tmux.wait_for("stap>", 1);
    tmux.type_line(r#"probe kernel.trace("kfree_skb") {"#);
    tmux.type_line("  x = 1");
    tmux.type_line(r#"  printf("%d\n", x)"#);
    let screen = tmux.enter("}");
    assert!(screen.contains("verifier"), "{screen}");
    assert!(screen.contains("<input>:2:"), "{screen}");
    let screen = tmux.enter(r#"printf("%d\n", 40+2)"#);
    assert!(screen.contains("\n42\n"), "{screen}");
}

fn check_saved_script_runs(script: &Path) {
    let text =
        std::fs::read_to_string(script).unwrap_or_else(|e| panic!("{}: {e}", script.display()));
    assert!(text.contains("global funcs"), "{text}");
    assert!(!text.contains("1+2"), "statements are not kept: {text}");
    let out = stap(&["-T", "2", script.to_str().unwrap()]);
    assert!(out.status.success(), "{out:?}");
}
