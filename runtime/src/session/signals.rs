//! SIGINT, SIGTERM, SIGHUP and SIGQUIT end the session cleanly (end probes
//! run, probes detach), as in stap: they are blocked and read from a
//! signalfd in the event loop. The old mask comes back on drop.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

const STOP_SIGNALS: [libc::c_int; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];

pub struct StopSignals {
    fd: OwnedFd,
    old_mask: libc::sigset_t,
}

impl StopSignals {
    pub fn block() -> io::Result<StopSignals> {
        // SAFETY: sigset operations on a zeroed local set, then a mask change
        // for this thread (the session runs on one thread).
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for signal in STOP_SIGNALS {
                libc::sigaddset(&mut set, signal);
            }
            let mut old_mask: libc::sigset_t = std::mem::zeroed();
            if libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old_mask) != 0 {
                return Err(io::Error::last_os_error());
            }
            let fd = libc::signalfd(-1, &set, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK);
            if fd < 0 {
                let err = io::Error::last_os_error();
                libc::pthread_sigmask(libc::SIG_SETMASK, &old_mask, std::ptr::null_mut());
                return Err(err);
            }
            Ok(StopSignals {
                fd: OwnedFd::from_raw_fd(fd),
                old_mask,
            })
        }
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// The signal that arrived, if any.
    pub fn take(&self) -> Option<i32> {
        // SAFETY: reads one signalfd_siginfo into a zeroed local.
        unsafe {
            let mut info: libc::signalfd_siginfo = std::mem::zeroed();
            let size = std::mem::size_of::<libc::signalfd_siginfo>();
            let got = libc::read(self.fd.as_raw_fd(), (&raw mut info).cast(), size);
            (got == size as isize).then_some(info.ssi_signo as i32)
        }
    }
}

impl Drop for StopSignals {
    fn drop(&mut self) {
        // SAFETY: restores the mask saved in `block`.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.old_mask, std::ptr::null_mut()) };
    }
}
