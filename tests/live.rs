//! Live acceptance tests: the real `stap-rs` binary runs scripts against this
//! machine's kernel (root needed), the test makes the probed event happen,
//! and asserts on what the script printed.
//!
//! Every test filters on its own trigger (a process name no one else uses),
//! runs under `-T 20` and waits a bounded time. They hold one lock, so only
//! one session runs at a time: the kill -9 test must see only its own
//! programs disappear. Trigger programs are the C files in `tests/live/`,
//! compiled with `cc` into the test's temporary directory. The last tests
//! run host-only scripts (begin/end/timers/errors/`-c`), which need no root.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

#[path = "live/host.rs"]
mod host;

#[path = "live/examples.rs"]
mod examples;

#[path = "live/functions.rs"]
mod functions;

#[path = "live/netfilter.rs"]
mod netfilter;

#[path = "live/builtins.rs"]
mod builtins;

#[path = "live/kernel_foreach.rs"]
mod kernel_foreach;

#[path = "live/kernel_gaps.rs"]
mod kernel_gaps;

#[path = "live/identity.rs"]
mod identity;

#[path = "live/callgraph.rs"]
mod callgraph;

#[path = "live/kernel_dwarf.rs"]
mod kernel_dwarf;

#[path = "live/try_catch.rs"]
mod try_catch;

#[path = "live/sdt.rs"]
mod sdt;

#[path = "live/plt.rs"]
mod plt;

#[path = "live/pretty.rs"]
mod pretty;

#[path = "live/tapsets.rs"]
mod tapsets;

#[path = "live/reliability.rs"]
mod reliability;

#[path = "live/modules.rs"]
mod modules;

#[path = "live/fleet.rs"]
mod fleet;

#[path = "live/stock_metrics.rs"]
mod stock_metrics;

#[path = "live/kernel_strings.rs"]
mod kernel_strings;

#[path = "live/syscalls.rs"]
mod syscalls;

#[path = "live/concurrency.rs"]
mod concurrency;

#[path = "live/families.rs"]
mod families;

#[path = "live/lsm.rs"]
mod lsm;

#[path = "live/tapset_functions.rs"]
mod tapset_functions;

/// How long a session may take to start (compile, load, attach).
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a session may take to end once started (`-T 20` plus margin).
const FINISH_TIMEOUT: Duration = Duration::from_secs(45);
const READY_LINE: &str = "Pass 5: starting run.";

static ONE_SESSION_AT_A_TIME: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    ONE_SESSION_AT_A_TIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Compiles `tests/live/NAME.c` and returns the binary's path.
fn build(name: &str) -> PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/live")
        .join(format!("{name}.c"));
    let binary = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let status = Command::new("cc")
        .args(["-O1", "-g", "-fno-omit-frame-pointer", "-o"])
        .arg(&binary)
        .arg(&source)
        .status()
        .expect("running cc (tests/setup.sh installs it)");
    assert!(status.success(), "cc failed for {}", source.display());
    binary
}

/// A running `stap-rs` session with its output collected in the background.
struct Session {
    child: Child,
    stderr_lines: Receiver<String>,
    stderr: Arc<Mutex<String>>,
    stdout: Option<JoinHandle<String>>,
}

struct Finished {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

impl Session {
    /// Starts `stap-rs -v -T 20 ARGS...`.
    fn start(args: &[&str]) -> Session {
        Session::start_for(20, args)
    }

    /// Starts `stap-rs -v -T SECONDS ARGS...`: for tests that end the
    /// session themselves and may need longer in a slow (TCG) guest.
    fn start_for(seconds: u32, args: &[&str]) -> Session {
        Session::spawn(seconds, args, None)
    }

    /// [`Session::start`] with `input` on stap-rs's stdin, then end of
    /// input (for `input.char`/`input.line`).
    fn start_with_input(args: &[&str], input: &str) -> Session {
        Session::spawn(20, args, Some(input.as_bytes().to_vec()))
    }

