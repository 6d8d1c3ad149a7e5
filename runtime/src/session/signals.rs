//! SIGINT, SIGTERM, SIGHUP and SIGQUIT end the session cleanly (end probes
//! run, probes detach), as in stap. They are blocked and read from a
//! signalfd by a watcher thread, which also enforces `-T`: a host handler
//! that loops, or a write to an output nobody reads, keeps the session's
//! own thread busy, so the stop must be noticed elsewhere. The watcher
//! records it in `crate::stop` (which the busy code polls) and wakes the
//! event loop through an eventfd. The old mask comes back on drop.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;

use super::timers::monotonic_ns;
use crate::stop;

const STOP_SIGNALS: [libc::c_int; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];

pub struct StopSignals {
    /// Readable once a stop was asked for: what the event loop polls.
    wake: OwnedFd,
    /// Written to make the watcher look at `shared` again.
    poke: OwnedFd,
    shared: Arc<Shared>,
    watcher: Option<JoinHandle<()>>,
    old_mask: libc::sigset_t,
}

impl StopSignals {
    /// Blocks the stop signals and starts the watcher.
    pub fn block() -> io::Result<StopSignals> {
        stop::reset();
        // SAFETY: sigset operations on a zeroed local set, then a mask change
        // for this thread (threads started later inherit it).
        let (set, old_mask) = unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for signal in STOP_SIGNALS {
                libc::sigaddset(&mut set, signal);
            }
            let mut old_mask: libc::sigset_t = std::mem::zeroed();
            if libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old_mask) != 0 {
                return Err(io::Error::last_os_error());
            }
            (set, old_mask)
        };
        let restore = |err: io::Error| {
            // SAFETY: restores the mask saved above.
            unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old_mask, std::ptr::null_mut()) };
            err
        };
        // SAFETY: signalfd over a valid set; the fd is checked and owned.
        let signal_fd = unsafe {
            let fd = libc::signalfd(-1, &set, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK);
            if fd < 0 {
                return Err(restore(io::Error::last_os_error()));
            }
            OwnedFd::from_raw_fd(fd)
        };
        let wake = eventfd().map_err(restore)?;
        let poke = eventfd().map_err(restore)?;
        let (wake_w, poke_r) = (
            wake.try_clone().map_err(restore)?,
            poke.try_clone().map_err(restore)?,
        );
        let shared = Arc::new(Shared {
            deadline: AtomicU64::new(NO_DEADLINE),
            quit: AtomicBool::new(false),
        });
        let watched = shared.clone();
        let watcher = std::thread::Builder::new()
            .name("stap-rs-stop".into())
            .spawn(move || watch(signal_fd, wake_w, poke_r, &watched))
            .map_err(restore)?;
        Ok(StopSignals {
            wake,
            poke,
            shared,
            watcher: Some(watcher),
            old_mask,
        })
    }

    /// `-T`: from `at` (a `CLOCK_MONOTONIC` time in ns) on, the session
    /// stops even if the event loop is kept busy.
    pub fn set_deadline(&self, at: u64) {
        self.shared.deadline.store(at, Ordering::SeqCst);
        signal_eventfd(self.poke.as_fd());
    }

    /// Readable once a stop was asked for.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.wake.as_fd()
    }

    /// Whether a stop was asked for since the last call.
    pub fn take(&self) -> Option<()> {
        let mut count = 0u64;
        // SAFETY: reads the eventfd's 8-byte counter into a local.
        let got = unsafe { libc::read(self.wake.as_raw_fd(), (&raw mut count).cast(), 8) };
        (got == 8).then_some(())
    }
}

impl Drop for StopSignals {
    fn drop(&mut self) {
        self.shared.quit.store(true, Ordering::SeqCst);
        signal_eventfd(self.poke.as_fd());
        if let Some(watcher) = self.watcher.take() {
            let _ = watcher.join();
        }
        // SAFETY: restores the mask saved in `block`.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.old_mask, std::ptr::null_mut()) };
    }
}

/// What the session tells the watcher.
struct Shared {
    /// `-T`'s end, or [`NO_DEADLINE`].
    deadline: AtomicU64,
    quit: AtomicBool,
}

const NO_DEADLINE: u64 = u64::MAX;

/// The watcher: signals and the deadline become `crate::stop` state and a
/// wake-up of the event loop, until told to quit.
fn watch(signals: OwnedFd, wake: OwnedFd, poke: OwnedFd, shared: &Shared) {
    let mut expired = false;
    loop {
        if shared.quit.load(Ordering::SeqCst) {
            return;
        }
        let deadline = shared.deadline.load(Ordering::SeqCst);
        if !expired && deadline != NO_DEADLINE && monotonic_ns() >= deadline {
            expired = true;
            stop::deadline();
            signal_eventfd(wake.as_fd());
        }
        let timeout_ms = if expired || deadline == NO_DEADLINE {
            -1
        } else {
            let left = deadline.saturating_sub(monotonic_ns());
            i32::try_from(left.div_ceil(1_000_000)).unwrap_or(i32::MAX)
        };
        let mut fds = [
            libc::pollfd {
                fd: signals.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: poke.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: two valid pollfds.
        let woken = unsafe { libc::poll(fds.as_mut_ptr(), 2, timeout_ms) };
        if woken < 0 {
            if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return;
        }
        if fds[1].revents != 0 {
            let mut count = 0u64;
            // SAFETY: reads the eventfd's counter into a local.
            unsafe { libc::read(poke.as_raw_fd(), (&raw mut count).cast(), 8) };
        }
        if fds[0].revents != 0 {
            while read_signal(signals.as_fd()).is_some() {
                stop::signal();
                signal_eventfd(wake.as_fd());
            }
        }
    }
}

fn read_signal(fd: BorrowedFd<'_>) -> Option<i32> {
    // SAFETY: reads one signalfd_siginfo into a zeroed local.
    unsafe {
        let mut info: libc::signalfd_siginfo = std::mem::zeroed();
        let size = std::mem::size_of::<libc::signalfd_siginfo>();
        let got = libc::read(fd.as_raw_fd(), (&raw mut info).cast(), size);
        (got == size as isize).then_some(info.ssi_signo as i32)
    }
}

fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: eventfd returns a new fd or -1.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this fd to us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn signal_eventfd(fd: BorrowedFd<'_>) {
    let one = 1u64;
    // SAFETY: writes the 8-byte increment from a local.
    unsafe { libc::write(fd.as_raw_fd(), (&raw const one).cast(), 8) };
}
