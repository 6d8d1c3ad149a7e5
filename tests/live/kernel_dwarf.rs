//! stap's DWARF-only kernel probe forms, live: `kernel.function("F@FILE")`
//! and `kernel.statement("F@FILE:LINES")`. They need the running kernel's
//! DWARF (`tests/vm/run provision --dbg 6.12` gives the 6.12 guest
//! Debian's) and kprobes, so they skip elsewhere; the host test checks
//! the error where the DWARF is missing.

use super::{Session, assert_success, serial};
use std::process::{Command, Output};

fn stap(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_stap-rs"))
        .args(args)
        .output()
        .expect("running stap-rs")
}

/// Why `point` cannot be resolved here (no DWARF, no kprobes), or `None`.
fn unresolvable(point: &str) -> Option<String> {
    let out = stap(&["-p2", "-e", &format!("probe {point} {{ }}")]);
    (!out.status.success()).then(|| {
        String::from_utf8_lossy(&out.stderr)
            .lines()
            .find(|l| l.contains("error"))
            .unwrap_or("the probe point does not resolve")
            .to_string()
    })
}

fn skip_unless_resolvable(point: &str) -> bool {
    match unresolvable(point) {
        Some(reason) => {
            eprintln!("stap-rs-skip: {reason}");
            true
        }
        None => false,
    }
}

const PROC_FILES: &str = r#"kernel.function("*@fs/proc*.c")"#;

/// Every function of fs/proc*.c, found through DWARF, attaches; reading
/// a /proc file fires one of them in the reading process.
#[test]
fn a_source_file_wildcard_fires_when_proc_is_read() {
    let _one = serial();
    if skip_unless_resolvable(PROC_FILES) {
        return;
    }
    let listing = stap(&["-p2", "-e", &format!("probe {PROC_FILES} {{ }}")]);
    let listing = String::from_utf8_lossy(&listing.stdout).into_owned();
    let script = format!(
        "probe {PROC_FILES} {{ if (pid() == target()) {{ printf(\"hit %s\\n\", ppfunc()); exit() }} }}"
    );
    let done = Session::start_for(300, &["-c", "cat /proc/self/status", "-e", &script])
        .finish_within(std::time::Duration::from_secs(360));
    assert_success(&done);
    let hit = done
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("hit "))
        .unwrap_or_else(|| panic!("no probe fired:\n{}\n{}", done.stdout, done.stderr));
    assert!(
        listing.contains(&format!("kernel.function(\"{hit}\")")),
        "{hit} is not among the resolved fs/proc functions:\n{listing}"
    );
    // The listing names the well-known ones, and nothing from elsewhere.
    assert!(
        listing.contains("kernel.function(\"proc_pid_status\")"),
        "{listing}"
    );
    assert!(
        !listing.contains("kernel.function(\"vfs_read\")"),
        "{listing}"
    );
}

/// Each line of vfs_read is a kprobe at its first instruction; reading a
/// file runs the function's first line first.
#[test]
fn a_statement_probe_fires_on_a_source_line() {
    let _one = serial();
    let point = r#"kernel.statement("vfs_read@fs/read_write.c:*")"#;
    if skip_unless_resolvable(point) {
        return;
    }
    let script = format!(
        "global lines \
         probe {point} {{ if (pid() == target()) lines[pp()] <<< 1 }} \
         probe end {{ foreach (l in lines) println(l) }}"
    );
    let done = Session::start_for(120, &["-c", "cat /etc/hostname", "-e", &script])
        .finish_within(std::time::Duration::from_secs(180));
    assert_success(&done);
    let fired: Vec<u64> = done
        .stdout
        .lines()
        .filter_map(|l| {
            l.strip_prefix("kernel.statement(\"vfs_read@fs/read_write.c:")?
                .strip_suffix("\")")?
                .parse()
                .ok()
        })
        .collect();
    assert!(
        fired.len() >= 2,
        "expected several lines of vfs_read to fire:\n{}\n{}",
        done.stdout,
        done.stderr
    );
    // The lines that fired are lines of the one function, near each other.
    let (lowest, highest) = (fired.iter().min().unwrap(), fired.iter().max().unwrap());
    assert!(highest - lowest < 100, "{fired:?}");
}

/// A line number that is no line of the function is an error at the
/// probe point, not an empty probe.
#[test]
fn a_missing_line_is_an_error() {
    let point = r#"kernel.statement("vfs_read@fs/read_write.c:*")"#;
    if skip_unless_resolvable(point) {
        return;
    }
    let out = stap(&[
        "-p2",
        "-e",
        r#"probe kernel.statement("vfs_read@fs/read_write.c:1") { }"#,
    ]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no line 1 of a file matching"), "{stderr}");
}

/// `symfileline` of an address a kernel probe saw names the function's
/// source file and a line, from the kernel's DWARF; `symfile` and
/// `symline` are its parts.
#[test]
fn symfileline_names_the_source_line_of_a_kernel_address() {
    let _one = serial();
    if skip_unless_resolvable(r#"kernel.statement("vfs_read@fs/read_write.c:*")"#) {
        return;
    }
    let script = r#"global at
        probe kernel.function("vfs_read") { if (pid() == target()) { at = addr(); exit() } }
        probe end { printf("%s|%s|%s\n", symfileline(at), symfile(at), symline(at)) }"#;
    let done = Session::start_for(120, &["-c", "cat /etc/hostname", "-e", script])
        .finish_within(std::time::Duration::from_secs(180));
    assert_success(&done);
    let line = done.stdout.lines().last().unwrap_or_default().to_string();
    let parts: Vec<&str> = line.split('|').collect();
    let [fileline, file, number] = parts[..] else {
        panic!("unexpected output:\n{}\n{}", done.stdout, done.stderr);
    };
    assert_eq!(file, "fs/read_write.c", "{line}");
    assert!(number.parse::<u64>().is_ok_and(|n| n > 0), "{line}");
    assert_eq!(fileline, format!("{file}:{number}"));
}
