//! stap's own example scripts that serve metrics (`probe prometheus`,
//! `probe json_data`), run unmodified from stap's corpus
//! (`../shared/stap-corpus`, or `$STAP_CORPUS`): each starts with
//! `--http`, the test causes what the script counts, curl fetches the page
//! as an operator would, and Prometheus's `promtool` (or a JSON parser)
//! checks it. The scripts that need kernel function probes skip here
//! (no kprobes, no fentry) and run in the guests:
//! `tests/vm/run 6.12 -- stock_`.

use super::fleet::{curl, getppid_calls, http_port, interrupt, promtool_check};
use super::*;
use std::io::Write;

/// The script at `examples/REL` of stap's corpus; `None`, with the skip
/// marker, when the corpus is not there.
pub(super) fn stock_script(rel: &str) -> Option<PathBuf> {
    let root = std::env::var_os("STAP_CORPUS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/stap-corpus"));
    let path = root.join("examples").join(rel);
    if path.is_file() {
        Some(path)
    } else {
        eprintln!(
            "stap-rs-skip: {} not found (set STAP_CORPUS to stap's corpus)",
            path.display()
        );
        None
    }
}

/// Lets the waiting trigger exit, then waits until the page no longer has
/// the label `label_of(pid)`: the script forgets an exited process.
fn assert_forgotten_after_exit(port: u16, mut waiting: Child, label_of: impl Fn(u32) -> String) {
    drop(waiting.stdin.take());
    waiting.wait().expect("waiting for the trigger");
    let label = label_of(waiting.id());
    let page = metrics_until(port, |p| !p.contains(&label), || {});
    assert!(!page.contains(&label), "still there after exit:\n{page}");
}

/// Starts `stap-rs --http 127.0.0.1:0 SCRIPT` unmodified. `None`, with
/// the skip marker, when this kernel cannot probe what the script needs
/// (its compile-only run says so); any other failure fails the test.
fn start_stock(script: &Path) -> Option<(Session, u16)> {
    let check = Command::new(env!("CARGO_BIN_EXE_stap-rs"))
        .arg("-p4")
        .arg(script)
        .output()
        .expect("running stap-rs -p4");
    let stderr = String::from_utf8_lossy(&check.stderr);
    if !check.status.success() {
        // Skipped only when every error is a missing probe mechanism: any
        // other error is stap-rs's, and fails the test.
        let missing = ["cannot be probed on this kernel", "needs kprobes"];
        let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error")).collect();
        if !errors.is_empty() && errors.iter().all(|l| missing.iter().any(|m| l.contains(m))) {
            eprintln!("stap-rs-skip: {}", errors[0].trim_start_matches("error: "));
            return None;
        }
        panic!("{} does not compile:\n{stderr}", script.display());
    }
    let path = script.to_str().expect("a UTF-8 path");
    // The test ends the session itself; -T only bounds a test that fails.
    let mut session = Session::start_for(180, &["--http", "127.0.0.1:0", path]);
    session.wait_ready();
    let port = http_port(&session);
    Some((session, port))
}

/// Fetches `/metrics` until `wanted` holds for the page (the events go
/// through the kernel's ring of tracepoints and the script's own timers
/// first), at most 120 s (a TCG guest is slow); returns the last page.
fn metrics_until(
    port: u16,
    mut wanted: impl FnMut(&str) -> bool,
    mut cause: impl FnMut(),
) -> String {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        cause();
        let page = curl(&format!("http://127.0.0.1:{port}/metrics"));
        if wanted(&page) || Instant::now() > deadline {
            return page;
        }
        thread::sleep(Duration::from_millis(300));
    }
}

/// Ends the session as Ctrl-C would, and checks it ended well.
fn stop(session: Session) {
    interrupt(&session);
    assert_success(&session.finish());
}

/// The trigger program (`build("trigger")`, built before the session
/// starts) under `name`: `chdirs` failing chdir(2) calls, then alive,
/// reading its stdin, until the test closes it.
fn waiting_trigger(trigger: &Path, name: &str, chdirs: u32) -> Child {
    Command::new(trigger)
        .args([name, "chdirs", &chdirs.to_string()])
        .stdin(Stdio::piped())
        .spawn()
        .expect("starting the trigger")
}

/// The sample lines of a page whose labels contain `needle`.
fn samples_with<'p>(page: &'p str, needle: &str) -> Vec<&'p str> {
    page.lines()
        .filter(|l| !l.starts_with('#') && l.contains(needle))
        .collect()
}

