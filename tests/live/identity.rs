//! Probe identity, stacks, strings, the task family and thread_indent in a
//! kernel probe, live; and stap's array overflow error from a kernel
//! probe and a host probe.

use super::{Session, assert_success, build, closed_port, serial, trigger_until_done};

/// `pp()`, `probefunc()`, `print_backtrace()`, `substr()` and the task
/// family in a tracepoint: the drop of a SYN to a closed port happens in
/// TCP's receive path, so the symbolized stack starts in the function
/// that raised the tracepoint (probefunc) and passes through tcp_v4_rcv.
#[test]
fn identity_stack_strings_and_task_in_a_tracepoint() {
    let _one = serial();
    let trigger = build("trigger");
    let port = closed_port().to_string();
    let mut session = Session::start(&[
        "-e",
        r#"probe kernel.trace("kfree_skb") {
             if (substr(execname(), 0, 5) == "stapI" && isinstr(execname(), "Ident")) {
               t = task_current()
               printf("pp=%s\nfunc=%s\nsub=%s\ntask=%d %d %s %d\n", pp(), probefunc(),
                      substr(execname(), 4, 5), task_pid(t) == pid(), task_tid(t) == tid(),
                      task_execname(t), task_pid(task_parent(t)) == ppid())
               print_backtrace()
               exit()
             }
           }"#,
    ]);
    session.wait_ready();
    trigger_until_done(&mut session, &trigger, &["stapIdent", "connect", &port]);
    let done = session.finish();
    assert_success(&done);
    let mut lines = done.stdout.lines();
    assert_eq!(lines.next(), Some(r#"pp=kernel.trace("skb:kfree_skb")"#));
    let func = lines
        .next()
        .and_then(|l| l.strip_prefix("func="))
        .unwrap_or("");
    assert!(!func.is_empty(), "no probefunc:\n{}", done.stdout);
    assert_eq!(lines.next(), Some("sub=Ident"));
    assert_eq!(lines.next(), Some("task=1 1 stapIdent 1"));
    let frames: Vec<String> = lines
        .map(|line| match backtrace_symbol(line) {
            Some(name) => name.to_string(),
            None => panic!("not a backtrace line: {line:?}\n{}", done.stdout),
        })
        .collect();
    assert_eq!(
        frames.first().map(String::as_str),
        Some(func),
        "{}",
        done.stdout
    );
    assert!(
        frames.iter().any(|f| f == "tcp_v4_rcv"),
        "no tcp_v4_rcv in the stack:\n{}",
        done.stdout
    );
}

/// `probe_type()` and `is_return()` are stap's answers for each probe
/// point, in kernel and host probes alike, through one function both
/// call: a tracepoint named directly, the stdlib's `syscall.*.return`
/// (an exit tracepoint where stap has a kretprobe), begin and end.
#[test]
fn probe_type_and_is_return_in_kernel_and_host_probes() {
    let _one = serial();
    let done = Session::start(&[
        "-c",
        "cat /dev/null",
        "-e",
        r#"global entered, returned
           function kind() { return sprintf("%s %d", probe_type(), is_return()) }
           probe begin { printf("begin %s\n", kind()) }
           probe kernel.trace("syscalls:sys_enter_openat") {
             if (pid() == target() && !entered++) printf("enter %s\n", kind())
           }
           probe syscall.openat.return {
             if (pid() == target() && !returned++) printf("return %s\n", kind())
           }
           probe end { printf("end %s\n", kind()) }"#,
    ])
    .finish();
    assert_success(&done);
    let lines: Vec<&str> = done.stdout.lines().collect();
    assert_eq!(
        lines,
        [
            "begin begin_end 0",
            "enter kernel_tracepoint 0",
            "return kretprobe 1",
            "end begin_end 0",
        ],
        "{}",
        done.stdout
    );
}

/// thread_indent in a kernel probe: stap's `%6d NAME(TID):` prefix, one
/// space per level below the first, the time relative to the outermost.
#[test]
fn thread_indent_has_stap_format_in_a_kernel_probe() {
    let _one = serial();
    let trigger = build("trigger");
    let port = closed_port().to_string();
    let mut session = Session::start(&[
        "-e",
        r#"probe kernel.trace("kfree_skb") {
             if (execname() == "stapIndent") {
               printf("%s|a\n", thread_indent(1))
               printf("%s|b\n", thread_indent(1))
               printf("%s|c\n", thread_indent(-1))
               printf("%s|d\n", thread_indent(-1))
               printf("tid=%d\n", tid())
               exit()
             }
           }"#,
    ]);
    session.wait_ready();
    trigger_until_done(&mut session, &trigger, &["stapIndent", "connect", &port]);
    let done = session.finish();
    assert_success(&done);
    let lines: Vec<&str> = done.stdout.lines().collect();
    assert_eq!(lines.len(), 5, "{}", done.stdout);
    let tid = lines[4].strip_prefix("tid=").expect("a tid line");
    let mut shapes = Vec::new();
    for line in &lines[..4] {
        let (time, rest) = line.split_at(6.min(line.len()));
        assert!(
            time.trim_start().parse::<u64>().is_ok() && rest.starts_with(' '),
            "not thread_indent's six-wide time: {line:?}"
        );
        let rest = rest[1..]
            .strip_prefix(&format!("stapIndent({tid}):"))
            .unwrap_or_else(|| panic!("not `stapIndent(TID):`: {line:?}"));
        let (spaces, tag) = rest.split_once('|').expect("the | marker");
        assert!(spaces.bytes().all(|b| b == b' '), "{line:?}");
        shapes.push(format!("{}{tag}", spaces.len()));
    }
    // Entering: depth 1 then 2; leaving: 2 then 1 (less one each).
    assert_eq!(shapes, ["0a", "1b", "1c", "0d"]);
    assert!(lines[0].trim_start().starts_with("0 "), "{}", lines[0]);
}

