//! Output that never breaks the line being typed. When stdin and stdout are
//! a terminal, the line editor talks to /dev/tty, and fds 1 and 2 become a
//! pipe: everything the session prints (probe output, errors, diagnostics)
//! goes in, and a forwarder thread hands it to rustyline's external
//! printer, which prints it above the line being edited and redraws that
//! line. The main thread's answer to the editor ("this input is handled")
//! travels through the same pipe as a marker, so the next prompt comes
//! after the input's output.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::mpsc::Sender;

/// Written by the main thread after an input's output; never printed.
pub const ACK_MARKER: &[u8] = b"\x1e\x1dstap-rs-ack\x1d\x1e";

/// fds 1 and 2 as they were before [`Console::redirect`].
pub struct Console {
    stdout: OwnedFd,
    stderr: OwnedFd,
}

fn check(ret: i32) -> io::Result<i32> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// A duplicate of `fd`, closed on exec.
fn duplicate(fd: i32) -> io::Result<OwnedFd> {
    // SAFETY: F_DUPFD_CLOEXEC has no memory-safety preconditions.
    let new = check(unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) })?;
    // SAFETY: `new` was just returned by fcntl and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(new) })
}

/// Whether stdin and stdout are both a terminal.
pub fn interactive() -> bool {
    // SAFETY: isatty has no preconditions.
    unsafe { libc::isatty(0) == 1 && libc::isatty(1) == 1 }
}

impl Console {
    /// Points fds 1 and 2 at a new pipe; returns its read end.
    pub fn redirect() -> io::Result<(Console, OwnedFd)> {
        let mut ends = [0i32; 2];
        // SAFETY: `ends` has room for the two fds pipe2 writes.
        check(unsafe { libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC) })?;
        // SAFETY: pipe2 succeeded, so both are new fds owned by nothing else.
        let (read, write) =
            unsafe { (OwnedFd::from_raw_fd(ends[0]), OwnedFd::from_raw_fd(ends[1])) };
        let console = Console {
            stdout: duplicate(1)?,
            stderr: duplicate(2)?,
        };
        let _ = io::stdout().flush();
        for target in [1, 2] {
            // SAFETY: dup2 onto the standard fds, which stay open.
            check(unsafe { libc::dup2(write.as_raw_fd(), target) })?;
        }
        Ok((console, read))
    }

    /// Puts fds 1 and 2 back; the forwarder then sees the pipe's end.
    pub fn restore(self) {
        let _ = io::stdout().flush();
        // SAFETY: dup2 of fds we own onto the standard fds.
        unsafe {
            libc::dup2(self.stdout.as_raw_fd(), 1);
            libc::dup2(self.stderr.as_raw_fd(), 2);
        }
    }
}

/// Tells the editor, through the pipe, that an input is handled.
pub fn write_ack() {
    let mut out = io::stdout().lock();
    let _ = out.flush();
    let _ = out.write_all(ACK_MARKER);
    let _ = out.flush();
}

/// The forwarder: reads the pipe until every writer is gone, printing
/// whole lines through `print` and turning each marker into an answer on
/// `acks`. A last answer goes out at the end (the answer to `:quit`).
pub fn forward(read: OwnedFd, mut print: impl FnMut(String), acks: Sender<()>) {
    let mut pipe = File::from(read);
    let mut pending: Vec<u8> = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut emit = |bytes: Vec<u8>| {
        if !bytes.is_empty() {
            print(String::from_utf8_lossy(&bytes).into_owned());
        }
    };
    loop {
        let n = match pipe.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        pending.extend_from_slice(&buf[..n]);
        while let Some(at) = find(&pending, ACK_MARKER) {
            let text: Vec<u8> = pending.drain(..at).collect();
            pending.drain(..ACK_MARKER.len());
            emit(text);
            let _ = acks.send(());
        }
        // Whole lines now; a partial line (or marker) waits for the rest.
        if let Some(last) = pending.iter().rposition(|&b| b == b'\n') {
            let lines: Vec<u8> = pending.drain(..=last).collect();
            emit(lines);
        }
    }
    emit(pending);
    let _ = acks.send(());
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_become_answers_and_lines_are_printed_whole() {
        let mut ends = [0i32; 2];
        assert_eq!(unsafe { libc::pipe(ends.as_mut_ptr()) }, 0);
        let (read, write) =
            unsafe { (OwnedFd::from_raw_fd(ends[0]), OwnedFd::from_raw_fd(ends[1])) };
        let (acks, answers) = std::sync::mpsc::channel();
        let printed = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = printed.clone();
        let forwarder =
            std::thread::spawn(move || forward(read, move |s| sink.lock().unwrap().push(s), acks));
        let mut write = File::from(write);
        write.write_all(b"one\ntw").unwrap();
        write.write_all(b"o").unwrap();
        write.write_all(ACK_MARKER).unwrap();
        write.write_all(b"three\n").unwrap();
        drop(write);
        forwarder.join().unwrap();
        assert_eq!(answers.try_iter().count(), 2, "the marker's and the end's");
        let text: String = printed.lock().unwrap().concat();
        assert_eq!(text, "one\ntwothree\n");
    }
}
