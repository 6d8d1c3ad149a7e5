//! Concurrency as stap defines it (docs/language.md, "Concurrency"): with
//! both CPUs in the probed path at once, no update of a global is lost and
//! one handler's output is never split by another's. The trigger forks
//! once and both processes call getppid in a loop (`-c`, so `target()` is
//! the parent); each test fails on a build without the mechanism.

use super::*;

/// Runs `script` with `-c "trigger NAME getppid N"` and returns its output.
fn run_getppid(name: &str, per_process: u32, script: &str) -> Finished {
    let trigger = build("trigger");
    let command = format!("{} {name} getppid {per_process}", trigger.display());
    let mut session =
        Session::start(&["-D", "MAXMAPENTRIES=1000000", "-c", &command, "-e", script]);
    session.wait_ready();
    let done = session.finish();
    assert_success(&done);
    done
}

/// `name=value` fields of the first line that has them.
fn field(stdout: &str, name: &str) -> i64 {
    let prefix = format!("{name}=");
    stdout
        .split_whitespace()
        .find_map(|word| word.strip_prefix(&prefix))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name}= in {stdout:?}"))
}

#[test]
fn concurrent_read_modify_write_loses_no_update() {
    let _one = serial();
    let per_process = 500_000;
    let done = run_getppid(
        "stapT20cnt",
        per_process,
        r#"global x, y, z, a, s
           probe kernel.trace("syscalls:sys_enter_getppid") {
             if (ppid() == target() || pid() == target()) {
               x = x + 1; y++; z += 2; a[1] = a[1] + 1; s <<< 1
             }
           }
           probe end { printf("x=%d y=%d z=%d a=%d count=%d\n", x, y, z, a[1], @count(s)) }"#,
    );
    // The parent's own start-up may add a getppid or two.
    let count = field(&done.stdout, "count");
    assert!(count >= 2 * i64::from(per_process), "{}", done.stderr);
    assert_eq!(field(&done.stdout, "x"), count, "x = x + 1 lost updates");
    assert_eq!(field(&done.stdout, "y"), count);
    assert_eq!(field(&done.stdout, "z"), 2 * count);
    assert_eq!(
        field(&done.stdout, "a"),
        count,
        "a[k] = a[k] + 1 lost updates"
    );
    assert!(
        !done.stderr.contains("may lose updates"),
        "atomic forms warned:\n{}",
        done.stderr
    );
}

#[test]
fn two_printfs_of_one_handler_never_interleave() {
    let _one = serial();
    let per_process = 50_000;
    let done = run_getppid(
        "stapT20out",
        per_process,
        r#"probe kernel.trace("syscalls:sys_enter_getppid") {
             if (ppid() == target() || pid() == target()) {
               printf("A%d", pid()); printf("B%d\n", pid())
             }
           }"#,
    );
    // Lost events are records; a lost unit (two records) is never printed
    // in part.
    let lost = done
        .stderr
        .lines()
        .find_map(|l| l.strip_prefix("WARNING: "))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse::<usize>().ok())
        .unwrap_or(0);
    let mut lines = 0;
    for line in done.stdout.lines() {
        let (a, b) = line
            .strip_prefix('A')
            .and_then(|rest| rest.split_once('B'))
            .unwrap_or_else(|| panic!("malformed line {line:?}"));
        assert!(
            a == b && a.parse::<u32>().is_ok(),
            "interleaved line {line:?}"
        );
        lines += 1;
    }
    let hits = 2 * per_process as usize;
    assert!(
        2 * lines + lost >= 2 * hits && 2 * lines + lost <= 2 * hits + 4,
        "{lines} lines and {lost} lost records for {hits} hits; stderr:\n{}",
        done.stderr
    );
    assert!(
        lines >= hits / 2,
        "too few lines ({lines}) to test interleaving; stderr:\n{}",
        done.stderr
    );
}

#[test]
fn test_and_set_counts_each_key_once() {
    let _one = serial();
    // Keys are 50 µs time buckets: both CPUs reach each new bucket at
    // about the same time and race to insert it.
    let done = run_getppid(
        "stapT20tas",
        100_000,
        r#"global seen, n
           probe kernel.trace("syscalls:sys_enter_getppid") {
             if (ppid() == target() || pid() == target()) {
               k = gettimeofday_us() / 50
               if (!(k in seen)) { seen[k] = 1; n++ }
             }
           }
           probe end { foreach (k in seen) keys++; printf("keys=%d n=%d\n", keys, n) }"#,
    );
    let keys = field(&done.stdout, "keys");
    assert!(keys > 100, "too few keys to race on: {}", done.stdout);
    assert_eq!(field(&done.stdout, "n"), keys, "a key was counted twice");
}
