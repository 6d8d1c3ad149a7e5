//! String built-ins that used to be host-only, in kernel probes: `=~`/`!~`
//! (a DFA built at compile time, walked in BPF). Each test opens files
//! with its own trigger process name and prints what the probe computed
//! from the path the kernel saw.

use super::{Session, assert_success, build, closed_port, serial, trigger_until_done};

/// `=~` and `!~` over the path of an `openat`: the trigger opens PATH and
/// then PATH.missing, so the first matches an archive pattern anchored at
/// the end and the second does not.
#[test]
fn regex_match_runs_in_a_tracepoint() {
    let _one = serial();
    let trigger = build("trigger");
    let dir = std::env::temp_dir().join(format!("stap-rs-kregex-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let path = dir.join("backup.tar.gz");
    let path = path.to_str().expect("utf-8 path");
    let mut session = Session::start(&[
        "-e",
        r#"probe kernel.trace("syscalls:sys_enter_openat") {
             if (execname() != "stapKRegex") next
             f = user_string($filename)
             if (!isinstr(f, "stap-rs-kregex-")) next
             printf("%s archive=%d notmissing=%d digits=%d anchored=%d\n",
                    isinstr(f, ".missing") ? "second" : "first",
                    f =~ "(\\.tar\\.(gz|bz2|xz)|\\.zip|\\.tgz)$",
                    f !~ "\\.missing$",
                    f =~ "-[0-9]+/",
                    f =~ "^tmp")
             if (f =~ "missing$") exit()
           }"#,
    ]);
    session.wait_ready();
    trigger_until_done(&mut session, &trigger, &["stapKRegex", "open", path]);
    let done = session.finish();
    let _ = std::fs::remove_dir_all(&dir);
    assert_success(&done);
    let lines: Vec<&str> = done.stdout.lines().collect();
    assert_eq!(
        lines.last().copied(),
        Some("second archive=0 notmissing=0 digits=1 anchored=0"),
        "{}",
        done.stdout
    );
    assert!(
        lines.contains(&"first archive=1 notmissing=1 digits=1 anchored=0"),
        "{}",
        done.stdout
    );
}

/// `str_replace` (a literal search string, any replacement, every
/// occurrence) and `text_str` (stap's escapes) over a path with a tab in
/// it, in a tracepoint.
#[test]
fn str_replace_and_text_str_run_in_a_tracepoint() {
    let _one = serial();
    let trigger = build("trigger");
    let dir = std::env::temp_dir().join(format!("stap-rs-kstr-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let path = dir.join("tab\there.txt");
    let path = path.to_str().expect("utf-8 path");
    let mut session = Session::start(&[
        "-e",
        r#"probe kernel.trace("syscalls:sys_enter_openat") {
             if (execname() != "stapKStr") next
             f = user_string($filename)
             if (!isinstr(f, "stap-rs-kstr-") || !isinstr(f, ".missing")) next
             with = "<" . execname() . ">"
             base = substr(f, strpos(f, "tab"), 100)
             printf("%s|%s|%s\n", text_str(base), text_str(str_replace(base, "e", "EE")),
                    str_replace(f, "stap-rs-kstr-", with))
             exit()
           }"#,
    ]);
    session.wait_ready();
    trigger_until_done(&mut session, &trigger, &["stapKStr", "open", path]);
    let done = session.finish();
    let _ = std::fs::remove_dir_all(&dir);
    assert_success(&done);
    let expected = format!(
        "tab\\there.txt.missing|tab\\thEErEE.txt.missing|{}.missing",
        path.replace("stap-rs-kstr-", "<stapKStr>")
    );
    assert_eq!(
        done.stdout.lines().last(),
        Some(expected.as_str()),
        "{}",
        done.stdout
    );
}

/// `cmdline_str()`, `cmdline_arg(n)` and `cmdline_args(n, m, delim)` in a
/// tracepoint read the triggering process's own argument block.
#[test]
fn cmdline_functions_run_in_a_tracepoint() {
    let _one = serial();
    let trigger = build("trigger");
    let dir = std::env::temp_dir().join(format!("stap-rs-kcmd-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let path = dir.join("f");
    let path = path.to_str().expect("utf-8 path");
    let mut session = Session::start(&[
        "-e",
        r#"probe kernel.trace("syscalls:sys_enter_openat") {
             if (execname() != "stapKCmd") next
             printf("%s\n%s\n%s\n%s\n", cmdline_str(), cmdline_arg(2), cmdline_args(1, 2, "|"),
                    cmdline_args(3, -1, ","))
             exit()
           }"#,
    ]);
    session.wait_ready();
    trigger_until_done(&mut session, &trigger, &["stapKCmd", "open", path]);
    let done = session.finish();
    let _ = std::fs::remove_dir_all(&dir);
    assert_success(&done);
    let expected = format!(
        "{} stapKCmd open {path}\nopen\nstapKCmd|open\n{path}\n",
        trigger.display()
    );
    assert_eq!(done.stdout, expected);
}

/// `backtrace()` and `ubacktrace()` as values in a tracepoint: stap's
/// hex strings, kept in a global, then named on the host by
/// `sprint_stack()` in the end probe. The drop of a SYN to a closed port
/// happens in TCP's receive path, in the connecting process (a stack
/// every kernel of the matrix captures, unlike a system call event's on
/// 6.1, where `print_backtrace()` is empty too).
#[test]
fn backtrace_values_in_a_tracepoint_are_symbolized_on_the_host() {
    let _one = serial();
    let trigger = build("trigger");
    let port = closed_port().to_string();
    let mut session = Session::start(&[
        "-e",
        r#"global stacks
           probe kernel.trace("kfree_skb") {
             if (execname() != "stapKBt") next
             stacks["k"] = backtrace()
             stacks["u"] = ubacktrace()
             exit()
           }
           probe end {
             printf("k=%s\nu=%s\n%s\n", stacks["k"], stacks["u"], sprint_stack(stacks["k"]))
           }"#,
    ]);
    session.wait_ready();
    trigger_until_done(&mut session, &trigger, &["stapKBt", "connect", &port]);
    let done = session.finish();
    assert_success(&done);
    let hex_list = |line: &str| {
        !line.is_empty()
            && line.split(' ').all(|frame| {
                frame
                    .strip_prefix("0x")
                    .is_some_and(|h| !h.is_empty() && h.bytes().all(|b| b.is_ascii_hexdigit()))
            })
    };
    let mut lines = done.stdout.lines();
    let kernel = lines
        .next()
        .and_then(|l| l.strip_prefix("k="))
        .unwrap_or("");
    assert!(hex_list(kernel), "kernel stack: {}", done.stdout);
    assert!(kernel.split(' ').count() > 1, "{}", done.stdout);
    let user = lines
        .next()
        .and_then(|l| l.strip_prefix("u="))
        .unwrap_or("");
    assert!(hex_list(user), "user stack: {}", done.stdout);
    // TCP's receive path is on the stack; the tracing machinery is not.
    let named: Vec<&str> = lines.collect();
    assert!(
        named.iter().any(|l| l.starts_with("tcp_v4_rcv+")),
        "{}",
        done.stdout
    );
    assert!(
        !named
            .iter()
            .any(|l| l.starts_with("bpf_") || l.starts_with("__bpf_")),
        "{}",
        done.stdout
    );
}

/// `ctime()` and `tz_ctime()` as values in a tracepoint (a map key here)
/// give the host's text: fixed dates, and the current time in the local
/// zone compared with the host probe's own `tz_ctime` of the same second.
#[test]
fn ctime_values_in_a_tracepoint_match_the_host() {
    let _one = serial();
    let trigger = build("trigger");
    let dir = std::env::temp_dir().join(format!("stap-rs-kdate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let path = dir.join("f");
    let path = path.to_str().expect("utf-8 path");
    let mut session = Session::start(&[
        "-e",
        r#"global dates, when
           probe kernel.trace("syscalls:sys_enter_openat") {
             if (execname() != "stapKDate") next
             when = gettimeofday_s()
             dates[tz_ctime(when)] = 1
             dates[ctime(0)] = 2
             dates[ctime(1234567890)] = 3
             dates[ctime(951782400)] = 4
             dates[ctime(4102444799)] = 5
             exit()
           }
           probe end {
             foreach (d in dates) printf("%d %s\n", dates[d], d)
             printf("host %s\n", tz_ctime(when))
           }"#,
    ]);
    session.wait_ready();
    trigger_until_done(&mut session, &trigger, &["stapKDate", "open", path]);
    let done = session.finish();
    let _ = std::fs::remove_dir_all(&dir);
    assert_success(&done);
    let mut lines: Vec<&str> = done.stdout.lines().collect();
    lines.sort();
    let host = lines
        .iter()
        .find_map(|l| l.strip_prefix("host "))
        .unwrap_or("");
    assert!(!host.is_empty(), "{}", done.stdout);
    assert_eq!(
        lines,
        [
            format!("1 {host}").as_str(),
            "2 Thu Jan  1 00:00:00 1970",
            "3 Fri Feb 13 23:31:30 2009",
            "4 Tue Feb 29 00:00:00 2000",
            "5 Thu Dec 31 23:59:59 2099",
            &format!("host {host}"),
        ],
        "{}",
        done.stdout
    );
}

/// `text_strn(s, len, quoted)` in a tracepoint over a path with a tab and
/// a quote: bounded, quoted, cut short (`"...` over the last bytes, as
/// stap backs up, even into an escape), and with `len` 0 or negative (the
/// whole string), each the same as the host computes from the same string
/// in the end probe.
#[test]
fn text_strn_in_a_tracepoint_matches_the_host() {
    let _one = serial();
    let trigger = build("trigger");
    let dir = std::env::temp_dir().join(format!("stap-rs-kstrn-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let path = dir.join("a\t\"b");
    let path = path.to_str().expect("utf-8 path");
    let mut session = Session::start(&[
        "-e",
        r#"global base
           function variants(s) {
             return sprintf("%s|%s|%s|%s|%s|%s", text_strn(s, 0, 0), text_strn(s, 5, 0),
                            text_strn(s, 7, 1), text_strn(s, 2, 1), text_strn(s, -3, 1),
                            text_strn(s, 100, 1))
           }
           probe kernel.trace("syscalls:sys_enter_openat") {
             if (execname() != "stapKStrn") next
             f = user_string($filename)
             if (!isinstr(f, "stap-rs-kstrn-") || !isinstr(f, ".missing")) next
             base = substr(f, strpos(f, "/a") + 1, 100)
             printf("kernel %s\n", variants(base))
             exit()
           }
           probe end { printf("host %s\n", variants(base)) }"#,
    ]);
    session.wait_ready();
    trigger_until_done(&mut session, &trigger, &["stapKStrn", "open", path]);
    let done = session.finish();
    let _ = std::fs::remove_dir_all(&dir);
    assert_success(&done);
    let line = |side: &str| side_line(&done.stdout, side);
    let whole = r#"a\t\"b.missing"#;
    let expected = format!(r#"{whole}|a\t\"|"a\"...|""...|"{whole}"|"{whole}""#);
    assert_eq!(line("kernel"), expected, "{}", done.stdout);
    assert_eq!(line("host"), expected, "{}", done.stdout);
}

/// String comparison in a kernel probe, word by word: strings that differ
/// in the first, the second and the third word, a prefix, the empty
/// string and a literal of exactly one word, against the host's answers.
/// The same handler builds `syscall.execve`'s `args` (`__sys_argv`: a
/// loop of eight rounds), which the verifier once refused as "too
/// complex" while each round compared strings and each compare was a
/// loop of MAXSTRINGLEN rounds.
#[test]
fn string_comparisons_in_a_tracepoint_match_the_host() {
    let _one = serial();
    let trigger = build("trigger");
    let dir = std::env::temp_dir().join(format!("stap-rs-kcmp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let path = dir.join("f");
    let path = path.to_str().expect("utf-8 path");
    let mut session = Session::start(&[
        "-e",
        r#"global name, execs
           function compares(e) {
             long1 = e . "-longer-than-a-word"
             long2 = e . "-longer-than-a-wore"
             return sprintf("%d%d%d%d%d%d%d%d%d%d%d%d", e == "stapKCmp", e < "stapKCmq",
                            e > "stapKCm", e < "stapKCmp2", e != "", "" < e, long1 > long2,
                            long1 == e . "-longer-than-a-word", e >= e, e == "stapKCmP",
                            substr(e, 0, 4) == "stap", "stapKCmp2" < e)
           }
           probe syscall.execve {
             if (!isinstr(args, "stapKCmp")) next
             execs++
           }
           probe kernel.trace("syscalls:sys_enter_openat") {
             if (execname() != "stapKCmp" || !execs) next
             name = execname()
             printf("kernel %s\n", compares(name))
             exit()
           }
           probe end { printf("host %s\n", compares(name)) }"#,
    ]);
    session.wait_ready();
    trigger_until_done(&mut session, &trigger, &["stapKCmp", "open", path]);
    let done = session.finish();
    let _ = std::fs::remove_dir_all(&dir);
    assert_success(&done);
    let line = |side: &str| side_line(&done.stdout, side);
    assert_eq!(line("kernel"), "111111011010", "{}", done.stdout);
    assert_eq!(line("host"), line("kernel"), "{}", done.stdout);
}

/// The rest of the line of `stdout` that starts with `side` and a space
/// (the kernel probe's and the host probe's answers to the same calls).
fn side_line(stdout: &str, side: &str) -> String {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{side} ")))
        .unwrap_or_else(|| panic!("no {side} line in:\n{stdout}"))
        .to_string()
}
