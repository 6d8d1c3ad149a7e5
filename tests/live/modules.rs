//! Probes into kernel modules, live: a module that is not loaded is read
//! from its file under /lib/modules/RELEASE, so its probes compile; running
//! them stops with an error naming the module, unless the probe is
//! optional; once the module is loaded they attach and fire. The module is
//! `dummy` (no dependencies, in Debian's kernels, not loaded by default):
//! adding a dummy link runs its dummy_dev_init. It needs the module's file
//! and kprobes or fentry, so in practice the guests run it (tests/vm mounts
//! the guest kernel's own /lib/modules); elsewhere it skips. The loaded
//! module is probed both ways: `module("dummy").function(...)` and
//! `kprobe.module("dummy").function(...)` (entry and return).

use super::{Session, assert_success, serial};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const MODULE: &str = "dummy";
const LINK: &str = "stapdummy0";

/// Prints the new link's name and ends the run.
const SCRIPT: &str = r#"probe module("dummy").function("dummy_dev_init") {
  printf("init %s\n", kernel_string($dev->name)); exit()
}"#;

/// The dummy module's file of the running kernel, if there is one.
fn module_file() -> Option<PathBuf> {
    let release = Command::new("uname").arg("-r").output().ok()?;
    let release = String::from_utf8_lossy(&release.stdout).trim().to_string();
    let dir = Path::new("/lib/modules")
        .join(release)
        .join("kernel/drivers/net");
    ["dummy.ko", "dummy.ko.xz", "dummy.ko.zst", "dummy.ko.gz"]
        .iter()
        .map(|name| dir.join(name))
        .find(|path| path.is_file())
}

fn is_loaded(module: &str) -> bool {
    std::fs::read_to_string("/proc/modules")
        .unwrap_or_default()
        .lines()
        .any(|line| line.split_whitespace().next() == Some(module))
}

fn stap(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_stap-rs"))
        .args(args)
        .output()
        .expect("running stap-rs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn a_module_probe_compiles_unloaded_fails_to_run_unloaded_and_fires_once_loaded() {
    let _one = serial();
    let Some(file) = module_file() else {
        eprintln!("stap-rs-skip: no {MODULE} module file under /lib/modules/$(uname -r)");
        return;
    };
    if is_loaded(MODULE) {
        // A run before this one loaded it; unload to test from the start.
        let _ = Command::new("rmmod").arg(MODULE).status();
    }
    assert!(
        !is_loaded(MODULE),
        "{MODULE} is loaded and cannot be unloaded"
    );

    // Not loaded: compiles from the module's file...
    let compiled = stap(&["-p4", "-e", SCRIPT]);
    let stderr = text(&compiled.stderr);
    if stderr.contains("cannot be probed") || stderr.contains("needs kprobes") {
        eprintln!("stap-rs-skip: no kprobes or fentry here: {stderr}");
        return;
    }
    assert!(compiled.status.success(), "-p4 failed:\n{stderr}");
    // ...but does not run, and says why.
    let refused = stap(&["-T", "10", "-e", SCRIPT]);
    let stderr = text(&refused.stderr);
    assert!(!refused.status.success(), "ran without {MODULE} loaded");
    assert!(
        stderr.contains("module dummy is not loaded; modprobe dummy"),
        "{stderr}"
    );
    // An optional probe is left out, and the rest of the script runs.
    let optional = stap(&[
        "-T",
        "10",
        "-e",
        r#"probe module("dummy").function("dummy_dev_init") ? { print("fired\n") }
           probe begin { print("began\n"); exit() }"#,
    ]);
    assert!(optional.status.success(), "{}", text(&optional.stderr));
    assert_eq!(text(&optional.stdout), "began\n");

    // Loaded: the probe attaches and sees the new link.
    let loaded = Command::new("insmod")
        .arg(&file)
        .status()
        .expect("running insmod");
    assert!(loaded.success(), "insmod {} failed", file.display());
    let mut session = Session::start_for(60, &["-e", SCRIPT]);
    session.wait_ready();
    let added = Command::new("ip")
        .args(["link", "add", LINK, "type", "dummy"])
        .status()
        .expect("running ip");
    let done = session.finish();
    let _ = Command::new("ip").args(["link", "del", LINK]).status();
    // The same function through kprobe.module: a kprobe and a kretprobe,
    // with its parameter at the entry and its return value (0) at the end.
    let mut session = Session::start_for(60, &["-e", KPROBE_SCRIPT]);
    session.wait_ready();
    let added_again = Command::new("ip")
        .args(["link", "add", LINK, "type", "dummy"])
        .status()
        .expect("running ip");
    let kprobed = session.finish();
    let _ = Command::new("ip").args(["link", "del", LINK]).status();
    let _ = Command::new("rmmod").arg(MODULE).status();
    assert!(added.success(), "ip link add {LINK} type dummy failed");
    assert_success(&done);
    assert_eq!(done.stdout, format!("init {LINK}\n"));
    assert!(
        added_again.success(),
        "ip link add {LINK} type dummy failed"
    );
    assert_success(&kprobed);
    assert_eq!(
        kprobed.stdout,
        format!("kprobe init {LINK}\nkprobe return 0 from dummy_dev_init\n")
    );
}

/// `kprobe.module("M").function("F")[.return]`: DWARF-less, by kprobes
/// whatever `--kernel-probes` says; the parameters come from the module's
/// BTF.
const KPROBE_SCRIPT: &str = r#"probe kprobe.module("dummy").function("dummy_dev_init") {
  printf("kprobe init %s\n", kernel_string($dev->name))
}
probe kprobe.module("dummy").function("dummy_dev_init").return {
  printf("kprobe return %d from %s\n", $return, ppfunc()); exit()
}"#;