    fn spawn(seconds: u32, args: &[&str], input: Option<Vec<u8>>) -> Session {
        let mut child = Command::new(env!("CARGO_BIN_EXE_stap-rs"))
            .args(["-v", "-T", &seconds.to_string()])
            .args(args)
            .stdin(match input {
                Some(_) => Stdio::piped(),
                None => Stdio::null(),
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting stap-rs");
        if let (Some(input), Some(mut pipe)) = (input, child.stdin.take()) {
            // Dropping the pipe after the write is the end of input.
            thread::spawn(move || {
                use std::io::Write;
                let _ = pipe.write_all(&input);
            });
        }
        let mut out = child.stdout.take().expect("piped stdout");
        let stdout = thread::spawn(move || {
            let mut text = String::new();
            let _ = out.read_to_string(&mut text);
            text
        });
        let err = child.stderr.take().expect("piped stderr");
        let (send, stderr_lines) = mpsc::channel();
        let stderr = Arc::new(Mutex::new(String::new()));
        let all = Arc::clone(&stderr);
        thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                if let Ok(mut all) = all.lock() {
                    all.push_str(&line);
                    all.push('\n');
                }
                let _ = send.send(line);
            }
        });
        Session {
            child,
            stderr_lines,
            stderr,
            stdout: Some(stdout),
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn stderr_so_far(&self) -> String {
        self.stderr.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Waits for the ready line (every probe attached and live).
    fn wait_ready(&mut self) {
        let deadline = Instant::now() + START_TIMEOUT;
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match self.stderr_lines.recv_timeout(left) {
                Ok(line) if line.contains(READY_LINE) => return,
                Ok(_) => {}
                Err(_) => break,
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        panic!(
            "stap-rs never became ready; stderr:\n{}",
            self.stderr_so_far()
        );
    }

    fn has_exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    /// Waits for the session to end on its own (killing it after the
    /// finish timeout) and returns everything it printed.
    fn finish(self) -> Finished {
        self.finish_within(FINISH_TIMEOUT)
    }

    /// [`Session::finish`] with a longer limit, for sessions that load
    /// hundreds of programs in a slow (TCG) guest.
    fn finish_within(mut self, limit: Duration) -> Finished {
        let deadline = Instant::now() + limit;
        let status = loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                break status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let status = self.child.wait().expect("waiting for stap-rs");
                let stderr = self.stderr_so_far();
                panic!("stap-rs did not finish in time ({status}); stderr:\n{stderr}");
            }
            thread::sleep(Duration::from_millis(20));
        };
        let stdout = self
            .stdout
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default();
        // The stderr reader ends at EOF, right after the process exits.
        thread::sleep(Duration::from_millis(50));
        Finished {
            status,
            stdout,
            stderr: self.stderr_so_far(),
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if !self.has_exited() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Runs `trigger NAME ARGS...` every 200 ms until the session ends (the
/// scripts `exit()` at the first matching event), so a trigger that fires
/// a little early or is lost does not fail the test.
fn trigger_until_done(session: &mut Session, trigger: &Path, args: &[&str]) {
    let deadline = Instant::now() + FINISH_TIMEOUT;
    while !session.has_exited() && Instant::now() < deadline {
        let status = Command::new(trigger)
            .args(args)
            .status()
            .expect("running the trigger");
        assert!(status.success(), "trigger {args:?} failed: {status}");
        thread::sleep(Duration::from_millis(200));
    }
}

/// A loopback TCP port with nothing listening on it.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("binding a port");
    listener.local_addr().expect("local address").port()
}

#[track_caller]
/// Whether this kernel lacks the `bpf_task_from_pid` kfunc (Linux 6.1, a
/// guest), which `pid2task()` in kernel probes needs: `-p4` says so, and
/// the caller skips with that line.
fn skip_without_task_from_pid() -> bool {
    let out = Command::new(env!("CARGO_BIN_EXE_stap-rs"))
        .args([
            "-p4",
            "-e",
            r#"probe kernel.trace("sched_switch") { println(pid2task(1)) }"#,
        ])
        .output()
        .expect("running stap-rs -p4");
    let stderr = String::from_utf8_lossy(&out.stderr);
    match stderr
        .lines()
        .find(|l| l.contains("bpf_task_from_pid kfunc"))
    {
        Some(why) => {
            eprintln!("stap-rs-skip: {}", why.trim_start_matches("error: "));
            true
        }
        None => false,
    }
}

fn assert_success(done: &Finished) {
    assert!(
        done.status.success(),
        "stap-rs failed ({})\nstdout:\n{}\nstderr:\n{}",
        done.status,
        done.stdout,
        done.stderr
    );
}

#[test]
fn kfree_skb_names_the_dropping_function_and_process() {
    let _one = serial();
    let trigger = build("trigger");
    let port = closed_port().to_string();
    let mut session = Session::start(&[
        "-e",
        r#"probe kernel.trace("kfree_skb") {
             if (execname() == "stapT1conn") {
               printf("%s %s\n", execname(), symname($location)); exit()
             }
           }"#,
    ]);
    session.wait_ready();
    trigger_until_done(&mut session, &trigger, &["stapT1conn", "connect", &port]);
    let done = session.finish();
    assert_success(&done);
    assert_eq!(
        done.stdout, "stapT1conn tcp_v4_rcv\n",
        "stderr:\n{}",
        done.stderr
    );
}

/// A veth pair whose peer lives in a fresh network namespace, with static
/// neighbour entries both ways so no ARP traffic muddles the drops. Removed
/// on drop, whatever the test's outcome.
struct VethPair {
    namespace: String,
    outer: String,
    inner: String,
}

const OUTER_ADDR: &str = "10.213.77.1";
const INNER_ADDR: &str = "10.213.77.2";
const OUTER_MAC: &str = "02:5a:70:00:00:01";
const INNER_MAC: &str = "02:5a:70:00:00:02";

impl VethPair {
    fn create() -> VethPair {
        let tag = std::process::id() % 100_000;
        let pair = VethPair {
            namespace: format!("stapT2ns{tag}"),
            outer: format!("stT2o{tag}"),
            inner: format!("stT2i{tag}"),
        };
        pair.cleanup();
        let ns = pair.namespace.as_str();
        let (outer, inner) = (pair.outer.as_str(), pair.inner.as_str());
        let outer_cidr = format!("{OUTER_ADDR}/30");
        let inner_cidr = format!("{INNER_ADDR}/30");
        let steps: [&[&str]; 9] = [
            &["netns", "add", ns],
            &[
                "link", "add", outer, "address", OUTER_MAC, "type", "veth", "peer", "name", inner,
                "address", INNER_MAC, "netns", ns,
            ],
            &["addr", "add", &outer_cidr, "dev", outer],
            &["link", "set", outer, "up"],
            &[
                "neigh",
                "replace",
                INNER_ADDR,
                "lladdr",
                INNER_MAC,
                "dev",
                outer,
                "nud",
                "permanent",
            ],
            &["-n", ns, "addr", "add", &inner_cidr, "dev", inner],
            &["-n", ns, "link", "set", inner, "up"],
            &["-n", ns, "link", "set", "lo", "up"],
            &[
                "-n",
                ns,
                "neigh",
                "replace",
                OUTER_ADDR,
                "lladdr",
                OUTER_MAC,
                "dev",
                inner,
                "nud",
                "permanent",
            ],
        ];
        for step in steps {
            let status = Command::new("ip").args(step).status().expect("running ip");
            assert!(status.success(), "ip {step:?} failed");
        }
        pair
    }

    fn cleanup(&self) {
        let quiet = |args: &[&str]| {
            let _ = Command::new("ip")
                .args(args)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        };
        quiet(&["link", "del", &self.outer]);
        quiet(&["netns", "del", &self.namespace]);
    }
}

impl Drop for VethPair {
    fn drop(&mut self) {
        self.cleanup();
    }
}

#[test]
fn device_name_of_a_veth_drop_through_member_chain_and_cast() {
    let _one = serial();
    let trigger = build("trigger");
    let veth = VethPair::create();
    let mut session = Session::start(&[
        "-e",
        r#"function devname:string(skb:long) {
             dev = @cast(skb, "struct sk_buff", "kernel<linux/skbuff.h>")->dev
             dev_name = @cast(dev, "struct net_device", "kernel<linux/netdevice.h>")->name
             if (dev_name != 0) { return sprintf("%s", kernel_string(dev_name)); } else { return "unknown" }
           }
           probe kernel.trace("kfree_skb") {
             if (execname() == "stapT2udp") {
               printf("chain %s\n", kernel_string($skb->dev->name))
               printf("cast %s\n", devname($skb))
               exit()
             }
           }"#,
    ]);
    session.wait_ready();
    // UDP to a closed port inside the namespace: dropped there (no socket)
    // on the inner veth, in the sender's softirq context.
    trigger_until_done(
        &mut session,
        &trigger,
        &["stapT2udp", "udp", INNER_ADDR, "9"],
    );
    let done = session.finish();
    assert_success(&done);
    let expected = format!("chain {0}\ncast {0}\n", veth.inner);
    assert_eq!(done.stdout, expected, "stderr:\n{}", done.stderr);
}

#[test]
fn long_strings_built_in_a_kernel_probe_arrive_intact() {
    let _one = serial();
    let trigger = build("trigger");
    let port = closed_port().to_string();
    let alphabet = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
    let script = format!(
        r#"probe kernel.trace("kfree_skb") {{
             if (execname() == "stapT3conn") {{
               a = "{alphabet}"
               s = a . a . a
               s = sprintf("%s|%d|%s", s, 12345, a)
               printf("%s\n", s)
               exit()
             }}
           }}"#
    );
    let mut session = Session::start(&["-e", &script]);
    session.wait_ready();
    trigger_until_done(&mut session, &trigger, &["stapT3conn", "connect", &port]);
    let done = session.finish();
    assert_success(&done);
    let expected = format!("{alphabet}{alphabet}{alphabet}|12345|{alphabet}");
    assert_eq!(expected.len(), 255);
    let line = done.stdout.strip_suffix('\n').unwrap_or(&done.stdout);
    assert_eq!(line.len(), expected.len(), "stderr:\n{}", done.stderr);
    assert_eq!(line, expected);
}

#[test]
fn uprobe_reads_an_int_and_a_user_string_argument() {
    let _one = serial();
    let target = build("uprobe_target");
    let path = target.display().to_string();
    // `$n`/`$s` come from the binary's DWARF (build() passes -g); the
    // second line reads the same registers DWARF-less, as stap's
    // int_arg(N)/pointer_arg(N) do (x86_64 calling convention).
    let script = format!(
        r#"probe process("{path}").function("f") {{
             printf("f %d %s\n", $n, user_string($s))
             printf("args %d %s\n", int_arg(1), user_string(pointer_arg(2)))
           }}"#
    );
    // -c: the command runs once every probe is live; the session ends
    // when it exits.
    let done = Session::start(&["-c", &path, "-e", &script]).finish();
    assert_success(&done);
    assert_eq!(
        done.stdout, "f 42 hello-uprobe\nargs 42 hello-uprobe\n",
        "stderr:\n{}",
        done.stderr
    );
}

