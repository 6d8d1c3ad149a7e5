//! Live tests of issue 19 (reliability): stop signals and `-T` obeyed while
//! host code loops or stdout is blocked, a second SIGINT absorbed during
//! end probes, MAXSTRINGLEN equal on both sides, one ERROR line per fault
//! at MAXERRORS=0, `-c` failures and the fate of the `-c` child and of
//! what it started, write errors failing the run, and a closed stdout
//! ending it quietly.

use super::*;

/// A run started by [`spawn`].
struct Run {
    child: Child,
    /// Everything on stdout, if it is read.
    stdout: Option<JoinHandle<String>>,
    lines: Receiver<String>,
    stderr: Arc<Mutex<String>>,
}

/// `stap-rs ARGS...` with piped output, optionally without reading stdout.
fn spawn(args: &[&str], read_stdout: bool) -> Run {
    let mut child = Command::new(env!("CARGO_BIN_EXE_stap-rs"))
        .arg("-v")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting stap-rs");
    let stdout = read_stdout.then(|| {
        let mut out = child.stdout.take().expect("piped stdout");
        thread::spawn(move || {
            let mut text = String::new();
            let _ = out.read_to_string(&mut text);
            text
        })
    });
    let err = child.stderr.take().expect("piped stderr");
    let (send, lines) = mpsc::channel();
    let all = Arc::new(Mutex::new(String::new()));
    let text = Arc::clone(&all);
    thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            if let Ok(mut text) = text.lock() {
                text.push_str(&line);
                text.push('\n');
            }
            let _ = send.send(line);
        }
    });
    Run {
        child,
        stdout,
        lines,
        stderr: all,
    }
}

fn wait_line(lines: &Receiver<String>, wanted: &str, all: &Arc<Mutex<String>>) {
    let deadline = Instant::now() + START_TIMEOUT;
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        match lines.recv_timeout(left) {
            Ok(line) if line.contains(wanted) => return,
            Ok(_) => {}
            Err(_) => break,
        }
    }
    panic!("no line with {wanted:?}; stderr:\n{}", all.lock().unwrap());
}

/// Waits for `child` to exit; its status. Each run here would never end
/// by itself (an endless loop, a full pipe), so exiting at all is what the
/// tests check: `within` is only how long a hang is waited for, generous
/// for a loaded machine, not a measure of speed.
fn exits_within(child: &mut Child, within: Duration) -> ExitStatus {
    let started = Instant::now();
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return status;
        }
        if started.elapsed() > within {
            let _ = child.kill();
            let _ = child.wait();
            panic!("stap-rs did not exit within {within:?}");
        }
        thread::sleep(Duration::from_millis(20));
    }
}

fn signal(child: &Child, signal: &str) {
    let status = Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status()
        .expect("running kill");
    assert!(status.success());
}

const SPIN: &str = "probe timer.ms(10) { while (1) {} } probe end { println(\"end ran\") }";

#[test]
fn minus_t_ends_an_endless_host_loop() {
    let _one = serial();
    let Run {
        mut child,
        stdout,
        stderr,
        ..
    } = spawn(
        &["-T", "2", "-D", "MAXACTION=100000000000000", "-e", SPIN],
        true,
    );
    let status = exits_within(&mut child, Duration::from_secs(20));
    let out = stdout.unwrap().join().unwrap();
    let err = stderr.lock().unwrap().clone();
    assert!(status.success(), "{status}\n{err}");
    assert_eq!(out, "end ran\n", "{err}");
    assert!(err.contains("Pass 5: run completed"), "{err}");
    assert!(!err.contains("ERROR"), "{err}");
}

#[test]
fn sigint_ends_an_endless_host_loop() {
    let _one = serial();
    let Run {
        mut child,
        stdout,
        lines,
        stderr,
    } = spawn(&["-D", "MAXACTION=100000000000000", "-e", SPIN], true);
    wait_line(&lines, READY_LINE, &stderr);
    thread::sleep(Duration::from_millis(300));
    signal(&child, "-INT");
    let status = exits_within(&mut child, Duration::from_secs(20));
    let err = stderr.lock().unwrap().clone();
    assert!(status.success(), "{status}\n{err}");
    assert_eq!(stdout.unwrap().join().unwrap(), "end ran\n", "{err}");
}

