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
        let socket = format!("stap-rs-repl-{}", std::process::id());
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
        self.run(&["send-keys", "-l", line]);
        self.run(&["send-keys", "Enter"]);
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
fn a_session_adds_a_kernel_probe_prints_its_global_and_saves_a_runnable_script() {
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
    let screen = tmux.enter(":probes");
    assert!(
        screen.contains(r#"  1  probe kernel.trace("kfree_skb") {"#),
        "{screen}"
    );
    let counted = drops_counted(&tmux.enter(":print funcs"));
    assert!(counted >= 5, "{counted}");

    let script = tmux.dir.join("saved.stp");
    let screen = tmux.enter(&format!(":save {}", script.display()));
    assert!(screen.contains("saved "), "{screen}");
    check_saved_script_runs(&script);

    let screen = tmux.enter(":help");
    assert!(screen.contains(":print NAME"), "{screen}");

    // A new probe restarts the program; the global keeps its count.
    tmux.enter(r#"probe end { printf("bye %d\n", funcs["tcp_v4_rcv"]) }"#);
    let kept = drops_counted(&tmux.enter(":print funcs"));
    assert!(kept >= counted, "{kept} < {counted}");

    // :quit runs end probes.
    tmux.type_line(":quit");
    let screen = tmux.wait_for("\nbye ", 1);
    eprintln!("{screen}");
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

fn check_saved_script_runs(script: &Path) {
    let text =
        std::fs::read_to_string(script).unwrap_or_else(|e| panic!("{}: {e}", script.display()));
    assert!(text.contains("global funcs"), "{text}");
    assert!(!text.contains("1+2"), "statements are not kept: {text}");
    let out = stap(&["-T", "2", script.to_str().unwrap()]);
    assert!(out.status.success(), "{out:?}");
}
