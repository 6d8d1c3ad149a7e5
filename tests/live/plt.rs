//! PLT probes (`process("PATH").plt("PATTERN")[.return]`) on a program
//! built here that calls libc through its PLT: each stub fires with
//! `$$name` naming its function, in call order, and the return probe sees
//! the function's return value.

use super::{Session, assert_success, build, serial};

#[test]
fn plt_probes_name_each_libc_call_and_its_return() {
    let _one = serial();
    let target = build("plt_target");
    let path = target.display().to_string();
    let script = format!(
        r#"probe process("{path}").plt("get*") {{ printf("call %s %d\n", $$name, pid() == target()) }}
probe process("{path}").plt("getpid").return {{ printf("return %s %d\n", $$name, returnval() == target()) }}
probe process("{path}").plt {{ calls[$$name]++ }}
global calls
probe end {{ foreach (f+ in calls) printf("%s=%d\n", f, calls[f]) }}"#
    );
    let done = Session::start(&["-c", &path, "-e", &script]).finish();
    assert_success(&done);
    let lines: Vec<&str> = done.stdout.lines().collect();
    assert_eq!(
        lines[..3],
        ["call getenv 1", "call getpid 1", "return getpid 1"],
        "stderr:\n{}",
        done.stderr
    );
    // The unfiltered `.plt` sees the same calls (and, in a PIE, the
    // `.plt.got` stub of __cxa_finalize at exit).
    for counted in ["getenv=1", "getpid=1"] {
        assert!(lines[3..].contains(&counted), "stdout:\n{}", done.stdout);
    }
}

/// A pattern no stub matches is an error at the probe point, naming the
/// file.
#[test]
fn a_plt_pattern_with_no_stub_is_an_error() {
    let _one = serial();
    let target = build("plt_target");
    let path = target.display().to_string();
    let script = format!(r#"probe process("{path}").plt("no_such_fn*") {{ }}"#);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_stap-rs"))
        .args(["-p2", "-e", &script])
        .output()
        .expect("running stap-rs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("no PLT stub matching `no_such_fn*`") && stderr.contains(&path),
        "{stderr}"
    );
}