#[test]
fn sigterm_ends_a_run_whose_stdout_nobody_reads() {
    let _one = serial();
    // Fills the pipe within milliseconds, then blocks in write(2).
    let script = "probe timer.ms(1) { for (i = 0; i < 100; i++) println(\"0123456789012345678901234567890123456789\") }";
    let Run {
        mut child,
        lines,
        stderr,
        ..
    } = spawn(&["-e", script], false);
    wait_line(&lines, READY_LINE, &stderr);
    thread::sleep(Duration::from_millis(1000));
    signal(&child, "-TERM");
    let status = exits_within(&mut child, Duration::from_secs(20));
    thread::sleep(Duration::from_millis(100));
    let err = stderr.lock().unwrap().clone();
    // Output was lost: the run says so and fails.
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(err.contains("bytes of output dropped"), "{err}");
}

#[test]
fn sigterm_ends_a_run_whose_stderr_nobody_reads() {
    let _one = serial();
    // Warnings go to stderr: they fill its pipe within milliseconds, and
    // the session blocks writing the next one.
    let script = "probe timer.ms(1) { for (i = 0; i < 100; i++) warn(\"0123456789012345678901234567890123456789\") } probe end { println(\"end ran\") }";
    let mut child = Command::new(env!("CARGO_BIN_EXE_stap-rs"))
        .args(["-e", script])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting stap-rs");
    let mut out = child.stdout.take().expect("piped stdout");
    let stdout = thread::spawn(move || {
        let mut text = String::new();
        let _ = out.read_to_string(&mut text);
        text
    });
    // Held, never read: the pipe stays full.
    let _stderr = child.stderr.take();
    thread::sleep(Duration::from_millis(3000));
    signal(&child, "-TERM");
    let status = exits_within(&mut child, Duration::from_secs(20));
    // The end probe ran and its output (on stdout, which is read) is whole.
    assert_eq!(stdout.join().unwrap(), "end ran\n");
    assert!(status.success(), "{status}");
}

