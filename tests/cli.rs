//! The `stap-rs` binary against this machine's real kernel facts (BTF and
//! tracefs): what a user sees for the front-end passes.

use std::process::{Command, Output, Stdio};

fn stap(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_stap-rs"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdin(Stdio::null())
        .output()
        .expect("running stap-rs")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[track_caller]
fn assert_ok(out: &Output) {
    assert!(
        out.status.success(),
        "stap-rs failed: {}\nstderr:\n{}",
        out.status,
        stderr(out)
    );
}

#[test]
fn p2_of_the_seed_script_shows_btf_typed_probe_and_placement() {
    let out = stap(&["-p2", "examples/drops.stp"]);
    assert_ok(&out);
    let text = stdout(&out);
    for expected in [
        "funcs: stats[long, string]",
        "kernel.trace(\"skb:kfree_skb\")",
        "mechanism: raw tracepoint",
        "$skb: struct sk_buff * (ctx[0])",
        "$location: void * (ctx[1])",
        "$reason: enum skb_drop_reason (ctx[2])",
        "runs in: kernel (BPF)",
        "timer.sec(5)",
        "runs in: host (JIT)",
        "devname:string (skb:long)",
    ] {
        assert!(text.contains(expected), "missing `{expected}` in:\n{text}");
    }
}

#[test]
fn p1_prints_the_parsed_program_with_precedence_visible() {
    let out = stap(&["-p1", "-e", "probe begin { x = 1 + 2 * 3; println(x) }"]);
    assert_ok(&out);
    assert!(
        stdout(&out).contains("x = (1 + (2 * 3));"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn script_arguments_substitute_before_parsing() {
    let out = stap(&[
        "-p1",
        "-e",
        "probe begin { println($1, @2) }",
        "42",
        "hello",
    ]);
    assert_ok(&out);
    let text = stdout(&out);
    assert!(text.contains("42") && text.contains("\"hello\""), "{text}");
}

#[test]
fn script_is_read_from_stdin_with_dash() {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_stap-rs"))
        .args(["-p1", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning stap-rs");
    child
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(b"probe end { println(\"bye\") }\n")
        .expect("writing the script");
    let out = child.wait_with_output().expect("waiting for stap-rs");
    assert_ok(&out);
    assert!(stdout(&out).contains("probe end"), "{}", stdout(&out));
}

#[test]
fn unknown_tracepoint_fails_with_a_suggestion_and_the_source_line() {
    let out = stap(&["-p2", "-e", "probe kernel.trace(\"kfree_skbb\") { }"]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("kfree_skb"), "{err}");
    assert!(err.contains("<input>:1:"), "no location in: {err}");
    assert!(
        err.contains("probe kernel.trace(\"kfree_skbb\")"),
        "no source line in: {err}"
    );
}

#[test]
fn unknown_member_suggests_the_nearest_names() {
    let out = stap(&[
        "-p2",
        "-e",
        "probe kernel.trace(\"kfree_skb\") { println($skb->devv) }",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("devv") && err.contains("`dev`"), "{err}");
}

#[test]
fn listing_with_variables_matches_btf() {
    let out = stap(&["-L", "kernel.trace(\"net:net_dev_xmit\")"]);
    assert_ok(&out);
    assert_eq!(
        stdout(&out).trim(),
        "kernel.trace(\"net:net_dev_xmit\") $skb:struct sk_buff * $rc:int $dev:struct net_device * $skb_len:unsigned int"
    );
}

#[test]
fn listing_expands_wildcards_over_tracefs() {
    let out = stap(&["-l", "kernel.trace(\"sched:*\")"]);
    assert_ok(&out);
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines.len() > 5, "{text}");
    assert!(lines.iter().all(|l| l.starts_with("kernel.trace(\"sched:")));
    assert!(
        lines.contains(&"kernel.trace(\"sched:sched_switch\")"),
        "{text}"
    );
}

#[test]
fn only_the_tapsets_a_script_uses_are_pulled_in() {
    let uses = stap(&[
        "-p2",
        "-e",
        "probe begin { println(ip_ntop(htonl(0x7f000001))) }",
    ]);
    assert_ok(&uses);
    let text = stdout(&uses);
    assert!(text.contains("ip_ntop:string (addr:long)"), "{text}");
    assert!(text.contains("ntohl:long"), "{text}");

    let unused = stap(&["-p2", "-e", "probe begin { println(1) }"]);
    assert_ok(&unused);
    assert!(!stdout(&unused).contains("ip_ntop"), "{}", stdout(&unused));
}

/// The constants and byte-order helpers of stdlib/lib/bits.stp, on the
/// host (a begin probe).
#[test]
fn byte_order_and_wait_status_helpers_in_a_host_probe() {
    let out = stap(&[
        "-e",
        "probe begin { printf(\"%d %d %x %x %x %d %d %d\\n\", AF_INET(), AF_INET6(), \
         big_endian4(0x12345678), ntohll(0x0102030405060708), little_endian4(-1), \
         WIFEXITED(0x8b), WEXITSTATUS(0x2a00), WTERMSIG(0x8b)); exit() }",
    ]);
    assert_ok(&out);
    assert_eq!(
        stdout(&out),
        "2 10 78563412 807060504030201 ffffffff 0 42 11\n"
    );
}

/// thread_indent keeps a depth per thread in a stdlib global, through a
/// helper whose key every caller fills with tid(): nothing for the user
/// to be warned about.
#[test]
fn thread_indent_in_a_kernel_probe_draws_no_racy_update_warning() {
    let out = stap(&[
        "-p2",
        "-e",
        r#"probe kernel.trace("sched_switch") { printf("%s -> x\n", thread_indent(1)) }"#,
    ]);
    assert_ok(&out);
    let text = stdout(&out);
    assert!(text.contains("__indent_depth"), "{text}");
    assert!(
        !stderr(&out).contains("may lose updates"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn defines_and_global_overrides_reach_the_program() {
    let out = stap(&[
        "-p2",
        "-D",
        "MAXSTRINGLEN=1024",
        "-G",
        "threshold=7",
        "-e",
        "global threshold = 3\nprobe begin { println(threshold) }",
    ]);
    assert_ok(&out);
    let text = stdout(&out);
    assert!(text.contains("MAXSTRINGLEN=1024"), "{text}");
    assert!(text.contains("7"), "{text}");
}

#[test]
fn verbose_prints_pass_lines() {
    let out = stap(&["-v", "-p2", "examples/drops.stp"]);
    assert_ok(&out);
    let err = stderr(&out);
    assert!(err.contains("Pass 1: parsed user script"), "{err}");
    assert!(err.contains("Pass 2: analyzed script"), "{err}");
}

#[test]
fn p4_compiles_both_halves_of_the_seed_script_and_stops() {
    // Without -p the seed script would run (forever: it has no exit());
    // tests/live.rs runs scripts for real.
    let out = stap(&["-v", "-p4", "examples/drops.stp"]);
    assert_ok(&out);
    let err = stderr(&out);
    assert!(err.contains("Pass 3: translated to IR"), "{err}");
    assert!(err.contains("Pass 4: compiled 1 BPF programs"), "{err}");
    assert!(!err.contains("Pass 5"), "{err}");
}

#[test]
fn missing_btf_file_says_what_still_works() {
    let out = stap(&["--btf", "/nonexistent/vmlinux", "-p2", "examples/drops.stp"]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("/nonexistent/vmlinux"), "{err}");
    assert!(err.contains("begin"), "{err}");
}

#[test]
fn guru_mode_refuses_only_what_needs_it() {
    // -g alone is fine: the script needs nothing from it.
    let out = stap(&["-g", "-p2", "-e", "probe begin { println(1) }"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // Embedded C is refused at its line: without -g for lacking it...
    let script = "function f() %{ return; %}\nprobe begin { f() }";
    let out = stap(&["-p2", "-e", script]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("requires guru mode (-g)"), "{err}");
    assert!(err.contains("<input>:1:"), "{err}");
    // ...and with -g because a BPF runtime cannot run C.
    let out = stap(&["-g", "-p2", "-e", script]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("unsupported: embedded C"), "{err}");
    assert!(err.contains("cannot run C code"), "{err}");
}

#[test]
fn stap_options_without_meaning_here_are_accepted_and_noted() {
    let out = stap(&[
        "-v",
        "-k",
        "-u",
        "-w",
        "-b",
        "-t",
        "-s",
        "8",
        "-m",
        "mod",
        "--all-modules",
        "--ldd",
        "-d",
        "/bin/ls",
        "--suppress-time-limits",
        "--runtime=bpf",
        "-p1",
        "-e",
        "probe begin { }",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("Note: -k has no effect"), "{err}");
    assert!(err.contains("Note: --all-modules has no effect"), "{err}");
}

#[test]
fn missing_script_file_is_a_clear_error() {
    let out = stap(&["-p2", "no/such/script.stp"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("cannot read script file 'no/such/script.stp'"));
}

#[test]
fn kernel_function_without_a_mechanism_says_why() {
    if std::path::Path::new("/sys/bus/event_source/devices/kprobe").exists() {
        eprintln!("skipped: this kernel has kprobes, so the probe resolves");
        return;
    }
    let out = stap(&["-p2", "-e", "probe kernel.function(\"tcp_sendmsg\") { }"]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("cannot be probed on this kernel"), "{err}");
    assert!(err.contains("kprobes: "), "{err}");
    assert!(err.contains("fentry/fexit: "), "{err}");

    let optional = stap(&[
        "-p2",
        "-e",
        "probe kernel.function(\"tcp_sendmsg\")? { } probe begin { }",
    ]);
    assert_ok(&optional);
}

/// Source files and lines come from the kernel's DWARF: where none is
/// installed, the error says so and where it looked.
#[test]
fn kernel_source_file_probes_without_dwarf_say_where_they_looked() {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let release = release.trim();
    let debug = format!("/usr/lib/debug/boot/vmlinux-{release}");
    if std::path::Path::new(&debug).exists() || std::env::var_os("STAP_RS_KERNEL_DWARF").is_some() {
        eprintln!("skipped: this kernel's DWARF is installed");
        return;
    }
    for point in [
        r#"kernel.function("*@fs/proc*.c")"#,
        r#"kernel.statement("vfs_read@fs/read_write.c:*")"#,
    ] {
        let out = stap(&["-p2", "-e", &format!("probe {point} {{ }}")]);
        assert_eq!(out.status.code(), Some(1));
        let err = stderr(&out);
        assert!(err.contains("needs the kernel's DWARF"), "{err}");
        assert!(err.contains(&debug), "{err}");
        assert!(err.contains("STAP_RS_KERNEL_DWARF"), "{err}");
    }
}

/// SystemTap's own corpus (`../shared/stap-corpus`, or `$STAP_CORPUS`),
/// when present.
fn stap_corpus() -> Option<std::path::PathBuf> {
    let dir = match std::env::var_os("STAP_CORPUS") {
        Some(dir) => std::path::PathBuf::from(dir),
        None => std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/stap-corpus"),
    };
    if dir.is_dir() {
        Some(dir)
    } else {
        eprintln!("skipped: ../shared/stap-corpus is absent");
        None
    }
}

#[test]
fn stap_tapset_tree_parses_as_a_library() {
    let Some(corpus) = stap_corpus() else { return };
    let tapsets = corpus.join("tapset");
    let tapsets = tapsets.to_str().expect("a UTF-8 path");
    let out = stap(&["-v", "-p1", "-I", tapsets, "-e", "probe begin { }"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // Every file of the tree that applies to x86_64 (the stdlib adds a few).
    let err = stderr(&out);
    let count: usize = err
        .split("parsed user script and ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no pass 1 line in: {err}"));
    assert!(count > 450, "only {count} library scripts: {err}");
}

/// Each stock example at -p1, run as its `.meta` test_check line says
/// (its arguments, `-g`, ...), in its own directory.
#[test]
fn stap_examples_parse() {
    let Some(corpus) = stap_corpus() else { return };
    let bin = env!("CARGO_BIN_EXE_stap-rs");
    let mut failed = Vec::new();
    let mut checked = 0;
    let mut metas: Vec<_> = std::fs::read_dir(corpus.join("examples"))
        .expect("examples dir")
        .flatten()
        .flat_map(|d| std::fs::read_dir(d.path()).into_iter().flatten().flatten())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "meta"))
        .collect();
    metas.sort();
    for meta in metas {
        let text = std::fs::read_to_string(&meta).expect("reading a .meta");
        let Some(line) = text.lines().find_map(|l| l.strip_prefix("test_check:")) else {
            continue;
        };
        let Some(rest) = line.trim().strip_prefix("stap ") else {
            continue;
        };
        // `-p4`, `-gp4`, `-p2` all become -p1, keeping the other flags.
        let words: Vec<String> = rest
            .split(' ')
            .map(
                |w| match w.strip_prefix('-').and_then(|f| f.split_once('p')) {
                    Some((flags, n)) if n.len() == 1 && n.chars().all(|c| c.is_ascii_digit()) => {
                        if flags.is_empty() {
                            "-p1".to_string()
                        } else {
                            format!("-{flags} -p1")
                        }
                    }
                    _ => w.to_string(),
                },
            )
            .collect();
        let command = format!("{bin} {}", words.join(" "));
        let out = Command::new("sh")
            .arg("-c")
            .arg(&command)
            .current_dir(meta.parent().expect("in a directory"))
            .stdin(Stdio::null())
            .output()
            .expect("running sh");
        checked += 1;
        if !out.status.success() {
            failed.push(format!("{}: {}", meta.display(), stderr(&out)));
        }
    }
    assert!(
        checked > 90,
        "only {checked} examples have a test_check line"
    );
    assert!(
        failed.is_empty(),
        "{} of {checked} fail:\n{}",
        failed.len(),
        failed.join("\n")
    );
}

// ---- reliability (issue 19): hostile input ends in a clear error ----------

/// Runs stap-rs with `script` as a file (too big for argv) and a deadline;
/// a run past it is killed and fails the test.
fn stap_file(script: &str, args: &[&str], within: std::time::Duration) -> Output {
    // Removed when it drops, even when the run panics.
    let file = script_file(script);
    let child = Command::new(env!("CARGO_BIN_EXE_stap-rs"))
        .args(args)
        .arg(file.path())
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running stap-rs");
    let pid = child.id();
    // Output is collected while the run goes on (a full pipe would stall it).
    let (send, done) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = send.send(child.wait_with_output());
    });
    match done.recv_timeout(within) {
        Ok(out) => out.expect("waiting for stap-rs"),
        Err(_) => {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            panic!("stap-rs {args:?} took longer than {within:?}");
        }
    }
}

/// `script` in a fresh `.stp` file, removed when the guard drops.
fn script_file(script: &str) -> tempfile::NamedTempFile {
    use std::io::Write;
    let mut file = tempfile::Builder::new()
        .prefix("stap-rs-cli-")
        .suffix(".stp")
        .tempfile()
        .unwrap();
    file.write_all(script.as_bytes()).unwrap();
    file
}

const MINUTE: std::time::Duration = std::time::Duration::from_secs(60);

#[test]
fn deep_nesting_is_a_clear_error_not_a_stack_overflow() {
    let braces = format!(
        "probe begin {{ {}x=1;{} exit() }}",
        "{".repeat(5000),
        "}".repeat(5000)
    );
    let calls = format!(
        "probe begin {{ x = {}1{} }}",
        "abs(".repeat(5000),
        ")".repeat(5000)
    );
    let ifs = format!("probe begin {{ {} x = 1 }}", "if (1) ".repeat(5800));
    for script in [braces, calls, ifs] {
        let out = stap_file(&script, &["-p2"], MINUTE);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains("nesting too deep"), "{err}");
        assert!(err.len() < 4096, "{err}");
    }
}

#[test]
fn nesting_at_the_limit_compiles_through_every_pass() {
    // Just under the limit, on both sides: host code (begin: elaboration,
    // inference, IR lowering, Cranelift) and a kernel probe (inlining, BPF
    // emission), one construct per script.
    let depth = stap_lang::nesting::MAX_NESTING - 8;
    let n = |s: &str| s.repeat(depth);
    let scripts = [
        format!("{{ {}x = 1{} }}", n("{ "), n(" }")),
        format!("x = 1{} g = x", n(" + 1")),
        format!("g = {}1", n("~ ")),
        format!("{} x++ g = x", n("if (x < 5) ")),
    ];
    for body in scripts {
        let script = format!(
            "global g = 0\nprobe begin {{ x = 0 {body} println(g) exit() }}\n\
             probe timer.profile {{ x = 0 {body} }}\n"
        );
        let out = stap_file(&script, &["-p4"], MINUTE * 2);
        assert_ok(&out);
    }
}

#[test]
fn zero_and_negative_timeouts_are_refused_as_stap_does() {
    for value in ["0", "0.0001", "nan", "x"] {
        let out = stap(&["-T", value, "-p2", "-e", "probe begin { exit() }"]);
        assert_eq!(out.status.code(), Some(2), "-T {value}");
        assert!(
            stderr(&out).contains("invalid timeout interval"),
            "{}",
            stderr(&out)
        );
    }
    assert_ok(&stap(&["-T", "0.5", "-p2", "-e", "probe begin { exit() }"]));
}

#[test]
fn maxstringlen_outside_its_range_is_refused() {
    for value in ["0", "4", "7", "65537"] {
        let define = format!("MAXSTRINGLEN={value}");
        let out = stap(&["-D", &define, "-p2", "-e", "probe begin { exit() }"]);
        assert_eq!(out.status.code(), Some(1), "{value}");
        assert!(
            stderr(&out).contains("must be between 8 and 65536"),
            "{}",
            stderr(&out)
        );
    }
    assert_ok(&stap(&[
        "-D",
        "MAXSTRINGLEN=8",
        "-p2",
        "-e",
        "probe begin { exit() }",
    ]));
}

#[test]
fn kernel_memory_in_a_host_probe_compiles() {
    // Read through /proc/kcore when the probe runs (tests/live/host.rs).
    let out = stap(&[
        "-p3",
        "-e",
        "probe begin {\n  printf(\"%d %s\\n\", @cast(0, \"struct task_struct\")->pid, kernel_string(0))\n}",
    ]);
    assert_ok(&out);
}

#[test]
fn many_errors_are_capped_with_a_count_of_the_rest() {
    // One error per bad statement, each on a 10 KB line.
    let line = format!("probe begin {{ {} }}", "x = ; ".repeat(2000));
    let out = stap_file(&line, &["-p2"], MINUTE);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        err.contains("not shown (stap-rs prints the first 50)"),
        "{}",
        &err[..2000.min(err.len())]
    );
    assert!(
        err.matches("error").count() >= 50,
        "{}",
        &err[..2000.min(err.len())]
    );
    assert!(err.len() < 64 * 1024, "{} bytes of errors", err.len());
}

#[test]
fn a_long_member_chain_error_stays_small() {
    let script = format!(
        "probe kernel.trace(\"kfree_skb\") {{ x = $skb->{}len }}",
        "next->".repeat(3000)
    );
    let out = stap_file(&script, &["-p2"], MINUTE);
    let err = stderr(&out);
    assert!(err.len() < 64 * 1024, "{} bytes of errors", err.len());
}

#[test]
fn a_huge_unknown_name_is_reported_quickly() {
    let name = "f".repeat(8192);
    let script = format!("probe begin {{ {name}() }}");
    let started = std::time::Instant::now();
    let out = stap_file(&script, &["-p2"], MINUTE);
    assert_eq!(out.status.code(), Some(1));
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    assert!(stderr(&out).len() < 16 * 1024);
}

#[test]
fn an_endless_script_file_is_refused_at_the_size_cap() {
    let out = stap(&["-p1", "/dev/zero"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("is larger than 16 MiB"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_target_pid_that_does_not_exist_is_a_warning() {
    let out = stap(&[
        "-x",
        "999999",
        "-e",
        "probe begin { println(target()) exit() }",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "999999\n");
    assert!(
        stderr(&out).contains("WARNING: -x 999999: no such process"),
        "{}",
        stderr(&out)
    );
    let zero = stap(&["-x", "0", "-e", "probe begin { exit() }"]);
    assert_eq!(zero.status.code(), Some(1));
}

#[test]
fn unprivileged_runs_say_what_is_needed() {
    // Drop to nobody with no capabilities; skipped where setpriv is
    // missing or the binary is out of nobody's reach.
    let binary = env!("CARGO_BIN_EXE_stap-rs");
    let probe = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
        ])
        .args([binary, "--version"])
        .output();
    match probe {
        Ok(out) if out.status.success() => {}
        _ => {
            eprintln!("skipped: cannot run stap-rs as nobody here");
            return;
        }
    }
    let as_nobody = |args: &[&str]| {
        Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "--inh-caps=-all",
            ])
            .arg(binary)
            .args(args)
            .current_dir("/")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let out = as_nobody(&["-e", "probe begin { exit() }"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(
        err.lines().filter(|l| l.starts_with("ERROR")).count(),
        1,
        "{err}"
    );
    assert!(
        err.contains("needs root, or CAP_BPF + CAP_PERFMON and read access to tracefs"),
        "{err}"
    );
    assert!(err.contains("lacks CAP_BPF, CAP_PERFMON"), "{err}");

    let tracefs = std::path::Path::new("/sys/kernel/tracing/events");
    let list = as_nobody(&["-l", "kernel.trace(\"sched:sched_switch\")"]);
    let err = stderr(&list);
    if tracefs.exists() {
        assert!(!err.contains("not mounted"), "{err}");
    }
}

/// The numbers `-v` reports after pass 2 and pass 4 ("N probes",
/// "N instructions").
fn pass_counts(out: &Output) -> (usize, usize) {
    let err = stderr(out);
    let number_before = |line: &str, word: &str| -> usize {
        let words: Vec<&str> = line.split_whitespace().collect();
        let at = words.iter().position(|w| w.trim_start_matches('(') == word);
        at.and_then(|i| words[i - 1].trim_start_matches('(').parse().ok())
            .unwrap_or_else(|| panic!("no `N {word}` in: {line}"))
    };
    let line = |prefix: &str| {
        err.lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no `{prefix}` line in:\n{err}"))
            .to_string()
    };
    (
        number_before(&line("Pass 2:"), "probes,"),
        number_before(&line("Pass 4:"), "instructions)"),
    )
}

/// `syscall.*` and `syscall.*.return` cover every system call this kernel
/// traces, hand-written aliases and derived ones alike, and compile.
#[test]
fn syscall_wildcards_cover_every_traced_system_call() {
    let Ok(events) = std::fs::read_dir("/sys/kernel/tracing/events/syscalls") else {
        eprintln!("skipped: no tracefs syscalls events");
        return;
    };
    let calls = events
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("sys_enter_"))
        .count();
    let out = stap(&[
        "-v",
        "-p4",
        "-e",
        "global calls probe syscall.*, nd_syscall.*.return { calls[name] <<< 1 }",
    ]);
    assert_ok(&out);
    // And stap's end probe that prints `calls`, which nothing reads.
    assert_eq!(pass_counts(&out).0, 2 * calls + 1, "{}", stderr(&out));
}

/// A script that never uses `argstr` (or `mode_str`, ...) pays nothing
/// for it: the alias's assignment is elided before code generation.
#[test]
fn unused_syscall_variables_cost_no_bpf() {
    let compile = |body: &str| {
        let script = format!("probe syscall.openat {{ {body} }}");
        let out = stap(&["-v", "-p4", "-e", &script]);
        assert_ok(&out);
        pass_counts(&out).1
    };
    let filename = compile("println(filename)");
    let with_argstr = compile("println(filename, argstr)");
    assert!(
        with_argstr > filename + 100,
        "argstr adds {filename} -> {with_argstr} instructions"
    );
    assert!(compile("println(name)") < filename);
}

/// As stap's getopt: options may follow the script's arguments (the stock
/// examples' `stap script.stp ARG -T 1`), and `--` ends the options.
#[test]
fn options_after_the_script_arguments_are_options() {
    let script = r#"probe begin { printf("%d %s\n", $#, @1) }"#;
    let out = stap(&["-e", script, "first", "-p1"]);
    assert_ok(&out);
    assert!(
        stdout(&out).contains(r#"printf("%d %s\n", 1, "first")"#),
        "{}",
        stdout(&out)
    );
    let out = stap(&["-p1", "-e", script, "--", "-T"]);
    assert_ok(&out);
    assert!(
        stdout(&out).contains(r#"printf("%d %s\n", 1, "-T")"#),
        "{}",
        stdout(&out)
    );
}

/// stap names some system calls x86_64 does not have (send, recv, the
/// 16-bit-uid and compat_* forms); its aliases for them resolve to nothing
/// there, so a script probing one compiles (with the points that do
/// resolve), as here. A name stap does not know is still an error.
#[test]
fn syscalls_of_other_architectures_match_nothing_and_unknown_ones_fail() {
    let out = stap(&[
        "-p2",
        "-e",
        "probe syscall.send, syscall.recv.return, nd_syscall.chown16, syscall.compat_nanosleep, syscall.read { print(name) }",
    ]);
    assert_ok(&out);
    let out = stap(&["-p2", "-e", "probe syscall.sendd { }"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("no system call matches `syscall.sendd`"),
        "{}",
        stderr(&out)
    );
}

/// `stap-rs ARGS | head -1`: reads one line, closes the pipe, and returns
/// how stap-rs ended.
fn closing_stdout_after_one_line(args: &[&str], stdin: &str) -> Output {
    use std::io::{BufRead, BufReader, Write};
    let mut child = Command::new(env!("CARGO_BIN_EXE_stap-rs"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running stap-rs");
    // From a thread: a listing reads no stdin, so a large input would
    // block this thread (and the error says it went away unread).
    let mut input = child.stdin.take().expect("piped stdin");
    let stdin = stdin.to_string();
    let writer = std::thread::spawn(move || {
        let _ = input.write_all(stdin.as_bytes());
    });
    let mut out = BufReader::new(child.stdout.take().expect("piped stdout"));
    let mut first = String::new();
    out.read_line(&mut first).expect("reading a line");
    assert!(!first.is_empty(), "no output at all");
    drop(out);
    let done = child.wait_with_output().expect("waiting for stap-rs");
    writer.join().expect("the stdin writer");
    done
}

#[test]
fn a_closed_stdout_ends_listings_and_dumps_quietly() {
    // Far more than a pipe holds, so the write after the close fails.
    let script: String = (0..3000)
        .map(|i| format!("probe begin {{ x{i} = {i}; println(x{i}) }}\n"))
        .collect();
    for args in [
        &["-p1", "-"][..],
        &["-p2", "-"],
        &["-p3", "-"],
        &["--dump", "types", "-"],
        // Hundreds of KB with this machine's tracepoints.
        &["-L", "kernel.trace(\"*\")"],
    ] {
        let out = closing_stdout_after_one_line(args, &script);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).is_empty(), "{args:?}: {}", stderr(&out));
    }
}

#[test]
fn a_closed_stdout_ends_the_repl_quietly() {
    let commands = ":help\n".repeat(2000);
    let out = closing_stdout_after_one_line(&["-i"], &commands);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));
}

#[test]
fn a_closed_stderr_loses_messages_without_a_panic() {
    // A pipe whose reader has gone: every write to it fails with EPIPE.
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    let out = Command::new(env!("CARGO_BIN_EXE_stap-rs"))
        .args(["-v", "-p2", "-e", "probe begin { }"])
        .stdout(Stdio::piped())
        .stderr(writer)
        .output()
        .expect("running stap-rs");
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
}

#[test]
fn a_define_that_sets_nothing_is_a_warning() {
    for (define, expected) in [
        (
            "MAXNESTING=20",
            "-D MAXNESTING=20 has no effect: calls nest at most 10 deep",
        ),
        ("STP_NO_OVERLOAD", "-D STP_NO_OVERLOAD has no effect"),
    ] {
        let out = stap(&["-p2", "-D", define, "-e", "probe begin { exit() }"]);
        assert_ok(&out);
        assert!(stderr(&out).contains(expected), "{}", stderr(&out));
    }
}

#[test]
fn a_string_loop_in_one_hit_stops_at_the_string_space_limit() {
    // The red team's loop reached 5.3 GB: each `.` makes a new string, and
    // strings live until the hit ends.
    let out = stap(&[
        "-D",
        "MAXACTION=100000000",
        "-e",
        "probe begin { s = \"x\"; for (i = 0; i < 30000000; i++) s = s . s; println(strlen(s)); exit() }",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out)
            .contains("ERROR: out of string space: one probe hit created more than 256 MiB"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_megabyte_literal_is_cut_at_maxstringlen_on_the_host() {
    let script = format!(
        "probe begin {{ println(strlen(\"{}\")); exit() }}",
        "a".repeat(1 << 20)
    );
    // A file: one argument may not exceed 128 KiB.
    let file = script_file(&script);
    let out = stap(&[file.path().to_str().unwrap()]);
    assert_ok(&out);
    assert_eq!(stdout(&out), "511\n");
}

/// `text_strn` in a host probe: a length cut between escapes, and a quoted
/// text cut short (stap's `"...`).
#[test]
fn text_strn_cuts_and_quotes_as_stap() {
    let out = stap(&[
        "-e",
        r#"probe begin {
             printf("%s|%s|%s|%s\n", text_strn("tab\there", 0, 0), text_strn("tab\there", 4, 0),
                    text_strn("hello world", 8, 1), text_strn("ok", 0, 1))
             exit()
           }"#,
    ]);
    assert_ok(&out);
    assert_eq!(stdout(&out), "tab\\there|tab|\"hel\"...|\"ok\"\n");
}

#[test]
fn array_slices_delete_walk_and_test_the_matching_elements() {
    let out = stap(&[
        "-e",
        r#"global a, b
           probe begin {
             a[1, "x"] = 1; a[1, "y"] = 2; a[2, "x"] = 3; a[2, "y"] = 4; a[3, "x"] = 5
             delete a[1, *]
             delete a[*, "y"]
             foreach ([k, s] in a+) printf("a %d %s %d\n", k, s, a[k, s])
             for (i = 1; i <= 4; i++) for (j = 1; j <= 3; j++) b[i, j] = i * 10 + j
             two = 2
             foreach ([i, j+] in b[two, *] limit 2) printf("b %d %d %d\n", i, j, b[i, j])
             foreach ([i-, j] in b[*, 3]) printf("c %d %d\n", i, j)
             printf("in %d %d %d %d %d\n", [two, *] in b, [5, *] in b, [*, 3] in b,
                    [*, 4] in b, !([*, *] in b))
             delete b[*, *]
             printf("left %d %d\n", [4, 3] in b, [*, *] in b)
             exit()
           }"#,
    ]);
    assert_ok(&out);
    assert_eq!(
        stdout(&out),
        "a 2 x 3\na 3 x 5\nb 2 1 21\nb 2 2 22\nc 4 3\nc 3 3\nc 2 3\nc 1 3\nin 1 0 1 0 0\nleft 0 0\n"
    );
}

/// stap's display of unread globals after the end probes, in a host
/// session: `%#x` numbers, quoted strings and string keys, elements by
/// decreasing value, a statistic's aggregates and an empty one's count.
/// Globals something reads (`++`, a `foreach`, the end probe) are not shown.
#[test]
fn globals_written_but_never_read_are_printed_at_the_end() {
    let out = stap(&[
        "-e",
        r#"global x, s, a, st, sa, empty, read_back, bumped
           probe begin {
             x = 5; s = "say \"hi\""
             a[1, "k"] = 3; a[2, "j"] = -1; a[3, "z"] = 7
             st <<< 3; st <<< 5
             sa["u"] <<< 4; sa["w"] <<< 1; sa["w"] <<< 1
             read_back = 1; bumped++
             exit()
           }
           probe never { empty <<< 1 }
           probe end { println("end ", read_back) }"#,
    ]);
    assert_ok(&out);
    assert_eq!(
        stdout(&out),
        "end 1\nx=0x5\ns=\"say \\\"hi\\\"\"\na[3,\"z\"]=0x7\na[1,\"k\"]=0x3\n\
         a[2,\"j\"]=0xffffffffffffffff\nst @count=2 @min=3 @max=5 @sum=8 @avg=4\n\
         sa[\"w\"] @count=2 @min=1 @max=1 @sum=2 @avg=1\n\
         sa[\"u\"] @count=1 @min=4 @max=4 @sum=4 @avg=4\nempty @count=0x0\n"
    );
}
