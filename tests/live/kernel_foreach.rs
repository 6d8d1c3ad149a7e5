//! `foreach` inside a kernel probe. Unsorted (a `bpf_for_each_map_elem`
//! callback with program BTF): one kernel probe fills an array keyed by the
//! pids of this test's own trigger runs, another walks it when a second
//! trigger name fires, with `limit`, `break` and value binding, and the
//! test checks every number against the pids it spawned. Sorted (rounds of
//! selection, `lang/src/bpf/emit/sorted.rs`): every order stap defines.

use std::process::Command;

use super::{Session, assert_success, build, closed_port, serial, trigger_until_done};

/// x86_64 `socket(2)`: the trigger's `udp` mode makes exactly one.
const SYS_SOCKET: i64 = 41;

#[test]
fn kernel_foreach_sums_keys_and_values_with_limit_and_break() {
    let _one = serial();
    let trigger = build("trigger");
    let port = closed_port().to_string();
    // a[pid] = arrival order (1, 2, 3); the walk prints each element, the
    // key total, how many `limit 2` visits, and which pid `break` stopped
    // at (the second arrival).
    let script = format!(
        r#"global a, arrivals
           probe kernel.trace("raw_syscalls:sys_enter") {{
             if ($id == {SYS_SOCKET} && execname() == "stapKFeFill") {{
               arrivals++
               a[pid()] = arrivals
             }}
             if ($id == {SYS_SOCKET} && execname() == "stapKFeWalk") {{
               total = 0; values = 0; n = 0; found = 0; visits = 0
               foreach (v = [k] in a) {{
                 printf("key %d %d\n", k, v)
                 total += k
                 values += a[k]
               }}
               foreach ([k] in a limit 2) n++
               foreach ([k] in a) {{
                 visits++
                 if (a[k] == 2) {{ found = k; break }}
               }}
               printf("total %d values %d limit %d found %d visited %d\n", total, values, n, found, visits <= 3)
               exit()
             }}
           }}"#
    );
    let mut session = Session::start(&["-e", &script]);
    session.wait_ready();
    let mut pids = Vec::new();
    for _ in 0..3 {
        let mut child = Command::new(&trigger)
            .args(["stapKFeFill", "udp", "127.0.0.1", &port])
            .spawn()
            .expect("running the trigger");
        pids.push(child.id() as i64);
        let status = child.wait().expect("waiting for the trigger");
        assert!(status.success(), "trigger failed: {status}");
    }
    trigger_until_done(
        &mut session,
        &trigger,
        &["stapKFeWalk", "udp", "127.0.0.1", &port],
    );
    let done = session.finish();
    assert_success(&done);
    // Hash order is the kernel's: compare the element lines as a set.
    let mut lines: Vec<&str> = done.stdout.lines().collect();
    let summary = lines.pop().unwrap_or_default().to_string();
    lines.sort();
    let mut expected: Vec<String> = pids
        .iter()
        .enumerate()
        .map(|(i, pid)| format!("key {pid} {}", i + 1))
        .collect();
    expected.sort();
    assert_eq!(lines, expected, "stderr:\n{}", done.stderr);
    let total: i64 = pids.iter().sum();
    assert_eq!(
        summary,
        format!("total {total} values 6 limit 2 found {} visited 1", pids[1]),
        "stderr:\n{}",
        done.stderr
    );
}