/// An insert into a full kernel-side array is stap's error, once, at the
/// assignment, and the run fails; the same on the host.
#[test]
fn array_overflow_is_an_error_at_the_line_in_kernel_and_host_probes() {
    let _one = serial();
    let session = Session::start(&[
        "-D",
        "MAXMAPENTRIES=4",
        "-e",
        "global a\nprobe kernel.trace(\"sched:sched_switch\") {\n  a[$next->pid, $prev->pid, cpu()] = 1\n}",
    ]);
    let done = session.finish();
    assert!(!done.status.success(), "{}", done.stderr);
    let errors: Vec<&str> = done
        .stderr
        .lines()
        .filter(|l| l.starts_with("ERROR:"))
        .collect();
    assert_eq!(
        errors,
        ["ERROR: Array overflow, check MAXMAPENTRIES near identifier 'a' at <input>:3:3"],
        "{}",
        done.stderr
    );

    let session = Session::start(&[
        "-D",
        "MAXMAPENTRIES=4",
        "-e",
        "global a\nprobe begin {\n  for (i = 0; i < 10; i++)\n    a[i] = i\n}",
    ]);
    let done = session.finish();
    assert!(!done.status.success(), "{}", done.stderr);
    assert!(
        done.stderr.contains(
            "ERROR: Array overflow, check MAXMAPENTRIES near identifier 'a' at <input>:4:5"
        ),
        "{}",
        done.stderr
    );
}

/// The symbol of a `print_backtrace()` line (` 0x%016x : NAME+0xOFF/0xSIZE
/// [MODULE]`), or `None` when the line has another shape.
fn backtrace_symbol(line: &str) -> Option<&str> {
    let rest = line.strip_prefix(" 0x")?;
    let (addr, rest) = rest.split_once(" : ")?;
    if addr.len() != 16 || !addr.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let (name, rest) = rest.split_once("+0x")?;
    let (offsets, module) = rest.split_once(' ')?;
    let (offset, size) = offsets.split_once("/0x")?;
    let hex = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit());
    let module_ok = module.starts_with('[') && module.ends_with(']');
    (hex(offset) && hex(size) && module_ok && !name.is_empty()).then_some(name)
}
