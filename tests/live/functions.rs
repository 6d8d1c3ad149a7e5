//! kernel.function probes, live: entry and return probes on the TCP
//! functions a known loopback exchange goes through, each run once with
//! fentry/fexit and once with kprobes/kretprobes (`--kernel-probes`), which
//! must print the same. Where the kernel lacks a mechanism (this host has
//! neither), its tests skip; the fallback test covers that case instead.

use super::{Finished, Session, assert_success, bpf_ids_of, bpf_object_exists, build, serial};
use super::{closed_port, trigger_until_done};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// The loopback send every TCP test makes: 9 bytes.
const PAYLOAD: &[u8; 9] = b"stap-rs!\n";
/// The receiver's buffer size: `@entry($len)` of tcp_recvmsg.
const RECV_BUFFER: usize = 77;

/// Why `--kernel-probes=OPTION` cannot run here, asked of stap-rs itself
/// (it probes the kernel for the mechanism), or `None` when it can.
fn unavailable(option: &str) -> Option<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_stap-rs"))
        .args(["--kernel-probes", option, "-p2", "-e"])
        .arg(r#"probe kernel.function("tcp_sendmsg") { }"#)
        .output()
        .expect("running stap-rs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = stderr.lines().find(|l| l.contains("cannot use"));
    line.map(|l| l.trim_start_matches("error: ").to_string())
}

/// Skips the calling test (returns true) when `option` is unavailable.
fn skip_without(option: &str) -> bool {
    match unavailable(option) {
        Some(reason) => {
            eprintln!("stap-rs-skip: {reason}");
            true
        }
        None => false,
    }
}

/// A loopback TCP exchange repeated every 200 ms until stopped: connect,
/// send PAYLOAD, and read it on the accepting side with a RECV_BUFFER-byte
/// buffer. Sessions exit at the first matching event; repeating makes a
/// send that lands before the probes are live harmless.
struct Traffic {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Traffic {
    fn listen() -> (TcpListener, u16) {
        let listener = TcpListener::bind("127.0.0.1:0").expect("binding a port");
        let port = listener.local_addr().expect("local address").port();
        (listener, port)
    }

    fn start(listener: TcpListener, port: u16) -> Traffic {
        let stop = Arc::new(AtomicBool::new(false));
        let done = Arc::clone(&stop);
        let server = thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { break };
                if done.load(Ordering::Relaxed) {
                    break;
                }
                let mut buffer = [0u8; RECV_BUFFER];
                let _ = stream.read(&mut buffer);
            }
        });
        let done = Arc::clone(&stop);
        let client = thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                if let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) {
                    let _ = stream.write_all(PAYLOAD);
                }
                thread::sleep(Duration::from_millis(200));
            }
            // Wakes the accept loop so it sees the stop flag.
            let _ = TcpStream::connect(("127.0.0.1", port));
        });
        Traffic {
            stop,
            threads: vec![server, client],
        }
    }

    fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Runs SCRIPT (which may filter on `$1`, the port as it sits in memory:
/// network byte order read as a native u16) while Traffic runs; returns
/// what it printed and the port.
fn run_with_traffic(option: &str, script: &str) -> (Finished, u16) {
    let (listener, port) = Traffic::listen();
    let in_memory = u16::from_ne_bytes(port.to_be_bytes()).to_string();
    let mut session = Session::start(&["--kernel-probes", option, "-e", script, &in_memory]);
    session.wait_ready();
    let traffic = Traffic::start(listener, port);
    let done = session.finish();
    traffic.stop();
    assert_success(&done);
    (done, port)
}

const SENDMSG: &str = r#"
    probe kernel.function("tcp_sendmsg") {
        if ($size == 9 && $sk->__sk_common->skc_dport == $1) {
            printf("size=%d dport=%d\n", $size, ntohs($sk->__sk_common->skc_dport))
            exit()
        }
    }"#;

fn sendmsg(option: &str) {
    let _one = serial();
    if skip_without(option) {
        return;
    }
    let (done, port) = run_with_traffic(option, SENDMSG);
    assert_eq!(
        done.stdout,
        format!("size=9 dport={port}\n"),
        "stderr:\n{}",
        done.stderr
    );
}

#[test]
fn tcp_sendmsg_size_and_dport_with_fentry() {
    sendmsg("fentry");
}

#[test]
fn tcp_sendmsg_size_and_dport_with_kprobe() {
    sendmsg("kprobe");
}

/// A pointer argument is a plain number in the script, whatever the
/// mechanism: bit operations, arithmetic, a NULL test and `@cast` of a
/// computed address all work on `$sk` (fentry's context types it as a
/// kernel object, which the verifier would not let through these).
const POINTER_ARITHMETIC: &str = r#"
    probe kernel.function("tcp_sendmsg") {
        if ($size == 9 && $sk->__sk_common->skc_dport == $1) {
            sk = $sk
            printf("aligned=%d high=%d same=%d xor=%d nonnull=%d null=%d cast=%d\n",
                   sk & 7, (sk >> 63) & 1, (sk + 24) - 24 == $sk, sk ^ $sk,
                   $sk != 0, $sk == 0,
                   @cast((sk | 1) - 1, "struct sock", "kernel")->__sk_common->skc_dport == $1)
            exit()
        }
    }"#;

fn pointer_arithmetic(option: &str) {
    let _one = serial();
    if skip_without(option) {
        return;
    }
    let (done, _) = run_with_traffic(option, POINTER_ARITHMETIC);
    // Kernel addresses are 8-aligned for a struct sock and have bit 63 set.
    assert_eq!(
        done.stdout, "aligned=0 high=1 same=1 xor=0 nonnull=1 null=0 cast=1\n",
        "stderr:\n{}",
        done.stderr
    );
}

#[test]
fn pointer_argument_arithmetic_and_cast_with_fentry() {
    pointer_arithmetic("fentry");
}

#[test]
fn pointer_argument_arithmetic_and_cast_with_kprobe() {
    pointer_arithmetic("kprobe");
}

/// `$return` and `@entry($len)` of tcp_recvmsg: the receiver's read. An
/// `@entry` of more than a plain argument is saved by an entry probe, on
/// fexit as on kretprobes.
const RECVMSG: &str = r#"
    probe kernel.function("tcp_recvmsg").return {
        if ($return == 9 && @entry($len) == 77) {
            printf("return=%d len=%d twice=%d\n", $return, @entry($len), @entry($len * 2))
            exit()
        }
    }"#;

#[test]
fn tcp_recvmsg_return_and_entry_len_with_fexit() {
    let _one = serial();
    if skip_without("fentry") {
        return;
    }
    let (done, _) = run_with_traffic("fentry", RECVMSG);
    assert_eq!(
        done.stdout, "return=9 len=77 twice=154\n",
        "stderr:\n{}",
        done.stderr
    );
}

/// A kretprobe sees the registers at return, where `$len` is gone: an
/// entry kprobe saves `@entry($len)` per thread for the return handler.
/// A bare `$len` in the return probe is the same value at the entry, as
/// in stap (the implicit `@entry`).
#[test]
fn tcp_recvmsg_return_with_kretprobe() {
    let _one = serial();
    if skip_without("kprobe") {
        return;
    }
    let (done, _) = run_with_traffic("kprobe", RECVMSG);
    assert_eq!(
        done.stdout, "return=9 len=77 twice=154\n",
        "stderr:\n{}",
        done.stderr
    );

    let implicit = r#"
        probe kernel.function("tcp_recvmsg").return {
            if ($return == 9 && $len == 77) { printf("len=%d\n", $len); exit() }
        }"#;
    let (done, _) = run_with_traffic("kprobe", implicit);
    assert_eq!(done.stdout, "len=77\n", "stderr:\n{}", done.stderr);
}

fn connect_by_wildcard(option: &str) {
    let _one = serial();
    if skip_without(option) {
        return;
    }
    let trigger = build("trigger");
    let port = closed_port().to_string();
    let mut session = Session::start(&[
        "--kernel-probes",
        option,
        "-e",
        // Each expansion (tcp_v4_connect, tcp_v4_conn_request) has its
        // own probefunc() and ppfunc(), and its own parameters.
        r#"probe kernel.function("tcp_v4_conn*") {
               if (execname() == "kf_connect") {
                   printf("%s %s %s addr_len=%d\n", probefunc(), ppfunc(),
                          @defined($addr_len) ? "tcp_v4_connect" : "another",
                          @choose_defined($addr_len, -1))
                   exit()
               }
           }"#,
    ]);
    session.wait_ready();
    trigger_until_done(&mut session, &trigger, &["kf_connect", "connect", &port]);
    let done = session.finish();
    assert_success(&done);
    // The wildcard matched more than the one function that fires.
    assert!(
        !done.stderr.contains("analyzed script: 1 probes"),
        "stderr:\n{}",
        done.stderr
    );
    // sizeof(struct sockaddr_in), as connect(2) passes it.
    assert_eq!(
        done.stdout, "tcp_v4_connect tcp_v4_connect tcp_v4_connect addr_len=16\n",
        "stderr:\n{}",
        done.stderr
    );
}

