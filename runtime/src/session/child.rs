//! `-c CMD`: the target command. It is forked before the probes are loaded
//! (so `target()` is known to begin probes and to the kernel side), held
//! before `exec` until the session releases it once every probe is live,
//! and watched through a pidfd so its exit ends the session.
//!
//! As in stap, a command that fails (non-zero status, killed by a signal,
//! not found) fails the run. Unlike a stap module, which stays loaded until
//! staprun cleans up, nothing of ours survives us, so neither may the
//! command nor anything it started: the command leads a process group of
//! its own, and that whole group is killed when the session ends. If
//! stap-rs itself dies, even by SIGKILL, the kernel kills the command
//! (`PR_SET_PDEATHSIG`) and a guardian process kills the rest of its group
//! (children that `sh -c "a & b"` or a build tool started).
//!
//! staprun leaves the command in staprun's process group (and ignores
//! SIGINT meanwhile), so a terminal's ^C reaches the command; here the
//! command's group takes the terminal's foreground while it runs (so it can
//! read the terminal, and gets ^C as with stap), and stap-rs takes it back
//! when the command ends.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, FromRawFd, OwnedFd};

pub struct TargetCommand {
    pid: libc::pid_t,
    /// Writing one byte lets the held child `exec`; closing it unreleased
    /// makes the child exit without running the command.
    release: Option<OwnedFd>,
    pidfd: OwnedFd,
    reaped: bool,
    /// The wait status, once reaped.
    status: Option<i32>,
    /// Kills the command's group if stap-rs dies (see [`Guardian`]).
    guardian: Option<Guardian>,
    /// The terminal on fd 0 whose foreground the command's group took,
    /// with the group to give it back to.
    terminal: Option<libc::pid_t>,
}