#[test]
fn a_reader_that_closes_stdout_ends_the_run_quietly() {
    let _one = serial();
    let mut child = Command::new(env!("CARGO_BIN_EXE_stap-rs"))
        .args(["-e", "probe timer.ms(1) { println(\"line\") }"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting stap-rs");
    let mut err = child.stderr.take().expect("piped stderr");
    let stderr = thread::spawn(move || {
        let mut text = String::new();
        let _ = err.read_to_string(&mut text);
        text
    });
    // `| head -1`: one line, then the read end closes.
    let mut out = BufReader::new(child.stdout.take().expect("piped stdout"));
    let mut first = String::new();
    out.read_line(&mut first).expect("a line");
    assert_eq!(first, "line\n");
    drop(out);
    let status = exits_within(&mut child, Duration::from_secs(20));
    let err = stderr.join().unwrap();
    assert!(status.success(), "{status}\n{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(!err.contains("ERROR"), "{err}");
}

#[test]
fn a_second_sigint_does_not_cut_the_end_probes() {
    let _one = serial();
    let script = "probe end { t = gettimeofday_ms(); while (gettimeofday_ms() - t < 1500) {} println(\"end done\") }";
    let Run {
        mut child,
        stdout,
        lines,
        stderr,
    } = spawn(&["-D", "MAXACTION=100000000000000", "-e", script], true);
    wait_line(&lines, READY_LINE, &stderr);
    signal(&child, "-INT");
    thread::sleep(Duration::from_millis(300));
    signal(&child, "-INT");
    let status = exits_within(&mut child, Duration::from_secs(20));
    let err = stderr.lock().unwrap().clone();
    assert!(status.success(), "{status}\n{err}");
    assert_eq!(stdout.unwrap().join().unwrap(), "end done\n", "{err}");
    assert!(err.contains("Pass 5: run completed"), "{err}");
}

#[test]
fn a_third_sigint_cuts_endless_end_probes() {
    let _one = serial();
    let script = "probe end { while (1) {} } probe end(1) { println(\"later end\") }";
    let Run {
        mut child,
        stdout,
        lines,
        stderr,
    } = spawn(&["-D", "MAXACTION=100000000000000", "-e", script], true);
    wait_line(&lines, READY_LINE, &stderr);
    for _ in 0..3 {
        signal(&child, "-INT");
        thread::sleep(Duration::from_millis(300));
    }
    let status = exits_within(&mut child, Duration::from_secs(20));
    let err = stderr.lock().unwrap().clone();
    assert!(status.success(), "{status}\n{err}");
    // Cutting stops every end probe still to run, as staprun's forced exit.
    assert_eq!(stdout.unwrap().join().unwrap(), "", "{err}");
    assert!(err.contains("Pass 5: run completed"), "{err}");
}

#[test]
fn host_and_kernel_cut_strings_at_the_same_length() {
    let _one = serial();
    // The same expressions in begin (host JIT) and in a kernel probe.
    let exprs = r#"printf("%d %d %d %d %d %s|\n", strlen("0123456789abcdefghijklmnopqrstuvwxyz"),
        strlen("0123456789" . "abcdefghij"), strlen(sprintf("%s-%s", "0123456789", "abcdef")),
        strlen(sprintf("%d%s", 1234567, "abcdef")), strlen(s . s), s . s)"#;
    let script = format!(
        "global s = \"abcdefghijklmnop\"\n\
         probe begin {{ {exprs} }}\n\
         probe timer.profile {{ {exprs} exit() }}\n"
    );
    for max in ["8", "16", "512"] {
        let define = format!("MAXSTRINGLEN={max}");
        let mut session = Session::start(&["-D", &define, "-e", &script]);
        session.wait_ready();
        let done = session.finish();
        assert_success(&done);
        let lines: Vec<&str> = done.stdout.lines().collect();
        // The begin line, then one per CPU whose profile tick came before
        // exit() took hold: all the same.
        assert!(lines.len() >= 2, "{}\n{}", done.stdout, done.stderr);
        assert!(
            lines.iter().all(|l| *l == lines[0]),
            "MAXSTRINGLEN={max}: host then kernel:\n{}",
            done.stdout
        );
        if max == "8" {
            assert!(lines[0].starts_with("7 7 7 "), "{}", lines[0]);
            assert!(lines[0].ends_with(" 7 abcdefg|"), "{}", lines[0]);
        }
    }
}

#[test]
fn one_kernel_fault_prints_one_error_line() {
    let _one = serial();
    // Every CPU faults at once; MAXERRORS=0 ends the run at the first.
    let mut session = Session::start(&["-e", "global zero probe timer.profile { x = 1 / zero }"]);
    session.wait_ready();
    let done = session.finish();
    assert_eq!(done.status.code(), Some(1), "{}", done.stderr);
    let errors = done
        .stderr
        .lines()
        .filter(|l| l.starts_with("ERROR: division by zero"))
        .count();
    assert_eq!(errors, 1, "{}", done.stderr);
    assert!(
        done.stderr.contains("WARNING: Number of errors: "),
        "{}",
        done.stderr
    );
}

#[test]
fn a_failing_command_fails_the_run_as_staprun_says() {
    let _one = serial();
    let cases = [
        ("false", "Child process exited with status 1"),
        ("exit 42", "Child process exited with status 42"),
        (
            "no-such-command-stap-rs",
            "Child process exited with status 127",
        ),
        ("kill -SEGV $$", "Child process exited with signal 11"),
    ];
    for (command, says) in cases {
        let mut session = Session::start(&["-c", command, "-e", "probe end { println(\"end\") }"]);
        session.wait_ready();
        let done = session.finish();
        assert_eq!(done.status.code(), Some(1), "-c {command}\n{}", done.stderr);
        assert!(
            done.stderr.contains(&format!("WARNING: {says}")),
            "{}",
            done.stderr
        );
        assert_eq!(done.stdout, "end\n", "end probes still run");
    }
    let mut ok = Session::start(&["-c", "true", "-e", "probe end { println(\"end\") }"]);
    ok.wait_ready();
    assert_success(&ok.finish());
}

fn alive(pid: i32) -> bool {
    // A zombie (reaped later by init) is as good as gone.
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

/// The `-c` command's pid, as its begin probe prints it.
fn command_pid(stdout: &Receiver<String>) -> i32 {
    let line = stdout
        .recv_timeout(START_TIMEOUT)
        .expect("the begin probe prints target()");
    line.trim().parse().expect("a pid")
}

#[test]
fn the_command_does_not_outlive_stap_rs_however_it_ends() {
    let _one = serial();
    for how in ["-T", "-INT", "-TERM", "-KILL"] {
        let mut args = vec![
            "-c",
            "sleep 1000",
            "-e",
            "probe begin { printf(\"%d\\n\", target()) }",
        ];
        if how == "-T" {
            args.extend(["-T", "1"]);
        }
        let mut child = Command::new(env!("CARGO_BIN_EXE_stap-rs"))
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting stap-rs");
        let (send, lines) = mpsc::channel();
        let out = child.stdout.take().unwrap();
        thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = send.send(line);
            }
        });
        let pid = command_pid(&lines);
        assert!(alive(pid), "{how}: the command runs");
        if how != "-T" {
            signal(&child, how);
        }
        exits_within(&mut child, Duration::from_secs(20));
        let deadline = Instant::now() + Duration::from_secs(5);
        while alive(pid) && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(50));
        }
        assert!(!alive(pid), "{how}: the command {pid} survived stap-rs");
    }
}