#[test]
fn tcp_v4_connect_through_a_wildcard_with_fentry() {
    connect_by_wildcard("fentry");
}

#[test]
fn tcp_v4_connect_through_a_wildcard_with_kprobe() {
    connect_by_wildcard("kprobe");
}

/// The kprobes registered in the kernel, where debugfs shows them.
fn kprobes_list() -> Option<String> {
    std::fs::read_to_string("/sys/kernel/debug/kprobes/list").ok()
}

fn kill_9_cleanup(option: &str) {
    let _one = serial();
    if skip_without(option) {
        return;
    }
    // Two bodies that differ: identical ones would share one program.
    let script = r#"global hits
        probe kernel.function("tcp_sendmsg") { hits++ }
        probe kernel.function("tcp_recvmsg").return { hits += 2 }"#;
    let mut session = Session::start(&["--kernel-probes", option, "-e", script]);
    session.wait_ready();
    let (progs, links) = bpf_ids_of(session.pid());
    assert!(
        progs.len() >= 2,
        "expected at least two programs held by stap-rs, found {progs:?}"
    );
    if option == "kprobe"
        && let Some(list) = kprobes_list()
    {
        assert!(
            list.contains("tcp_sendmsg"),
            "the kprobe is not registered:\n{list}"
        );
    }

    let status = Command::new("kill")
        .args(["-9", &session.pid().to_string()])
        .status()
        .expect("running kill");
    assert!(status.success());
    let done = session.finish();
    assert!(!done.status.success());

    // Programs, links and perf events go when their last fd closes,
    // shortly (RCU) after the process is gone.
    let deadline = Instant::now() + Duration::from_secs(10);
    let leftovers = loop {
        let mut left: Vec<String> = progs
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
        let list = kprobes_list().unwrap_or_default();
        if list.contains("tcp_sendmsg") || list.contains("tcp_recvmsg") {
            left.push(format!("kprobes:\n{list}"));
        }
        if left.is_empty() || Instant::now() > deadline {
            break left;
        }
        thread::sleep(Duration::from_millis(100));
    };
    assert!(
        leftovers.is_empty(),
        "still loaded after kill -9: {leftovers:?}"
    );
    let events = std::fs::read_to_string("/sys/kernel/tracing/kprobe_events").unwrap_or_default();
    assert!(
        !events.contains("tcp_sendmsg") && !events.contains("tcp_recvmsg"),
        "tracefs kprobe_events still names a probed function:\n{events}"
    );
}

