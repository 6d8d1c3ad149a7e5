//! `system(cmd)`: shell commands that probes ask for. As stap's, each runs
//! in the background through `/bin/sh -c` once the probe that asked is
//! done (a host probe queues it; a kernel probe's record arrives after its
//! handler ended), with the session's stdout and stderr. The session does
//! not wait for them.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::process::{Child, Command, Stdio};

#[derive(Default)]
pub struct Commands {
    queued: Vec<Vec<u8>>,
    running: Vec<Child>,
}

impl Commands {
    pub fn queue(&mut self, command: &[u8]) {
        self.queued.push(command.to_vec());
    }

    /// Starts the queued commands; the caller has flushed the script's
    /// output, so what the probe printed comes first. Returns a message
    /// per command that could not start.
    pub fn start(&mut self) -> Vec<String> {
        // Reap the ones that ended, so none lingers as a zombie.
        self.running
            .retain_mut(|child| matches!(child.try_wait(), Ok(None)));
        let mut failures = Vec::new();
        for command in std::mem::take(&mut self.queued) {
            let spawned = Command::new("/bin/sh")
                .arg("-c")
                .arg(OsStr::from_bytes(&command))
                .stdin(Stdio::null())
                .spawn();
            match spawned {
                Ok(child) => self.running.push(child),
                Err(e) => failures.push(format!(
                    "system(\"{}\"): cannot run /bin/sh: {e}",
                    String::from_utf8_lossy(&command)
                )),
            }
        }
        failures
    }
}