impl TargetCommand {
    /// Forks `sh -c CMD`, held before exec. A simple command runs as
    /// `exec CMD` (not every shell execs in place: dash forks), so `pid()`
    /// is the command's pid as in stap, which execs such commands directly.
    pub fn spawn_held(command: &str) -> io::Result<TargetCommand> {
        let shell = CString::new("/bin/sh").map_err(io::Error::other)?;
        let dash_c = CString::new("-c").map_err(io::Error::other)?;
        let command = if is_simple_command(command) {
            format!("exec {command}")
        } else {
            command.to_string()
        };
        let text = CString::new(command).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "the -c command contains a NUL byte",
            )
        })?;
        let argv = [
            shell.as_ptr(),
            dash_c.as_ptr(),
            text.as_ptr(),
            std::ptr::null(),
        ];

        // Asked before the fork: the child may take the terminal at once.
        let terminal = foreground_terminal();
        let mut pipe = [0; 2];
        // SAFETY: `pipe` has room for the two fds pipe2 writes.
        if unsafe { libc::pipe2(pipe.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: both fds were just created and are owned by nobody else.
        let (read_end, write_end) =
            unsafe { (OwnedFd::from_raw_fd(pipe[0]), OwnedFd::from_raw_fd(pipe[1])) };
        let (read_raw, write_raw) = (pipe[0], pipe[1]);

        // SAFETY: the child only calls async-signal-safe functions (close,
        // sigprocmask, read, execv, _exit) on memory prepared before fork.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(io::Error::last_os_error());
        }
        if pid == 0 {
            // SAFETY: see the fork above; this branch never returns.
            unsafe { held_child(read_raw, write_raw, argv.as_ptr()) }
        }
        drop(read_end);
        // The child does the same: whichever runs first, the group exists
        // before the guardian below can signal it.
        // SAFETY: setpgid on our own, not yet exec'd, child.
        unsafe { libc::setpgid(pid, pid) };
        let pidfd = pidfd_open(pid)?;
        // Without a guardian, kill -9 of stap-rs could leave the command's
        // children running: better not to run the command at all.
        let guardian = match Guardian::spawn(pid) {
            Ok(guardian) => guardian,
            Err(error) => {
                // Unreleased, the held child exits when the pipe closes.
                drop(write_end);
                let mut status = 0;
                // SAFETY: waits for our own child, which is exiting.
                unsafe { libc::waitpid(pid, &mut status, 0) };
                return Err(error);
            }
        };
        Ok(TargetCommand {
            pid,
            release: Some(write_end),
            pidfd,
            reaped: false,
            status: None,
            guardian: Some(guardian),
            terminal,
        })
    }

    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Lets the command run.
    pub fn release(&mut self) {
        if let Some(fd) = self.release.take() {
            let byte = [1u8];
            // SAFETY: writes one byte from a live buffer to an fd we own.
            unsafe {
                libc::write(
                    std::os::fd::AsRawFd::as_raw_fd(&fd),
                    byte.as_ptr().cast(),
                    1,
                )
            };
        }
    }

    /// Readable once the command has exited.
    pub fn exit_fd(&self) -> BorrowedFd<'_> {
        self.pidfd.as_fd()
    }

    /// Reaps the command if it has exited; returns whether it has.
    pub fn try_reap(&mut self) -> bool {
        if self.reaped {
            return true;
        }
        let mut status = 0;
        // SAFETY: waits for our own child without blocking.
        let got = unsafe { libc::waitpid(self.pid, &mut status, libc::WNOHANG) };
        self.reaped = got == self.pid || got < 0;
        if got == self.pid {
            self.status = Some(status);
        }
        self.reaped
    }

    /// How the command failed, in staprun's words, if it exited with a
    /// non-zero status or was killed by a signal.
    pub fn failure(&self) -> Option<String> {
        let status = self.status?;
        if libc::WIFSIGNALED(status) {
            let signal = libc::WTERMSIG(status);
            // SAFETY: strsignal returns a static or thread-local C string.
            let name = unsafe { std::ffi::CStr::from_ptr(libc::strsignal(signal)) };
            Some(format!(
                "Child process exited with signal {signal} ({})",
                name.to_string_lossy()
            ))
        } else if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) != 0 {
            Some(format!(
                "Child process exited with status {}",
                libc::WEXITSTATUS(status)
            ))
        } else {
            None
        }
    }

    /// Ends a command still running when the session ends: SIGTERM to its
    /// group, then SIGKILL to the group once the command exited or a grace
    /// period passed; then reaps it. The group is signalled while the
    /// command is unreaped, so its id cannot have been reused.
    fn kill(&mut self) {
        const GRACE_MS: i32 = 1000;
        // SAFETY: signals the group of our own child, not yet reaped.
        unsafe { libc::kill(-self.pid, libc::SIGTERM) };
        let mut pfd = libc::pollfd {
            fd: std::os::fd::AsRawFd::as_raw_fd(&self.pidfd),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(&mut pfd, 1, GRACE_MS) };
        // Also what the command started and left behind.
        // SAFETY: as above.
        unsafe { libc::kill(-self.pid, libc::SIGKILL) };
        let mut status = 0;
        // SAFETY: waits for our own child, which is dying.
        unsafe { libc::waitpid(self.pid, &mut status, 0) };
        self.reaped = true;
    }
}

impl Drop for TargetCommand {
    fn drop(&mut self) {
        if self.release.take().is_some() && !self.reaped {
            // Never released: closing the pipe makes the held child exit at
            // once, so waiting for it cannot hang.
            let mut status = 0;
            // SAFETY: waits for our own child.
            unsafe { libc::waitpid(self.pid, &mut status, 0) };
        } else if self.try_reap() {
            // It exited: what it left running in its group goes too. (Its
            // id is free again, but reused as a group id only by a process
            // that makes itself a group leader in these few microseconds.)
            // SAFETY: signals a group we created.
            unsafe { libc::kill(-self.pid, libc::SIGKILL) };
        } else {
            self.kill();
        }
        if let Some(group) = self.terminal.take() {
            take_terminal_back(group);
        }
        if let Some(guardian) = self.guardian.take() {
            guardian.dismiss();
        }
    }
}

/// A process that outlives stap-rs only to kill the command's group when
/// stap-rs dies without doing it (SIGKILL, a crash). It holds the read end
/// of a pipe whose write end only stap-rs holds: end of file means stap-rs
/// is gone, one byte means the group was already dealt with.
struct Guardian {
    pid: libc::pid_t,
    alarm: OwnedFd,
}

