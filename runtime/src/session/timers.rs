//! Host timers (`timer.ms(N)`, `timer.s(N)`, `.randomize(M)`): one timerfd
//! each on CLOCK_MONOTONIC with absolute deadlines, so the schedule never
//! drifts: the next deadline is the previous deadline plus the period,
//! however late the handler ran.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

pub struct HostTimer {
    /// Index into `ir::Module::probes`.
    pub probe: usize,
    fd: OwnedFd,
    period_ns: u64,
    randomize_ns: u64,
    /// The unrandomized deadline of the next firing, monotonic ns.
    base_ns: u64,
    rng: u64,
}

impl HostTimer {
    /// Arms a timer whose first firing is one period from `start_ns`.
    pub fn new(probe: usize, period_ns: u64, randomize_ns: u64, start_ns: u64) -> io::Result<Self> {
        // SAFETY: timerfd_create takes a clock id and flags.
        let fd = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_CLOEXEC | libc::TFD_NONBLOCK,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut timer = HostTimer {
            probe,
            // SAFETY: the kernel just returned this fd.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            period_ns: period_ns.max(1),
            randomize_ns,
            base_ns: start_ns,
            rng: 0x9e37_79b9_7f4a_7c15 ^ (probe as u64) ^ start_ns,
        };
        timer.base_ns = start_ns.saturating_add(timer.period_ns);
        timer.arm()?;
        Ok(timer)
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Called when the fd is readable: consumes the expiration and arms the
    /// next deadline. Returns true when the handler should run (once per
    /// wake-up: firings missed while the host was busy are not replayed).
    pub fn fired(&mut self, now_ns: u64) -> io::Result<bool> {
        let mut expirations = 0u64;
        // SAFETY: reads 8 bytes into a live u64 from our nonblocking timerfd.
        let got = unsafe {
            libc::read(
                self.fd.as_raw_fd(),
                (&raw mut expirations).cast(),
                std::mem::size_of::<u64>(),
            )
        };
        if got != std::mem::size_of::<u64>() as isize {
            let err = io::Error::last_os_error();
            return match err.kind() {
                io::ErrorKind::WouldBlock => Ok(false),
                _ => Err(err),
            };
        }
        while self.base_ns <= now_ns {
            self.base_ns = self.base_ns.saturating_add(self.period_ns);
        }
        self.arm()?;
        Ok(true)
    }

    /// Arms the timerfd for `base_ns` plus a random offset in
    /// `[-randomize, +randomize]` (stap's `.randomize`).
    fn arm(&mut self) -> io::Result<()> {
        let mut deadline = self.base_ns;
        if self.randomize_ns > 0 {
            let span = self.randomize_ns.saturating_mul(2).saturating_add(1);
            let offset = self.next_random() % span;
            deadline = deadline
                .saturating_add(offset)
                .saturating_sub(self.randomize_ns)
                .max(1);
        }
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: timespec(deadline),
        };
        // SAFETY: arms our timerfd with a valid absolute itimerspec.
        let rc = unsafe {
            libc::timerfd_settime(
                self.fd.as_raw_fd(),
                libc::TFD_TIMER_ABSTIME,
                &spec,
                std::ptr::null_mut(),
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// xorshift64: randomization only needs spread, not quality.
    fn next_random(&mut self) -> u64 {
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng = x;
        x
    }
}

/// Monotonic clock in ns (the clock timers and `-T` use).
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

pub fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: writes one timespec.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

fn timespec(ns: u64) -> libc::timespec {
    libc::timespec {
        tv_sec: (ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (ns % 1_000_000_000) as libc::c_long,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlines_advance_by_whole_periods() {
        let start = monotonic_ns();
        let mut timer = HostTimer::new(0, 20_000_000, 0, start).unwrap();
        assert_eq!(timer.base_ns, start + 20_000_000);
        // Pretend the host woke up 2.5 periods late: the next deadline is
        // still on the original grid.
        std::thread::sleep(std::time::Duration::from_millis(25));
        assert!(timer.fired(start + 50_000_000).unwrap());
        assert_eq!(timer.base_ns, start + 60_000_000);
    }
}
