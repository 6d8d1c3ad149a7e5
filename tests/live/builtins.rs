//! Kernel-side built-ins and formatting, live: `ppid()`, `euid()`,
//! `modname()` and `get_cycles()` evaluated in a kernel probe, and
//! `sprintf` directives that `bpf_snprintf` lacks, formatted by emitted code
//! and compared byte for byte with the host formatter (which formats the
//! same values printed with `printf` from the same event); and `%m`/`%M`
//! in a kernel `printf`, whose memory travels in the event.

use super::{Session, assert_success, build, closed_port, serial, trigger_until_done};

/// The effective uid of this process, from /proc (the second `Uid:` field).
fn own_euid() -> u32 {
    let status = std::fs::read_to_string("/proc/self/status").expect("reading /proc/self/status");
    let line = status
        .lines()
        .find(|l| l.starts_with("Uid:"))
        .expect("a Uid: line");
    line.split_whitespace()
        .nth(2)
        .and_then(|f| f.parse().ok())
        .expect("an effective uid")
}

#[test]
fn ppid_euid_modname_and_get_cycles_in_a_kernel_probe() {
    let _one = serial();
    let trigger = build("trigger");
    let port = closed_port().to_string();
    // The trigger is this test's child, so its ppid is our pid; the drop
    // happens in tcp_v4_rcv, core kernel code; modname() is also used as
    // a string inside BPF (a map key and a comparison).
    let mut session = Session::start(&[
        "-e",
        r#"global mods
           probe kernel.trace("kfree_skb") {
             if (execname() == "stapB2conn") {
               m = modname($location)
               mods[modname($location)] = 1
               c1 = get_cycles(); c2 = get_cycles()
               printf("ppid=%d euid=%d mod=%s same=%d key=%d cycles=%d\n", ppid(), euid(), m,
                      modname($location) == "kernel", ["kernel"] in mods, c1 > 0 && c2 >= c1)
               exit()
             }
           }"#,
    ]);
    session.wait_ready();
    trigger_until_done(&mut session, &trigger, &["stapB2conn", "connect", &port]);
    let done = session.finish();
    assert_success(&done);
    let expected = format!(
        "ppid={} euid={} mod=kernel same=1 key=1 cycles=1\n",
        std::process::id(),
        own_euid()
    );
    assert_eq!(done.stdout, expected, "stderr:\n{}", done.stderr);
}

/// Formats with what `bpf_snprintf` cannot do (`%o %p %b`, `#`, `*`, a
/// precision on an integer), mixed with what it can, and their arguments.
const FORMATS: &[(&str, &str)] = &[
    (
        "%o|%#o|%5o|%-5o|%.4o|%#.0o|%.0o|%#o",
        "8, 8, 8, 8, 8, 0, 0, 0",
    ),
    (
        "%#x|%#X|%#08x|%#-8x|%#x|x=%x|%08.3x",
        "2042, 2042, 255, 255, 0, 2042, 7",
    ),
    ("%p|%20p|%-20p|%p", "2042, 2042, 2042, -1"),
    (
        "%*d|%-*d|%*d|%.*d|%*.*d|%0*d|%+*d",
        "5, 42, 4, 1, -4, 1, 3, 7, 6, 3, 5, 6, -42, 6, 42",
    ),
    (
        "% .*d|%.*d|%.*u|%*x|%-*X|",
        "4, 9, -1, 12, 0, 0, 6, 255, 5, 255",
    ),
    (
        "%.*s|%*s|%-*s|%*.*s|%*c|%-*c|",
        "2, \"abcdef\", 5, \"ab\", 5, \"ab\", 6, 3, \"xyz12\", 3, 90, 3, 89",
    ),
    ("%1b%1b%1b|%4b|%2b", "65, 66, 67, 0x44434241, 0x4645"),
    (
        "%s=%d %o %s=%d %#x %c%c %5s %u %X %d %d %d %d",
        "\"a\", 1, 9, \"b\", 2, 10, 72, 105, \"z\", 3, 255, 4, 5, 6, 7",
    ),
];

