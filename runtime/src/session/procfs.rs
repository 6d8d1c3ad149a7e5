//! procfs probes in the session: the HTTP server (`crate::http`) starts
//! only when the script has them, and its requests run their probes on
//! the session's thread, between kernel events and timers.

use std::net::SocketAddr;

use stap_lang::ir;
use stap_lang::ir::ProbeKind;

use super::{Session, SessionError};
use crate::host::Level;
use crate::http::{self, Endpoint, Reply, Server};

/// `--http ADDR:PORT` and `--http-write`.
#[derive(Debug, Clone)]
pub struct HttpSettings {
    pub addr: SocketAddr,
    pub allow_write: bool,
    /// Print the address served on stderr once listening (`-v`).
    pub announce: bool,
}

/// One endpoint per procfs name, with its read and write probes.
pub fn endpoints(module: &ir::Module) -> Vec<Endpoint> {
    let mut endpoints: Vec<Endpoint> = Vec::new();
    for (i, probe) in module.probes.iter().enumerate() {
        let ProbeKind::Procfs {
            name,
            write,
            maxsize,
        } = &probe.kind
        else {
            continue;
        };
        if probe.kind.is_stdin_input() {
            continue;
        }
        let at = match endpoints.iter().position(|e| e.name == *name) {
            Some(at) => at,
            None => {
                endpoints.push(Endpoint {
                    name: name.clone(),
                    ..Endpoint::default()
                });
                endpoints.len() - 1
            }
        };
        let endpoint = &mut endpoints[at];
        let max = maxsize_of(module, *maxsize);
        if *write {
            endpoint.write.get_or_insert(i);
            endpoint.max_body = max;
        } else {
            endpoint.read.get_or_insert(i);
        }
    }
    endpoints
}

/// A probe's `.maxsize(N)`, or MAXSTRINGLEN.
fn maxsize_of(module: &ir::Module, maxsize: Option<u64>) -> usize {
    let n = maxsize.unwrap_or(module.limits.max_string_len);
    usize::try_from(n).unwrap_or(usize::MAX)
}

/// Starts the server if the script has procfs probes. The driver refuses
/// such a script without `--http`, so `None` settings here mean none.
pub(super) fn start(
    module: &ir::Module,
    settings: Option<&HttpSettings>,
) -> Result<Option<Server>, SessionError> {
    let endpoints = endpoints(module);
    let (Some(settings), false) = (settings, endpoints.is_empty()) else {
        return Ok(None);
    };
    let server = Server::start(http::Config {
        addr: settings.addr,
        allow_write: settings.allow_write,
        endpoints,
    })
    .map_err(|e| SessionError::Setup(format!("cannot serve --http {}: {e}", settings.addr)))?;
    if settings.announce {
        crate::stop::stderr_line(&format!(
            "Pass 5: serving procfs probes at http://{}/",
            server.local_addr()
        ));
    }
    Ok(Some(server))
}

/// The `procfs("__stdin").write` probes (`input.char`, `input.line`).
pub(super) fn stdin_probes(module: &ir::Module) -> Vec<usize> {
    let stdin = module.probes.iter().enumerate();
    stdin
        .filter(|(_, p)| p.kind.is_stdin_input())
        .map(|(i, _)| i)
        .collect()
}

impl Session<'_> {
    /// Reads what stdin has (poll said it is readable) and runs every
    /// stdin probe once per byte, with the byte as `$value`, as staprun
    /// feeds stap's `__stdin` file. Returns false at end of input (or a
    /// read error), after which stdin is no longer polled.
    pub(super) fn feed_stdin(&mut self, probes: &[usize]) -> bool {
        let mut buf = [0u8; 4096];
        // A raw read(2): std's stdin buffers behind poll's back.
        // SAFETY: `buf` is a live, writable buffer of its length.
        let n = unsafe { libc::read(libc::STDIN_FILENO, buf.as_mut_ptr().cast(), buf.len()) };
        let n = match usize::try_from(n) {
            Ok(0) => return false,
            Ok(n) => n,
            Err(_) => {
                let err = std::io::Error::last_os_error();
                return matches!(
                    err.kind(),
                    std::io::ErrorKind::Interrupted | std::io::ErrorKind::WouldBlock
                );
            }
        };
        for &byte in &buf[..n] {
            for &probe in probes {
                if self.ending {
                    return true;
                }
                let max = match &self.compiled.module.probes[probe].kind {
                    ProbeKind::Procfs { maxsize, .. } => maxsize_of(self.compiled.module, *maxsize),
                    _ => 1,
                };
                self.runtime.procfs.start(vec![byte], max.max(1));
                self.run_host_probe(probe);
                self.runtime.procfs.take();
            }
        }
        self.flush_output();
        true
    }

    /// Runs the probe of every waiting HTTP request and answers it.
    pub(super) fn serve_http(&mut self) {
        let calls = match &self.http {
            Some(server) => server.take_calls(),
            None => return,
        };
        for mut call in calls {
            if self.ending {
                call.answer(Reply::new(503, "the session is ending\n"));
                continue;
            }
            let module = self.compiled.module;
            let max = match &module.probes[call.probe].kind {
                ProbeKind::Procfs { maxsize, .. } => maxsize_of(module, *maxsize),
                _ => 0,
            };
            let write = call.write;
            let body = std::mem::take(&mut call.body);
            self.runtime.procfs.start(body, max);
            let errors = self.errors;
            self.run_host_probe(call.probe);
            let (value, truncated) = self.runtime.procfs.take();
            if truncated && !write {
                let name = &self.compiled.module.probes[call.probe].point;
                let message = format!(
                    "{name}: $value was cut at its maxsize ({max} bytes): raise it with .maxsize(N)"
                );
                self.runtime
                    .output
                    .notice(Level::Warning, "procfs_truncated", &message, &[]);
            }
            let reply = if self.errors > errors {
                Reply::new(500, "the probe failed with a run-time error\n")
            } else if write {
                Reply::new(200, Vec::new())
            } else {
                Reply::new(200, value)
            };
            call.answer(reply);
        }
    }
}