/// A stripped binary whose DWARF was moved to a separate debug file, as
/// distributions ship them (`objcopy --only-keep-debug`, then a
/// `.gnu_debuglink` to it in the binary's `.debug/` directory): `$n`, `$s`
/// and a source line come from the debug file.
#[test]
fn uprobe_reads_parameters_from_a_separate_debug_file() {
    let _one = serial();
    let built = build("uprobe_target");
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("split-debug");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join(".debug")).expect("mkdir");
    let target = dir.join("uprobe_target");
    std::fs::copy(&built, &target).expect("copying the target");
    let debug = dir.join(".debug/uprobe_target.debug");
    let run = |program: &str, args: &[&std::ffi::OsStr]| {
        let status = Command::new(program).args(args).status().expect(program);
        assert!(status.success(), "{program} {args:?} failed");
    };
    run(
        "objcopy",
        &[
            "--only-keep-debug".as_ref(),
            target.as_os_str(),
            debug.as_os_str(),
        ],
    );
    run("strip", &["--strip-debug".as_ref(), target.as_os_str()]);
    let link = format!("--add-gnu-debuglink={}", debug.display());
    run("objcopy", &[link.as_ref(), target.as_os_str()]);

    let path = target.display().to_string();
    // Line 11 of uprobe_target.c is f's `return`; it may share f's first
    // address, so the end probe reports (no order between the two).
    let script = format!(
        r#"global n, s, lines
           probe process("{path}").function("f") {{ n = $n; s = user_string($s) }}
           probe process("{path}").statement("f@uprobe_target.c:11") {{ lines++ }}
           probe end {{ printf("f %d %s lines %d\n", n, s, lines) }}"#
    );
    let done = Session::start(&["-c", &path, "-e", &script]).finish();
    assert_success(&done);
    assert_eq!(
        done.stdout, "f 42 hello-uprobe lines 1\n",
        "stderr:\n{}",
        done.stderr
    );
}

