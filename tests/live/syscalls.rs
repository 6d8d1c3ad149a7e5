//! The syscall tapset on this kernel: `syscall.NAME` and `.return` over the
//! syscalls:* trace events with stap's variables, `syscall_any`, and a
//! wildcard over every system call. Each test filters on its own
//! trigger's process name.

use std::path::Path;

use super::{Session, assert_success, build, closed_port, serial, trigger_until_done};

/// A path only this test opens.
fn probe_path(tag: &str) -> String {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("stap-rs-{tag}-{}", std::process::id()))
        .display()
        .to_string()
}

#[test]
fn syscall_openat_shows_filename_flags_str_and_argstr() {
    let _one = serial();
    let trigger = build("trigger");
    let path = probe_path("openat");
    let script = format!(
        r#"probe syscall.openat {{
             if (execname() == "stapSysOpen" && filename == "\"{path}\"") {{
               printf("%s|%s|%s|%s|%s\n", name, filename, flags_str, mode_str, argstr)
               exit()
             }}
           }}"#
    );
    let mut session = Session::start(&["-e", &script]);
    session.wait_ready();
    trigger_until_done(&mut session, &trigger, &["stapSysOpen", "open", &path]);
    let done = session.finish();
    assert_success(&done);
    let expected = format!(
        "openat|\"{path}\"|O_WRONLY|O_CREAT|O_TRUNC|O_CLOEXEC|S_IRUSR|S_IWUSR|S_IRGRP|\
         AT_FDCWD, \"{path}\", O_WRONLY|O_CREAT|O_TRUNC|O_CLOEXEC, 0640\n"
    );
    assert_eq!(done.stdout, expected, "stderr:\n{}", done.stderr);
    let _ = std::fs::remove_file(&path);
}

#[test]
fn syscall_openat_return_shows_retstr_with_the_errno_name() {
    let _one = serial();
    let trigger = build("trigger");
    let path = probe_path("openret");
    // The entry marks the thread whose open is ours; the return reports it.
    let script = format!(
        r#"global mine
           probe syscall.openat {{
             if (execname() == "stapSysRet" && filename_unquoted == "{path}.missing") mine[tid()] = 1
           }}
           probe syscall.openat.return {{
             if (mine[tid()]) {{ printf("%s = %s (retval %d)\n", name, retstr, retval); exit() }}
           }}"#
    );
    let mut session = Session::start(&["-e", &script]);
    session.wait_ready();
    trigger_until_done(&mut session, &trigger, &["stapSysRet", "open", &path]);
    let done = session.finish();
    assert_success(&done);
    assert_eq!(
        done.stdout, "openat = -2 (ENOENT) (retval -2)\n",
        "stderr:\n{}",
        done.stderr
    );
    let _ = std::fs::remove_file(&path);
}

/// A wildcard mixes the stdlib's aliases (socket, sendto) with generic
/// points (setsockopt, sched_*, ...). Every call (`syscall.*`, 360 classic
/// tracepoints here) compiles in the CLI tests; attaching all of them
/// takes too long for a live test on a loaded machine.
#[test]
fn wildcard_over_the_syscall_tapset_attaches_and_counts_the_triggers_calls() {
    let _one = serial();
    let trigger = build("trigger");
    let port = closed_port().to_string();
    let script = r#"global seen
           probe syscall.s*, syscall.close {
             if (execname() == "stapSysAll") seen[name] = 1
             if (execname() == "stapSysAll" && name == "close" && ["socket"] in seen && ["sendto"] in seen) {
               printf("socket sendto close\n")
               exit()
             }
           }"#;
    let mut session = Session::start(&["-e", script]);
    session.wait_ready();
    trigger_until_done(
        &mut session,
        &trigger,
        &["stapSysAll", "udp", "127.0.0.1", &port],
    );
    let done = session.finish();
    assert_success(&done);
    assert_eq!(
        done.stdout, "socket sendto close\n",
        "stderr:\n{}",
        done.stderr
    );
}

