//! `-c CMD`: the target command. It is forked before the probes are loaded
//! (so `target()` is known to begin probes and to the kernel side), held
//! before `exec` until the session releases it once every probe is live,
//! and watched through a pidfd so its exit ends the session.
//!
//! As in stap, a command that fails (non-zero status, killed by a signal,
//! not found) fails the run. Unlike a stap module, which stays loaded until
//! staprun cleans up, nothing of ours survives us, so neither may the
//! command: it is killed when the session ends, and the kernel kills it
//! (`PR_SET_PDEATHSIG`) if stap-rs itself dies, even by SIGKILL.

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
        let pidfd = pidfd_open(pid)?;
        Ok(TargetCommand {
            pid,
            release: Some(write_end),
            pidfd,
            reaped: false,
            status: None,
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

    /// Ends a command still running when the session ends: SIGTERM, then
    /// SIGKILL if it has not exited after a grace period; then reaps it.
    fn kill(&mut self) {
        const GRACE_MS: i32 = 1000;
        // SAFETY: signals our own child, not yet reaped (so its pid is not
        // reused).
        unsafe { libc::kill(self.pid, libc::SIGTERM) };
        let mut pfd = libc::pollfd {
            fd: std::os::fd::AsRawFd::as_raw_fd(&self.pidfd),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        if unsafe { libc::poll(&mut pfd, 1, GRACE_MS) } != 1 {
            // SAFETY: as above.
            unsafe { libc::kill(self.pid, libc::SIGKILL) };
        }
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
            return;
        }
        // Reaped if it already exited (no zombie), killed if it still runs.
        if !self.try_reap() {
            self.kill();
        }
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
