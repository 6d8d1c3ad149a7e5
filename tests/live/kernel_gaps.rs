//! Constructs that used to be host-only, now in kernel probes: `delete` of
//! a whole array or statistics array (a `bpf_for_each_map_elem` callback
//! that deletes each element), and printing a histogram (a record the
//! host answers with its own histogram printer). Each test filters on its
//! own trigger's process name. Also typed-pointer locals (`p = $regs;
//! p->di`), read as the direct member chain is.

use std::process::Command;

use super::{Session, assert_success, build, closed_port, serial, trigger_until_done};

/// x86_64 `socket(2)`: the trigger's `udp` mode makes exactly one.
const SYS_SOCKET: i64 = 41;

#[test]
fn kernel_delete_empties_an_array_and_a_statistics_array() {
    let _one = serial();
    let trigger = build("trigger");
    let port = closed_port().to_string();
    let script = format!(
        r#"global a, s
           probe kernel.trace("raw_syscalls:sys_enter") {{
             if ($id == {SYS_SOCKET} && execname() == "stapKGFill") {{
               a[pid()] = 1
               s[pid()] <<< pid()
             }}
             if ($id == {SYS_SOCKET} && execname() == "stapKGDel") {{
               n = 0
               foreach ([k] in a) n++
               m = 0
               foreach ([k] in s) m++
               printf("before %d %d\n", n, m)
               delete a
               delete s
               exit()
             }}
           }}
           probe end {{
             n = 0
             foreach (k in a) n++
             m = 0
             foreach (k in s) m++
             printf("after %d %d\n", n, m)
           }}"#
    );
    let mut session = Session::start(&["-e", &script]);
    session.wait_ready();
    for _ in 0..3 {
        let status = Command::new(&trigger)
            .args(["stapKGFill", "udp", "127.0.0.1", &port])
            .status()
            .expect("running the trigger");
        assert!(status.success(), "trigger failed: {status}");
    }
    trigger_until_done(
        &mut session,
        &trigger,
        &["stapKGDel", "udp", "127.0.0.1", &port],
    );
    let done = session.finish();
    assert_success(&done);
    assert_eq!(
        done.stdout, "before 3 3\nafter 0 0\n",
        "stderr:\n{}",
        done.stderr
    );
}

/// One histogram row in stap's layout (counts here stay under 50, so one
/// `@` per sample).
fn row(value: i64, count: usize) -> String {
    format!("{value:>5} |{:<50}{count:>5}\n", "@".repeat(count))
}

const HEADER: &str = "value |-------------------------------------------------- count\n";

#[test]
fn kernel_probe_prints_log_and_linear_histograms_in_stap_layout() {
    let _one = serial();
    let trigger = build("trigger");
    let port = closed_port().to_string();
    let values: [i64; 8] = [1, 2, 2, 3, 8, 8, 8, 64];
    let adds: String = values
        .iter()
        .map(|v| format!("h[pid()] <<< {v}; g[execname()] <<< {}\n", v % 10))
        .collect();
    let script = format!(
        r#"global h, g
           probe kernel.trace("raw_syscalls:sys_enter") {{
             if ($id == {SYS_SOCKET} && execname() == "stapKGHist") {{
               {adds}
               printf("log\n")
               print(@hist_log(h[pid()]))
               printf("linear\n")
               println(@hist_linear(g[execname()], 0, 10, 2))
               printf("done\n")
               exit()
             }}
           }}"#
    );
    let mut session = Session::start(&["-e", &script]);
    session.wait_ready();
    trigger_until_done(
        &mut session,
        &trigger,
        &["stapKGHist", "udp", "127.0.0.1", &port],
    );
    let done = session.finish();
    assert_success(&done);
    // Log buckets: 1 → 1, {2, 2, 3} → 2, {8, 8, 8} → 8, 64 → 64; two
    // empty rows around the data, nothing below 0.
    let log: String = [(0, 0), (1, 1), (2, 3), (4, 0), (8, 3), (16, 0)]
        .iter()
        .chain(&[(32, 0), (64, 1), (128, 0), (256, 0)])
        .map(|(v, n)| row(*v, *n))
        .collect();
    // Linear, of v % 10 = 1 2 2 3 8 8 8 4: 0..1 → 1, 2..3 → 3, 4..5 → 1,
    // 8..9 → 3; the buckets run to hi = 10.
    let linear: String = [(0, 1), (2, 3), (4, 1), (6, 0), (8, 3), (10, 0)]
        .iter()
        .map(|(v, n)| row(*v, *n))
        .collect();
    let expected = format!("log\n{HEADER}{log}\nlinear\n{HEADER}{linear}\n\ndone\n");
    assert_eq!(done.stdout, expected, "stderr:\n{}", done.stderr);
}