#[test]
fn syscall_any_names_the_call_and_its_number() {
    let _one = serial();
    let trigger = build("trigger");
    let port = closed_port().to_string();
    let script = r#"probe syscall_any {
             if (execname() == "stapSysAny" && name == "socket") {
               printf("%s %d\n", name, syscall_nr)
               exit()
             }
           }"#;
    let mut session = Session::start(&["-e", script]);
    session.wait_ready();
    trigger_until_done(
        &mut session,
        &trigger,
        &["stapSysAny", "udp", "127.0.0.1", &port],
    );
    let done = session.finish();
    assert_success(&done);
    // socket(2)'s number on this machine, as libc has it.
    assert_eq!(
        done.stdout,
        format!("socket {}\n", libc::SYS_socket),
        "stderr:\n{}",
        done.stderr
    );
}

/// stap's synonyms of `syscall.*` (nd_, nd1_, nd2_ and tp_syscall) give
/// the same variables as `syscall.openat` and its return, in one session;
/// `syscall_any.return` names the call, its number and its value.
#[test]
fn syscall_synonyms_and_syscall_any_return_report_an_openat() {
    const SYNONYMS: [&str; 5] = [
        "dw_syscall",
        "nd_syscall",
        "nd1_syscall",
        "nd2_syscall",
        "tp_syscall",
    ];
    let _one = serial();
    let trigger = build("trigger");
    let path = probe_path("synonyms");
    let mut script = String::from("global seen\n");
    for family in SYNONYMS {
        script.push_str(&format!(
            r#"probe {family}.openat {{
  if (execname() == "stapSysSyn" && filename_unquoted == "{path}" && !seen["{family}"]++)
    printf("{family} %s %s %s\n", name, flags_str, mode_str)
}}
probe {family}.openat.return {{
  if (execname() == "stapSysSyn" && retval == -2 && !seen["{family}.return"]++)
    printf("{family}.return %s %s\n", name, retstr)
}}
"#
        ));
    }
    script.push_str(
        r#"probe syscall_any.return {
  if (execname() == "stapSysSyn" && name == "openat" && retval == -2 && !seen["any"]++)
    printf("syscall_any.return %s %d %d\n", name, syscall_nr, retval)
}
probe timer.ms(100) { if (seen["any"] && seen["tp_syscall.return"]) exit() }
"#,
    );
    let mut session = Session::start(&["-e", &script]);
    session.wait_ready();
    trigger_until_done(&mut session, &trigger, &["stapSysSyn", "open", &path]);
    let done = session.finish();
    assert_success(&done);
    let lines: Vec<&str> = done.stdout.lines().collect();
    let mut expected = Vec::new();
    for family in SYNONYMS {
        expected.push(format!(
            "{family} openat O_WRONLY|O_CREAT|O_TRUNC|O_CLOEXEC S_IRUSR|S_IWUSR|S_IRGRP"
        ));
        // The trigger's second open is of a missing file.
        expected.push(format!("{family}.return openat -2 (ENOENT)"));
    }
    expected.push(format!("syscall_any.return openat {} -2", libc::SYS_openat));
    for line in &expected {
        assert!(
            lines.contains(&line.as_str()),
            "no line {line:?}; stdout:\n{}\nstderr:\n{}",
            done.stdout,
            done.stderr
        );
    }
    let _ = std::fs::remove_file(&path);
}

/// prctl has no hand-written alias: its variables come from its trace
/// event (option, arg2, ...), reached through a synonym family.
#[test]
fn generic_syscall_probes_derive_their_variables_from_the_trace_event() {
    let _one = serial();
    let trigger = build("trigger");
    let port = closed_port().to_string();
    // The trigger names itself with prctl(PR_SET_NAME, "stapSysGen").
    let script = r#"probe nd_syscall.prctl {
             if (option == 15 && user_string(arg2, "") == "stapSysGen") {
               printf("%s %d|%s\n", name, option, argstr)
               exit()
             }
           }"#;
    let mut session = Session::start(&["-e", script]);
    session.wait_ready();
    trigger_until_done(
        &mut session,
        &trigger,
        &["stapSysGen", "udp", "127.0.0.1", &port],
    );
    let done = session.finish();
    assert_success(&done);
    assert!(
        done.stdout.starts_with("prctl 15|15, ") && done.stdout.lines().count() == 1,
        "stdout:\n{}\nstderr:\n{}",
        done.stdout,
        done.stderr
    );
}