impl Guardian {
    fn spawn(group: libc::pid_t) -> io::Result<Guardian> {
        let mut pipe = [0; 2];
        // SAFETY: `pipe` has room for the two fds pipe2 writes.
        if unsafe { libc::pipe2(pipe.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: both fds were just created and are owned by nobody else.
        let (read_end, write_end) =
            unsafe { (OwnedFd::from_raw_fd(pipe[0]), OwnedFd::from_raw_fd(pipe[1])) };
        let read_raw = pipe[0];
        // SAFETY: the child only calls async-signal-safe functions.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(io::Error::last_os_error());
        }
        if pid == 0 {
            // SAFETY: a freshly forked child; never returns.
            unsafe { guard(read_raw, group) }
        }
        drop(read_end);
        Ok(Guardian {
            pid,
            alarm: write_end,
        })
    }

    /// The group was dealt with: the guardian exits without signalling
    /// it, and is reaped.
    fn dismiss(self) {
        let byte = [0u8];
        // SAFETY: writes one byte from a live buffer to an fd we own.
        unsafe {
            libc::write(
                std::os::fd::AsRawFd::as_raw_fd(&self.alarm),
                byte.as_ptr().cast(),
                1,
            )
        };
        drop(self.alarm);
        let mut status = 0;
        // SAFETY: waits for our own child, which exits on that byte.
        unsafe { libc::waitpid(self.pid, &mut status, 0) };
    }
}

/// The guardian's body.
///
/// # Safety
/// Must only be called in a freshly forked child.
unsafe fn guard(alarm: i32, group: libc::pid_t) -> ! {
    // SAFETY: all calls are async-signal-safe and take valid arguments.
    unsafe {
        // It must hold none of stap-rs's fds: a copy of a BPF link or
        // program fd would keep probes attached after stap-rs died. Only
        // the alarm pipe stays open.
        close_all_but(alarm);
        // Deaf to the signals that end stap-rs (a terminal's ^C reaches
        // the whole foreground group): only the pipe tells it to act.
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::sigprocmask(libc::SIG_SETMASK, &all, std::ptr::null_mut());
        let mut byte = 0u8;
        loop {
            let got = libc::read(alarm, (&raw mut byte).cast(), 1);
            if got < 0 && *libc::__errno_location() == libc::EINTR {
                continue;
            }
            if got != 1 {
                libc::kill(-group, libc::SIGKILL);
            }
            libc::_exit(0)
        }
    }
}

/// Closes every fd but `keep`.
///
/// # Safety
/// Async-signal-safe; for a freshly forked child that owns nothing else.
unsafe fn close_all_but(keep: i32) {
    // SAFETY: close_range(2) takes a range of fd numbers and flags.
    unsafe {
        if keep > 0 {
            libc::syscall(libc::SYS_close_range, 0u32, (keep - 1) as u32, 0u32);
        }
        libc::syscall(libc::SYS_close_range, (keep + 1) as u32, u32::MAX, 0u32);
    }
}

/// The process group to give the terminal back to, if stdin is a terminal
/// and stap-rs's group holds its foreground.
fn foreground_terminal() -> Option<libc::pid_t> {
    // SAFETY: isatty, tcgetpgrp and getpgrp have no preconditions.
    unsafe {
        let ours = libc::getpgrp();
        (libc::isatty(0) == 1 && libc::tcgetpgrp(0) == ours).then_some(ours)
    }
}

/// Makes `group` the terminal's foreground again. tcsetpgrp from a
/// background group raises SIGTTOU, which would stop us: it is blocked
/// around the call.
fn take_terminal_back(group: libc::pid_t) {
    // SAFETY: a mask change for this thread only, then tcsetpgrp on fd 0.
    unsafe {
        let mut ttou: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut ttou);
        libc::sigaddset(&mut ttou, libc::SIGTTOU);
        libc::pthread_sigmask(libc::SIG_BLOCK, &ttou, &mut old);
        libc::tcsetpgrp(0, group);
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
    }
}