/// `@variance` in a kernel probe: stap's integer results for 1..5 (12, and
/// 2 with a shift of 1), the samples added and extracted in the kernel.
#[test]
fn kernel_probe_variance_uses_stap_integer_arithmetic() {
    let _one = serial();
    let trigger = build("trigger");
    let port = closed_port().to_string();
    let script = format!(
        r#"global x, y
           probe kernel.trace("raw_syscalls:sys_enter") {{
             if ($id == {SYS_SOCKET} && execname() == "stapKGVar") {{
               for (i = 1; i <= 5; i++) {{ x <<< i; y <<< i }}
               printf("%d %d\n", @variance(x), @variance(y, 1))
               exit()
             }}
           }}"#
    );
    let mut session = Session::start(&["-e", &script]);
    session.wait_ready();
    trigger_until_done(
        &mut session,
        &trigger,
        &["stapKGVar", "udp", "127.0.0.1", &port],
    );
    let done = session.finish();
    assert_success(&done);
    assert_eq!(done.stdout, "12 2\n", "stderr:\n{}", done.stderr);
}

/// Stacks as string values in a kernel probe: `sprint_backtrace()`,
/// `sprint_ubacktrace()` and `sprint_stack(backtrace())` stored in locals
/// and used as a map key are named by the host when printed, the same
/// text as `sprint_backtrace()` as a print argument; `print_syms()` and
/// `print_stack()` of `backtrace()` print `print_backtrace()`'s lines; and
/// the host probe's `print_syms`/`sprint_stack` of the same `backtrace()`
/// string agree with the kernel probe's.
#[test]
fn kernel_probe_stack_values_are_named_by_the_host() {
    let _one = serial();
    let trigger = build("trigger");
    let port = closed_port().to_string();
    let script = format!(
        r#"global keys, addresses
           probe kernel.trace("raw_syscalls:sys_enter") {{
             if ($id == {SYS_SOCKET} && execname() == "stapKGStack") {{
               bt = sprint_backtrace()
               ubt = sprint_ubacktrace()
               keys[bt] <<< 1
               addresses = backtrace()
               printf("=value\n%s\n=arg\n%s\n", bt, sprint_backtrace())
               printf("=stack\n%s\n", sprint_stack(backtrace()))
               printf("=uvalue\n%s\n=uarg\n%s\n", ubt, sprint_ubacktrace())
               print("=syms\n"); print_syms(backtrace())
               print("=print_stack\n"); print_stack(backtrace())
               print("=backtrace\n"); print_backtrace()
               print("=end\n")
               exit()
             }}
           }}
           probe end {{
             foreach (k in keys limit 1) printf("=key\n%s\n", k)
             printf("=host_stack\n%s\n", sprint_stack(addresses))
             print("=host_syms\n"); print_syms(addresses)
           }}"#
    );
    let mut session = Session::start(&["-e", &script]);
    session.wait_ready();
    trigger_until_done(
        &mut session,
        &trigger,
        &["stapKGStack", "udp", "127.0.0.1", &port],
    );
    let done = session.finish();
    assert_success(&done);
    // Sections by name; a second hit before exit() repeats the first's.
    let mut sections: Vec<(String, String)> = Vec::new();
    for line in done.stdout.lines() {
        match line.strip_prefix('=') {
            Some(name) => sections.push((name.to_string(), String::new())),
            None => {
                let (_, text) = sections.last_mut().expect("a section first");
                text.push_str(line);
                text.push('\n');
            }
        }
    }
    let section = |name: &str| {
        sections
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, text)| text.clone())
            .unwrap_or_else(|| panic!("no section {name} in:\n{}", done.stdout))
    };
    let value = section("value");
    assert!(value.contains(" [kernel]\n"), "{}", done.stdout);
    assert!(!value.contains('\u{1b}'), "{}", done.stdout);
    for same in ["arg", "stack", "key", "host_stack"] {
        assert_eq!(section(same), value, "{same}:\n{}", done.stdout);
    }
    let uvalue = section("uvalue");
    assert!(!uvalue.trim().is_empty(), "{}", done.stdout);
    assert_eq!(section("uarg"), uvalue, "{}", done.stdout);
    let printed = section("backtrace");
    assert!(printed.starts_with(" 0x"), "{}", done.stdout);
    for same in ["syms", "print_stack", "host_syms"] {
        assert_eq!(section(same), printed, "{same}:\n{}", done.stdout);
    }
}