/// A script's alias used with a suffix (stap's alias suffixes):
/// `myprctl.return` is the alias's points with `.return` appended, here a
/// generic point, whose `retval` and `retstr` come from its trace event.
#[test]
fn alias_suffixes_reach_the_return_of_a_generic_syscall() {
    let _one = serial();
    let trigger = build("trigger");
    let port = closed_port().to_string();
    let script = r#"global mine, calls
           probe myprctl = nd_syscall.prctl { calls++ }
           probe myprctl { if (option == 15 && user_string(arg2, "") == "stapSysSfx") mine[tid()] = 1 }
           probe myprctl.return {
             if (mine[tid()]) { printf("%s retval %d retstr %s\n", name, retval, retstr); exit() }
           }"#;
    let mut session = Session::start(&["-e", script]);
    session.wait_ready();
    trigger_until_done(
        &mut session,
        &trigger,
        &["stapSysSfx", "udp", "127.0.0.1", &port],
    );
    let done = session.finish();
    assert_success(&done);
    assert_eq!(
        done.stdout, "prctl retval 0 retstr 0\n",
        "stderr:\n{}",
        done.stderr
    );
}

/// stap's nd_syscall idiom, reading the call's arguments as registers:
/// `int_arg(N)`/`pointer_arg(N)` at a system call's entry are its
/// arguments, here taken from the trace event's fields.
#[test]
fn register_arguments_read_the_calls_arguments_at_its_entry() {
    let _one = serial();
    let trigger = build("trigger");
    let port = closed_port().to_string();
    let script = r#"probe nd_syscall.prctl {
             if (int_arg(1) == 15 && user_string(pointer_arg(2), "") == "stapSysArg") {
               printf("%s %d %d\n", name, uint_arg(1), long_arg(1) == option)
               exit()
             }
           }"#;
    let mut session = Session::start(&["-e", script]);
    session.wait_ready();
    trigger_until_done(
        &mut session,
        &trigger,
        &["stapSysArg", "udp", "127.0.0.1", &port],
    );
    let done = session.finish();
    assert_success(&done);
    assert_eq!(done.stdout, "prctl 15 1\n", "stderr:\n{}", done.stderr);
}

/// The same in a system call's return (stap's killsnoop-nd.stp): the
/// register arguments are still the call's, taken at its enter event.
#[test]
fn register_arguments_in_a_syscall_return_are_the_calls_arguments() {
    let _one = serial();
    let trigger = build("trigger");
    let port = closed_port().to_string();
    let script = r#"probe nd_syscall.prctl.return {
             if (int_arg(1) == 15 && user_string(pointer_arg(2), "") == "stapSysRet") {
               printf("%s %d %d %s\n", name, uint_arg(1), @entry(long_arg(1)), retstr)
               exit()
             }
           }"#;
    let mut session = Session::start(&["-e", script]);
    session.wait_ready();
    trigger_until_done(
        &mut session,
        &trigger,
        &["stapSysRet", "udp", "127.0.0.1", &port],
    );
    let done = session.finish();
    assert_success(&done);
    assert_eq!(done.stdout, "prctl 15 15 0\n", "stderr:\n{}", done.stderr);
}

/// `@entry(...)` in a system call's return, whose exit event has no entry
/// of its own: the values are taken at the call's enter event, the call's
/// arguments (`$filename`, `pointer_arg(2)`) readable there.
#[test]
fn entry_values_in_a_syscall_return_come_from_its_enter_event() {
    let _one = serial();
    let trigger = build("trigger");
    let path = probe_path("entry");
    let script = format!(
        r#"probe syscall.openat.return {{
             if (execname() == "stapSysEnt" && user_string(@entry($filename), "") == "{path}.missing") {{
               printf("%s %s %d %s\n", name, retstr, gettimeofday_ns() >= @entry(gettimeofday_ns()),
                      user_string(@entry(pointer_arg(2)), "") == "{path}.missing" ? "arg" : "no arg")
               exit()
             }}
           }}"#
    );
    let mut session = Session::start(&["-e", &script]);
    session.wait_ready();
    trigger_until_done(&mut session, &trigger, &["stapSysEnt", "open", &path]);
    let done = session.finish();
    assert_success(&done);
    assert_eq!(
        done.stdout, "openat -2 (ENOENT) 1 arg\n",
        "stderr:\n{}",
        done.stderr
    );
    let _ = std::fs::remove_file(&path);
}