/// The forked child: waits for the release byte, then execs the shell.
///
/// # Safety
/// Must only be called in a freshly forked child; `argv` must point to a
/// NULL-terminated array of C strings that stay valid (they were built
/// before fork).
unsafe fn held_child(read_fd: i32, write_fd: i32, argv: *const *const libc::c_char) -> ! {
    // SAFETY: all calls are async-signal-safe and take valid arguments.
    unsafe {
        libc::close(write_fd);
        // A group of its own, so that the session can end everything the
        // command starts. If stap-rs's group holds the terminal, the
        // command's takes it (SIGTTOU, which that raises in a background
        // group, is still blocked here).
        let parent_group = libc::getpgrp();
        libc::setpgid(0, 0);
        let mut ttou: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut ttou);
        libc::sigaddset(&mut ttou, libc::SIGTTOU);
        libc::sigprocmask(libc::SIG_BLOCK, &ttou, std::ptr::null_mut());
        if libc::isatty(0) == 1 && libc::tcgetpgrp(0) == parent_group {
            libc::tcsetpgrp(0, libc::getpid());
        }
        // The session blocks SIGINT/SIGTERM to read them from a signalfd;
        // the command must get the default mask back.
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
        // Dies with stap-rs, however stap-rs ends (the release pipe makes
        // an unreleased child exit anyway). If the parent died before this
        // line, the release read below fails and the child exits.
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
        let mut byte = 0u8;
        let got = libc::read(read_fd, (&raw mut byte).cast(), 1);
        if got != 1 {
            libc::_exit(127);
        }
        libc::execv(*argv, argv);
        libc::_exit(127)
    }
}

fn pidfd_open(pid: libc::pid_t) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this fd to us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// A pidfd for an existing process (`-x PID`), readable when it exits.
pub fn watch_pid(pid: i32) -> io::Result<OwnedFd> {
    pidfd_open(pid)
}

/// A command that `exec` can prefix without changing its meaning: words
/// only (quotes and globs allowed), no operators, redirections,
/// substitutions, leading assignments or shell keywords.
fn is_simple_command(command: &str) -> bool {
    const KEYWORDS: &[&str] = &[
        "if", "then", "else", "elif", "fi", "case", "esac", "for", "while", "until", "do", "done",
        "!", "{", "}", "[[", "function", "select", "time", "exec",
        // Builtins that `exec` cannot run (there is no such program).
        "exit", "cd", ".", "source", "eval", "set", "unset", "export", "readonly", "return",
        "shift", "trap", "ulimit", "umask", "wait", "read", ":", "alias", "type", "command",
    ];
    let Some(first) = command.split_whitespace().next() else {
        return false;
    };
    !command.contains(|c| {
        matches!(
            c,
            ';' | '&' | '|' | '<' | '>' | '(' | ')' | '$' | '`' | '\n'
        )
    }) && !first.contains('=')
        && !KEYWORDS.contains(&first)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wait_readable(fd: BorrowedFd<'_>, ms: i32) -> bool {
        let mut pfd = libc::pollfd {
            fd: std::os::fd::AsRawFd::as_raw_fd(&fd),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(&mut pfd, 1, ms) == 1 }
    }

    #[test]
    fn simple_commands_are_execed_in_place() {
        assert!(is_simple_command("/bin/echo 'a b' *.c"));
        assert!(!is_simple_command("echo ran > file"));
        assert!(!is_simple_command("a; b"));
        assert!(!is_simple_command("X=1 cmd"));
        assert!(!is_simple_command("if true; then :; fi"));
        assert!(!is_simple_command("echo $HOME"));
        assert!(!is_simple_command("  "));
    }

    #[test]
    fn held_command_runs_only_after_release() {
        let dir = std::env::temp_dir().join(format!("stap-rs-child-{}", std::process::id()));
        let _ = std::fs::remove_file(&dir);
        let mut child =
            TargetCommand::spawn_held(&format!("echo ran > {}", dir.display())).unwrap();
        assert!(child.pid() > 0);
        assert!(!wait_readable(child.exit_fd(), 200), "ran before release");
        assert!(!dir.exists());
        child.release();
        assert!(wait_readable(child.exit_fd(), 10_000), "never exited");
        assert!(child.try_reap());
        assert_eq!(std::fs::read_to_string(&dir).unwrap(), "ran\n");
        let _ = std::fs::remove_file(&dir);
    }

    #[test]
    fn unreleased_command_exits_without_running() {
        let dir = std::env::temp_dir().join(format!("stap-rs-child-u-{}", std::process::id()));
        let _ = std::fs::remove_file(&dir);
        let child = TargetCommand::spawn_held(&format!("echo ran > {}", dir.display())).unwrap();
        let pidfd = pidfd_open(child.pid()).unwrap();
        drop(child);
        assert!(wait_readable(pidfd.as_fd(), 10_000));
        assert!(!dir.exists());
    }
}
