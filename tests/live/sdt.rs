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
             printf("%s %d %d %d\n", $$name, $arg1, $arg2, @defined($arg3))
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
    assert_eq!(
        done.stdout,
        "demo:plain n=9 s=hello-sdt a=123456789012\n\
         mixed -3 65535 30 77\n\
         consts 5 -1 0\n\
         guarded 18 semaphore 1\n",
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
}