/// A uretprobe sees the registers at the return: `@entry` values are
/// saved per thread by an entry uprobe, and so is a bare argument.
#[test]
fn uretprobe_reads_return_and_entry_values() {
    let _one = serial();
    let target = build("uprobe_target");
    let path = target.display().to_string();
    let script = format!(
        r#"probe process("{path}").function("f").return {{
             printf("ret %d n %d s %s twice %d\n", $return, @entry($n),
                    @entry(user_string($s)), @entry($n * 2))
           }}"#
    );
    let done = Session::start(&["-c", &path, "-e", &script]).finish();
    assert_success(&done);
    assert_eq!(
        done.stdout, "ret 43 n 42 s hello-uprobe twice 84\n",
        "stderr:\n{}",
        done.stderr
    );

    // A bare parameter in the return probe is its value at the entry, as
    // in stap (the implicit `@entry`).
    let bare = format!(r#"probe process("{path}").function("f").return {{ println($n) }}"#);
    let done = Session::start(&["-c", &path, "-e", &bare]).finish();
    assert_success(&done);
    assert_eq!(done.stdout, "42\n", "stderr:\n{}", done.stderr);
}

/// The uprobes a script names are opened while it compiles
/// (runtime/src/attach/early.rs): two probes on one function each get
/// their own event, an entry and a return probe on it both fire, and a
/// wildcard (attached as before) fires beside them, once each.
#[test]
fn uprobes_opened_early_fire_once_each() {
    let _one = serial();
    let target = build("uprobe_target");
    let path = target.display().to_string();
    let script = format!(
        r#"probe process("{path}").function("f") {{ printf("a %d\n", $n) }}
           probe process("{path}").function("f") {{ printf("b %d\n", $n) }}
           probe process("{path}").function("f").return {{ printf("r %d\n", $return) }}
           probe process("{path}").function("ma*") {{ println("w") }}
           probe process("{path}").function("main") {{ println("m") }}"#
    );
    let done = Session::start(&["-c", &path, "-e", &script]).finish();
    assert_success(&done);
    let mut lines: Vec<&str> = done.stdout.lines().collect();
    lines.sort();
    assert_eq!(
        lines,
        ["a 42", "b 42", "m", "r 43", "w"],
        "stderr:\n{}",
        done.stderr
    );
}

