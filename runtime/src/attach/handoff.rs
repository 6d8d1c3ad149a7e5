//! Detaching after the run, without making the user wait for the kernel.
//!
//! Some closes wait in the kernel for RCU grace periods after the output is
//! complete: a uprobe's perf event waits two (`perf_event_detach_bpf_prog`,
//! then `perf_uprobe_destroy`), 76-104 ms here. The handlers are already
//! inert (the Control map's run flag is off), so nothing the script sees
//! depends on when the close ends. The attachment fds are therefore handed
//! to short-lived helper processes that do the final closes, while stap-rs
//! exits; every probe is still detached, a grace period or two later.
//!
//! A file's close waits only when it drops the last reference, so who
//! holds what, and when, is the whole protocol:
//! 1. stap-rs forks an intermediate process M and reaps it; M forks one
//!    closer per chunk of fds (up to [`MAX_CLOSERS`], so the waits overlap
//!    as the in-process close's threads did) and exits holding nothing.
//! 2. Each closer keeps only its chunk and the read end of the "go" pipe,
//!    closing every other fd (its stdio too, so a pipe reading stap-rs's
//!    output sees EOF when stap-rs exits), then its copy of the go pipe's
//!    write end.
//! 3. stap-rs closes its own fds (never the last reference: the closers
//!    hold them), then its write end.
//! 4. The go pipe reads EOF once every process has dropped the references
//!    it does not own; each closer then makes the last close of its chunk
//!    and exits. A closer that is killed detaches the same way: the kernel
//!    closes its fds.
//!
//! The children only make async-signal-safe calls on memory prepared
//! before the fork (stap-rs has threads).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// At most this many closers, each closing its share in turn.
const MAX_CLOSERS: usize = 8;

/// Closes `fds` in helper processes; stap-rs's own copies are closed when
/// this returns. Gives the fds back if no helper could be started.
pub fn close_later(fds: Vec<OwnedFd>) -> Result<(), Vec<OwnedFd>> {
    if fds.is_empty() {
        return Ok(());
    }
    let Ok((go_read, go_write)) = pipe() else {
        return Err(fds);
    };
    let keep = keep_lists(&fds, go_read.as_raw_fd());
    // SAFETY: the child runs `intermediate`, which only makes
    // async-signal-safe calls on `keep`, allocated before the fork.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(fds);
    }
    if pid == 0 {
        // SAFETY: a freshly forked child; never returns.
        unsafe { intermediate(&keep, go_read.as_raw_fd()) }
    }
    let mut status = 0;
    // SAFETY: waits for our own child, which exits once it has forked.
    let reaped = unsafe { libc::waitpid(pid, &mut status, 0) };
    let forked = reaped == pid && libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
    if !forked {
        // Closers that did start hold copies, so closing here may or may
        // not be the last close; either way nothing stays attached.
        return Err(fds);
    }
    drop(fds);
    drop(go_read);
    drop(go_write);
    Ok(())
}

/// Per closer, the sorted fd numbers it keeps: its chunk and the go pipe's
/// read end.
fn keep_lists(fds: &[OwnedFd], go_read: i32) -> Vec<Vec<i32>> {
    let closers = fds.len().min(MAX_CLOSERS);
    let per_closer = fds.len().div_ceil(closers);
    fds.chunks(per_closer)
        .map(|chunk| {
            let mut keep: Vec<i32> = chunk.iter().map(AsRawFd::as_raw_fd).collect();
            keep.push(go_read);
            keep.sort_unstable();
            keep
        })
        .collect()
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut ends = [0; 2];
    // SAFETY: `ends` has room for the two fds pipe2 writes.
    if unsafe { libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both fds were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(ends[0]), OwnedFd::from_raw_fd(ends[1])) })
}

/// M: forks the closers, then exits holding nothing. Exits 1 if a fork
/// failed, so stap-rs closes everything itself.
///
/// # Safety
/// Must only be called in a freshly forked child.
unsafe fn intermediate(keep: &[Vec<i32>], go_read: i32) -> ! {
    // SAFETY: async-signal-safe calls with valid arguments.
    unsafe {
        // Deaf to a terminal's ^C, and out of its session: the closers
        // outlive stap-rs, which the shell no longer waits for.
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::sigprocmask(libc::SIG_SETMASK, &all, std::ptr::null_mut());
        libc::setsid();
        for list in keep {
            match libc::fork() {
                0 => closer(list, go_read),
                pid if pid < 0 => libc::_exit(1),
                _ => {}
            }
        }
        // Its own copies are never the last: every fd is kept by a closer.
        libc::syscall(libc::SYS_close_range, 0u32, u32::MAX, 0u32);
        libc::_exit(0)
    }
}

/// A closer: drops every reference but `keep`, waits until everyone else
/// has done so, then makes the last close of its chunk.
///
/// # Safety
/// Must only be called in a freshly forked child.
unsafe fn closer(keep: &[i32], go_read: i32) -> ! {
    // SAFETY: async-signal-safe calls with valid arguments.
    unsafe {
        let mut next = 0u32;
        for &fd in keep {
            if fd as u32 > next {
                libc::syscall(libc::SYS_close_range, next, fd as u32 - 1, 0u32);
            }
            next = fd as u32 + 1;
        }
        libc::syscall(libc::SYS_close_range, next, u32::MAX, 0u32);
        // Nobody writes: the read returns at EOF (or on an error, after
        // which closing now is still correct, only perhaps not the last).
        let mut byte = 0u8;
        loop {
            let got = libc::read(go_read, (&raw mut byte).cast(), 1);
            if got == 0 || (got < 0 && *libc::__errno_location() != libc::EINTR) {
                break;
            }
        }
        libc::syscall(libc::SYS_close_range, 0u32, u32::MAX, 0u32);
        libc::_exit(0)
    }
}
