//! The kernel tapset families of stdlib/kernel and stdlib/lib, live: a
//! shell under a name of its own forks, execs, reads a file we create,
//! signals itself and exits with a known code, and the kprocess.*,
//! scheduler.*, signal.* and vfs.* aliases report it with the variables
//! stap documents. Memory, interrupt and block aliases are checked on
//! events the kernel makes anyway. All of them sit on tracepoints, so they
//! run on this host (no kprobes, no fentry) as in the VM guests.

use super::{Session, assert_success, serial, skip_without_task_from_pid};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A copy of a system binary under a name of our own, so that `execname()`
/// picks out the processes this test starts.
fn renamed(binary: &str, name: &str) -> PathBuf {
    let copy = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    std::fs::copy(binary, &copy).unwrap_or_else(|e| panic!("copying {binary}: {e}"));
    copy
}

#[test]
fn process_scheduler_signal_and_vfs_aliases_see_a_shell_at_work() {
    let _one = serial();
    let shell = renamed("/bin/sh", "stapTapsetSh");
    let cat = renamed("/bin/cat", "stapTapsetCat");
    let file = Path::new(env!("CARGO_TARGET_TMPDIR")).join("stap-tapsets-read.txt");
    std::fs::write(&file, "hello tapsets\n").expect("writing the file to read");
    let ino = std::fs::metadata(&file).expect("stat").ino();
    let script = format!(
        r#"global seen, shell
probe kprocess.exec {{ if (filename == "\"{shell}\"") printf("exec %s %s\n", args == "[\"{shell}\", \"-c\", \"" . @1 . "\"]" ? "args" : args, argstr) }}
probe syscall.execve {{ if (filename == "\"{shell}\"") printf("syscall.execve %s\n", args) }}
probe kprocess.exec_complete {{ if (execname() == "stapTapsetSh") printf("exec_complete %d %d %s\n", success, errno, name) }}
probe kprocess.create {{ if (execname() == "stapTapsetSh" && !seen["create"]++) printf("create %d\n", new_pid != pid() && new_tid == new_pid) }}
probe scheduler.process_fork {{ if (execname() == "stapTapsetSh" && !seen["fork"]++) printf("process_fork %d\n", parent_pid == pid()) }}
probe scheduler.ctxswitch {{ if (prev_task_name == "stapTapsetSh" && !seen["switch"]++) printf("ctxswitch %d %d\n", prev_pid == pid(), prev_tid == tid()) }}
probe signal.syskill {{ if (execname() == "stapTapsetSh") printf("syskill %s %d\n", sig_name, sig_pid == pid()) }}
probe signal.send {{ if (pid_name == "stapTapsetSh" && sig == 10) printf("send %s %d %s\n", sig_name, sig_pid == pid(), name) }}
probe signal.handle {{ if (execname() == "stapTapsetSh") printf("handle %s\n", sig_name) }}
probe vfs.read {{ if (execname() == "stapTapsetCat" && ino == {ino} && !seen["read"]++) printf("vfs.read %d\n", bytes_to_read > 0) }}
probe vfs.read.return {{ if (execname() == "stapTapsetCat" && ino == {ino} && !seen["read.return"]++) printf("vfs.read.return %d %d %s %d\n", bytes_read, error, __file_filename(file), dev != 0) }}
probe vfs.write.return {{ if (execname() == "stapTapsetCat" && !seen["write.return"]++) printf("vfs.write.return %d %s\n", bytes_written, devname) }}
probe kprocess.exit {{ if (execname() == "stapTapsetSh") printf("exit %d\n", code) }}
probe scheduler.process_exit {{ if (execname() == "stapTapsetSh") printf("process_exit %d\n", pid == pid()) }}
probe process("{shell}").begin {{ shell = pid(); printf("process.begin %s\n", execname()) }}
probe process("{shell}").end {{ printf("process.end %d\n", pid() == shell) }}
probe kprocess.release {{ if (released_pid == shell && shell) {{ printf("release %d\n", released_tid == shell); exit() }} }}"#,
        shell = shell.display(),
    );
    // Bytes the shell passes to -c, checked against kprocess.exec's args.
    let commands = format!(
        "trap 'true' USR1; {} {} > /dev/null; kill -USR1 $$; sleep 0.1; exit 3",
        cat.display(),
        file.display()
    );
    let mut session = Session::start(&["-e", &script, &commands]);
    session.wait_ready();
    let status = Command::new(&shell)
        .args(["-c", &commands])
        .status()
        .expect("running the shell");
    assert_eq!(status.code(), Some(3), "the shell's exit status");
    let done = session.finish();
    assert_success(&done);
    let lines: Vec<&str> = done.stdout.lines().collect();
    // stap's execve formatting: the filename quoted, the arguments a list.
    let exec_line = format!(
        "exec args \"{}\", [\"-c\", \"{commands}\"]",
        shell.display()
    );
    // syscall.execve's args: the same list, 0th argument included.
    let syscall_line = format!(
        "syscall.execve [\"{}\", \"-c\", \"{commands}\"]",
        shell.display()
    );
    for expected in [
        exec_line.as_str(),
        syscall_line.as_str(),
        "exec_complete 1 0 execve",
        "create 1",
        "process_fork 1",
        "ctxswitch 1 1",
        "syskill SIGUSR1 1",
        "send SIGUSR1 1 signal_generate",
        "handle SIGUSR1",
        "vfs.read 1",
        "vfs.read.return 14 0 stap-tapsets-read.txt 1",
        // cat copies the file to /dev/null, a device with no block device.
        "vfs.write.return 14 N/A",
        // exit 3 is a wait status of 3 << 8.
        "exit 768",
        "process_exit 1",
        "process.begin stapTapsetSh",
        "process.end 1",
        "release 1",
    ] {
        assert!(
            lines.contains(&expected),
            "no line {expected:?}; stdout:\n{}\nstderr:\n{}",
            done.stdout,
            done.stderr
        );
    }
}

