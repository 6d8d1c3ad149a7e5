//! User-space SDT markers (`process("PATH").mark("NAME")`) on a program
//! built here with `<sys/sdt.h>` (Debian's systemtap-sdt-dev): the
//! arguments of every operand form the compiler writes, `$$name` and
//! `$$provider`, and a marker behind a semaphore.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::{Session, assert_success, serial};

/// Builds sdt_target from its two files; `None` (a skip) without sys/sdt.h.
fn build_sdt_target() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/live");
    let binary = Path::new(env!("CARGO_TARGET_TMPDIR")).join("sdt_target");
    let header = Command::new("sh")
        .args([
            "-c",
            "echo '#include <sys/sdt.h>' | cc -E - >/dev/null 2>&1",
        ])
        .status()
        .is_ok_and(|s| s.success());
    if !header {
        eprintln!("stap-rs-skip: no <sys/sdt.h> (tests/setup.sh installs systemtap-sdt-dev)");
        return None;
    }
    let status = Command::new("cc")
        .args(["-O1", "-g", "-fno-omit-frame-pointer", "-o"])
        .arg(&binary)
        .arg(dir.join("sdt_target.c"))
        .arg(dir.join("sdt_guarded.c"))
        .status()
        .expect("running cc");
    assert!(status.success(), "cc failed for sdt_target");
    Some(binary)
}

#[test]
fn sdt_marker_arguments_of_every_operand_form() {
    let _one = serial();
    let Some(target) = build_sdt_target() else {
        return;
    };
    let path = target.display().to_string();
    let script = format!(
        r#"probe process("{path}").mark("plain") {{
             printf("%s:%s n=%d s=%s a=%d\n", $$provider, $$name, $arg1, user_string($arg2), $arg3)
           }}
           probe process("{path}").provider("demo").mark("mixed") {{
             printf("mixed %d %d %d %d\n", $arg1, $arg2, $arg3, $arg4)
           }}
           probe process("{path}").mark("cons*") {{
             printf("%s %d %d %d %s\n", $$name, $arg1, $arg2, @defined($arg3), pn())
           }}
           probe process("{path}").mark("guarded") {{
             printf("guarded %d semaphore %d\n", $arg1, $arg2)
           }}"#
    );
    let done = Session::start(&["-c", &format!("{path} 9"), "-e", &script]).finish();
    assert_success(&done);
    // arg3 of plain is through a pointer; mixed's are a char and an
    // unsigned short constant, `arr[i]` (base + index * 8) and a global;
    // guarded fires only because the kernel set its semaphore (to 1).
    // pn(): the point as written, its wildcard expanded to the marker.
    assert_eq!(
        done.stdout,
        format!(
            "demo:plain n=9 s=hello-sdt a=123456789012\n\
         mixed -3 65535 30 77\n\
         consts 5 -1 0 process(\"{path}\").mark(\"consts\")\n\
         guarded 18 semaphore 1\n"
        ),
        "stderr:\n{}",
        done.stderr
    );
}