/// CONFIG_HZ of the running kernel, from /proc/config.gz.
fn kernel_hz() -> u64 {
    // /proc/config.gz where the kernel has it, else the distribution's
    // /boot/config-RELEASE (Debian's kernels in the VM tests).
    let script = "{ zcat /proc/config.gz 2>/dev/null || cat /boot/config-$(uname -r); } | grep '^CONFIG_HZ='";
    let out = Command::new("sh")
        .args(["-c", script])
        .output()
        .expect("reading the kernel config");
    let text = String::from_utf8_lossy(&out.stdout);
    text.trim()
        .strip_prefix("CONFIG_HZ=")
        .and_then(|hz| hz.parse().ok())
        .unwrap_or_else(|| panic!("no CONFIG_HZ in the kernel config: {text:?}"))
}

#[test]
fn timer_profile_samples_a_busy_cpu_at_hz() {
    let _one = serial();
    let trigger = build("trigger");
    let command = format!("{} stapT5spin spin 4", trigger.display());
    // The spinner's own scheduler run time (sum_exec_runtime, ns) at its
    // first and last sample says how much CPU it got in between, so the
    // expected count holds on a loaded machine too: one sample per tick
    // of that time.
    let done = Session::start(&[
        "-c",
        &command,
        "-e",
        r#"global samples, first, last
           probe timer.profile {
             if (execname() == "stapT5spin") {
               ran = @cast(task_current(), "task_struct")->se->sum_exec_runtime
               if (!samples) first = ran
               last = ran
               samples++
             }
           }
           probe timer.s(2) { printf("samples %d ran_ns %d\n", samples, last - first); exit() }"#,
    ])
    .finish();
    assert_success(&done);
    let fields: Vec<u64> = done
        .stdout
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    let [samples, ran_ns] = fields[..] else {
        panic!(
            "unexpected output {:?}; stderr:\n{}",
            done.stdout, done.stderr
        )
    };
    // On a quiet machine that is one busy CPU for about two seconds.
    assert!(
        ran_ns > 100_000_000,
        "the spinner ran only {ran_ns} ns: {samples} samples"
    );
    let expected = kernel_hz() * ran_ns / 1_000_000_000 + 1;
    assert!(
        samples >= expected * 3 / 4 && samples <= expected * 5 / 4 + 2,
        "{samples} samples over {ran_ns} ns of the spinner's run time, expected {expected} ± 25%"
    );
}