#[test]
fn memory_interrupt_and_block_aliases_report_the_kernel_at_work() {
    let _one = serial();
    let file = Path::new(env!("CARGO_TARGET_TMPDIR")).join("stap-tapsets-block.bin");
    std::fs::write(&file, b"").expect("creating the file");
    // Block I/O needs a file system on a block device; the VM guests keep
    // the target directory on tmpfs (device major 0), where no bio is made.
    let dev = std::fs::metadata(&file).expect("stat").dev();
    let on_block_device = (dev >> 8) & 0xfff != 0;
    if !on_block_device {
        eprintln!(
            "no block device under {}: ioblock.request is not checked",
            file.display()
        );
    }
    let wait_for_request = if on_block_device {
        r#" && seen["request"]"#
    } else {
        ""
    };
    let script = format!(
        r#"global seen
probe vm.kmalloc {{ if (!seen["kmalloc"]++) printf("kmalloc %d %d\n", bytes_alloc >= bytes_req, gfp_flag_name != "") }}
probe vm.kfree {{ if (!seen["kfree"]++) printf("kfree %d\n", caller_function != "") }}
probe vm.kmem_cache_alloc {{ if (!seen["cache"]++) printf("kmem_cache_alloc %d\n", bytes_alloc >= bytes_req && bytes_req > 0) }}
probe vm.pagefault {{ if (!seen["fault"]++) printf("pagefault %d\n", address != 0) }}
probe vm.mmap {{ if (!seen["mmap"]++) printf("mmap %d\n", length > 0) }}
probe softirq.entry {{ if (!seen["softirq"]++) printf("softirq %d\n", vec_nr >= 0 && vec_nr < 10) }}
probe ioblock.request {{ if (size > 0 && !seen["request"]++) printf("ioblock.request %d %d\n", devname != "N/A", rw == BIO_WRITE || rw == BIO_READ || rw > 1) }}
probe timer.s(1) {{ if (seen["kmalloc"] && seen["kfree"] && seen["cache"] && seen["fault"] && seen["mmap"] && seen["softirq"]{wait_for_request}) exit() }}"#
    );
    let mut session = Session::start(&["-e", &script]);
    session.wait_ready();
    // Block I/O: write a file and flush it to the disk.
    std::fs::write(&file, vec![7u8; 1 << 20]).expect("writing a file");
    let f = std::fs::File::open(&file).expect("opening it");
    f.sync_all().expect("fsync");
    let status = Command::new("sync").status().expect("running sync");
    assert!(status.success());
    let done = session.finish();
    assert_success(&done);
    let lines: Vec<&str> = done.stdout.lines().collect();
    let mut expected = vec![
        "kmalloc 1 1",
        "kfree 1",
        "kmem_cache_alloc 1",
        "pagefault 1",
        "mmap 1",
        "softirq 1",
    ];
    if on_block_device {
        expected.push("ioblock.request 1 1");
    }
    for expected in expected {
        assert!(
            lines.contains(&expected),
            "no line {expected:?}; stdout:\n{}\nstderr:\n{}",
            done.stdout,
            done.stderr
        );
    }
}