/// Array slices in a kernel probe: `foreach` over `a[f, *]` (with and
/// without `limit`), `delete a[f, *]` and `[f, *] in a`, each a walk of
/// the whole map.
#[test]
fn kernel_array_slices_walk_delete_and_test_the_matching_elements() {
    let _one = serial();
    let trigger = build("trigger");
    let port = closed_port().to_string();
    let script = format!(
        r#"global a, filler, total, visits
           probe kernel.trace("raw_syscalls:sys_enter") {{
             if ($id == {SYS_SOCKET} && execname() == "stapKSlFill") {{
               filler = pid()
               a[pid(), 1] = 1; a[pid(), 2] = 2; a[pid() + 1, 1] = 40
             }}
           }}
           probe kernel.trace("raw_syscalls:sys_enter") {{
             if ($id == {SYS_SOCKET} && execname() == "stapKSlWalk") {{
               f = filler
               foreach ([p, n] in a[f, *]) total += a[p, n]
               foreach ([p, n] in a[f, *] limit 1) visits++
             }}
           }}
           probe kernel.trace("raw_syscalls:sys_enter") {{
             if ($id == {SYS_SOCKET} && execname() == "stapKSlDel") {{
               had = [filler, *] in a
               delete a[filler, *]
               left = 0
               foreach ([p, n] in a) left += a[p, n]
               printf("total %d visits %d left %d\n", total, visits, left)
               printf("in %d %d %d %d\n", had, [filler, *] in a, [*, 2] in a, [*, 1] in a)
               exit()
             }}
           }}"#
    );
    let mut session = Session::start(&["-e", &script]);
    session.wait_ready();
    for name in ["stapKSlFill", "stapKSlWalk"] {
        let status = Command::new(&trigger)
            .args([name, "udp", "127.0.0.1", &port])
            .status()
            .expect("running the trigger");
        assert!(status.success(), "trigger failed: {status}");
    }
    trigger_until_done(
        &mut session,
        &trigger,
        &["stapKSlDel", "udp", "127.0.0.1", &port],
    );
    let done = session.finish();
    assert_success(&done);
    assert_eq!(
        done.stdout, "total 3 visits 1 left 40\nin 1 0 0 1\n",
        "stderr:\n{}",
        done.stderr
    );
}

#[test]
fn kernel_foreach_sorted_runs_in_the_kernel_in_stap_order() {
    let _one = serial();
    let trigger = build("trigger");
    let port = closed_port().to_string();
    // Arrays filled in the probe itself, then walked in each order stap
    // defines: by key or value, either direction, string keys and values,
    // the second of two keys, ties on a value broken by the keys
    // (ascending), `limit` and `break`.
    let script = format!(
        r#"global a, s, m
           probe kernel.trace("raw_syscalls:sys_enter") {{
             if ($id == {SYS_SOCKET} && execname() == "stapKSort") {{
               a[3] = 30; a[1] = 20; a[2] = 20; a[-5] = 10
               s["pear"] = 2; s["apple"] = 3; s["fig"] = 1; s["apricot"] = 3
               m[1, "b"] = 5; m[2, "a"] = 6; m[1, "a"] = 7
               foreach (k+ in a) printf("k+ %d\n", k)
               foreach (k- in a) printf("k- %d\n", k)
               foreach (v = k in a-) printf("v- %d %d\n", k, v)
               foreach (k in a+ limit 3) printf("v+ %d\n", k)
               foreach (w in s+) printf("sv+ %s\n", w)
               foreach (w- in s) printf("sk- %s %d\n", w, s[w])
               foreach ([x, y+] in m) printf("m %d %s %d\n", x, y, m[x, y])
               foreach (k+ in a) {{ if (k == 2) break; printf("b %d\n", k) }}
               exit()
             }}
           }}"#
    );
    let mut session = Session::start(&["-e", &script]);
    session.wait_ready();
    trigger_until_done(
        &mut session,
        &trigger,
        &["stapKSort", "udp", "127.0.0.1", &port],
    );
    let done = session.finish();
    assert_success(&done);
    let expected = [
        "k+ -5",
        "k+ 1",
        "k+ 2",
        "k+ 3",
        "k- 3",
        "k- 2",
        "k- 1",
        "k- -5",
        "v- 3 30",
        "v- 1 20",
        "v- 2 20",
        "v- -5 10",
        "v+ -5",
        "v+ 1",
        "v+ 2",
        "sv+ fig",
        "sv+ pear",
        "sv+ apple",
        "sv+ apricot",
        "sk- pear 2",
        "sk- fig 1",
        "sk- apricot 3",
        "sk- apple 3",
        "m 1 a 7",
        "m 2 a 6",
        "m 1 b 5",
        "b -5",
        "b 1",
    ];
    assert_eq!(
        done.stdout,
        expected.map(|l| format!("{l}\n")).concat(),
        "stderr:\n{}",
        done.stderr
    );
}

#[test]
fn kernel_foreach_sorted_by_a_statistic_names_the_host_probe_move() {
    let done = Session::start(&[
        "-p4",
        "-e",
        r#"global a
           probe kernel.trace("raw_syscalls:sys_enter") {
             a[pid()] <<< 1
             foreach ([k] in a-) printf("%d\n", k)
           }"#,
    ])
    .finish();
    assert!(
        !done.status.success(),
        "a kernel foreach sorted by a statistic must not compile"
    );
    assert!(
        done.stderr.contains(
            "unsupported: a foreach over a statistics array sorted by its values in a kernel probe"
        ),
        "{}",
        done.stderr
    );
}