#[test]
fn stock_topsys_serves_the_top_syscalls() {
    let _one = serial();
    let Some(script) = stock_script("profiling/topsys.stp") else {
        return;
    };
    let Some((session, port)) = start_stock(&script) else {
        return;
    };
    // The script keeps the 20 most frequent calls of the last 5 s: many
    // getppid calls put getppid among them.
    let page = metrics_until(
        port,
        |p| p.contains("top_syscall_count{name=\"getppid\"} "),
        || getppid_calls(200_000),
    );
    let line = samples_with(&page, "name=\"getppid\"");
    assert_eq!(line.len(), 1, "{page}");
    let count: u64 = line[0]
        .rsplit(' ')
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("not a count: {}", line[0]));
    assert!(count > 0, "{page}");
    assert!(page.lines().count() <= 20, "limit 20:\n{page}");
    promtool_check(&page);
    stop(session);
}

#[test]
fn stock_syscallerrorsbypid_counts_errors_and_forgets_exited_processes() {
    let _one = serial();
    let Some(script) = stock_script("profiling/syscallerrorsbypid.stp") else {
        return;
    };
    let trigger = build("trigger");
    let Some((session, port)) = start_stock(&script) else {
        return;
    };
    // Three chdir(2) calls that fail with ENOENT, from a process that then
    // waits.
    let waiting = waiting_trigger(&trigger, "stapSEbypid", 3);
    let label = format!(
        "pid=\"stapSEbypid[{}]\",syscall=\"chdir\",error=\"ENOENT\"",
        waiting.id()
    );
    let page = metrics_until(port, |p| p.contains(&label), || {});
    let line = samples_with(&page, &label);
    assert_eq!(line.len(), 1, "no {label} in:\n{page}");
    assert!(
        line[0].starts_with("syscall_error_count{") && line[0].ends_with("} 3"),
        "{}",
        line[0]
    );
    promtool_check(&page);
    // Its exit deletes its elements (`delete arr[pid(), *, *]`, an array
    // slice in a kernel probe).
    assert_forgotten_after_exit(port, waiting, |pid| format!("pid=\"stapSEbypid[{pid}]\""));
    stop(session);
}

#[test]
fn stock_syscalllatency_sums_time_per_process_and_syscall() {
    let _one = serial();
    let Some(script) = stock_script("profiling/syscalllatency.stp") else {
        return;
    };
    let trigger = build("trigger");
    let Some((session, port)) = start_stock(&script) else {
        return;
    };
    // A process blocked in read(2) on a pipe until the test writes to it.
    let mut waiting = waiting_trigger(&trigger, "stapSLatency", 0);
    thread::sleep(Duration::from_millis(200));
    waiting
        .stdin
        .as_mut()
        .expect("stdin")
        .write_all(b"x\n")
        .expect("writing to the trigger");
    let label = format!("syscall_time{{pid=\"{}\",syscall=\"read\"}} ", waiting.id());
    let page = metrics_until(port, |p| p.contains(&label), || {});
    let line = samples_with(&page, &label);
    assert_eq!(line.len(), 1, "no {label} in:\n{page}");
    // ns2sec: "SECONDS.NANOSECONDS", as the script formats it.
    let value = line[0].rsplit(' ').next().unwrap_or("");
    let (secs, nanos) = value.split_once('.').unwrap_or(("", ""));
    assert!(
        secs.parse::<u64>().is_ok() && nanos.parse::<u64>().is_ok(),
        "{}",
        line[0]
    );
    promtool_check(&page);
    assert_forgotten_after_exit(port, waiting, |pid| format!("pid=\"{pid}\""));
    stop(session);
}

#[test]
fn stock_syscallsrw_counts_reads_and_writes() {
    let _one = serial();
    let Some(script) = stock_script("profiling/syscallsrw.stp") else {
        return;
    };
    let Some((session, port)) = start_stock(&script) else {
        return;
    };
    let count = |page: &str, call: &str| -> u64 {
        samples_with(page, &format!("count{{syscall=\"{call}\"}}"))
            .first()
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or(0)
    };
    let page = metrics_until(
        port,
        |p| count(p, "ksys_read") > 0 && count(p, "ksys_write") > 0,
        || {
            let _ = std::fs::read(&script);
            let _ = std::fs::write(
                Path::new(env!("CARGO_TARGET_TMPDIR")).join("syscallsrw"),
                "x",
            );
        },
    );
    assert!(count(&page, "ksys_read") > 0, "{page}");
    assert!(count(&page, "ksys_write") > 0, "{page}");
    promtool_check(&page);
    stop(session);
}