#[test]
fn sdt_marker_errors_name_the_marker_and_the_argument() {
    let _one = serial();
    let Some(target) = build_sdt_target() else {
        return;
    };
    let path = target.display().to_string();
    let check = |script: String, expected: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_stap-rs"))
            .args(["-p2", "-e", &script])
            .output()
            .expect("running stap-rs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{script} passed");
        for e in expected {
            assert!(stderr.contains(e), "{script}: no {e:?} in\n{stderr}");
        }
    };
    check(
        format!(r#"probe process("{path}").mark("plain") {{ println($arg4) }}"#),
        &[
            "no context variable `$arg4`",
            "this probe has $arg1, $arg2, $arg3",
            "<input>:1:",
        ],
    );
    check(
        format!(r#"probe process("{path}").mark("nope") {{ }}"#),
        &[
            "no SDT marker",
            "demo:consts, demo:guarded, demo:mixed, demo:plain",
        ],
    );
    check(
        r#"probe process("/nonexistent/lib*.so").mark("x") { }"#.to_string(),
        &["process(\"/nonexistent/lib*.so\") names no file"],
    );
    check(
        r#"probe python3.module("m").function("f") { }"#.to_string(),
        &[
            "unsupported: `python3.module(\"m\").function(\"f\")`",
            "HelperSDT",
        ],
    );
    // A marker tapset whose library lacks the markers (Debian's glib)
    // names the library and its package.
    let glib = Command::new(env!("CARGO_BIN_EXE_stap-rs"))
        .args(["-p2", "-e", "probe glib.mem_alloc { println(n_bytes) }"])
        .output()
        .expect("running stap-rs");
    if !glib.status.success() {
        let stderr = String::from_utf8_lossy(&glib.stderr);
        assert!(
            stderr.contains("libglib-2.0.so") && stderr.contains("Debian package libglib2.0-0"),
            "{stderr}"
        );
    }
}

/// The stap.* tapset over stap's own markers (Debian's systemtap package):
/// `stap -p1` without a kernel build tree stops after its pass 0 and
/// cleans up (pass 6), and both markers carry the session's address.
#[test]
fn stap_tapset_sees_a_stap_run() {
    let _one = serial();
    if !Path::new("/usr/bin/stap").exists() {
        eprintln!("stap-rs-skip: no /usr/bin/stap (tests/setup.sh installs systemtap)");
        return;
    }
    let script = r#"probe stap.pass0 { printf("pass0 %d\n", session != 0) }
                    probe stap.pass6 { printf("pass6 %d\n", session != 0) }"#;
    let done = Session::start(&["-c", "stap -p1 -e 'probe begin {}'", "-e", script]).finish();
    assert!(
        done.stdout.starts_with("pass0 1\n") && done.stdout.ends_with("pass6 1\n"),
        "stdout:\n{}\nstderr:\n{}",
        done.stdout,
        done.stderr
    );
}

/// python.function.return over the markers of Debian's python3 (guarded
/// by semaphores, which the kernel sets while the probe is attached).
#[test]
fn python_tapset_names_the_returning_function() {
    let _one = serial();
    if !Path::new("/usr/bin/python3").exists() {
        eprintln!("stap-rs-skip: no /usr/bin/python3");
        return;
    }
    let program = Path::new(env!("CARGO_TARGET_TMPDIR")).join("stap_probe_me.py");
    std::fs::write(
        &program,
        "def stap_probe_me(x):\n    return x\nlist(map(stap_probe_me, [1, 2]))\n",
    )
    .unwrap();
    let script = r#"probe python.function.return {
                      if (funcname == "stap_probe_me") printf("%s %s:%d\n", funcname, filename, lineno)
                    }"#;
    let command = format!("/usr/bin/python3 {}", program.display());
    let done = Session::start(&["-c", &command, "-e", script]).finish();
    assert_success(&done);
    let line = format!("stap_probe_me {}:2\n", program.display());
    assert_eq!(
        done.stdout,
        format!("{line}{line}"),
        "stderr:\n{}",
        done.stderr
    );
}

/// The process forms of stap's examples: no path (the -c target's
/// program), a wildcard function, and `.library("LIB")` (libc's strtol,
/// which the target's atoi calls on its argument, seen in the target only);
/// `register()`/`u_register()` by name at a function's entry.
#[test]
fn process_probes_without_a_path_with_wildcards_and_in_a_library() {
    let _one = serial();
    let Some(target) = build_sdt_target() else {
        return;
    };
    let path = target.display().to_string();
    let script = format!(
        r#"global functions
           probe process.mark("plain") {{ printf("%s %d\n", $$name, $arg1) }}
           probe process.function("w*") {{ functions++ }}
           probe process("{path}").library("libc.so.6").function("strtol") {{
             printf("strtol %s\n", user_string(pointer_arg(1)))
           }}
           probe process.function("work") {{
             printf("edi %d rsi %d\n", register("edi"), u_register("rsi") == pointer_arg(2))
           }}
           probe end {{ printf("w* %d\n", functions) }}"#
    );
    let done = Session::start(&["-c", &format!("{path} 7"), "-e", &script]).finish();
    assert_success(&done);
    // `w*` is `work` alone among the program's functions.
    assert_eq!(
        done.stdout, "strtol 7\nedi 7 rsi 1\nplain 7\nw* 1\n",
        "stderr:\n{}",
        done.stderr
    );
}