/// Why kernel functions cannot be probed here (with fentry/fexit or
/// kprobes), asked of stap-rs, or `None` when they can.
fn no_function_probes() -> Option<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_stap-rs"))
        .args(["-p2", "-e", r#"probe kernel.function("do_exit") { }"#])
        .output()
        .expect("running stap-rs -p2");
    let stderr = String::from_utf8_lossy(&out.stderr);
    stderr
        .lines()
        .find(|l| l.contains("cannot be probed on this kernel"))
        .map(|l| l.trim_start_matches("error: ").to_string())
}

/// The aliases with no tracepoint of their meaning, on a kernel that can
/// probe functions (the VM guests: `tests/vm/run 6.12 -- function_backed`).
#[test]
fn function_backed_aliases_see_a_shell_at_work() {
    let _one = serial();
    if let Some(reason) = no_function_probes() {
        eprintln!("stap-rs-skip: {reason}");
        return;
    }
    let shell = renamed("/bin/sh", "stapTapsetFn");
    let file = Path::new(env!("CARGO_TARGET_TMPDIR")).join("stap-tapsets-open.txt");
    std::fs::write(&file, "opened\n").expect("writing the file to open");
    let kprobes = Path::new("/sys/bus/event_source/devices/kprobe").exists();
    let kprobe_probe = if kprobes {
        r#"probe kprobe.function("do_exit") { if (execname() == "stapTapsetFn" && !seen["kprobe"]++) printf("kprobe.function %d\n", $code) }"#
    } else {
        ""
    };
    let script = format!(
        r#"global seen, shell
probe process("{shell}").begin {{ shell = pid() }}
probe kprocess.start {{ if (execname() == "stapTapsetFn" && !seen["start"]++) printf("start %d\n", pid() != shell) }}
probe signal.checkperm {{ if (execname() == "stapTapsetFn" && !seen["checkperm"]++) printf("checkperm %s %d\n", sig_name, sig_pid == pid()) }}
probe vfs.open {{ if (execname() == "stapTapsetFn" && pathname == "stap-tapsets-open.txt" && !seen["open"]++) printf("vfs.open %s\n", pathname) }}
probe vfs.open.return {{ if (execname() == "stapTapsetFn" && pathname == "stap-tapsets-open.txt" && !seen["open.return"]++) printf("vfs.open.return %d\n", ret) }}
probe vm.pagefault.return {{ if (execname() == "stapTapsetFn" && !seen["fault"]++) printf("pagefault.return\n") }}
{kprobe_probe}
probe kprocess.release {{ if (released_pid == shell && shell) exit() }}"#,
        shell = shell.display(),
    );
    let mut session = Session::start(&["-e", &script]);
    session.wait_ready();
    let commands = format!("read line < {}; kill -0 $$; (true); exit 2", file.display());
    let status = Command::new(&shell)
        .args(["-c", &commands])
        .status()
        .expect("running the shell");
    assert_eq!(status.code(), Some(2), "the shell's exit status");
    let done = session.finish();
    assert_success(&done);
    let lines: Vec<&str> = done.stdout.lines().collect();
    let mut expected = vec![
        "start 1",
        "checkperm 0 1",
        "vfs.open stap-tapsets-open.txt",
        "vfs.open.return 0",
        "pagefault.return",
    ];
    if kprobes {
        // exit 2 as do_exit's code: a wait status of 2 << 8.
        expected.push("kprobe.function 512");
    }
    for line in expected {
        assert!(
            lines.contains(&line),
            "no line {line:?}; stdout:\n{}\nstderr:\n{}",
            done.stdout,
            done.stderr
        );
    }
}

/// Without fentry or kprobes (this host), an alias with no tracepoint of
/// its meaning is an error naming the alias and what it needs.
/// scheduler.cpu_on: a process we start is seen beginning execution on a
/// cpu, with `task_prev` another task. Where kernel functions can be
/// probed the handler runs in the incoming task (finish_task_switch), as
/// in stap; on this host it falls back on sched:sched_switch, which runs
/// in the outgoing task, so there `task_current()` is `task_prev`.
#[test]
fn scheduler_cpu_on_sees_a_process_we_start_come_on() {
    let _one = serial();
    let sleeper = renamed("/bin/sleep", "stapCpuOn");
    let script = r#"global seen
probe scheduler.cpu_on {
  if (task_execname(task_next) == "stapCpuOn" && !seen["on"]++) {
    current = task_current() == task_next ? "next" : (task_current() == task_prev ? "prev" : "other")
    printf("cpu_on %s %d %d %d %d %s\n", name, task_prev != task_next, task_prev != 0, idle, task_pid(task_next) == $1, current)
    exit()
  }
}"#;
    let mut child = Command::new("sh")
        .args(["-c", "read go; exec \"$0\" 0.2"])
        .arg(&sleeper)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .expect("starting the sleeper");
    let pid = child.id().to_string();
    let mut session = Session::start(&["-e", script, &pid]);
    session.wait_ready();
    {
        use std::io::Write;
        let mut go = child.stdin.take().expect("the sleeper's stdin");
        go.write_all(b"go\n").expect("starting the sleeper");
    }
    let status = child.wait().expect("waiting for the sleeper");
    assert!(status.success(), "the sleeper failed: {status}");
    let done = session.finish();
    assert_success(&done);
    let current = if no_function_probes().is_some() {
        "prev"
    } else {
        "next"
    };
    assert_eq!(
        done.stdout.lines().collect::<Vec<_>>(),
        [format!("cpu_on cpu_on 1 1 0 1 {current}")],
        "stderr:\n{}",
        done.stderr
    );
}

/// A one-cpu affinity mask.
fn only_cpu(cpu: usize) -> libc::cpu_set_t {
    // SAFETY: cpu_set_t is plain bits; CPU_SET writes inside it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        set
    }
}