#[test]
fn stock_cpu_throttle_serves_its_counter() {
    let _one = serial();
    let Some(script) = stock_script("general/cpu_throttle.stp") else {
        return;
    };
    let Some((session, port)) = start_stock(&script) else {
        return;
    };
    // No CPU throttles here: the begin probe's element, with its HELP and
    // TYPE lines.
    let page = metrics_until(
        port,
        |p| p.contains("cpu_throttle_time{cpu=\"0\"} 0\n"),
        || {},
    );
    assert!(
        page.starts_with("# HELP cpu_throttle_time ")
            && page.contains("# TYPE cpu_throttle_time counter\n")
            && page.contains("cpu_throttle_time{cpu=\"0\"} 0\n"),
        "{page}"
    );
    promtool_check(&page);
    stop(session);
}

/// timeout.stp dumps an array whose *value* is a process name, so its
/// samples read `process_timeouts{...} NAME`: stap's page is not valid
/// exposition text either (a sample's value is a number). The test checks
/// stap's format and the count it caused, not promtool.
#[test]
fn stock_timeout_counts_poll_timeouts() {
    let _one = serial();
    let Some(script) = stock_script("profiling/timeout.stp") else {
        return;
    };
    let Some((session, port)) = start_stock(&script) else {
        return;
    };
    // poll(2) of no descriptors for 1 ms: a timeout each time, counted
    // for the process that made it.
    let poll_timeouts = || {
        for _ in 0..5 {
            // SAFETY: no descriptors, so no pointer is read.
            unsafe { libc::poll(std::ptr::null_mut(), 0, 1) };
        }
    };
    // execname() is the calling thread's name: libtest may run the test
    // on a thread named after it.
    let name = std::fs::read_to_string("/proc/thread-self/comm").expect("comm");
    let ending = format!("}} {}", name.trim_end());
    let page = metrics_until(
        port,
        |p| p.lines().any(|l| l.ends_with(&ending)),
        poll_timeouts,
    );
    let ours: Vec<&str> = page.lines().filter(|l| l.ends_with(&ending)).collect();
    assert!(!ours.is_empty(), "no sample for {ending:?}:\n{page}");
    let labels = [
        "poll_timeout",
        "select_timeout",
        "epoll_timeout",
        "itimer_timeout",
        "futex_timeout",
        "nanosleep_timeout",
        "signal_timeout",
    ];
    let sample = ours[0];
    let inner = sample
        .strip_prefix("process_timeouts{")
        .and_then(|s| s.strip_suffix(ending.as_str()))
        .unwrap_or_else(|| panic!("not stap's format: {sample}"));
    let pairs: Vec<(&str, &str)> = inner
        .split(',')
        .filter_map(|kv| kv.split_once('='))
        .collect();
    assert_eq!(
        pairs.iter().map(|(k, _)| *k).collect::<Vec<_>>(),
        labels,
        "{sample}"
    );
    let polls: u64 = pairs[0].1.trim_matches('"').parse().unwrap_or(0);
    assert!(polls > 0, "{sample}");
    stop(session);
}

#[test]
fn stock_netfilter_summary_json_serves_json_and_metadata() {
    let _one = serial();
    let Some(script) = stock_script("network/netfilter_summary_json.stp") else {
        return;
    };
    let Some((session, port)) = start_stock(&script) else {
        return;
    };
    // Every request to the session is loopback traffic through
    // PRE_ROUTING, so fetching the page causes what it counts.
    let url = format!("http://127.0.0.1:{port}/json");
    let deadline = Instant::now() + Duration::from_secs(30);
    let (data, rows) = loop {
        let data: serde_json::Value = serde_json::from_str(&curl(&url)).expect("/json is JSON");
        let rows = data["netfilter_data"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if !rows.is_empty() || Instant::now() > deadline {
            break (data, rows);
        }
        thread::sleep(Duration::from_millis(300));
    };
    let row = rows
        .iter()
        .find(|r| {
            r["__id"]
                .as_str()
                .is_some_and(|id| id.contains("127.0.0.1 -->"))
        })
        .unwrap_or_else(|| panic!("no loopback row: {data}"));
    let packets = row["packets"].as_i64().expect("packets is a number");
    let bytes = row["bytes"].as_i64().expect("bytes is a number");
    assert!(packets > 0 && bytes >= packets * 20, "{row}");
    let meta: serde_json::Value =
        serde_json::from_str(&curl(&format!("http://127.0.0.1:{port}/metadata.json")))
            .expect("/metadata.json is JSON");
    assert_eq!(meta["prefix"], "netfilter", "{meta}");
    let array = &meta["metrics"][0];
    assert_eq!(array["name"], "netfilter_data", "{meta}");
    assert_eq!(array["type"], "array", "{meta}");
    let names: Vec<&str> = array["metrics"]
        .as_array()
        .map(|m| m.iter().filter_map(|x| x["name"].as_str()).collect())
        .unwrap_or_default();
    assert!(
        names.contains(&"packets") && names.contains(&"bytes"),
        "{meta}"
    );
    stop(session);
}
