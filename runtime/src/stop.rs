//! The stop state of a session, shared between the thread that watches
//! signals and `-T` (`session/signals.rs`), JIT code, and output writes.
//!
//! stap's rules, which these follow: `-T` and the first SIGINT/SIGTERM end
//! the run (end probes run); a second one changes nothing; from the third
//! on, whatever still runs is cut short (staprun's "user mashing on ^C").
//! Host code cannot be interrupted by a signal, so a running handler polls
//! [`cut_requested`] at every loop back-edge, where it counts MAXACTION,
//! and stops there. A write to an output nobody reads gives up once a stop
//! was asked for and the output stayed blocked for [`BLOCKED_GRACE`].

use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Set when the running host handler must stop at its next back-edge.
static CUT: AtomicBool = AtomicBool::new(false);
/// Set once the session was asked to stop (a signal or `-T`); never
/// cleared during a session.
static STOPPING: AtomicBool = AtomicBool::new(false);
/// Stop signals received so far.
static SIGNALS: AtomicU32 = AtomicU32::new(0);
/// Output bytes dropped because the output stayed blocked after a stop.
static DROPPED: AtomicU64 = AtomicU64::new(0);
/// Set once a write to the output gave up: later writes drop at once
/// instead of each waiting [`BLOCKED_GRACE`] again.
static ABANDONED: AtomicBool = AtomicBool::new(false);
/// The same for stderr, which a reader may leave blocked on its own.
static ABANDONED_STDERR: AtomicBool = AtomicBool::new(false);

/// How long a write may stay blocked once a stop was asked for.
pub const BLOCKED_GRACE: Duration = Duration::from_secs(1);

/// A new session: nothing asked yet.
pub fn reset() {
    CUT.store(false, Ordering::SeqCst);
    STOPPING.store(false, Ordering::SeqCst);
    SIGNALS.store(0, Ordering::SeqCst);
    DROPPED.store(0, Ordering::SeqCst);
    ABANDONED.store(false, Ordering::SeqCst);
    ABANDONED_STDERR.store(false, Ordering::SeqCst);
}

/// A stop signal arrived; returns how many have so far.
pub fn signal() -> u32 {
    let n = SIGNALS.fetch_add(1, Ordering::SeqCst) + 1;
    STOPPING.store(true, Ordering::SeqCst);
    // The first ends the run; the second is absorbed; the third and later
    // cut whatever runs, end probes included.
    if n == 1 || n >= 3 {
        CUT.store(true, Ordering::SeqCst);
    }
    n
}

/// `-T` expired: the same as a first signal, without counting as one.
pub fn deadline() {
    STOPPING.store(true, Ordering::SeqCst);
    CUT.store(true, Ordering::SeqCst);
}

/// The session starts its ending: end probes run in full unless a third
/// signal comes.
pub fn ending() {
    if SIGNALS.load(Ordering::SeqCst) < 3 {
        CUT.store(false, Ordering::SeqCst);
    }
}

/// Whether the running host handler must stop now.
pub fn cut_requested() -> bool {
    CUT.load(Ordering::Relaxed)
}

/// Whether a stop was asked for in this session.
pub fn stopping() -> bool {
    STOPPING.load(Ordering::SeqCst)
}

/// Output bytes dropped so far (see [`write_all`]).
pub fn dropped() -> u64 {
    DROPPED.load(Ordering::SeqCst)
}

/// Writes all of `bytes` to `fd`, waiting while the fd is full, but only
/// until a stop was asked for and the fd made no progress for
/// [`BLOCKED_GRACE`]: then the rest is dropped, counted, and the error is
/// `WouldBlock`. Writes go in pipe-buffer-sized pieces after poll(2) says
/// the fd is writable, so a single write(2) never blocks for long.
pub fn write_all(fd: RawFd, bytes: &[u8]) -> io::Result<()> {
    write_giving_up(fd, bytes, &ABANDONED, Some(&DROPPED))
}

/// A warning or error line of the run on stderr, by the same rules as
/// [`write_all`]: a stderr nobody reads must not hold the session past a
/// stop either. Its failures go nowhere (there is nowhere to report them),
/// and its dropped bytes are not output: they are not counted.
pub fn write_stderr(bytes: &[u8]) {
    let _ = write_giving_up(libc::STDERR_FILENO, bytes, &ABANDONED_STDERR, None);
}

/// One line on stderr through [`write_stderr`].
pub fn stderr_line(line: &str) {
    let mut bytes = Vec::with_capacity(line.len() + 1);
    bytes.extend_from_slice(line.as_bytes());
    bytes.push(b'\n');
    write_stderr(&bytes);
}

fn write_giving_up(
    fd: RawFd,
    mut bytes: &[u8],
    abandoned: &AtomicBool,
    dropped: Option<&AtomicU64>,
) -> io::Result<()> {
    let count_dropped = |n: usize| {
        if let Some(dropped) = dropped {
            dropped.fetch_add(n as u64, Ordering::SeqCst);
        }
    };
    let blocked = || {
        io::Error::new(
            io::ErrorKind::WouldBlock,
            "the output was not being read after the stop",
        )
    };
    if abandoned.load(Ordering::SeqCst) {
        count_dropped(bytes.len());
        return Err(blocked());
    }
    // A regular file never blocks for long: one write(2) for everything.
    let piece_size = if is_regular_file(fd) {
        usize::MAX
    } else {
        libc::PIPE_BUF
    };
    let mut stalled_since: Option<Instant> = None;
    while !bytes.is_empty() {
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLOUT,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let ready = unsafe { libc::poll(&mut pfd, 1, 100) };
        if ready < 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(err);
        }
        if ready == 0 {
            if stopping() {
                let since = *stalled_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= BLOCKED_GRACE {
                    abandoned.store(true, Ordering::SeqCst);
                    count_dropped(bytes.len());
                    return Err(blocked());
                }
            }
            continue;
        }
        let piece = &bytes[..bytes.len().min(piece_size)];
        // SAFETY: writes from a live buffer of `piece.len()` bytes.
        let wrote = unsafe { libc::write(fd, piece.as_ptr().cast(), piece.len()) };
        if wrote < 0 {
            let err = io::Error::last_os_error();
            match err.kind() {
                io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock => continue,
                _ => return Err(err),
            }
        }
        if wrote == 0 {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                "the output accepts no more bytes",
            ));
        }
        bytes = &bytes[wrote as usize..];
        stalled_since = None;
    }
    Ok(())
}

fn is_regular_file(fd: RawFd) -> bool {
    // SAFETY: fstat fills a zeroed local stat.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        libc::fstat(fd, &mut st) == 0 && (st.st_mode & libc::S_IFMT) == libc::S_IFREG
    }
}