/// A local assigned a typed pointer is read through `->` as that type
/// (stap's autocast): `$regs`, `@cast(...)`, a member that is a pointer
/// and the local itself (`a = a->real_parent`), in a kernel probe, and an
/// `@cast` held in a local of a host probe; each beside the direct chain.
#[test]
fn typed_pointer_locals_read_like_the_direct_chain() {
    let _one = serial();
    let trigger = build("trigger");
    let port = closed_port().to_string();
    let script = format!(
        r#"global parent
           probe kernel.trace("raw_syscalls:sys_enter") {{
             if ($id == {SYS_SOCKET} && execname() == "stapKGTyped") {{
               r = $regs
               t = @cast(task_current(), "task_struct")
               up = t->real_parent
               a = t
               for (i = 0; i < 1; i++) a = a->real_parent
               se = &t->se
               printf("regs %d %d\n", r->di, $regs->di)
               printf("parent %d %d %d\n", up->tgid, a->tgid,
                      @cast(task_current(), "task_struct")->real_parent->tgid)
               printf("tgid %d %d\n", t->tgid, pid())
               printf("se %d\n", se->on_rq == @cast(task_current(), "task_struct")->se->on_rq)
               parent = up
               exit()
             }}
           }}
           probe end {{
             p = @cast(parent, "task_struct")
             printf("host %d %d\n", p->tgid, @cast(parent, "struct task_struct")->tgid)
           }}"#
    );
    let mut session = Session::start(&["-e", &script]);
    session.wait_ready();
    trigger_until_done(
        &mut session,
        &trigger,
        &["stapKGTyped", "udp", "127.0.0.1", &port],
    );
    let done = session.finish();
    assert_success(&done);
    // The first hit's lines (a second hit before exit() repeats them).
    let line = |name: &str| -> Vec<i64> {
        let found = done
            .stdout
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no {name} line in:\n{}", done.stdout));
        found.split(' ').map(|n| n.parse().unwrap()).collect()
    };
    // socket(AF_INET, ...): the first argument register holds 2.
    assert_eq!(line("regs"), [2, 2], "{}", done.stdout);
    // The trigger's parent is a thread of this test's process.
    let me = i64::from(std::process::id());
    assert_eq!(line("parent"), [me, me, me], "{}", done.stdout);
    let tgid = line("tgid");
    assert_eq!(tgid[0], tgid[1], "{}", done.stdout);
    assert_eq!(line("se"), [1], "{}", done.stdout);
    assert_eq!(line("host"), [me, me], "{}", done.stdout);
}