/// Why `--kernel-probes=OPTION` cannot run here (stap-rs probes the kernel
/// for the mechanism), or `None` when it can.
fn unavailable(option: &str) -> Option<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_stap-rs"))
        .args(["--kernel-probes", option, "-p2", "-e"])
        .arg(r#"probe kernel.function("udp_sendmsg") { }"#)
        .output()
        .expect("running stap-rs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = stderr.lines().find(|l| l.contains("cannot use"));
    line.map(|l| l.trim_start_matches("error: ").to_string())
}

/// The callback also loads into fentry (BPF_PROG_TYPE_TRACING) and kprobe
/// programs: a kernel.function probe walks an array a tracepoint probe
/// filled for the same trigger process.
#[test]
fn kernel_foreach_in_fentry_and_kprobe_probes() {
    let mut missing = Vec::new();
    for option in ["fentry", "kprobe"] {
        if let Some(reason) = unavailable(option) {
            eprintln!("{option} unavailable: {reason}");
            missing.push(reason);
            continue;
        }
        let _one = serial();
        let trigger = build("trigger");
        let port = closed_port().to_string();
        let script = format!(
            r#"global a
               probe kernel.trace("raw_syscalls:sys_enter") {{
                 if ($id == {SYS_SOCKET} && execname() == "stapKFeFn") a[pid()] = 7
               }}
               probe kernel.function("udp_sendmsg") {{
                 if (execname() == "stapKFeFn") {{
                   n = 0; s = 0
                   foreach (v = [k] in a) {{ n++; s += v; if (k != pid()) s += 1000 }}
                   printf("{option} %d %d\n", n, s)
                   exit()
                 }}
               }}"#
        );
        let mut session = Session::start(&["--kernel-probes", option, "-e", &script]);
        session.wait_ready();
        trigger_until_done(
            &mut session,
            &trigger,
            &["stapKFeFn", "udp", "127.0.0.1", &port],
        );
        let done = session.finish();
        assert_success(&done);
        assert_eq!(
            done.stdout,
            format!("{option} 1 7\n"),
            "stderr:\n{}",
            done.stderr
        );
    }
    if missing.len() == 2 {
        eprintln!("stap-rs-skip: {}", missing.join("; "));
    }
}

/// String keys sized by what reaches them (`bpf::key_text`): `execname()`
/// keys take 16 bytes instead of MAXSTRINGLEN. The same script must mean
/// the same: a 15-character name (the longest comm) is counted, walked in
/// the kernel and on the host, printed as a histogram key, and deleted,
/// all intact; a longer literal looked up from the host widens the key
/// and finds nothing.
#[test]
fn narrowed_string_keys_keep_every_name_whole() {
    let _one = serial();
    let trigger = build("trigger");
    let port = closed_port().to_string();
    let script = format!(
        r#"global counts, sizes, gone
           probe kernel.trace("raw_syscalls:sys_enter") {{
             if ($id == {SYS_SOCKET} && (execname() == "stapSk" || execname() == "stapSkLongName1")) {{
               counts[execname()]++
               sizes[execname(), 7] <<< 100
             }}
             if ($id == {SYS_SOCKET} && execname() == "stapSkWalk") {{
               foreach (k in counts) printf("kernel %s %d\n", k, counts[k])
               print(@hist_log(sizes["stapSkLongName1", 7]))
               delete counts["stapSk"]
               gone = !("stapSk" in counts)
               exit()
             }}
           }}
           probe end {{
             foreach (k in counts) printf("end %s %d\n", k, counts[k])
             printf("gone %d longer %d\n", gone, "stapSkLongName1-and-more" in counts)
           }}"#
    );
    let mut session = Session::start(&["-e", &script]);
    session.wait_ready();
    for name in ["stapSk", "stapSkLongName1", "stapSkLongName1"] {
        let status = Command::new(&trigger)
            .args([name, "udp", "127.0.0.1", &port])
            .status()
            .expect("running the trigger");
        assert!(status.success(), "trigger failed: {status}");
    }
    trigger_until_done(
        &mut session,
        &trigger,
        &["stapSkWalk", "udp", "127.0.0.1", &port],
    );
    let done = session.finish();
    assert_success(&done);
    let mut kernel: Vec<&str> = done
        .stdout
        .lines()
        .filter(|l| l.starts_with("kernel "))
        .collect();
    kernel.sort();
    assert_eq!(
        kernel,
        ["kernel stapSk 1", "kernel stapSkLongName1 2"],
        "stdout:\n{}\nstderr:\n{}",
        done.stdout,
        done.stderr
    );
    let end: Vec<&str> = done
        .stdout
        .lines()
        .filter(|l| l.starts_with("end ") || l.starts_with("gone "))
        .collect();
    assert_eq!(
        end,
        ["end stapSkLongName1 2", "gone 1 longer 0"],
        "stdout:\n{}",
        done.stdout
    );
    // The histogram of the 15-character key: two samples of 100.
    assert!(
        done.stdout
            .lines()
            .any(|l| l.trim_start().starts_with("64 |") && l.trim_end().ends_with(" 2")),
        "no bucket of 2 samples in:\n{}",
        done.stdout
    );
}

/// A body that always breaks (stap's idiom for "the first key", as
/// ltrace.stp writes it) never asks for the next element: the callback
/// has no path for it, which the verifier would reject as unreachable.
/// CPU 0 only: a second CPU already in the handler when exit() ran would
/// add its own pid, and its loop could take the first CPU's key (CI once
/// printed "1 1" and "0 1").
#[test]
fn kernel_foreach_whose_body_always_breaks_takes_the_first_key() {
    let _one = serial();
    let script = r#"global a
probe kernel.trace("sched_switch") {
  if (cpu() != 0) next
  a[pid()] = 1
  first = 0
  foreach (k in a) { first = k; break }
  printf("%d %d\n", first == pid(), first in a)
  exit()
}"#;
    let done = Session::start(&["-e", script]).finish();
    assert_success(&done);
    assert_eq!(done.stdout, "1 1\n", "stderr:\n{}", done.stderr);
}

/// A handler whose only strings are short map keys builds them on the stack
/// (`bpf::emit`, `plan_stack_strings`: no scratch region, no nesting
/// level). The counts, a statistic's count/sum/min/max by the same key,
/// and a literal key must read as with keys built in scratch: one socket()
/// per trigger run, the 15-character name whole.
#[test]
fn string_keys_built_on_the_stack_count_every_call() {
    let _one = serial();
    let trigger = build("trigger");
    let port = closed_port().to_string();
    let script = format!(
        r#"global counts, sizes, lits
           probe kernel.trace("raw_syscalls:sys_enter") {{
             if ($id == {SYS_SOCKET}) {{
               counts[execname()]++
               sizes[execname()] <<< 3
               lits["socket"]++
             }}
           }}
           probe end {{
             foreach (k in counts)
               printf("end %s %d %d %d %d %d\n", k, counts[k], @count(sizes[k]),
                      @sum(sizes[k]), @min(sizes[k]), @max(sizes[k]))
             printf("lits at least 3: %d\n", lits["socket"] >= 3)
           }}"#
    );
    let mut session = Session::start(&["-e", &script]);
    session.wait_ready();
    for name in ["stapStk", "stapStkLongNam1", "stapStkLongNam1"] {
        let status = Command::new(&trigger)
            .args([name, "udp", "127.0.0.1", &port])
            .status()
            .expect("running the trigger");
        assert!(status.success(), "trigger failed: {status}");
    }
    // SIGINT runs the end probe.
    let status = Command::new("kill")
        .args(["-INT", &session.pid().to_string()])
        .status()
        .expect("running kill");
    assert!(status.success(), "kill -INT failed");
    let done = session.finish();
    assert_success(&done);
    let mut ours: Vec<&str> = done
        .stdout
        .lines()
        .filter(|l| l.starts_with("end stapStk") || l.starts_with("lits "))
        .collect();
    ours.sort();
    assert_eq!(
        ours,
        [
            "end stapStk 1 1 3 3 3",
            "end stapStkLongNam1 2 2 6 3 3",
            "lits at least 3: 1"
        ],
        "stdout:\n{}\nstderr:\n{}",
        done.stdout,
        done.stderr
    );
}