#[test]
fn verifier_rejection_names_the_script_line() {
    let _one = serial();
    let done = Session::start(&[
        "--test-verifier-reject",
        "-e",
        "probe kernel.trace(\"kfree_skb\") {\n  x = 1\n  printf(\"%d\\n\", x)\n}\n",
    ])
    .finish();
    assert!(
        !done.status.success(),
        "a rejected program must fail the run"
    );
    assert!(
        done.stderr.contains("verifier"),
        "the error must say the verifier rejected it:\n{}",
        done.stderr
    );
    assert!(
        done.stderr.contains("<input>:2:"),
        "the error must name line 2 of the script:\n{}",
        done.stderr
    );
    assert!(!done.stderr.contains(READY_LINE), "{}", done.stderr);
}

/// BPF object ids held by a process, read from its fds' fdinfo: programs
/// (`prog_id`) and links (`link_id`).
fn bpf_ids_of(pid: u32) -> (Vec<u64>, Vec<u64>) {
    let (mut progs, mut links) = (Vec::new(), Vec::new());
    let dir = format!("/proc/{pid}/fdinfo");
    for entry in std::fs::read_dir(&dir).expect("reading fdinfo").flatten() {
        let Ok(info) = std::fs::read_to_string(entry.path()) else {
            continue;
        };
        for line in info.lines() {
            let mut parts = line.split(':');
            let (Some(key), Some(value)) = (parts.next(), parts.next()) else {
                continue;
            };
            let Ok(id) = value.trim().parse::<u64>() else {
                continue;
            };
            match key {
                "prog_id" if !progs.contains(&id) => progs.push(id),
                "link_id" if !links.contains(&id) => links.push(id),
                _ => {}
            }
        }
    }
    (progs, links)
}