#[test]
fn kill_9_leaves_no_fentry_program_or_link_behind() {
    kill_9_cleanup("fentry");
}

#[test]
fn kill_9_leaves_no_kprobe_program_or_event_behind() {
    kill_9_cleanup("kprobe");
}

/// Where neither mechanism exists (this host), a kernel.function probe
/// fails with one clear line, so does forcing either mechanism, and a `?`
/// probe is skipped.
#[test]
fn without_fentry_or_kprobes_a_function_probe_fails_clearly_and_optional_is_skipped() {
    let _one = serial();
    if unavailable("fentry").is_none() || unavailable("kprobe").is_none() {
        eprintln!("stap-rs-skip: this kernel has fentry or kprobes; the fallback needs neither");
        return;
    }
    let done = Session::start(&["-e", r#"probe kernel.function("tcp_sendmsg") { }"#]).finish();
    assert!(!done.status.success(), "stdout:\n{}", done.stdout);
    let first_error = done.stderr.lines().find(|l| l.starts_with("error"));
    assert_eq!(
        first_error,
        Some(r#"error: kernel.function("tcp_sendmsg") cannot be probed on this kernel"#),
        "stderr:\n{}",
        done.stderr
    );

    for (option, mechanism) in [("fentry", "fentry/fexit"), ("kprobe", "kprobes")] {
        let done = Session::start(&[
            "--kernel-probes",
            option,
            "-e",
            r#"probe kernel.function("tcp_sendmsg") { }"#,
        ])
        .finish();
        assert!(!done.status.success(), "stdout:\n{}", done.stdout);
        let expected = format!(
            r#"error: kernel.function("tcp_sendmsg") cannot use {mechanism} (--kernel-probes={option}): "#
        );
        assert!(
            done.stderr.lines().any(|l| l.starts_with(&expected)),
            "expected a line starting {expected:?}; stderr:\n{}",
            done.stderr
        );
    }

    let done = Session::start(&[
        "-e",
        r#"probe kernel.function("tcp_sendmsg")? { println("never") }
           probe begin { println("begun"); exit() }"#,
    ])
    .finish();
    assert_success(&done);
    assert_eq!(done.stdout, "begun\n", "stderr:\n{}", done.stderr);
}

/// Whether this kernel's perf-event link info carries a kprobe's miss
/// count (`bpf_link_info.perf_event.kprobe.missed`), asked of its BTF
/// through stap-rs itself.
fn kprobe_misses_readable() -> bool {
    let out = Command::new(env!("CARGO_BIN_EXE_stap-rs"))
        .arg("-e")
        .arg(
            r#"probe begin {
                 println(@defined(@cast(0, "struct bpf_link_info", "kernel")->perf_event->kprobe->missed) ? "yes" : "no")
                 exit()
               }"#,
        )
        .output()
        .expect("running stap-rs");
    String::from_utf8_lossy(&out.stdout).trim() == "yes"
}

/// A kprobe that fires while another kprobe's program runs on the same CPU
/// is missed, and stap counts it as a skipped probe. The tcp_sendmsg
/// handler calls bpf_snprintf (a sprintf), which runs
/// bpf_bprintf_prepare, which carries a second kprobe: each of those
/// nested hits is a miss.
#[test]
fn kprobe_misses_count_as_skipped_probes() {
    let _one = serial();
    if skip_without("kprobe") {
        return;
    }
    if !kprobe_misses_readable() {
        eprintln!(
            "stap-rs-skip: this kernel's link info has no kprobe miss count (bpf_link_info.perf_event.kprobe.missed)"
        );
        return;
    }
    let script = r#"global sends
        probe kernel.function("tcp_sendmsg") {
            if ($size == 9 && $sk->__sk_common->skc_dport == $1) {
                text = sprintf("%d bytes", $size)
                sends++
                if (sends == 3) { printf("%s x%d\n", text, sends); exit() }
            }
        }
        probe kernel.function("bpf_bprintf_prepare") { }"#;
    let (done, _) = run_with_traffic("kprobe", script);
    assert_eq!(done.stdout, "9 bytes x3\n", "stderr:\n{}", done.stderr);
    let skipped = done
        .stderr
        .lines()
        .find_map(|l| l.split("skipped probes: ").nth(1))
        .and_then(|n| n.trim().parse::<u64>().ok());
    assert!(
        skipped.is_some_and(|n| n >= 3),
        "expected at least 3 skipped probes (one per nested bpf_bprintf_prepare); stderr:\n{}",
        done.stderr
    );
}
