//! Pretty-printed context variables in kernel probes: `$$parms`, `$var$`,
//! `$var$$`, `$$parms$`, each checked against the same values read one by
//! one, and the text cut at MAXSTRINGLEN as stap cuts it.

use super::{Session, assert_success, build, closed_port, serial, trigger_until_done};

#[test]
fn pretty_printed_tracepoint_arguments_match_their_members() {
    let _one = serial();
    let trigger = build("trigger");
    let port = closed_port().to_string();
    // `$regs` is a `struct pt_regs *`: `$regs$` follows it and prints its
    // members; the process's `comm` is a `char[16]`, printed as a string.
    let script = r#"
        probe kernel.trace("raw_syscalls:sys_enter") {
          if (execname() != "stapPretty") next
          println($$parms == sprintf("regs=%#x id=%#x", $regs, $id) ? "parms ok" : "parms: " . $$parms)
          want = sprintf("{.r15=%u, .r14=%u, .r13=%u", $regs->r15, $regs->r14, $regs->r13)
          println(substr($regs$, 0, strlen(want)) == want ? "regs ok" : "regs: " . $regs$)
          println($$parms$ == sprintf("regs=%s id=%d", $regs$, $id) ? "parms$ ok" : "parms$: " . $$parms$)
          comm = @cast(task_current(), "task_struct")->comm$
          println(comm == "\"stapPretty\"" ? "comm ok" : "comm: " . comm)
          println(strlen($regs$$), " ", strlen($$parms$$))
          exit()
        }"#;
    let mut session = Session::start(&["-D", "MAXSTRINGLEN=128", "-e", script]);
    session.wait_ready();
    trigger_until_done(
        &mut session,
        &trigger,
        &["stapPretty", "udp", "127.0.0.1", &port],
    );
    let done = session.finish();
    assert_success(&done);
    // pt_regs has more than 20 members: its full text passes 127 bytes,
    // and is cut there.
    assert_eq!(
        done.stdout, "parms ok\nregs ok\nparms$ ok\ncomm ok\n127 127\n",
        "stderr:\n{}",
        done.stderr
    );
}

#[test]
fn pretty_printed_strings_are_quoted_or_their_address_when_unreadable() {
    let _one = serial();
    let trigger = build("trigger");
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("pretty-open");
    // `$bprm->filename` is a kernel `char *`: quoted. `$filename` of
    // openat is a user pointer, which a kernel read cannot reach: stap's
    // kernel_string_quoted gives the address instead.
    let script = r#"
        probe kernel.trace("sched:sched_process_exec") {
          if (kernel_string($bprm->filename) != @1) next
          f = $bprm->filename$
          println(f == "\"" . @1 . "\"" ? "exec ok" : "exec: " . f)
        }
        probe kernel.trace("syscalls:sys_enter_openat") {
          if (execname() != "stapPrettyOpen") next
          f = $filename$
          println(f == sprintf("%#x", $filename) ? "openat ok" : "openat: " . f)
          exit()
        }"#;
    let trigger_path = trigger.to_str().expect("utf-8 path");
    let mut session = Session::start(&["-e", script, trigger_path]);
    session.wait_ready();
    let path = path.to_str().expect("utf-8 path");
    trigger_until_done(&mut session, &trigger, &["stapPrettyOpen", "open", path]);
    let done = session.finish();
    assert_success(&done);
    assert!(
        done.stdout.starts_with("exec ok\n") && done.stdout.ends_with("openat ok\n"),
        "stdout:\n{}\nstderr:\n{}",
        done.stdout,
        done.stderr
    );
    assert!(!done.stdout.contains(": "), "{}", done.stdout);
}