/// Whether bpftool still finds `kind` (prog or link) `id`.
fn bpf_object_exists(kind: &str, id: u64) -> bool {
    Command::new("bpftool")
        .args([kind, "show", "id", &id.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("running bpftool (tests/setup.sh installs it)")
        .success()
}

/// Every program and link in `progs`/`links` is freed within the wait of
/// [`still_loaded_after_a_while`], and tracefs names no uprobe on `path`.
fn assert_nothing_left_attached(progs: &[u64], links: &[u64], path: &str, after: &str) {
    let leftovers = still_loaded_after_a_while(progs, links);
    assert!(
        leftovers.is_empty(),
        "still loaded after {after}: {leftovers:?}"
    );
    let uprobe_events =
        std::fs::read_to_string("/sys/kernel/tracing/uprobe_events").unwrap_or_default();
    assert!(
        !uprobe_events.contains(path),
        "tracefs uprobe_events still names the target:\n{uprobe_events}"
    );
}

/// The programs and links of `progs` and `links` that bpftool still finds
/// 10 seconds on: a stap-rs that exited leaves the closes that wait for RCU
/// grace periods to helper processes (runtime/src/attach/handoff.rs), and
/// the kernel frees the objects of a killed one after it is gone.
fn still_loaded_after_a_while(progs: &[u64], links: &[u64]) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left: Vec<String> = progs
            .iter()
            .filter(|id| bpf_object_exists("prog", **id))
            .map(|id| format!("prog {id}"))
            .chain(
                links
                    .iter()
                    .filter(|id| bpf_object_exists("link", **id))
                    .map(|id| format!("link {id}")),
            )
            .collect();
        if left.is_empty() || Instant::now() > deadline {
            return left;
        }
        thread::sleep(Duration::from_millis(100));
    }
}

/// The exit does not wait for the uprobe's perf event to close (two RCU
/// grace periods), but the probes are detached all the same: a program
/// attached through a perf event is freed only once the event is closed.
#[test]
fn exit_returns_before_the_kernel_detaches_and_nothing_stays_attached() {
    let _one = serial();
    let target = build("uprobe_target");
    let path = target.display().to_string();
    let script = format!(
        r#"global hits
           probe process("{path}").function("f") {{ hits++ }}
           probe kernel.trace("kfree_skb") {{ hits++ }}
           probe kernel.trace("sched:sched_switch") {{ hits++ }}
           probe end {{ println(hits > 0 ? "hits" : "no hits") }}"#
    );
    let mut session = Session::start(&["-e", &script]);
    session.wait_ready();
    let (progs, links) = bpf_ids_of(session.pid());
    // The two tracepoints' bodies are the same: they share one program.
    assert!(
        progs.len() >= 2 && !links.is_empty(),
        "expected two programs and their links held by stap-rs, found {progs:?} {links:?}"
    );
    let status = Command::new("kill")
        .args(["-INT", &session.pid().to_string()])
        .status()
        .expect("running kill");
    assert!(status.success());
    // finish() reads stdout to its end: the helpers must not hold it.
    let done = session.finish();
    assert_success(&done);
    assert_eq!(done.stdout, "hits\n", "stderr:\n{}", done.stderr);

    assert_nothing_left_attached(&progs, &links, &path, "the exit");
}

/// Probes whose bodies compile to the same program share one loaded
/// program (the verifier checks it once), attached at each point, and
/// every point still counts.
#[test]
fn identical_bodies_share_one_program_and_every_point_counts() {
    let _one = serial();
    let trigger = build("trigger");
    let mut session = Session::start(&[
        "-e",
        r#"global n
           probe kernel.trace("syscalls:sys_enter_getppid"),
                 kernel.trace("syscalls:sys_exit_getppid") {
             if (execname() == "stapshared") n++
           }
           probe end { printf("n=%d\n", n) }"#,
    ]);
    session.wait_ready();
    let (progs, _) = bpf_ids_of(session.pid());
    assert_eq!(progs.len(), 1, "expected one program, found {progs:?}");
    // The trigger names itself stapshared, forks once, and parent and child
    // each call getppid 5 times: 10 entries and 10 exits.
    let status = Command::new(&trigger)
        .args(["stapshared", "getppid", "5"])
        .status()
        .expect("running the trigger");
    assert!(status.success());
    let status = Command::new("kill")
        .args(["-INT", &session.pid().to_string()])
        .status()
        .expect("running kill");
    assert!(status.success());
    let done = session.finish();
    assert_success(&done);
    assert_eq!(done.stdout, "n=20\n", "stderr:\n{}", done.stderr);
}

