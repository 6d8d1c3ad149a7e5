//! Live tests of machine-readable output and fleets (issue 17):
//! `--format json` lines parsed with a JSON parser, procfs probes served
//! over HTTP (`--http`: read, write, maxsize, refusals), the Prometheus
//! exposition of `probe prometheus` checked with Prometheus's own
//! `promtool`, and a real Prometheus server scraping two stap-rs
//! instances (tests/setup.sh installs the `prometheus` package).

use super::*;
use std::io::Write;
use std::net::TcpStream;

/// A session started with `--http 127.0.0.1:0`: the port it got, read
/// from its `-v` line.
pub(super) fn http_port(session: &Session) -> u16 {
    let stderr = session.stderr_so_far();
    let line = stderr
        .lines()
        .find(|l| l.contains("serving procfs probes at http://"))
        .unwrap_or_else(|| panic!("no serving line; stderr:\n{stderr}"));
    let addr = line.rsplit("http://").next().unwrap_or("");
    let port = addr.trim_end_matches('/').rsplit(':').next().unwrap_or("");
    port.parse()
        .unwrap_or_else(|_| panic!("no port in {line:?}"))
}

/// One raw request; returns the status and the body.
fn request(port: u16, raw: &[u8]) -> (u16, String) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connecting to stap-rs");
    stream
        .set_read_timeout(Some(Duration::from_secs(15)))
        .expect("timeout");
    stream.write_all(raw).expect("sending the request");
    let mut reply = Vec::new();
    let _ = stream.read_to_end(&mut reply);
    let reply = String::from_utf8_lossy(&reply).into_owned();
    let status = reply
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {reply:?}"));
    let body = reply
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

fn get(port: u16, path: &str) -> (u16, String) {
    request(
        port,
        format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes(),
    )
}

