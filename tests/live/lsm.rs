//! LSM probes, live: `kernel.lsm("HOOK")` and stap's `lsm.*` aliases as
//! BPF LSM programs, reading the hook's arguments while this test binds a
//! socket and opens a file, and, under -g, denying a bind. They need BPF
//! trampolines and `bpf` in the active LSM list: where the kernel refuses
//! the program (this host: trampolines EPERM), the tests skip with
//! stap-rs's own error.

use super::{Session, assert_success, serial};
use std::net::UdpSocket;
use std::process::Command;
use std::time::{Duration, Instant};

/// stap-rs's reason when this kernel refuses a BPF LSM program (its load
/// or its attach), or `None` when one runs.
fn lsm_refused() -> Option<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_stap-rs"))
        .args(["-T", "1", "-e", r#"probe kernel.lsm("socket_bind") { }"#])
        .output()
        .expect("running stap-rs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    stderr
        .lines()
        .find(|l| l.contains("BPF LSM program"))
        .map(|l| l.trim_start_matches("error: ").to_string())
}

fn skip_without_lsm() -> bool {
    match lsm_refused() {
        Some(reason) => {
            eprintln!("stap-rs-skip: {reason}");
            true
        }
        None => false,
    }
}

/// A loopback UDP port nothing is bound to.
fn free_port() -> u16 {
    let socket = UdpSocket::bind("127.0.0.1:0").expect("binding a port");
    socket.local_addr().expect("local address").port()
}

const BIND_AND_OPEN: &str = r#"
global bound, opened
probe kernel.lsm("socket_bind") {
  if ($address->sa_family == 2 && ntohs(@cast($address, "struct sockaddr_in")->sin_port) == $1 && !bound) {
    printf("%s family=%d port=%d addrlen=%d ctx_is_args=%d\n", pp(), $address->sa_family,
           ntohs(@cast($address, "struct sockaddr_in")->sin_port), $addrlen,
           kernel_long($ctx + 8) == $address)
    bound = 1
  }
  if (bound && opened) exit()
}
probe lsm.file_open {
  name = kernel_string(@cast(file, "struct file")->f_path->dentry->d_name->name)
  if (name == @2 && !opened) {
    printf("%s %s\n", pn(), name)
    opened = 1
  }
  if (bound && opened) exit()
}
"#;

/// A bind and an open seen through their hooks: the bind's arguments by
/// their BTF names, `$ctx` as the address of the argument array (its
/// second word is `$address`), and the file through the alias's `file`.
#[test]
fn lsm_probes_see_a_bind_and_an_open_with_their_arguments() {
    let _one = serial();
    if skip_without_lsm() {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let name = format!("stap-rs-lsm-{}", std::process::id());
    let path = dir.path().join(&name);
    std::fs::write(&path, b"x").expect("writing the file");
    let port = free_port();
    let mut session = Session::start(&["-e", BIND_AND_OPEN, &port.to_string(), &name]);
    session.wait_ready();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !session.has_exited() && Instant::now() < deadline {
        drop(UdpSocket::bind(("127.0.0.1", port)));
        drop(std::fs::File::open(&path));
        std::thread::sleep(Duration::from_millis(100));
    }
    let done = session.finish();
    assert_success(&done);
    let mut lines: Vec<&str> = done.stdout.lines().collect();
    lines.sort();
    assert_eq!(
        lines,
        [
            format!("kernel.lsm(\"socket_bind\") family=2 port={port} addrlen=16 ctx_is_args=1"),
            format!("lsm.file_open {name}"),
        ],
        "stderr:\n{}",
        done.stderr
    );
}

const DENY_BIND: &str = r#"
probe kernel.lsm("socket_bind") {
  if ($address->sa_family == 2 && ntohs(@cast($address, "struct sockaddr_in")->sin_port) == $1) {
    $return = -1
    printf("denied port %d\n", $1)
    exit()
  }
}
"#;

/// Under -g a verdict denies: the bind the probe sees fails with EPERM
/// (`$return = -1`), and the same bind succeeds once the probe is gone.
#[test]
fn a_guru_lsm_probe_denies_a_bind_with_eperm() {
    let _one = serial();
    if skip_without_lsm() {
        return;
    }
    let port = free_port();
    let mut session = Session::start(&["-g", "-e", DENY_BIND, &port.to_string()]);
    session.wait_ready();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut refused = None;
    while refused.is_none() && Instant::now() < deadline {
        match UdpSocket::bind(("127.0.0.1", port)) {
            Ok(socket) => drop(socket),
            Err(error) => refused = Some(error),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let done = session.finish();
    assert_success(&done);
    let error = refused.expect("no bind was refused while the probe ran");
    assert_eq!(error.raw_os_error(), Some(libc::EPERM), "{error}");
    assert_eq!(done.stdout, format!("denied port {port}\n"));
    UdpSocket::bind(("127.0.0.1", port)).expect("the bind succeeds after the run");
}

/// Without -g, setting the verdict is refused at its line, before any
/// program is loaded (so this runs on every kernel).
#[test]
fn setting_an_lsm_verdict_needs_guru_mode() {
    let out = Command::new(env!("CARGO_BIN_EXE_stap-rs"))
        .args(["-p4", "-e", DENY_BIND, "1"])
        .output()
        .expect("running stap-rs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("setting the probe's verdict requires guru mode (-g)"),
        "{stderr}"
    );
    let guru = Command::new(env!("CARGO_BIN_EXE_stap-rs"))
        .args(["-g", "-p4", "-e", DENY_BIND, "1"])
        .output()
        .expect("running stap-rs");
    assert!(
        guru.status.success(),
        "{}",
        String::from_utf8_lossy(&guru.stderr)
    );
}