#[test]
fn what_the_command_started_does_not_outlive_stap_rs() {
    let _one = serial();
    // `sh -c "sleep & wait"`: the sleep is the command's child, which
    // stap-rs never forked itself.
    let dir = std::env::temp_dir().join(format!("stap-rs-grandchild-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for how in ["-T", "-INT", "-TERM", "-KILL"] {
        let file = dir.join(how.trim_start_matches('-'));
        let command = format!("sleep 1000 & echo $! > {}; wait", file.display());
        let mut args = vec!["-c", &command, "-e", "probe begin { println(\"begun\") }"];
        if how == "-T" {
            args.extend(["-T", "2"]);
        }
        let mut child = Command::new(env!("CARGO_BIN_EXE_stap-rs"))
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting stap-rs");
        let deadline = Instant::now() + START_TIMEOUT;
        let pid = loop {
            let text = std::fs::read_to_string(&file).unwrap_or_default();
            if let Ok(pid) = text.trim().parse::<i32>() {
                break pid;
            }
            assert!(Instant::now() < deadline, "{how}: the command never ran");
            thread::sleep(Duration::from_millis(50));
        };
        assert!(alive(pid), "{how}: the grandchild runs");
        if how != "-T" {
            signal(&child, how);
        }
        exits_within(&mut child, Duration::from_secs(20));
        let deadline = Instant::now() + Duration::from_secs(5);
        while alive(pid) && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(50));
        }
        assert!(
            !alive(pid),
            "{how}: the command's child {pid} survived stap-rs"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_write_error_on_the_output_fails_the_run() {
    let _one = serial();
    let mut session = Session::start(&[
        "-o",
        "/dev/full",
        "-e",
        "probe begin { println(\"x\") exit() }",
    ]);
    session.wait_ready();
    let done = session.finish();
    assert_eq!(done.status.code(), Some(1), "{}", done.stderr);
    assert!(
        done.stderr.contains("cannot write output"),
        "{}",
        done.stderr
    );
}

#[test]
fn perf_probes_of_one_period_fire_in_step_on_one_cpu() {
    let _one = serial();
    // Two spellings of a 1 ms CPU-clock sample: stap's BPF backend opens
    // perf probes on one CPU, and all of them start and stop together, so
    // both count the same ticks, all on the same CPU.
    let script = "global ticks, clock, cpus\n\
         probe perf.type(1).config(0).sample(1000000) { ticks++; cpus[cpu()]++ }\n\
         probe perf.sw.cpu_clock { clock++ }\n\
         probe timer.ms(300) { exit() }\n\
         probe end { printf(\"%d %d\\n\", ticks, clock) foreach (c in cpus) printf(\"cpu %d\\n\", c) }\n";
    let mut session = Session::start(&["-e", script]);
    session.wait_ready();
    let done = session.finish();
    assert_success(&done);
    let mut lines = done.stdout.lines();
    let counts: Vec<u64> = lines
        .next()
        .unwrap_or_default()
        .split(' ')
        .filter_map(|n| n.parse().ok())
        .collect();
    assert_eq!(counts.len(), 2, "{}", done.stdout);
    assert!(counts[0] > 0, "no sample: {}", done.stdout);
    assert_eq!(counts[0], counts[1], "{}", done.stdout);
    let cpus: Vec<&str> = lines.collect();
    let first = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap();
    let first = first.split([',', '-', '\n']).next().unwrap();
    assert_eq!(cpus, [format!("cpu {first}")], "{}", done.stdout);
}

#[test]
fn perf_probes_of_one_event_share_it_in_script_order() {
    let _one = serial();
    // The first two probes have the same event (the default period is
    // 1 ms), so one perf event runs both handlers per sample, in script
    // order: the second always sees the first's mark of the same sample,
    // and the two counts are equal by construction. The third (2 ms) has
    // an event of its own. Each handler names its own probe point.
    let script = "global first, second, in_order, third, names\n\
         probe perf.type(1).config(0).sample(1000000) { first++; mark = 1; names[pp()] = 1 }\n\
         probe perf.type(1).config(0) { second++; if (mark == 1) in_order++; mark = 0; names[pp()] = 1 }\n\
         probe perf.type(1).config(0).sample(2000000) { third++; names[pn()] = 1 }\n\
         global mark\n\
         probe timer.ms(300) { exit() }\n\
         probe end { printf(\"%d %d %d %d\\n\", first, second, in_order, third) foreach (n in names+) println(n) }\n";
    let mut session = Session::start(&["-e", script]);
    session.wait_ready();
    let done = session.finish();
    assert_success(&done);
    let mut lines = done.stdout.lines();
    let counts: Vec<u64> = lines
        .next()
        .unwrap_or_default()
        .split(' ')
        .filter_map(|n| n.parse().ok())
        .collect();
    let [first, second, in_order, third] = counts[..] else {
        panic!("{}", done.stdout);
    };
    assert!(first > 0, "no sample: {}", done.stdout);
    assert_eq!(first, second, "{}", done.stdout);
    assert_eq!(in_order, second, "{}", done.stdout);
    assert!(third > 0 && third < first, "{}", done.stdout);
    let names: Vec<&str> = lines.collect();
    assert_eq!(
        names,
        [
            "perf.type(1).config(0)",
            "perf.type(1).config(0).sample(1000000)",
            "perf.type(1).config(0).sample(2000000)",
        ],
        "{}",
        done.stdout
    );
}

#[test]
fn events_lost_to_a_full_ring_are_counted_and_reported() {
    let _one = serial();
    // Nobody reads stdout while this process makes its calls: the host
    // blocks in write(2) once the pipe is full, the kernel's ring fills
    // behind it (8 MiB, 32 bytes a record), and the rest is lost. Every
    // call must then be either a printed line or counted in the warning.
    let calls = 600_000;
    let me = std::process::id().to_string();
    let script = r#"probe kernel.trace("syscalls:sys_enter_getppid") { if (pid() == target()) printf("E %d\n", pid()) }"#;
    let Run {
        mut child,
        lines,
        stderr,
        ..
    } = spawn(&["-x", &me, "-e", script], false);
    wait_line(&lines, READY_LINE, &stderr);
    super::fleet::getppid_calls(calls);
    let mut out = child.stdout.take().expect("piped stdout");
    let reader = thread::spawn(move || {
        let mut text = String::new();
        let _ = out.read_to_string(&mut text);
        text
    });
    signal(&child, "-INT");
    let status = exits_within(&mut child, Duration::from_secs(60));
    let printed = reader.join().unwrap();
    thread::sleep(Duration::from_millis(100));
    let err = stderr.lock().unwrap().clone();
    assert!(status.success(), "{status}\n{err}");
    let delivered = printed.lines().filter(|l| *l == format!("E {me}")).count();
    let lost: usize = err
        .lines()
        .find_map(|l| {
            l.strip_prefix("WARNING: ")?
                .strip_suffix(" events lost: the ring buffer was full")
        })
        .unwrap_or_else(|| panic!("no loss reported; {delivered} lines printed\n{err}"))
        .parse()
        .expect("a count of lost events");
    assert!(
        lost > 0 && delivered > 0,
        "{delivered} printed, {lost} lost"
    );
    assert_eq!(delivered + lost, calls, "{err}");
}
