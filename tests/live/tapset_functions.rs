//! Functions of stap's tapset library in kernel probes. The user-memory
//! family: the integer reads of every width and sign over the bytes of a
//! path the kernel is given, and what each form does when the memory
//! cannot be read (0, a warning, a catchable error, a fallback text or
//! the address). The constants and byte-order conversions, computed in
//! BPF, against the same values computed here.

use super::{
    Session, assert_success, build, closed_port, serial, skip_without_task_from_pid,
    trigger_until_done,
};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// The file name's bytes (UTF-8 of "AB\u{e9}CD\u{fc}"): high bytes, so
/// that the signed and unsigned reads differ, and a last byte >= 0x80, so
/// that the 64-bit read is negative.
const NAME: &str = "AB\u{e9}CD\u{fc}";

#[test]
fn user_integer_reads_and_their_fault_forms_in_a_tracepoint() {
    let _one = serial();
    let trigger = build("trigger");
    let dir = std::env::temp_dir().join(format!("stap-rs-umem-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let path = dir.join(NAME);
    let path = path.to_str().expect("utf-8 path");
    // `o` is the offset of NAME's 8 bytes in the path.
    let mut session = Session::start(&[
        "-e",
        r#"probe kernel.trace("syscalls:sys_enter_openat") {
             if (execname() != "stapUMem") next
             f = $filename
             s = user_string(f)
             if (!isinstr(s, "stap-rs-umem-") || isinstr(s, ".missing")) next
             o = f + strlen(s) - 8
             printf("%d %d %d %d %d %d %d\n", user_char(o + 2), user_int8(o + 2),
                    user_uint8(o + 2), user_short(o + 2), user_int16(o + 2),
                    user_ushort(o + 2), user_uint16(o + 2))
             printf("%d %d %d %d %d %d %d %d\n", user_int(o + 4), user_int32(o + 4),
                    user_uint32(o + 4), user_long(o), user_int64(o), user_uint64(o),
                    user_ulong(o), user_uint32_error(o))
             printf("fault %d %d %d %d|%s|%s|%s|%s\n", user_int(0), user_char(0),
                    user_ulong_warn(0), user_short_warn(0), user_string_warn(0),
                    user_string_nofault(0), user_string2(0, "dflt"),
                    user_string_n_warn(0, 3, "w"))
             try { println(user_int64_error(0)) } catch (m) { println("caught") }
             printf("%s %s %s %s %s\n", user_string_n_quoted(o, 2), user_string_n_quoted(0, 2),
                    user_string_n2(o, 2, "x"), user_string_n_nofault(o, 1),
                    kernel_string_quoted(0))
             exit()
           }"#,
    ]);
    session.wait_ready();
    trigger_until_done(&mut session, &trigger, &["stapUMem", "open", path]);
    let done = session.finish();
    let _ = std::fs::remove_dir_all(&dir);
    assert_success(&done);

    let b = NAME.as_bytes();
    let i16_at = |k: usize| i16::from_le_bytes([b[k], b[k + 1]]);
    let u16_at = |k: usize| u16::from_le_bytes([b[k], b[k + 1]]);
    let bytes4 = |k: usize| [b[k], b[k + 1], b[k + 2], b[k + 3]];
    let whole = i64::from_le_bytes(b[..8].try_into().unwrap());
    let expected = format!(
        "{c} {c} {uc} {s} {s} {us} {us}\n{i} {i} {ui} {l} {l} {l} {l} {u0}\n\
         fault 0 0 0 0|||dflt|w\ncaught\n\"AB\" 0x0 AB A 0x0\n",
        c = b[2] as i8,
        uc = b[2],
        s = i16_at(2),
        us = u16_at(2),
        i = i32::from_le_bytes(bytes4(4)),
        ui = u32::from_le_bytes(bytes4(4)),
        l = whole,
        u0 = u32::from_le_bytes(bytes4(0)),
    );
    assert_eq!(done.stdout, expected, "stderr: {}", done.stderr);
    // The `_warn` forms say what failed, in stap's words.
    for warning in [
        "user unsigned long copy fault 0x",
        "user short copy fault 0x",
        "user string copy fault -14 at 0x0 [man error::fault]",
    ] {
        assert!(done.stderr.contains(warning), "{warning}: {}", done.stderr);
    }
}

/// The byte-order and wait-status helpers (stdlib/lib/bits.stp) in a
/// tracepoint, on values whose results Rust computes.
#[test]
fn byte_order_and_wait_status_helpers_in_a_tracepoint() {
    let _one = serial();
    let trigger = build("trigger");
    let dir = std::env::temp_dir().join(format!("stap-rs-bits-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let path = dir.join("f");
    let path = path.to_str().expect("utf-8 path");
    let mut session = Session::start(&[
        "-e",
        r#"probe kernel.trace("syscalls:sys_enter_openat") {
             if (execname() != "stapBits") next
             printf("%d %d %x %x %x %x %x %x %d %d %d\n", AF_INET(), AF_INET6(),
                    big_endian2(0x1234), big_endian4(0x12345678),
                    htonll(0x0102030405060708), ntohll(htonll(-2)), little_endian2(0x12345),
                    big_endian8(1), WIFEXITED(0x0300), WEXITSTATUS(0x0300), WTERMSIG(0x89))
             printf("%d %d\n", HZ(), atomic_read(&@cast(task_current(), "struct task_struct")->signal->live))
             exit()
           }"#,
    ]);
    session.wait_ready();
    trigger_until_done(&mut session, &trigger, &["stapBits", "open", path]);
    let done = session.finish();
    let _ = std::fs::remove_dir_all(&dir);
    assert_success(&done);
    let expected = format!(
        // The last 1: the trigger has one thread, its signal_struct's
        // live count.
        "2 10 {:x} {:x} {:x} {:x} {:x} {:x} 1 3 9\n{} 1\n",
        0x1234u16.swap_bytes(),
        0x1234_5678u32.swap_bytes(),
        0x0102_0304_0506_0708u64.swap_bytes(),
        (-2i64) as u64,
        0x12345 & 0xffff,
        1u64.swap_bytes(),
        super::kernel_hz(),
    );
    assert_eq!(done.stdout, expected, "stderr: {}", done.stderr);
}

/// What /proc says about a live process, for comparing with the probes.
struct ProcView {
    stat: String,
    limits: String,
    fd_count: usize,
    cwd: String,
    exe: String,
    stdout: String,
}

impl ProcView {
    fn read(pid: u32) -> ProcView {
        let proc = PathBuf::from(format!("/proc/{pid}"));
        let read = |p: &str| std::fs::read_to_string(proc.join(p)).expect(p);
        let link = |p: &str| {
            std::fs::read_link(proc.join(p))
                .expect(p)
                .display()
                .to_string()
        };
        ProcView {
            stat: read("stat"),
            limits: read("limits"),
            fd_count: std::fs::read_dir(proc.join("fd")).expect("fd dir").count(),
            cwd: link("cwd"),
            exe: link("exe"),
            stdout: link("fd/1"),
        }
    }
}

/// The fields of a /proc/PID/stat line after the command's ")": state,
/// ppid, pgrp, session, ..., starttime (index 19, in 1/100 s ticks).
fn stat_fields(stat: &str) -> Vec<String> {
    let after = stat.rsplit_once(')').expect("a stat line").1;
    after.split_whitespace().map(String::from).collect()
}

/// The task family over a process this test starts, compared with what
/// /proc says about it while it is still alive: credentials, process group
/// and session, start time, resource limits, open descriptors, the paths
/// of its working directory, executable and stdout, and its ancestry. The
/// trigger does a failing chdir, then blocks on stdin until the test has
/// read /proc; its exit ends the session.
#[test]
fn task_credentials_paths_and_limits_match_proc() {
    use std::os::unix::fs::MetadataExt;
    use std::os::unix::process::CommandExt;

    let _one = serial();
    // task_start_time() goes through pid2task().
    if skip_without_task_from_pid() {
        return;
    }
    let trigger = build("trigger");
    let dir = std::env::temp_dir().join(format!("stap-rs-taskfn-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let out_path = dir.join("out");
    // Each line starts with the pid: a trigger whose chdir came before the
    // probes were attached is told apart. Two path walks per probe at most
    // (the verifier's budget), so the paths are split over two probes.
    let mut session = Session::start(&[
        "-e",
        r#"probe kernel.trace("syscalls:sys_enter_chdir") {
             if (execname() != "stapTaskFn") next
             t = task_current()
             printf("%d ids %d %d %d %d %d %d %d\n", pid(), task_uid(t), task_euid(t), task_gid(t),
                    task_egid(t), egid(), ns_uid(), ns_egid())
             printf("%d groups %d %d %d %d %d %d\n", pid(), pgrp(), sid(), ns_pgrp(), ns_sid(),
                    ns_pid(), ns_ppid())
             printf("%d limits %d %d %d %d %d\n", pid(), task_rlimit_nofile(t),
                    task_rlimit(t, "RLIMIT_STACK"), task_rlimit_core(t), task_rlimit_nproc(t),
                    task_rlimit(t, "RLIMIT_BOGUS"))
             printf("%d fds %d %d\n", pid(), task_open_file_handles(t), task_max_file_handles(t))
             printf("%d cwd %s\n", pid(), fullpath_struct_path(task_cwd_path(t)))
             printf("%d exe %s\n", pid(), fullpath_struct_file(t, current_exe_file()))
           }
           probe kernel.trace("sched:sched_process_exit") {
             if (execname() != "stapTaskFn") next
             t = task_current()
             printf("%d start %d\n", pid(), task_start_time(tid()))
             printf("%d stdout %s\n", pid(), fullpath_struct_file(t, task_fd_lookup(t, 1)))
             printf("%d ancestry %s\n", pid(), task_ancestry(t, 0))
             exit()
           }"#,
    ]);
    session.wait_ready();
    let mut views = std::collections::HashMap::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !session.has_exited() && Instant::now() < deadline {
        let mut child = Command::new(&trigger)
            .args(["stapTaskFn", "chdirs", "1"])
            .current_dir(&dir)
            .stdin(Stdio::piped())
            .stdout(std::fs::File::create(&out_path).expect("stdout file"))
            .process_group(0)
            .spawn()
            .expect("starting the trigger");
        // Past its chdir (it then blocks reading stdin).
        thread::sleep(Duration::from_millis(300));
        views.insert(child.id(), ProcView::read(child.id()));
        drop(child.stdin.take());
        let _ = child.wait();
        thread::sleep(Duration::from_millis(200));
    }
    let my_session =
        stat_fields(&std::fs::read_to_string("/proc/self/stat").expect("stat"))[3].clone();
    let my_comm = std::fs::read_to_string("/proc/thread-self/comm").expect("own comm");
    let done = session.finish();
    let _ = std::fs::remove_dir_all(&dir);
    assert_success(&done);

    // The trigger whose exit ended the session, and its lines.
    let out = &done.stdout;
    let pid: u32 = out
        .lines()
        .find(|l| l.contains(" start "))
        .and_then(|l| l.split(' ').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no start line in {out:?}"));
    let field = |key: &str| -> String {
        let prefix = format!("{pid} {key} ");
        out.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .unwrap_or_else(|| panic!("no {key} line for {pid} in {out:?}"))
            .to_string()
    };
    let view = views
        .get(&pid)
        .expect("/proc read for the trigger that fired");
    let fields = stat_fields(&view.stat);

    let meta = std::fs::metadata("/proc/self").expect("own /proc entry");
    let (uid, gid) = (meta.uid(), meta.gid());
    assert_eq!(
        field("ids"),
        format!("{uid} {uid} {gid} {gid} {gid} {uid} {gid}")
    );
    assert_eq!(
        field("groups"),
        format!("{pid} {my_session} {pid} {my_session} {pid} {}", fields[1])
    );
    let start_ns: u64 = field("start").parse().expect("start time");
    let ticks: u64 = fields[19].parse().expect("starttime");
    assert_eq!(
        start_ns / 10_000_000,
        ticks,
        "start time against /proc stat"
    );

    // Soft limits, "unlimited" being -1.
    let soft = |name: &str| -> String {
        let line = view
            .limits
            .lines()
            .find(|l| l.starts_with(name))
            .expect(name);
        let value = line[name.len()..]
            .split_whitespace()
            .next()
            .expect("soft limit");
        if value == "unlimited" {
            "-1".to_string()
        } else {
            value.to_string()
        }
    };
    assert_eq!(
        field("limits"),
        format!(
            "{} {} {} {} -1",
            soft("Max open files"),
            soft("Max stack size"),
            soft("Max core file size"),
            soft("Max processes")
        )
    );
    let fds: Vec<u64> = field("fds")
        .split(' ')
        .map(|n| n.parse().expect("count"))
        .collect();
    assert_eq!(
        fds[0], view.fd_count as u64,
        "open descriptors against /proc fd"
    );
    assert!(
        fds[1] >= fds[0] && fds[1].is_multiple_of(64),
        "fd table size {}",
        fds[1]
    );

    assert_eq!(field("cwd"), view.cwd);
    assert_eq!(field("exe"), view.exe);
    assert_eq!(field("stdout"), view.stdout);
    let ancestry = field("ancestry");
    assert!(
        ancestry.ends_with(&format!("=>{}=>stapTaskFn", my_comm.trim())),
        "ancestry {ancestry:?}, this thread is {my_comm:?}"
    );
}

/// The socket and signal constants (stdlib/net/sockconst.stp and
/// stdlib/kernel/signal.stp) in tracepoints: the trigger's UDP socket
/// at `socket(2)` (AF_INET, SOCK_DGRAM, protocol 0), its signals at
/// `signal_generate` (SIGUSR2 raised while blocked, then SIGUSR1) with
/// the handler the trigger installed through glibc (which adds
/// SA_RESTORER).
#[test]
fn socket_and_signal_constants_in_tracepoints() {
    let _one = serial();
    let trigger = build("trigger");
    let dir = std::env::temp_dir().join(format!("stap-rs-sigsock-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let path = dir.join("v");
    let path = path.to_str().expect("utf-8 path");
    let mut session = Session::start(&[
        "-e",
        r#"global sockets, signals
           probe kernel.trace("syscalls:sys_enter_socket") {
             if (execname() != "stapSigSock" || sockets++) next
             printf("%s %s %s %d %d %d %s\n", sock_fam_num2str($family), sock_type_num2str($type & 0xf),
                    sock_prot_num2str($protocol), sock_fam_str2num(sock_fam_num2str($family)) == $family,
                    sock_type_str2num("DGRAM"), sock_prot_str2num("UDP"), sock_state_num2str(3))
           }
           probe kernel.trace("signal:signal_generate") {
             if (task_execname($task) != "stapSigStr" || ($sig != 10 && $sig != 12) || signals >= 2) next
             signals++
             act = &@cast($task, "struct task_struct")->sighand->action[$sig - 1]
             h = get_sa_handler(act)
             printf("%d %d %d [%s] [%s] [%s] %d %s\n", $sig, is_sig_blocked($task, 12), is_sig_blocked($task, 10),
                    sigset_mask_str(get_sigset(&@cast($task, "struct task_struct")->blocked)),
                    sa_flags_str(get_sa_flags(act)), sigset_mask_str(get_sigaction_mask(act)),
                    sa_handler_str(h) == sprintf("%p", h) && h > 1, sa_handler_str(0))
             if (signals == 2 && sockets) exit()
           }"#,
    ]);
    session.wait_ready();
    let port = closed_port().to_string();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !session.has_exited() && Instant::now() < deadline {
        for args in [
            &["stapSigSock", "udp", "127.0.0.1", &port][..],
            &["stapSigStr", "family", path][..],
        ] {
            let status = Command::new(&trigger).args(args).status().expect("trigger");
            assert!(status.success(), "trigger {args:?}: {status}");
        }
        thread::sleep(Duration::from_millis(200));
    }
    let done = session.finish();
    let _ = std::fs::remove_dir_all(&dir);
    assert_success(&done);
    assert_eq!(
        done.stdout,
        "INET DGRAM IP 1 2 17 CONNECTED\n\
         12 1 0 [12] [RESTORER] [] 1 default\n\
         10 0 0 [] [RESTORER] [] 1 default\n",
        "stderr: {}",
        done.stderr
    );
}

/// `randint`, `tz_gmtoff`, `tz_name` and `stp_pid` in a tracepoint and in
/// `begin`: the zone against what date(1) says, the pid against the
/// session's, randint's values within [0, n) (all six of 0..5 in 300
/// draws: a miss has odds below 1e-20) and its "range too wide" error.
#[test]
fn randint_time_zone_and_stp_pid_on_both_sides() {
    let _one = serial();
    let trigger = build("trigger");
    let mut session = Session::start(&[
        "-e",
        r#"global hits
           probe begin { printf("host %d %s %d\n", tz_gmtoff(), tz_name(), stp_pid()) }
           probe kernel.trace("syscalls:sys_enter_chdir") {
             if (execname() != "stapRandint" || hits++) next
             printf("kernel %d %s %d\n", tz_gmtoff(), tz_name(), stp_pid())
             outside = 0; seen = 0
             for (i = 0; i < 300; i++) {
               r = randint(6)
               if (r < 0 || r >= 6) outside++
               seen |= 1 << r
             }
             printf("outside %d seen %x zero %d\n", outside, seen, randint(0))
             try { randint(0x100001) } catch (m) { println(m) }
             exit()
           }"#,
    ]);
    session.wait_ready();
    let pid = session.pid();
    trigger_until_done(&mut session, &trigger, &["stapRandint", "chdirs", "1"]);
    let done = session.finish();
    assert_success(&done);
    let date = |format: &str| {
        let out = Command::new("date").arg(format).output().expect("date");
        String::from_utf8(out.stdout)
            .expect("utf-8")
            .trim()
            .to_string()
    };
    // +hhmm east of UTC; stap's tz_gmtoff is seconds west.
    let z = date("+%z");
    let (sign, digits) = z.split_at(1);
    let east =
        digits[..2].parse::<i64>().unwrap() * 3600 + digits[2..].parse::<i64>().unwrap() * 60;
    let west = if sign == "-" { east } else { -east };
    let zone = format!("{west} {} {pid}", date("+%Z"));
    assert_eq!(
        done.stdout,
        format!("host {zone}\nkernel {zone}\noutside 0 seen 3f zero 0\nrange too wide\n"),
        "stderr: {}",
        done.stderr
    );
}

/// The user-symbol functions in a uprobe, against nm(1)'s view of the
/// target: `usymname`, `usymdata` (a stored value too), `umodname`,
/// `sprint_usyms(ubacktrace())` and `print_ubacktrace_brief()`, which the
/// host names while the target still runs (it sleeps between calls).
#[test]
fn user_symbol_functions_in_a_uprobe() {
    let _one = serial();
    let target = build("uprobe_target");
    let path = target.display().to_string();
    let nm = Command::new("nm")
        .arg("-S")
        .arg(&target)
        .output()
        .expect("nm");
    let nm = String::from_utf8(nm.stdout).expect("utf-8");
    // `ADDRESS SIZE T f`: f's size as the symbol table has it.
    let size = nm
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|w| w.len() == 4 && w[3] == "f")
        .map(|w| u64::from_str_radix(w[1], 16).expect("hex size"))
        .expect("f in nm -S");
    let script = format!(
        r#"probe process("{path}").function("f") {{
             name = usymname(addr())
             printf("%s|%s|%s|%s|%s\n", usymname(addr()), usymdata(addr() + 1), umodname(addr()),
                    usymname(0), umodname(0))
             print(sprint_usyms(ubacktrace()))
             print_ubacktrace_brief()
             println(name)
             exit()
           }}"#
    );
    let command = format!("{path} 5");
    let done = Session::start(&["-c", &command, "-e", &script]).finish();
    assert_success(&done);
    let lines: Vec<&str> = done.stdout.lines().collect();
    assert_eq!(
        lines.first().copied(),
        Some(format!("f|f+0x1/0x{size:x} [{path}]|{path}|0x0|<unknown>").as_str()),
        "stdout:\n{}\nstderr:\n{}",
        done.stdout,
        done.stderr
    );
    // sprint_usyms: ` 0xADDR : f+0x0/0xSIZE [path]` first (at f's entry
    // the frame-pointer walk goes on from f's caller's caller), then
    // print_ubacktrace_brief: the same frames as name+offset, one a line.
    let frame = |i: usize| lines.get(i).copied().unwrap_or_default();
    let first = format!(" : f+0x0/0x{size:x} [{path}]");
    assert!(
        frame(1).starts_with(" 0x") && frame(1).ends_with(&first),
        "{}",
        done.stdout
    );
    let brief = lines
        .iter()
        .position(|l| *l == "f+0x0")
        .expect("brief frame of f");
    assert_eq!(brief - 1, lines.len() - 1 - brief, "{}", done.stdout);
    assert_eq!(lines.last().copied(), Some("f"), "{}", done.stdout);
}

/// `stack(n)`, `ustack(n)`, `callers(n)` and `ucallers(n)` in a
/// tracepoint, against `backtrace()` and `ubacktrace()` of the same hit.
#[test]
fn stack_depths_and_callers_match_the_backtraces() {
    let _one = serial();
    let trigger = build("trigger");
    let mut session = Session::start(&[
        "-e",
        r#"global hits
           probe kernel.trace("syscalls:sys_enter_getppid") {
             if (execname() != "stapStackN" || hits++) next
             printf("%s\n%x %x %x %x\n%s\n%s\n%s\n", backtrace(), stack(0), stack(1), stack(99),
                    stack(-1), callers(0), callers(1), callers(-1))
             printf("%s\n%x %x\n%s\n%s\n", ubacktrace(), ustack(0), ustack(99), ucallers(0),
                    ucallers(-1))
             exit()
           }"#,
    ]);
    session.wait_ready();
    trigger_until_done(&mut session, &trigger, &["stapStackN", "getppid", "1"]);
    let done = session.finish();
    assert_success(&done);
    let lines: Vec<&str> = done.stdout.lines().collect();
    assert_eq!(lines.len(), 9, "{}", done.stdout);
    let kernel: Vec<&str> = lines[0].split(' ').collect();
    assert!(
        kernel.len() >= 2,
        "a kernel stack of two frames or more: {}",
        lines[0]
    );
    let hex = |a: &str| a.trim_start_matches("0x").to_string();
    assert_eq!(
        lines[1],
        format!("{} {} 0 0", hex(kernel[0]), hex(kernel[1])),
        "{}",
        done.stdout
    );
    assert_eq!(lines[2], kernel[0]);
    assert_eq!(lines[3], kernel[..2].join(" "));
    assert_eq!(lines[4], lines[0]);
    let user: Vec<&str> = lines[5].split(' ').collect();
    assert_eq!(lines[6], format!("{} 0", hex(user[0])), "{}", done.stdout);
    assert_eq!(lines[7], user[0]);
    assert_eq!(lines[8], lines[5]);
}

/// stap's register-argument names, registers_valid() and pstrace() in a
/// uprobe and a tracepoint: f(42, "hello-uprobe") of the uprobe target,
/// whose parent chain starts with the target itself.
#[test]
fn register_names_registers_valid_and_pstrace() {
    let _one = serial();
    let target = build("uprobe_target");
    let path = target.display().to_string();
    let script = format!(
        r#"probe begin {{ printf("begin %d\n", registers_valid()) }}
           probe process("{path}").function("f") {{
             printf("uprobe %d %d %d %d %d %d %d %d\n", registers_valid(), s32_arg(1), u32_arg(1),
                    s64_arg(1), u64_arg(1), longlong_arg(1), ulonglong_arg(1), $n)
             printf("%s|%s(%d)\n", pstrace(task_current()), execname(), pid())
           }}
           probe kernel.trace("sched:sched_process_exit") {{
             if (pid() != target()) next
             printf("tracepoint %d\n", registers_valid())
             exit()
           }}"#
    );
    let done = Session::start(&["-c", &path, "-e", &script]).finish();
    assert_success(&done);
    let lines: Vec<&str> = done.stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{}\n{}", done.stdout, done.stderr);
    assert_eq!(lines[0], "begin 0");
    assert_eq!(lines[1], "uprobe 1 42 42 42 42 42 42 42");
    let (chain, own) = lines[2].split_once('|').expect("two parts");
    assert!(chain.starts_with(&format!(" {own}")), "{}", lines[2]);
    assert_eq!(lines[3], "tracepoint 0");
}