/// `%m`/`%M` of the loopback device's name, through the kernel `sprintf`;
/// the reference is the host formatter itself (`stap_lang::printf::format`)
/// applied to the bytes `%m` reads there.
const MEMORY_FORMAT: &str = "%.2m|%6.2m|%-6.2m|%m|%.4M|%10.2M|%-10.2M|";

#[test]
fn kernel_sprintf_of_memory_matches_the_host_formatter() {
    use stap_lang::printf::{Value, format, parse};
    let _one = serial();
    let trigger = build("trigger");
    let port = closed_port().to_string();
    let script = format!(
        r#"probe kernel.trace("kfree_skb") {{
             if (execname() == "stapB3mem") {{
               dev = $skb->dev->name
               printf("k:%s\n", sprintf("{MEMORY_FORMAT}", dev, dev, dev, dev, dev, dev, dev))
               exit()
             }}
           }}"#
    );
    let mut session = Session::start(&["-e", &script]);
    session.wait_ready();
    trigger_until_done(&mut session, &trigger, &["stapB3mem", "connect", &port]);
    let done = session.finish();
    assert_success(&done);
    // IFNAMSIZ bytes of "lo".
    let memory = *b"lo\0\0\0\0\0\0\0\0\0\0\0\0\0\0";
    let mut expected = b"k:".to_vec();
    let pieces = parse(MEMORY_FORMAT).expect("a valid format");
    format(&pieces, &[Value::Str(&memory); 7], &mut expected).expect("formats");
    expected.push(b'\n');
    assert_eq!(
        done.stdout,
        String::from_utf8(expected).expect("text"),
        "stderr:\n{}",
        done.stderr
    );
}

/// `%m`/`%M` in a kernel printf: the record carries the memory read when
/// the event fired. The memory is the exiting trigger's `comm` (`$prev` of
/// its last `sched_switch`), a name this test chose: TASK_COMM_LEN (16)
/// bytes, NUL-padded. Fixed, `*` and default precisions, widths, and the
/// same format through the kernel `sprintf`.
const PRINTF_MEMORY_FORMAT: &str = "%.10m|%.11M|%14.4m|%-10.2M|%.*m|%m|%*.3M|";

#[test]
fn kernel_printf_of_memory_copies_it_when_the_event_fires() {
    use stap_lang::printf::{Value, format, parse};
    let _one = serial();
    let trigger = build("trigger");
    let port = closed_port().to_string();
    let args = "c, c, c, c, 5, c, c, 8, c";
    let script = format!(
        r#"probe kernel.trace("sched_switch") {{
             if (execname() == "stapB5comm") {{
               c = $prev->comm
               printf("p:{PRINTF_MEMORY_FORMAT}\n", {args})
               printf("k:%s\n", sprintf("{PRINTF_MEMORY_FORMAT}", {args}))
               exit()
             }}
           }}"#
    );
    let mut session = Session::start(&["-e", &script]);
    session.wait_ready();
    trigger_until_done(&mut session, &trigger, &["stapB5comm", "connect", &port]);
    let done = session.finish();
    assert_success(&done);
    let shown = "stapB5comm|737461704235636f6d6d00|          stap|7374      |stapB|s|  737461|";
    assert_eq!(
        done.stdout,
        format!("p:{shown}\nk:{shown}\n"),
        "stderr:\n{}",
        done.stderr
    );
    // The host formatter gives the same for the same bytes.
    let memory = *b"stapB5comm\0\0\0\0\0\0";
    let mut host = Vec::new();
    let pieces = parse(PRINTF_MEMORY_FORMAT).expect("a valid format");
    let m = Value::Str(&memory);
    let values = [m, m, m, m, Value::Long(5), m, m, Value::Long(8), m];
    format(&pieces, &values, &mut host).expect("formats");
    assert_eq!(String::from_utf8(host).expect("text"), shown);
}