fn put(port: u16, path: &str, body: &str) -> (u16, String) {
    let raw = format!(
        "PUT {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    request(port, raw.as_bytes())
}

/// Ends a session as Ctrl-C would.
pub(super) fn interrupt(session: &Session) {
    let status = Command::new("kill")
        .args(["-INT", &session.pid().to_string()])
        .status()
        .expect("running kill");
    assert!(status.success());
}

#[test]
fn procfs_probes_read_write_and_maxsize_over_http() {
    let _one = serial();
    let mut session = Session::start(&[
        "--http",
        "127.0.0.1:0",
        "--http-write",
        "-e",
        r#"global stored = "none", reads
           probe procfs("state").read { reads++; $value = sprintf("stored=%s reads=%d\n", stored, reads) }
           probe procfs("state").write { stored = $value }
           probe procfs("big").read.maxsize(16) { $value = "0123456789"; $value .= "abcdefXYZ" }
           probe procfs("small").write.maxsize(8) { stored = "small:" . $value }
           probe procfs.read { $value = "default name\n" }"#,
    ]);
    session.wait_ready();
    let port = http_port(&session);
    assert_eq!(get(port, "/state"), (200, "stored=none reads=1\n".into()));
    assert_eq!(put(port, "/state", "hello").0, 200);
    assert_eq!(get(port, "/state"), (200, "stored=hello reads=2\n".into()));
    // maxsize bounds what a read probe answers...
    assert_eq!(get(port, "/big"), (200, "0123456789abcdef".into()));
    // ...and the body a write probe accepts.
    assert_eq!(put(port, "/small", "123456789").0, 413);
    assert_eq!(put(port, "/small", "12345678").0, 200);
    assert_eq!(get(port, "/state").1, "stored=small:12345678 reads=3\n");
    assert_eq!(get(port, "/command"), (200, "default name\n".into()));
    // Mistakes get a 4xx, and the session goes on.
    assert_eq!(get(port, "/nothing").0, 404);
    assert_eq!(put(port, "/big", "x").0, 405);
    assert_eq!(request(port, b"DELETE /state HTTP/1.1\r\n\r\n").0, 405);
    assert_eq!(request(port, b"\x01\x02garbage\r\n\r\n").0, 400);
    assert_eq!(get(port, "/state").1, "stored=small:12345678 reads=4\n");
    interrupt(&session);
    let done = session.finish();
    assert_success(&done);
    assert!(
        done.stderr
            .contains("$value was cut at its maxsize (16 bytes)"),
        "{}",
        done.stderr
    );
}

#[test]
fn writes_need_http_write_and_procfs_without_http_is_served_on_loopback() {
    let _one = serial();
    let script =
        r#"probe procfs("x").write { println($value) } probe procfs("x").read { $value = "r" }"#;
    // No --http: served on a loopback port the kernel picks (as stap makes
    // its /proc files unasked), and the address is printed even without -v.
    let quiet = Command::new(env!("CARGO_BIN_EXE_stap-rs"))
        .args(["-T", "1", "-e", script])
        .output()
        .expect("running stap-rs");
    let stderr = String::from_utf8_lossy(&quiet.stderr);
    assert!(quiet.status.success(), "{stderr}");
    assert!(
        stderr.contains("serving procfs probes at http://127.0.0.1:"),
        "{stderr}"
    );
    let mut session = Session::start(&["-e", script]);
    session.wait_ready();
    let port = http_port(&session);
    let (status, body) = put(port, "/x", "w");
    assert_eq!(status, 403);
    assert!(body.contains("--http-write"), "{body}");
    assert_eq!(get(port, "/x"), (200, "r".into()));
    interrupt(&session);
    let done = session.finish();
    assert_success(&done);
    assert_eq!(done.stdout, "", "the write probe must not have run");
}

#[test]
fn non_loopback_http_warns() {
    let _one = serial();
    let mut session = Session::start(&[
        "--http",
        "0.0.0.0:0",
        "-e",
        r#"probe procfs("x").read { $value = "r" }"#,
    ]);
    session.wait_ready();
    assert!(
        session
            .stderr_so_far()
            .contains("is not a loopback address: anyone who can reach it can read the metrics"),
        "{}",
        session.stderr_so_far()
    );
    interrupt(&session);
    assert_success(&session.finish());
}

/// Runs `promtool check metrics` on an exposition text: it parses it with
/// Prometheus's own parser (exit 1 on any error), then lints it (exit 3
/// for style problems such as a metric without `# HELP`, which stap's
/// examples have: valid, so accepted).
pub(super) fn promtool_check(text: &str) {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running promtool (tests/setup.sh installs the prometheus package)");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("writing to promtool");
    let out = child.wait_with_output().expect("promtool");
    assert!(
        matches!(out.status.code(), Some(0 | 3)),
        "promtool rejects the exposition:\n{text}\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Fetches a URL with curl, as an operator checking a host would.
pub(super) fn curl(url: &str) -> String {
    let out = Command::new("curl")
        .args(["-sS", "--fail", "--max-time", "15", url])
        .output()
        .expect("running curl (tests/setup.sh installs it)");
    assert!(
        out.status.success(),
        "curl {url}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Makes `n` getppid(2) calls from this process.
pub(super) fn getppid_calls(n: usize) {
    for _ in 0..n {
        // SAFETY: getppid has no preconditions.
        unsafe { libc::getppid() };
    }
}

#[test]
fn prometheus_dump_macros_serve_valid_exposition() {
    let _one = serial();
    let pid = std::process::id().to_string();
    let mut session = Session::start(&[
        "--http",
        "127.0.0.1:0",
        "-x",
        &pid,
        "-e",
        r##"global calls, bytes, sizes
           probe kernel.trace("syscalls:sys_enter_getppid") {
             if (pid() == target()) { calls["getppid", pid()]++; sizes["a b", pid(), 1] = 7 }
           }
           probe begin { bytes["quote\"d"] = 42 }
           probe prometheus {
             $value .= "# HELP stap_test_calls_total Calls the test made.\n"
             $value .= "# TYPE stap_test_calls_total counter\n"
             @prometheus_dump_array2(calls, "stap_test_calls_total", "syscall", "pid")
             @prometheus_dump_array1(bytes, "stap_test_bytes", "name")
             @prometheus_dump_array3_map_unquoted(sizes, "stap_test_sizes", "what", "pid", "n", sprint, sprint, sprint, sprint)
           }"##,
    ]);
    session.wait_ready();
    let port = http_port(&session);
    getppid_calls(7);
    let text = curl(&format!("http://127.0.0.1:{port}/metrics"));
    assert!(
        text.contains(&format!(
            "stap_test_calls_total{{syscall=\"getppid\",pid=\"{pid}\"}} 7\n"
        )),
        "{text}"
    );
    assert!(
        text.contains("stap_test_bytes{name=\"quote\\\"d\"} 42\n"),
        "{text}"
    );
    // _unquoted: the keys as they are (here, not valid exposition). As in
    // stap, the macros' loop variables are locals of the probe: arrays
    // dumped in one probe agree in key types, position by position.
    assert!(
        text.contains(&format!("stap_test_sizes{{what=a b,pid={pid},n=1}} 7\n")),
        "{text}"
    );
    let valid: String = text
        .lines()
        .filter(|l| !l.starts_with("stap_test_sizes"))
        .map(|l| format!("{l}\n"))
        .collect();
    promtool_check(&valid);
    interrupt(&session);
    assert_success(&session.finish());
}

/// The JSON lines of a run, each parsed and checked against the schema.
fn json_lines(text: &str) -> Vec<serde_json::Value> {
    let events: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l:?}: {e}")))
        .collect();
    for event in &events {
        check_schema(event);
    }
    assert_eq!(
        events.last().map(|e| e["type"].clone()),
        Some("end".into()),
        "the last line is the end event:\n{text}"
    );
    assert_eq!(
        events.iter().filter(|e| e["type"] == "end").count(),
        1,
        "{text}"
    );
    events
}

/// What a field of an event holds, as docs/output.md says.
#[derive(Clone, Copy)]
enum Field {
    Int,
    Str,
    /// One of these strings.
    OneOf(&'static [&'static str]),
    Buckets,
}

/// A field's name and what it holds.
type Named = (&'static str, Field);

/// Checks `event` against docs/output.md: its `type` is a documented one,
/// every required field is there with its type, and every other field is
/// one the schema documents as optional (so the test and the document
/// stay in step).
fn check_schema(event: &serde_json::Value) {
    use Field::*;
    let object = event
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {event}"));
    let kind = object.get("type").and_then(|t| t.as_str()).unwrap_or("");
    // (required, optional) fields of each type.
    let (required, optional): (Vec<Named>, Vec<Named>) = match kind {
        "output" => (vec![("data", Str)], vec![]),
        "histogram" => {
            let linear = object.get("scale").and_then(|s| s.as_str()) == Some("linear");
            let mut required = vec![
                ("scale", OneOf(&["log", "linear"])),
                ("count", Int),
                ("sum", Int),
                ("buckets", Buckets),
            ];
            if linear {
                required.extend([("lo", Int), ("hi", Int), ("width", Int)]);
            }
            (required, vec![("min", Int), ("max", Int)])
        }
        "warning" => {
            const KINDS: &[&str] = &[
                "warn",
                "errors_and_skipped",
                "lost_events",
                "procfs_truncated",
                "malformed_event",
                "session",
            ];
            let mut required = vec![("kind", OneOf(KINDS)), ("message", Str)];
            match object.get("kind").and_then(|k| k.as_str()) {
                Some("errors_and_skipped") => required.extend([("errors", Int), ("skipped", Int)]),
                Some("lost_events") => required.push(("lost", Int)),
                _ => {}
            }
            (required, vec![])
        }
        "error" => (
            vec![("kind", OneOf(&["runtime"])), ("message", Str)],
            vec![("error", Str), ("location", Str)],
        ),
        "end" => (
            vec![
                ("errors", Int),
                ("skipped", Int),
                ("lost", Int),
                ("status", Int),
            ],
            vec![],
        ),
        _ => panic!("undocumented event type: {event}"),
    };
    let holds = |value: &serde_json::Value, field: Field| match field {
        Int => value.is_i64() || value.is_u64(),
        Str => value.is_string(),
        OneOf(choices) => value.as_str().is_some_and(|v| choices.contains(&v)),
        Buckets => value.as_array().is_some_and(|buckets| {
            buckets.iter().all(|b| {
                let keys_ok = b.as_object().is_some_and(|o| {
                    o.keys()
                        .all(|k| ["value", "count", "range"].contains(&k.as_str()))
                });
                keys_ok
                    && b["value"].is_i64()
                    && b["count"].as_i64().is_some_and(|c| c > 0)
                    && (b.get("range").is_none()
                        || ["under", "over"].contains(&b["range"].as_str().unwrap_or("")))
            })
        }),
    };
    for (name, field) in &required {
        let value = object
            .get(*name)
            .unwrap_or_else(|| panic!("{kind} event without `{name}`: {event}"));
        assert!(holds(value, *field), "{kind} event: bad `{name}`: {event}");
    }
    for (name, value) in object {
        if name == "type" || required.iter().any(|(n, _)| n == name) {
            continue;
        }
        let field = optional
            .iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("{kind} event: undocumented field `{name}`: {event}"));
        assert!(holds(value, field.1), "{kind} event: bad `{name}`: {event}");
    }
    if kind == "histogram" {
        // The buckets hold every sample, lowest first; min and max come
        // together and bound the samples.
        let buckets = event["buckets"].as_array().expect("checked above");
        let total: i64 = buckets.iter().filter_map(|b| b["count"].as_i64()).sum();
        assert_eq!(Some(total), event["count"].as_i64(), "{event}");
        let values: Vec<i64> = buckets.iter().filter_map(|b| b["value"].as_i64()).collect();
        assert!(values.windows(2).all(|w| w[0] <= w[1]), "{event}");
        assert_eq!(
            object.contains_key("min"),
            object.contains_key("max"),
            "{event}"
        );
        if let (Some(min), Some(max)) = (event["min"].as_i64(), event["max"].as_i64()) {
            assert!(min <= max, "{event}");
        }
    }
}

#[test]
fn json_format_for_a_drops_like_script() {
    let _one = serial();
    let trigger = build("trigger");
    let port = closed_port().to_string();
    let mut session = Session::start(&[
        "-f",
        "json",
        "-e",
        r#"global funcs, lengths
           probe kernel.trace("kfree_skb") {
             if (execname() == "stapJ1conn") {
               funcs[$location, execname()] <<< 1
               lengths <<< $skb->len
             }
           }
           probe timer.ms(200) {
             foreach ([l, d] in funcs-) { printf("%d %s@%s\n", @count(funcs[l, d]), symname(l), d); exit() }
           }
           probe end { print(@hist_log(lengths)); warn("done") }"#,
    ]);
    session.wait_ready();
    trigger_until_done(&mut session, &trigger, &["stapJ1conn", "connect", &port]);
    let done = session.finish();
    assert_success(&done);
    let events = json_lines(&done.stdout);
    let output = events
        .iter()
        .find(|e| e["type"] == "output")
        .unwrap_or_else(|| panic!("no output event: {}", done.stdout));
    let data = output["data"].as_str().expect("data is a string");
    assert!(data.ends_with(" tcp_v4_rcv@stapJ1conn\n"), "{data:?}");
    // The kernel-side statistic, printed in the end probe, as data.
    let histogram = events
        .iter()
        .find(|e| e["type"] == "histogram")
        .unwrap_or_else(|| panic!("no histogram event: {}", done.stdout));
    assert_eq!(histogram["scale"], "log");
    let count = histogram["count"].as_i64().expect("count");
    assert!(count >= 1, "{histogram}");
    let (min, max) = (histogram["min"].as_i64(), histogram["max"].as_i64());
    assert!(min.is_some() && max.is_some(), "{histogram}");
    let warning = events
        .iter()
        .find(|e| e["type"] == "warning")
        .expect("warn() is an event");
    assert_eq!(warning["kind"], "warn");
    assert_eq!(warning["message"], "done");
    let end = events.last().expect("events");
    assert_eq!(end["type"], "end");
    assert_eq!(end["status"], 0);
    assert_eq!(end["errors"], 0);
    assert!(!done.stderr.contains("WARNING"), "{}", done.stderr);
}

#[test]
fn json_format_histograms_errors_and_output_file() {
    let _one = serial();
    let file = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fleet-json-out.ndjson");
    let out = Command::new(env!("CARGO_BIN_EXE_stap-rs"))
        .args(["--format", "json", "-o"])
        .arg(&file)
        .args([
            "-e",
            r#"global s
               probe begin {
                 for (i = 1; i <= 20; i++) s <<< i * 10
                 print(@hist_log(s))
                 print(@hist_linear(s, 0, 100, 50))
                 printf("count %d\n", @count(s))
                 error("deliberate")
               }"#,
        ])
        .output()
        .expect("running stap-rs");
    assert!(!out.status.success(), "error() fails the run");
    assert!(out.stdout.is_empty(), "-o takes the lines");
    let text = std::fs::read_to_string(&file).expect("reading -o file");
    let events = json_lines(&text);
    let types: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
    assert_eq!(
        types,
        [
            "histogram",
            "histogram",
            "output",
            "error",
            "warning",
            "end"
        ],
        "{text}"
    );
    let log = &events[0];
    assert_eq!(log["scale"], "log");
    assert_eq!(log["count"], 20);
    assert_eq!(log["sum"], 2100);
    assert_eq!(
        (log["min"].clone(), log["max"].clone()),
        (10.into(), 200.into())
    );
    let buckets = log["buckets"].as_array().expect("buckets");
    let total: i64 = buckets.iter().filter_map(|b| b["count"].as_i64()).sum();
    assert_eq!(total, 20);
    // 10..=200 by 10: 8 is the bucket of 10, 128 that of 130..=200.
    assert_eq!(buckets[0]["value"], 8);
    assert_eq!(buckets[0]["count"], 1);
    assert_eq!(buckets.last().unwrap()["value"], 128);
    assert_eq!(buckets.last().unwrap()["count"], 8);
    let linear = &events[1];
    assert_eq!(linear["scale"], "linear");
    assert_eq!(
        (linear["lo"].clone(), linear["width"].clone()),
        (0.into(), 50.into())
    );
    let lbuckets = linear["buckets"].as_array().expect("buckets");
    assert_eq!(lbuckets[0]["value"], 0);
    assert_eq!(lbuckets[0]["count"], 4);
    assert_eq!(lbuckets.last().unwrap()["range"], "over");
    let total: i64 = lbuckets.iter().filter_map(|b| b["count"].as_i64()).sum();
    assert_eq!(total, 20);
    assert_eq!(events[2]["data"], "count 20\n");
    let error = &events[3];
    assert_eq!(error["kind"], "runtime");
    assert_eq!(error["error"], "deliberate");
    assert!(
        error["location"]
            .as_str()
            .unwrap_or("")
            .starts_with("<input>:"),
        "{error}"
    );
    assert_eq!(events[4]["kind"], "errors_and_skipped");
    assert_eq!(events[4]["errors"], 1);
    assert_eq!(events[5]["status"], 1);
    assert_eq!(events[5]["errors"], 1);
}

/// A config for a Prometheus server scraping `targets` every second.
fn prometheus_config(targets: &[u16]) -> String {
    let list: Vec<String> = targets.iter().map(|p| format!("'127.0.0.1:{p}'")).collect();
    format!(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: stap-rs\n    metrics_path: /metrics\n    static_configs:\n      - targets: [{}]\n",
        list.join(", ")
    )
}

/// A Prometheus server in a temporary directory, killed on drop.
struct Prometheus {
    child: Child,
    port: u16,
}

impl Prometheus {
    fn start(targets: &[u16]) -> Prometheus {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("prometheus-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("creating the Prometheus directory");
        let config = dir.join("prometheus.yml");
        std::fs::write(&config, prometheus_config(targets)).expect("writing the config");
        let port = closed_port();
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting prometheus (tests/setup.sh installs it)");
        Prometheus { child, port }
    }

    /// `query` through the HTTP API: (instance label, value) per series.
    fn query(&self, query: &str) -> Option<Vec<(String, f64)>> {
        let url = format!("http://127.0.0.1:{}/api/v1/query", self.port);
        let out = Command::new("curl")
            .args(["-sS", "--max-time", "5", "--get", &url, "--data-urlencode"])
            .arg(format!("query={query}"))
            .output()
            .ok()?;
        let reply: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        if reply["status"] != "success" {
            return None;
        }
        let series = reply["data"]["result"].as_array()?;
        series
            .iter()
            .map(|s| {
                let instance = s["metric"]["instance"].as_str().unwrap_or("").to_string();
                let value = s["value"][1].as_str()?.parse().ok()?;
                Some((instance, value))
            })
            .collect()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A fleet on one machine: two stap-rs instances on two loopback ports
/// run the same script, each counting executions of its own program;
/// one Prometheus scrapes both; its query API gives each instance's
/// count and their sum.
#[test]
fn prometheus_scrapes_a_fleet_of_two_instances() {
    let _one = serial();
    let script = r##"global execs
        probe kernel.trace("sched:sched_process_exec") { if (execname() == @1) execs[execname()]++ }
        probe prometheus {
          $value .= "# HELP stap_fleet_execs_total Executions of the watched program.\n"
          $value .= "# TYPE stap_fleet_execs_total counter\n"
          @prometheus_dump_array1(execs, "stap_fleet_execs_total", "program")
        }"##;
    let ports = [closed_port(), closed_port()];
    let names = ["stapfleeta", "stapfleetb"];
    let mut sessions = Vec::new();
    for (port, name) in ports.iter().zip(names) {
        let addr = format!("127.0.0.1:{port}");
        let mut session = Session::start(&["--http", &addr, "-e", script, name]);
        session.wait_ready();
        sessions.push(session);
    }
    let prometheus = Prometheus::start(&ports);
    // The programs: /bin/true under the watched names.
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let counts = [3usize, 5];
    for (name, n) in names.iter().zip(counts) {
        let program = dir.join(name);
        let _ = std::fs::remove_file(&program);
        std::fs::copy("/bin/true", &program).expect("copying /bin/true");
        for _ in 0..n {
            let status = Command::new(&program)
                .status()
                .expect("running the program");
            assert!(status.success());
        }
    }
    let expected: Vec<(String, f64)> = ports
        .iter()
        .zip(counts)
        .map(|(p, n)| (format!("127.0.0.1:{p}"), n as f64))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(40);
    let mut per_instance = None;
    while Instant::now() < deadline {
        if let Some(mut series) = prometheus.query("stap_fleet_execs_total") {
            series.sort_by(|a, b| a.0.cmp(&b.0));
            let mut want = expected.clone();
            want.sort_by(|a, b| a.0.cmp(&b.0));
            if series == want {
                per_instance = Some(series);
                break;
            }
        }
        thread::sleep(Duration::from_millis(500));
    }
    assert!(
        per_instance.is_some(),
        "Prometheus never saw both instances' counts; last answer: {:?}",
        prometheus.query("stap_fleet_execs_total")
    );
    let sum = prometheus
        .query("sum(stap_fleet_execs_total)")
        .expect("sum query");
    assert_eq!(sum.len(), 1);
    assert_eq!(sum[0].1, 8.0);
    let up = prometheus.query("up{job=\"stap-rs\"}").expect("up query");
    assert_eq!(up.iter().filter(|(_, v)| *v == 1.0).count(), 2, "{up:?}");
    drop(prometheus);
    for session in sessions {
        interrupt(&session);
        assert_success(&session.finish());
    }
}