/// scheduler.migrate and scheduler.wait_task (tracepoints: here and in
/// the guests): a sleeper pinned to cpu 0 is moved to cpu 1 with
/// sched_setaffinity, then ptrace-attached; reading its registers makes
/// the kernel wait for it to be off its cpu (wait_task_inactive).
#[test]
fn scheduler_migrate_and_wait_task_follow_a_sleeper_we_move_and_trace() {
    use std::os::unix::process::CommandExt;
    let _one = serial();
    if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
        eprintln!("stap-rs-skip: one cpu: nothing to migrate to");
        return;
    }
    let sleeper = renamed("/bin/sleep", "stapMigrate");
    let mut command = Command::new("sh");
    command
        .args(["-c", "read go; exec \"$0\" 1"])
        .arg(&sleeper)
        .stdin(std::process::Stdio::piped());
    // SAFETY: sched_setaffinity on the child itself, between fork and exec.
    unsafe {
        command.pre_exec(|| {
            let set = only_cpu(0);
            match libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) {
                0 => Ok(()),
                _ => Err(std::io::Error::last_os_error()),
            }
        });
    }
    let mut child = command.spawn().expect("starting the sleeper");
    let pid = child.id() as libc::pid_t;
    let script = r#"global seen
probe scheduler.migrate { if (pid == $1 && !seen["migrate"]++) printf("migrate %s %d %d %d %d\n", name, task_pid(task) == $1, cpu_from, cpu_to, priority) }
probe scheduler.wait_task { if (task_pid == $1 && !seen["wait_task"]++) printf("wait_task %s %d\n", name, task_priority) }
probe scheduler.process_exit { if (pid == $1) exit() }"#;
    let pid_arg = pid.to_string();
    let mut session = Session::start(&["-e", script, &pid_arg]);
    session.wait_ready();
    {
        use std::io::Write;
        let mut go = child.stdin.take().expect("the sleeper's stdin");
        go.write_all(b"go\n").expect("starting the sleeper");
    }
    std::thread::sleep(std::time::Duration::from_millis(200));
    let priority = kernel_priority(&pid_arg);
    let set = only_cpu(1);
    // SAFETY: sched_setaffinity reads the mask of the size given.
    let rc = unsafe { libc::sched_setaffinity(pid, std::mem::size_of_val(&set), &set) };
    assert_eq!(rc, 0, "sched_setaffinity");
    // ptrace's variadic address and data: pointer-sized, not int zeros.
    const NONE: *mut libc::c_void = std::ptr::null_mut();
    // SAFETY: ptrace on our own child, with the arguments each request takes.
    unsafe {
        assert_eq!(
            libc::ptrace(libc::PTRACE_ATTACH, pid, NONE, NONE),
            0,
            "PTRACE_ATTACH"
        );
        let mut status = 0;
        assert_eq!(libc::waitpid(pid, &mut status, 0), pid, "waitpid");
        let mut regs: libc::user_regs_struct = std::mem::zeroed();
        let rc = libc::ptrace(libc::PTRACE_GETREGS, pid, 0, std::ptr::addr_of_mut!(regs));
        assert_eq!(rc, 0, "PTRACE_GETREGS");
        assert_eq!(
            libc::ptrace(libc::PTRACE_DETACH, pid, NONE, NONE),
            0,
            "PTRACE_DETACH"
        );
    }
    let status = child.wait().expect("waiting for the sleeper");
    assert!(status.success(), "the sleeper failed: {status}");
    let done = session.finish();
    assert_success(&done);
    assert_eq!(
        done.stdout.lines().collect::<Vec<_>>(),
        [
            format!("migrate migrate 1 0 1 {priority}"),
            format!("wait_task wait_task {priority}"),
        ],
        "stderr:\n{}",
        done.stderr
    );
}