#[test]
fn kill_9_leaves_no_program_link_or_uprobe_behind() {
    let _one = serial();
    let target = build("uprobe_target");
    let path = target.display().to_string();
    let script = format!(
        r#"global hits
           probe process("{path}").function("f") {{ hits++ }}
           probe kernel.trace("kfree_skb") {{ hits++ }}
           probe timer.profile {{ hits++ }}"#
    );
    let mut session = Session::start(&["-e", &script]);
    session.wait_ready();
    let (progs, links) = bpf_ids_of(session.pid());
    assert!(
        progs.len() >= 3,
        "expected at least three programs held by stap-rs, found {progs:?}"
    );

    let status = Command::new("kill")
        .args(["-9", &session.pid().to_string()])
        .status()
        .expect("running kill");
    assert!(status.success());
    let done = session.finish();
    assert!(!done.status.success());

    // The kernel frees programs and links once their last fd closes,
    // shortly (RCU) after the process is gone.
    assert_nothing_left_attached(&progs, &links, &path, "kill -9");
}

// Host-only sessions: the event loop without kernel probes.

#[test]
fn begin_and_end_probes_run_in_order_around_timers_until_exit() {
    let _one = serial();
    let done = Session::start(&[
        "-e",
        r#"global n
           probe begin(2) { println("begin 2") }
           probe begin(1) { println("begin 1") }
           probe timer.ms(20) { n++; if (n == 3) exit() }
           probe end { printf("end n=%d\n", n) }"#,
    ])
    .finish();
    assert_success(&done);
    assert_eq!(
        done.stdout, "begin 1\nbegin 2\nend n=3\n",
        "stderr:\n{}",
        done.stderr
    );
}

#[test]
fn timeout_ends_the_run_with_end_probes() {
    let _one = serial();
    let started = Instant::now();
    let done = Command::new(env!("CARGO_BIN_EXE_stap-rs"))
        .args(["-T", "0.3", "-e", r#"probe end { println("end") }"#])
        .output()
        .expect("running stap-rs");
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&done.stdout), "end\n");
    // -T must not end the run early; how late is not a test's business.
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(300), "{took:?}");
}

#[test]
fn a_runtime_error_ends_the_run_with_error_probes_and_status_1() {
    let _one = serial();
    let done = Session::start(&[
        "-e",
        r#"global zero
           probe begin { println(10 / zero) }
           probe end { println("end must not run") }
           probe error { println("error probe") }"#,
    ])
    .finish();
    assert_eq!(done.status.code(), Some(1), "stderr:\n{}", done.stderr);
    assert_eq!(done.stdout, "error probe\n");
    assert!(
        done.stderr.contains("ERROR: division by zero"),
        "{}",
        done.stderr
    );
    assert!(
        done.stderr
            .contains("WARNING: Number of errors: 1, skipped probes: 0"),
        "{}",
        done.stderr
    );
}

#[test]
fn the_command_starts_after_begin_probes_and_its_exit_ends_the_run() {
    let _one = serial();
    let done = Session::start(&[
        "-c",
        "echo command ran",
        "-e",
        r#"probe begin { printf("target set: %d\n", target() > 0) }
           probe end { println("end") }"#,
    ])
    .finish();
    assert_success(&done);
    assert_eq!(
        done.stdout, "target set: 1\ncommand ran\nend\n",
        "stderr:\n{}",
        done.stderr
    );
}