/// Autocast through function returns, parameters and globals: the
/// built-in `task_current()` and the stdlib's `task_parent()` followed by
/// `->`, a script function whose parameter is typed by its calls, a global
/// typed by its assignment (the parent's read again in a host probe, while
/// this test's thread that started the trigger still lives); each beside
/// the number the plain built-ins give.
#[test]
fn typed_pointers_through_functions_and_globals() {
    let _one = serial();
    let trigger = build("trigger");
    let port = closed_port().to_string();
    let script = format!(
        r#"global me, parent
           function tgid_of(t) {{ return t->tgid }}
           function name_of(t) {{ return kernel_string(t->comm) }}
           function up(t) {{ return t->real_parent }}
           probe kernel.trace("raw_syscalls:sys_enter") {{
             if ($id == {SYS_SOCKET} && execname() == "stapKGAuto") {{
               me = task_current()
               parent = up(me)
               printf("self %d %d %d %d\n", task_current()->tgid, tgid_of(task_current()),
                      me->tgid, pid())
               printf("parent %d %d %d\n", task_parent(task_current())->tgid,
                      up(me)->tgid, ppid())
               printf("name %s %s\n", name_of(me), execname())
               printf("by pid %d\n", pid2task(pid())->tgid)
               exit()
             }}
           }}
           probe end {{ printf("host %d\n", parent->tgid) }}"#
    );
    let mut session = Session::start(&["-e", &script]);
    session.wait_ready();
    trigger_until_done(
        &mut session,
        &trigger,
        &["stapKGAuto", "udp", "127.0.0.1", &port],
    );
    let done = session.finish();
    assert_success(&done);
    let line = |name: &str| -> Vec<String> {
        let found = done
            .stdout
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no {name} line in:\n{}", done.stdout));
        found.split(' ').map(str::to_string).collect()
    };
    let numbers =
        |name: &str| -> Vec<i64> { line(name).iter().map(|n| n.parse().unwrap()).collect() };
    let this = numbers("self");
    assert!(
        this[0] > 0 && this.iter().all(|n| *n == this[0]),
        "{}",
        done.stdout
    );
    // The trigger's parent is a thread of this test's process.
    let me = i64::from(std::process::id());
    assert_eq!(numbers("parent"), [me, me, me], "{}", done.stdout);
    assert_eq!(
        line("name"),
        ["stapKGAuto", "stapKGAuto"],
        "{}",
        done.stdout
    );
    assert_eq!(numbers("by pid"), [this[0]], "{}", done.stdout);
    assert_eq!(numbers("host"), [me], "{}", done.stdout);
}

/// stap's display of unread globals, for globals only kernel probes write
/// (their values are in BPF maps, read by the host at the end): no end
/// probe in the script, and the run ends with the `-c` command.
#[test]
fn globals_only_kernel_probes_write_are_printed_at_the_end() {
    let _one = serial();
    let trigger = build("trigger");
    let command = format!("{} stapKGShow chdirs 3", trigger.display());
    let done = Session::start(&[
        "-c",
        &command,
        "-e",
        r#"global calls, who, per, untouched
           probe kernel.trace("syscalls:sys_enter_chdir") {
             if (pid() == target()) { calls <<< 1; who = execname(); per[execname(), 3] = 7 }
           }
           probe kernel.trace("syscalls:sys_enter_fchdir") {
             if (pid() == target()) untouched <<< 1
           }"#,
    ])
    .finish();
    assert_success(&done);
    assert_eq!(
        done.stdout,
        "calls @count=3 @min=1 @max=1 @sum=3 @avg=1\nwho=\"stapKGShow\"\n\
         per[\"stapKGShow\",3]=0x7\nuntouched @count=0x0\n",
        "stderr:\n{}",
        done.stderr
    );
}