/// The kernel's priority of a task: /proc's stat field 18 is prio - 100.
fn kernel_priority(pid: &str) -> i64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("reading stat");
    let after_name = &stat[stat.rfind(')').expect("a comm") + 2..];
    let prio: i64 = after_name
        .split(' ')
        .nth(15)
        .expect("field 18")
        .parse()
        .expect("a number");
    prio + 100
}

/// The transparent-hugepage mode, put back as it was on drop.
struct HugepageMode {
    was: String,
}

impl HugepageMode {
    const PATH: &str = "/sys/kernel/mm/transparent_hugepage/enabled";

    fn set(mode: &str) {
        std::fs::write(Self::PATH, mode).unwrap_or_else(|e| panic!("setting THP {mode}: {e}"));
    }
}

impl Drop for HugepageMode {
    fn drop(&mut self) {
        let _ = std::fs::write(Self::PATH, &self.was);
    }
}

/// scheduler.kthread_stop and .return (tracepoints: here and in the
/// guests): turning transparent hugepages off stops the khugepaged kernel
/// thread with kthread_stop (the mode is put back afterwards).
#[test]
fn scheduler_kthread_stop_sees_khugepaged_stopped() {
    let _one = serial();
    let Ok(modes) = std::fs::read_to_string(HugepageMode::PATH) else {
        eprintln!("stap-rs-skip: no transparent hugepages on this kernel (no khugepaged to stop)");
        return;
    };
    let Some(was) = modes
        .split_whitespace()
        .find_map(|m| m.strip_prefix('[')?.strip_suffix(']'))
    else {
        panic!("no current mode in {modes:?}");
    };
    let restore = HugepageMode {
        was: was.to_string(),
    };
    if was == "never" {
        HugepageMode::set("madvise");
    }
    // khugepaged starts with the mode change; it may take a moment.
    let mut khugepaged = None;
    for _ in 0..50 {
        khugepaged = std::fs::read_dir("/proc")
            .expect("listing /proc")
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .find(|pid| {
                std::fs::read_to_string(format!("/proc/{pid}/comm"))
                    .is_ok_and(|comm| comm.trim() == "khugepaged")
            });
        if khugepaged.is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let Some(khugepaged) = khugepaged else {
        eprintln!("stap-rs-skip: no khugepaged thread with transparent hugepages on");
        return;
    };
    let priority = kernel_priority(&khugepaged);
    let script = r#"global stopping
probe scheduler.kthread_stop { if (thread_pid == $1) { stopping = 1; printf("kthread_stop %s %d\n", name, thread_priority) } }
probe scheduler.kthread_stop.return { if (stopping) { printf("kthread_stop.return %s %d\n", name, return_value); exit() } }"#;
    let mut session = Session::start(&["-e", script, &khugepaged]);
    session.wait_ready();
    HugepageMode::set("never");
    let done = session.finish();
    drop(restore);
    assert_success(&done);
    assert_eq!(
        done.stdout.lines().collect::<Vec<_>>(),
        [
            format!("kthread_stop kthread_stop {priority}"),
            "kthread_stop.return kthread_stop 0".to_string(),
        ],
        "stderr:\n{}",
        done.stderr
    );
}

#[test]
fn function_backed_aliases_fail_clearly_without_function_probes() {
    if no_function_probes().is_none() {
        eprintln!("stap-rs-skip: this kernel can probe functions");
        return;
    }
    for alias in [
        "scheduler.tick",
        "kprocess.start",
        "signal.checkperm",
        "signal.wakeup",
        "vm.pagefault.return",
        "vm.brk",
        "vfs.open",
    ] {
        let script = format!("probe {alias} {{ print(pid()) }}");
        let out = Command::new(env!("CARGO_BIN_EXE_stap-rs"))
            .args(["-p2", "-e", &script])
            .output()
            .expect("running stap-rs -p2");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{alias}");
        assert!(
            stderr.contains("cannot be probed on this kernel")
                && stderr.contains("needs fentry/fexit or kprobes")
                && stderr.contains(&format!("in probe alias `{alias}`")),
            "{alias}: {stderr}"
        );
    }
    let out = Command::new(env!("CARGO_BIN_EXE_stap-rs"))
        .args(["-p2", "-e", r#"probe kprobe.function("do_exit") { }"#])
        .output()
        .expect("running stap-rs -p2");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(r#"kprobe.function("do_exit") needs kprobes"#),
        "{stderr}"
    );
}

/// netfilter.ipv6.* and the TCP flags of netfilter.ipv4.*: a UDP datagram
/// to ::1 and a TCP connect to a closed IPv4 port (a SYN, answered by a RST).
#[test]
fn netfilter_ipv6_and_tcp_flags() {
    let _one = serial();
    let out = Command::new(env!("CARGO_BIN_EXE_stap-rs"))
        .args(["-p2", "-e", "probe netfilter.ipv6.local_out { }"])
        .output()
        .expect("running stap-rs -p2");
    let stderr = String::from_utf8_lossy(&out.stderr);
    if let Some(line) = stderr.lines().find(|l| l.contains("not available")) {
        eprintln!("stap-rs-skip: {}", line.trim_start_matches("error: "));
        return;
    }
    let Ok(receiver) = std::net::UdpSocket::bind("[::1]:0") else {
        eprintln!("stap-rs-skip: no IPv6 loopback address");
        return;
    };
    let port6 = receiver.local_addr().expect("local address").port();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("binding a port");
    let port4 = closed.local_addr().expect("local address").port();
    drop(closed);
    let script = format!(
        r#"global v6, syn4
probe netfilter.ipv6.local_out {{ if (protocol == 17 && dport == {port6} && !v6++) printf("ipv6 %s %s -> %s %d\n", pf, saddr, daddr, family) }}
probe netfilter.ipv4.local_out {{ if (protocol == 6 && dport == {port4} && syn && !ack && !syn4++) printf("ipv4 syn %s -> %s:%d\n", saddr, daddr, dport) }}
probe netfilter.ip.local_out {{ if (v6 && syn4) exit() }}"#
    );
    let mut session = Session::start(&["-e", &script]);
    session.wait_ready();
    let sender = std::net::UdpSocket::bind("[::1]:0").expect("binding the sender");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !session.has_exited() && std::time::Instant::now() < deadline {
        let _ = sender.send_to(b"stap-rs", ("::1", port6));
        let _ = std::net::TcpStream::connect(("127.0.0.1", port4));
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let done = session.finish();
    assert_success(&done);
    let lines: Vec<&str> = done.stdout.lines().collect();
    for expected in [
        // stap formats IPv6 addresses as %pI6: eight groups of four digits.
        "ipv6 ipv6 0000:0000:0000:0000:0000:0000:0000:0001 -> 0000:0000:0000:0000:0000:0000:0000:0001 10"
            .to_string(),
        format!("ipv4 syn 127.0.0.1 -> 127.0.0.1:{port4}"),
    ] {
        assert!(
            lines.contains(&expected.as_str()),
            "no line {expected:?}; stdout:\n{}\nstderr:\n{}",
            done.stdout,
            done.stderr
        );
    }
}

/// The target set follows the -c command's descendants (a subshell's child
/// included) and leaves other processes out; the task-time, clock and
/// parent-name functions read the same processes.
#[test]
fn target_set_task_time_and_clock_functions_follow_the_command() {
    let _one = serial();
    let shell = renamed("/bin/sh", "stapTsSh");
    let cat = renamed("/bin/cat", "stapTsCat");
    let trigger = super::build("trigger");
    let file = Path::new(env!("CARGO_TARGET_TMPDIR")).join("stap-tapsets-target-set.txt");
    std::fs::write(&file, "in the set\n").expect("writing the file");
    let file = file.display().to_string();
    let script = format!(
        r#"probe syscall.openat {{
  if (filename_unquoted == "{file}")
    printf("%s %d %s %d %d %d %s\n", execname(), target_set_pid(pid()), pexecname(),
           task_utime() >= 0 && task_stime() >= 0, cpu_clock_us(cpu()) > 0 && local_clock_ms() >= 0,
           cputime_to_msecs(2000000), task_time_string())
}}
probe end {{ target_set_report() }}"#
    );
    // The command waits so that the outsider opens the file first; the
    // second cat runs in a subshell, a grandchild of the target.
    let command = format!(
        "{} -c 'sleep 1; {cat} {file} > /dev/null; ({cat} {file} > /dev/null)'",
        shell.display(),
        cat = cat.display()
    );
    let mut session = Session::start(&["-c", &command, "-e", &script]);
    session.wait_ready();
    let status = Command::new(&trigger)
        .args(["stapTsOut", "open", &file])
        .status()
        .expect("running the trigger");
    assert!(status.success());
    let done = session.finish();
    assert_success(&done);
    let lines: Vec<&str> = done.stdout.lines().collect();
    let in_set: Vec<&&str> = lines
        .iter()
        .filter(|l| l.starts_with("stapTsCat 1 "))
        .collect();
    assert_eq!(
        in_set.len(),
        2,
        "stdout:\n{}\nstderr:\n{}",
        done.stdout,
        done.stderr
    );
    for line in in_set {
        // pexecname: the shell, or the subshell (a fork keeps its name).
        let fields: Vec<&str> = line.splitn(7, ' ').collect();
        assert_eq!(&fields[2..6], ["stapTsSh", "1", "1", "2"], "{line}");
        let times = fields[6];
        assert!(
            times.starts_with("usr: 0m0.")
                && times.contains("s, sys: 0m0.")
                && times.ends_with('s'),
            "{line}"
        );
    }
    assert!(
        lines.iter().any(|l| l.starts_with("stapTsOut 0 ")),
        "the outsider is not in the set; stdout:\n{}",
        done.stdout
    );
    // The report: a header and one "PARENT begat PID" line per member
    // still running at the end (the target itself at least).
    let report = lines
        .iter()
        .position(|l| *l == "target set:")
        .expect("a target set report");
    assert!(
        lines[report + 1..].iter().all(|l| {
            let words: Vec<&str> = l.split(' ').collect();
            words.len() == 3 && words[1] == "begat" && words[0].parse::<u32>().is_ok()
        }),
        "stdout:\n{}",
        done.stdout
    );
}

/// ioscheduler.* and ioscheduler_trace.* on the block:block_rq_*
/// tracepoints: a synced write to the disk under the target directory.
#[test]
fn ioscheduler_aliases_see_requests_of_the_disk() {
    let _one = serial();
    let file = Path::new(env!("CARGO_TARGET_TMPDIR")).join("stap-tapsets-iosched.bin");
    std::fs::write(&file, b"").expect("creating the file");
    let dev = std::fs::metadata(&file).expect("stat").dev();
    let major = (dev >> 8) & 0xfff;
    if major == 0 {
        eprintln!(
            "stap-rs-skip: {} is on no block device (tmpfs), so no request is made",
            file.display()
        );
        return;
    }
    let script = format!(
        r#"global seen
probe ioscheduler.elv_add_request, ioscheduler_trace.elv_issue_request, ioscheduler_trace.elv_completed_request {{
  if (disk_major == {major} && !seen[name]++)
    printf("%s %d %d\n", name, rq != 0 && q != 0, elevator_name == "" || strlen(elevator_name) > 1)
}}
probe timer.s(1) {{ if (seen["elv_issue_request"] && seen["elv_completed_request"]) exit() }}"#
    );
    let mut session = Session::start(&["-e", &script]);
    session.wait_ready();
    let mut rounds = 0;
    while !session.has_exited() && rounds < 20 {
        std::fs::write(&file, vec![rounds as u8; 1 << 16]).expect("writing the file");
        std::fs::File::open(&file)
            .expect("opening it")
            .sync_all()
            .expect("fsync");
        std::thread::sleep(std::time::Duration::from_millis(300));
        rounds += 1;
    }
    let done = session.finish();
    assert_success(&done);
    let lines: Vec<&str> = done.stdout.lines().collect();
    for expected in ["elv_issue_request 1 1", "elv_completed_request 1 1"] {
        assert!(
            lines.contains(&expected),
            "no line {expected:?}; stdout:\n{}\nstderr:\n{}",
            done.stdout,
            done.stderr
        );
    }
}

/// stap's argv tapset: the script's arguments as argc and argv[].
#[test]
fn argv_holds_the_script_arguments() {
    let _one = serial();
    let done = Session::start(&[
        "-e",
        r#"probe begin { printf("%d [%s] [%s] [%s]\n", argc, argv[1], argv[2], argv[3]); exit() }"#,
        "first",
        "second arg",
    ])
    .finish();
    assert_success(&done);
    assert_eq!(
        done.stdout, "2 [first] [second arg] []\n",
        "stderr:\n{}",
        done.stderr
    );
}

/// stap's input tapset: the bytes stap-rs reads from its stdin, one
/// `input.char` hit each and one `input.line` per newline; a last line
/// without its newline is never a line.
#[test]
fn input_char_and_line_see_what_stdin_delivers() {
    let _one = serial();
    let script = r#"global chars
probe input.char { chars .= char == "\n" ? "|" : char }
probe input.line {
  printf("line [%s]\n", substr(line, 0, strlen(line) - 1))
  if (line == "quit\n") exit()
}
probe end { printf("chars %s\n", chars) }"#;
    let done = Session::start_with_input(&["-e", script], "ab c\n\nquit\nnever").finish();
    assert_success(&done);
    assert_eq!(
        done.stdout, "line [ab c]\nline []\nline [quit]\nchars ab c||quit|\n",
        "stderr:\n{}",
        done.stderr
    );
}

/// `returnval()` is the probed call's return value: in a tracepoint-backed
/// `.return` alias (vfs.read.return on this host) and a system call's
/// exit, it equals the alias's own return variable; in a probe with no
/// return value it is stap's run-time error.
#[test]
fn returnval_is_the_return_value_where_there_is_one() {
    let _one = serial();
    let cat = renamed("/bin/cat", "stapRetvalCat");
    let file = Path::new(env!("CARGO_TARGET_TMPDIR")).join("stap-returnval.txt");
    std::fs::write(&file, "seventeen bytes!\n").expect("writing the file to read");
    let ino = std::fs::metadata(&file).expect("stat").ino();
    let script = r#"global seen
probe vfs.read.return { if (execname() == "stapRetvalCat" && ino == INO && bytes_read > 0 && !seen["read"]++) printf("vfs.read.return %d %d\n", returnval(), returnval() == ret) }
probe syscall.openat.return { if (execname() == "stapRetvalCat" && returnval() >= 0 && !seen["openat"]++) printf("openat.return %d\n", returnval() == retval) }
probe kernel.trace("sched_process_exit") { if (execname() == "stapRetvalCat") println(returnval()) }"#
        .replace("INO", &ino.to_string());
    let mut session = Session::start(&["-e", &script]);
    session.wait_ready();
    let status = Command::new(&cat)
        .arg(&file)
        .stdout(std::process::Stdio::null())
        .status()
        .expect("running cat");
    assert!(status.success(), "cat failed: {status}");
    let done = session.finish();
    assert_eq!(done.status.code(), Some(1), "stderr:\n{}", done.stderr);
    let lines: Vec<&str> = done.stdout.lines().collect();
    for expected in ["vfs.read.return 17 1", "openat.return 1"] {
        assert!(
            lines.contains(&expected),
            "no line {expected:?}; stdout:\n{}\nstderr:\n{}",
            done.stdout,
            done.stderr
        );
    }
    assert!(
        done.stderr
            .contains("ERROR: returnval() not defined in this context (kernel.trace"),
        "stderr:\n{}",
        done.stderr
    );
}

/// pid2task (bpf_task_from_pid) finds a process we started by its pid in a
/// kernel probe: the task family reads it, and the pid forms of the
/// proc_mem functions and pid2execname agree with /proc. A pid with no
/// task gives 0 and "".
#[test]
fn pid2task_and_the_pid_forms_read_a_process_we_started() {
    let _one = serial();
    if skip_without_task_from_pid() {
        return;
    }
    let sleeper = renamed("/bin/sleep", "stapPidSleep");
    let mut child = Command::new(&sleeper)
        .arg("60")
        .spawn()
        .expect("starting the sleeper");
    let pid = child.id();
    // One CPU's switches only: exit() stops later runs, not one that a
    // second CPU is already in (CI once printed the three lines twice).
    let script = r#"probe kernel.trace("sched_switch") {
  if (cpu() != 0) next
  t = pid2task($1)
  printf("%d %d %d %s %s\n", t != 0, task_pid(t), task_pid(task_parent(t)), task_execname(t), pid2execname($1))
  printf("%d %d %d %d %d\n", proc_mem_size($1), proc_mem_rss($1), proc_mem_shr($1), proc_mem_txt($1), proc_mem_data($1))
  printf("%d [%s] %d\n", pid2task(0x7ffffff0), pid2execname(0x7ffffff0), proc_mem_size(0x7ffffff0))
  exit()
}
probe end { printf("host %s\n", pid2execname($1)) }"#;
    let pid_arg = pid.to_string();
    let mut session = Session::start(&["-e", script, &pid_arg]);
    session.wait_ready();
    let done = session.finish();
    let statm = std::fs::read_to_string(format!("/proc/{pid}/statm")).expect("reading statm");
    child.kill().expect("stopping the sleeper");
    child.wait().expect("reaping the sleeper");
    assert_success(&done);
    let lines: Vec<&str> = done.stdout.lines().collect();
    assert_eq!(
        lines.len(),
        4,
        "stdout:\n{}\nstderr:\n{}",
        done.stdout,
        done.stderr
    );
    let ours = std::process::id();
    assert_eq!(
        lines[0],
        format!("1 {pid} {ours} stapPidSleep stapPidSleep"),
        "stdout:\n{}",
        done.stdout
    );
    let mem: Vec<u64> = lines[1].split(' ').map(|n| n.parse().unwrap()).collect();
    let statm: Vec<u64> = statm
        .split_whitespace()
        .map(|n| n.parse().unwrap())
        .collect();
    // size is total_vm, as statm's first field; an idle sleep keeps it.
    assert_eq!(mem[0], statm[0], "proc_mem_size vs statm: {}", lines[1]);
    let (rss, shr, txt, data) = (mem[1], mem[2], mem[3], mem[4]);
    assert!(rss > 0 && rss <= mem[0] && shr <= rss, "{}", lines[1]);
    assert!(txt > 0 && data > 0 && data <= mem[0], "{}", lines[1]);
    assert_eq!(lines[2], "0 [] 0");
    assert_eq!(lines[3], "host stapPidSleep");
}