/// syscall.pipe covers pipe2 and pipe with stap's variables: at the call,
/// the flags and what the array held (-7); at the return, the two
/// descriptors the kernel wrote, which the program prints too.
#[test]
fn syscall_pipe_shows_flags_and_the_descriptors_at_the_return() {
    let _one = serial();
    let target = build("pipe_target");
    let path = target.display().to_string();
    let script = r#"probe syscall.pipe { if (pid() == target()) printf("%s %d %s %s\n", name, flags, flag_str, argstr) }
probe syscall.pipe.return { if (pid() == target()) printf("%s %s %d %d\n", name, retstr, pipe0, pipe1) }"#;
    // Compiling the syscall tapset takes long in a TCG guest.
    let done = Session::start(&["-c", &path, "-e", script])
        .finish_within(std::time::Duration::from_secs(240));
    assert_success(&done);
    // The program's own line (four numbers) may come before or after
    // the probes' lines.
    let (program, lines): (Vec<&str>, Vec<&str>) = done
        .stdout
        .lines()
        .partition(|l| l.split(' ').all(|w| w.parse::<i32>().is_ok()));
    assert_eq!(
        (program.len(), lines.len()),
        (1, 4),
        "stdout:\n{}\nstderr:\n{}",
        done.stdout,
        done.stderr
    );
    let fds: Vec<&str> = program[0].split(' ').collect();
    assert_eq!(lines[0], "pipe2 2048 O_NONBLOCK [-7, -7], O_NONBLOCK");
    assert_eq!(lines[1], format!("pipe2 0 {} {}", fds[0], fds[1]));
    assert_eq!(lines[2], "pipe 0  [-7, -7]");
    assert_eq!(lines[3], format!("pipe 0 {} {}", fds[2], fds[3]));
}

/// `syscalls:` events run on the raw `sys_enter`/`sys_exit` tracepoints
/// (behind a dispatcher when a direction has several programs): a wildcard
/// with a program per event, one shared program for every event, and
/// single-event probes must all see the same calls, and nothing may stay
/// attached after the session.
#[test]
fn wildcard_counts_per_call_agree_with_single_call_probes_and_nothing_stays_attached() {
    let _one = serial();
    let trigger = build("trigger");
    let script = r#"global by_event, shared, single, exits, exits_by_event
           probe kernel.trace("syscalls:sys_enter_*") { if (execname() == "stapSysWild") by_event[pp()]++ }
           probe kernel.trace("syscalls:sys_enter_*") { if (execname() == "stapSysWild") shared++ }
           probe kernel.trace("syscalls:sys_enter_getppid") {
             if (execname() == "stapSysWild") single++
             if (execname() == "stapSysDone") exit()
           }
           probe kernel.trace("syscalls:sys_exit_getp*") { if (execname() == "stapSysWild") exits_by_event[pp()]++ }
           probe kernel.trace("syscalls:sys_exit_getppid") { if (execname() == "stapSysWild") exits++ }
           probe end {
             total = 0
             foreach (event in by_event) total += by_event[event]
             printf("getppid: wildcard %d, single %d\n",
                    by_event["kernel.trace(\"syscalls:sys_enter_getppid\")"], single)
             printf("getppid returns: wildcard %d, single %d\n",
                    exits_by_event["kernel.trace(\"syscalls:sys_exit_getppid\")"], exits)
             printf("every call: %s\n", total == shared ? "agree" : sprintf("%d per event, %d shared", total, shared))
           }"#;
    let mut session = Session::start(&["-e", script]);
    session.wait_ready();
    let (progs, links) = super::bpf_ids_of(session.pid());
    // Parent and child each call getppid 500 times.
    let status = std::process::Command::new(&trigger)
        .args(["stapSysWild", "getppid", "500"])
        .status()
        .expect("running the trigger");
    assert!(status.success(), "trigger failed: {status}");
    trigger_until_done(&mut session, &trigger, &["stapSysDone", "getppid", "1"]);
    let done = session.finish();
    assert_success(&done);
    assert_eq!(
        done.stdout,
        "getppid: wildcard 1000, single 1000\n\
         getppid returns: wildcard 1000, single 1000\n\
         every call: agree\n",
        "stderr:\n{}",
        done.stderr
    );
    assert!(
        !progs.is_empty() && !links.is_empty(),
        "no BPF objects held"
    );
    let leftovers = super::still_loaded_after_a_while(&progs, &links);
    assert!(leftovers.is_empty(), "still loaded: {leftovers:?}");
}