/// The nfsd module's file, if the running kernel has one.
fn nfsd_file() -> Option<PathBuf> {
    let release = Command::new("uname").arg("-r").output().ok()?;
    let release = String::from_utf8_lossy(&release.stdout).trim().to_string();
    let dir = Path::new("/lib/modules")
        .join(release)
        .join("kernel/fs/nfsd");
    ["nfsd.ko", "nfsd.ko.xz", "nfsd.ko.zst", "nfsd.ko.gz"]
        .iter()
        .map(|name| dir.join(name))
        .find(|path| path.is_file())
}

/// Every nfsd.* alias compiles from nfsd's file (the guests do not load
/// nfsd), with its variables; a run names the module. Firing them needs an
/// NFS server and client, which the guests do not have.
#[test]
fn every_nfsd_alias_compiles_from_the_module_file_and_a_run_names_the_module() {
    let _one = serial();
    if nfsd_file().is_none() || is_loaded("nfsd") {
        eprintln!("stap-rs-skip: needs nfsd's module file, and nfsd not loaded");
        return;
    }
    let script = r#"probe nfsd.entries, nfsd.proc.entries, nfsd.dispatch {
  printf("%s %s %s\n", name, client_ip, argstr)
}
probe nfsd.return, nfsd.proc.return, nfsd.dispatch.return { printf("%s %s\n", name, retstr) }
probe nfsd.proc.lookup, nfsd.proc.remove { printf("%s %d %d %s\n", filename, uid, gid, __svc_fh(fh)) }
probe nfsd.proc.read, nfsd.proc.write, nfsd.proc.commit { printf("%d %d %s\n", size, offset, units) }
probe nfsd.proc.rename, nfsd.rename { printf("%s %s\n", filename, tname) }"#;
    let compiled = stap(&["-p4", "-e", script]);
    let stderr = text(&compiled.stderr);
    if stderr.contains("cannot be probed") || stderr.contains("needs kprobes") {
        eprintln!("stap-rs-skip: no kprobes or fentry here: {stderr}");
        return;
    }
    assert!(compiled.status.success(), "-p4 failed:\n{stderr}");
    let refused = stap(&["-T", "10", "-e", script]);
    assert!(!refused.status.success(), "ran without nfsd loaded");
    let stderr = text(&refused.stderr);
    assert!(
        stderr.contains("module nfsd is not loaded; modprobe nfsd"),
        "{stderr}"
    );
}