/// A `%m` address that faults ends the handler with stap's kernel read
/// error, naming the address; nothing after it runs.
#[test]
fn kernel_printf_of_unreadable_memory_is_a_read_fault() {
    let _one = serial();
    let trigger = build("trigger");
    let port = closed_port().to_string();
    let script = r#"probe kernel.trace("sched_switch") {
          if (execname() == "stapB6fault") {
            printf("%.4m|\n", 8)
            printf("not reached\n")
          }
        }"#;
    let mut session = Session::start(&["-e", script]);
    session.wait_ready();
    trigger_until_done(&mut session, &trigger, &["stapB6fault", "connect", &port]);
    let done = session.finish();
    assert!(!done.status.success(), "stdout:\n{}", done.stdout);
    assert!(
        done.stderr.contains("ERROR: kernel read fault at 0x8 "),
        "stderr:\n{}",
        done.stderr
    );
    assert!(!done.stdout.contains("not reached"), "{}", done.stdout);
}

/// `%#m`/`%#M` read user memory: a uprobe's string argument, through
/// printf and the kernel `sprintf`.
#[test]
fn kernel_printf_of_user_memory() {
    let _one = serial();
    let target = build("uprobe_target");
    let path = target.display().to_string();
    let script = format!(
        r#"probe process("{path}").function("f") {{
             printf("%#.5m|%#.13M|%#8.2m|\n", $s, $s, $s)
             printf("%s\n", sprintf("%#.5m|%#.13M|%#8.2m|", $s, $s, $s))
           }}"#
    );
    let done = Session::start(&["-c", &path, "-e", &script]).finish();
    assert_success(&done);
    // "hello-uprobe" and its NUL.
    let line = "hello|68656c6c6f2d7570726f626500|      he|\n";
    assert_eq!(
        done.stdout,
        format!("{line}{line}"),
        "stderr:\n{}",
        done.stderr
    );
}

/// One session per format: a handler holding every format's arguments
/// twice would not fit the 512-byte BPF stack.
#[test]
fn kernel_sprintf_matches_the_host_formatter_byte_for_byte() {
    let _one = serial();
    let trigger = build("trigger");
    let port = closed_port().to_string();
    for (format, args) in FORMATS {
        let quoted = format.replace('"', "\\\"");
        let script = format!(
            r#"probe kernel.trace("kfree_skb") {{
                 if (execname() == "stapB3fmt") {{
                   s = sprintf("{quoted}", {args})
                   printf("k:%s\n", s)
                   printf("h:{quoted}\n", {args})
                   exit()
                 }}
               }}"#
        );
        let mut session = Session::start(&["-e", &script]);
        session.wait_ready();
        trigger_until_done(&mut session, &trigger, &["stapB3fmt", "connect", &port]);
        let done = session.finish();
        assert_success(&done);
        let mut lines = done.stdout.lines();
        let kernel = lines.next().and_then(|l| l.strip_prefix("k:"));
        let host = lines.next().and_then(|l| l.strip_prefix("h:"));
        assert!(
            kernel.is_some() && host.is_some(),
            "format {format:?}: stdout:\n{}\nstderr:\n{}",
            done.stdout,
            done.stderr
        );
        assert_eq!(
            kernel, host,
            "format {format:?}: kernel sprintf differs from the host formatter"
        );
    }
}

/// kernel.trace through tp_btf (`--tracepoint-mechanism=tp_btf`) gives what
/// the default raw tracepoint gives, typed pointer arguments included: bit
/// operations on `$skb` and a member chain through it.
#[test]
fn kfree_skb_through_tp_btf_matches_raw_tp() {
    let _one = serial();
    let trigger = build("trigger");
    let port = closed_port().to_string();
    let script = r#"probe kernel.trace("kfree_skb") {
          if (execname() == "stapB4conn") {
            printf("%s %s aligned=%d nonnull=%d dev=%s\n", execname(), symname($location),
                   ($skb & 7) == 0, $skb != 0, kernel_string($skb->dev->name))
            exit()
          }
        }"#;
    let mut outputs = Vec::new();
    for mechanism in ["raw_tp", "tp_btf"] {
        let mut session = Session::start(&["--tracepoint-mechanism", mechanism, "-e", script]);
        session.wait_ready();
        trigger_until_done(&mut session, &trigger, &["stapB4conn", "connect", &port]);
        let done = session.finish();
        assert_success(&done);
        outputs.push(done.stdout);
    }
    assert_eq!(
        outputs[0],
        "stapB4conn tcp_v4_rcv aligned=1 nonnull=1 dev=lo\n"
    );
    assert_eq!(outputs[1], outputs[0], "tp_btf differs from raw_tp");
}

/// `system(cmd)` from a kernel probe and from a host probe: the host runs
/// each command through the shell once the probe is done, so the probe's
/// own output comes first; the command writes to the session's stdout.
#[test]
fn system_runs_a_shell_command_after_the_probe_on_both_sides() {
    let _one = serial();
    let trigger = build("trigger");
    let port = closed_port().to_string();
    let script = r#"probe begin {
             system("echo host side $((40 + 2))")
             println("begin printed first")
           }
           probe kernel.trace("raw_syscalls:sys_enter") {
             if (execname() != "stapSystem") next
             println("kernel printed first")
             system("echo kernel side " . execname())
             exit()
           }"#;
    let mut session = Session::start(&["-e", script]);
    session.wait_ready();
    trigger_until_done(
        &mut session,
        &trigger,
        &["stapSystem", "udp", "127.0.0.1", &port],
    );
    let done = session.finish();
    assert_success(&done);
    let lines: Vec<&str> = done.stdout.lines().collect();
    let at = |line: &str| {
        lines.iter().position(|l| *l == line).unwrap_or_else(|| {
            panic!(
                "no line {line:?} in {:?}; stderr:\n{}",
                done.stdout, done.stderr
            )
        })
    };
    assert!(
        at("begin printed first") < at("host side 42"),
        "{:?}",
        done.stdout
    );
    assert!(
        at("kernel printed first") < at("kernel side stapSystem"),
        "{:?}",
        done.stdout
    );
    assert_eq!(lines.len(), 4, "{:?}", done.stdout);
}

/// Speculative output in kernel probes: each `openat` of a file in a
/// scratch dir speculates its lines under a new id for the thread, and
/// the exit commits them for the `keep` files only. Exactly the committed
/// lines appear, each where its `commit` ran among the ordinary output.
/// A host probe speculates too, and its discarded text never appears.
#[test]
fn speculative_output_prints_only_what_is_committed() {
    let _one = serial();
    let dir = std::env::temp_dir().join(format!("stap-rs-spec-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let files: Vec<String> = ["keep1", "drop1", "keep2", "drop2"]
        .iter()
        .map(|name| {
            let path = dir.join(name);
            std::fs::write(&path, b"").expect("scratch file");
            path.to_str().expect("utf-8 path").to_string()
        })
        .collect();
    let command = format!("cat {}", files.join(" "));
    let done = Session::start(&[
        "-c",
        &command,
        "-e",
        r#"global spec, keep
           probe begin { b = speculation(); speculate(b, "never\n"); discard(b)
                         h = speculation(); speculate(h, "host "); speculate(h, "committed\n"); commit(h) }
           probe kernel.trace("syscalls:sys_enter_openat") {
             if (pid() == target()) {
               // The loader's paths may sit in pages not read in yet.
               name = user_string($filename, "")
               if (isinstr(name, "/stap-rs-spec-")) {
                 id = speculation()
                 spec[tid()] = id
                 keep[tid()] = isinstr(name, "keep")
                 speculate(id, sprintf("open %s\n", substr(name, strlen(name) - 5, 5)))
               }
             }
           }
           probe kernel.trace("syscalls:sys_exit_openat") {
             if (pid() == target() && tid() in spec) {
               id = spec[tid()]
               speculate(id, sprintf("ok %d\n", $ret >= 0))
               printf("exit %d\n", keep[tid()])
               if (keep[tid()]) commit(id) else discard(id)
               delete spec[tid()]
             }
           }
           probe end { println("end") }"#,
    ])
    .finish();
    let _ = std::fs::remove_dir_all(&dir);
    assert_success(&done);
    let lines: Vec<&str> = done.stdout.lines().collect();
    assert_eq!(
        lines,
        [
            "host committed",
            "exit 1",
            "open keep1",
            "ok 1",
            "exit 0",
            "exit 1",
            "open keep2",
            "ok 1",
            "exit 0",
            "end",
        ],
        "{}",
        done.stdout
    );
}
