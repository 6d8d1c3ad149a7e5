//! The HTTP server behind `procfs` probes (`--http ADDR:PORT`).
//!
//! stap serves `procfs("NAME")` probes as files under
//! `/proc/systemtap/MODULE/`; stap-rs has no kernel module, so it serves
//! them over HTTP instead: `GET /NAME` runs the read probe and answers its
//! `$value`, `PUT`/`POST /NAME` runs the write probe with the body as
//! `$value`. Probes run on the session's thread (host code is
//! single-threaded), so connection threads hand each request over a
//! channel, wake the event loop through a socket pair, and wait for the
//! reply.
//!
//! Requests are parsed with `httparse` into buffers this file bounds:
//! the request head (8 KiB, 32 headers), the body (the probe's
//! `maxsize`), the number of connections served at once, and the time a
//! client may take to send (5 s). One request per connection
//! (`Connection: close`). Anything malformed gets a 4xx and the
//! connection closes; nothing a client sends can panic or grow memory
//! past these bounds. The thread exists only when a script has procfs
//! probes.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::thread;
use std::time::Duration;

/// Longest request line plus headers.
pub const MAX_HEAD: usize = 8 * 1024;
/// Most headers in one request.
const MAX_HEADERS: usize = 32;
/// Connections served at once; more are answered 503 straight away.
pub const MAX_CONNECTIONS: usize = 16;
/// Requests waiting for the session's thread; more are answered 503.
const MAX_QUEUED: usize = 16;
/// How long a client may take to send its request, and we to send the reply.
pub const IO_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a request waits for its probe to run.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// One `procfs("NAME")` file: its probes, by index into the module's probes.
#[derive(Debug, Clone, Default)]
pub struct Endpoint {
    pub name: String,
    pub read: Option<usize>,
    pub write: Option<usize>,
    /// The largest body a write accepts (the write probe's `maxsize`).
    pub max_body: usize,
}

#[derive(Debug, Clone)]
pub struct Config {
    pub addr: SocketAddr,
    /// `--http-write`: without it, writes are refused with 403.
    pub allow_write: bool,
    pub endpoints: Vec<Endpoint>,
}

/// A request for the session's thread: run `probe` with `body` as `$value`.
pub struct Call {
    pub probe: usize,
    pub write: bool,
    pub body: Vec<u8>,
    reply: SyncSender<Reply>,
}

impl Call {
    /// Answers the client (ignored if it has gone away).
    pub fn answer(self, reply: Reply) {
        let _ = self.reply.try_send(reply);
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub status: u16,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn new(status: u16, body: impl Into<Vec<u8>>) -> Reply {
        Reply {
            status,
            body: body.into(),
        }
    }
}

/// The listening server; dropping it stops accepting.
pub struct Server {
    calls: Receiver<Call>,
    /// Readable when calls wait; the event loop polls it.
    wake: UnixStream,
    stop: Arc<AtomicBool>,
    addr: SocketAddr,
}

/// What connection threads share.
struct Shared {
    config: Config,
    calls: SyncSender<Call>,
    wake: UnixStream,
    busy: AtomicUsize,
}

impl Server {
    /// Binds `config.addr` and starts the accept thread.
    pub fn start(config: Config) -> io::Result<Server> {
        let listener = TcpListener::bind(config.addr)?;
        let addr = listener.local_addr()?;
        let (tx, calls) = mpsc::sync_channel(MAX_QUEUED);
        let (wake, waker) = UnixStream::pair()?;
        wake.set_nonblocking(true)?;
        waker.set_nonblocking(true)?;
        let stop = Arc::new(AtomicBool::new(false));
        let shared = Arc::new(Shared {
            config,
            calls: tx,
            wake: waker,
            busy: AtomicUsize::new(0),
        });
        let stopping = stop.clone();
        thread::Builder::new()
            .name("stap-rs http".into())
            .spawn(move || accept_loop(listener, shared, stopping))?;
        Ok(Server {
            calls,
            wake,
            stop,
            addr,
        })
    }

    /// The bound address (the real port when 0 was asked).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Readable when requests wait for [`Server::take_calls`].
    pub fn wake_fd(&self) -> BorrowedFd<'_> {
        self.wake.as_fd()
    }

    /// Every request waiting for the session's thread.
    pub fn take_calls(&self) -> Vec<Call> {
        let mut sink = [0u8; 64];
        while matches!((&self.wake).read(&mut sink), Ok(n) if n > 0) {}
        self.calls.try_iter().collect()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accept thread so it sees the flag and exits (waiting
        // requests fail: their reply channel is gone).
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(200));
    }
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>, stop: Arc<AtomicBool>) {
    for stream in listener.incoming() {
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(stream) = stream else {
            // EMFILE and friends: back off rather than spin.
            thread::sleep(Duration::from_millis(10));
            continue;
        };
        let _ = stream.set_read_timeout(Some(IO_TIMEOUT));
        let _ = stream.set_write_timeout(Some(IO_TIMEOUT));
        if shared.busy.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
            shared.busy.fetch_sub(1, Ordering::SeqCst);
            respond(&stream, &Reply::new(503, "too many connections\n"), false);
            continue;
        }
        let shared2 = shared.clone();
        let spawned = thread::Builder::new()
            .name("stap-rs http conn".into())
            .spawn(move || {
                serve(&stream, &shared2);
                shared2.busy.fetch_sub(1, Ordering::SeqCst);
            });
        if spawned.is_err() {
            shared.busy.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// One connection: one request, one reply.
fn serve(stream: &TcpStream, shared: &Shared) {
    let Some((reply, head_only)) = handle(stream, shared) else {
        return;
    };
    respond(stream, &reply, head_only);
    // Read what the client still sends (a refused body) before closing,
    // so the close does not reset the connection under our reply.
    let _ = stream.shutdown(Shutdown::Write);
    let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
    let mut sink = [0u8; 4096];
    let mut left: usize = 64 * 1024;
    while left > 0 {
        match (&*stream).read(&mut sink) {
            Ok(n) if n > 0 => left = left.saturating_sub(n),
            _ => break,
        }
    }
}

/// A parsed request head.
struct Head {
    method: String,
    path: String,
    content_length: Option<usize>,
    chunked: bool,
    expect_continue: bool,
    /// Bytes of the body that arrived with the head.
    body_start: Vec<u8>,
}

/// Reads and answers one request; `None` when the client sent nothing.
/// The flag says the reply has no body (HEAD).
fn handle(stream: &TcpStream, shared: &Shared) -> Option<(Reply, bool)> {
    let head = match read_head(stream) {
        Ok(Some(head)) => head,
        Ok(None) => return None,
        Err(reply) => return Some((reply, false)),
    };
    let head_only = head.method == "HEAD";
    Some((route(stream, shared, head), head_only))
}

fn route(stream: &TcpStream, shared: &Shared, head: Head) -> Reply {
    let config = &shared.config;
    let path = head.path.split(['?', '#']).next().unwrap_or("");
    let Some(name) = path.strip_prefix('/') else {
        return Reply::new(400, "the path must start with /\n");
    };
    if name.is_empty() && matches!(head.method.as_str(), "GET" | "HEAD") {
        let mut index = String::new();
        for e in &config.endpoints {
            index.push('/');
            index.push_str(&e.name);
            index.push('\n');
        }
        return Reply::new(200, index);
    }
    let Some(endpoint) = config.endpoints.iter().find(|e| e.name == name) else {
        return Reply::new(404, format!("no procfs probe named \"{name}\"\n"));
    };
    match head.method.as_str() {
        "GET" | "HEAD" => match endpoint.read {
            Some(probe) => call(shared, probe, false, Vec::new()),
            None => Reply::new(405, format!("\"{name}\" has no read probe\n")),
        },
        "PUT" | "POST" => {
            let Some(probe) = endpoint.write else {
                return Reply::new(405, format!("\"{name}\" has no write probe\n"));
            };
            if !config.allow_write {
                return Reply::new(403, "write probes are off: run stap-rs with --http-write\n");
            }
            match read_body(stream, &head, endpoint.max_body) {
                Ok(body) => call(shared, probe, true, body),
                Err(reply) => reply,
            }
        }
        _ => Reply::new(405, "methods: GET, HEAD, PUT, POST\n"),
    }
}

/// Hands the request to the session's thread and waits for the probe.
fn call(shared: &Shared, probe: usize, write: bool, body: Vec<u8>) -> Reply {
    let (reply, answer) = mpsc::sync_channel(1);
    let sent = shared.calls.try_send(Call {
        probe,
        write,
        body,
        reply,
    });
    match sent {
        Ok(()) => {}
        Err(TrySendError::Full(_)) => return Reply::new(503, "too many requests waiting\n"),
        Err(TrySendError::Disconnected(_)) => return Reply::new(503, "the session has ended\n"),
    }
    let _ = (&shared.wake).write(&[1]);
    match answer.recv_timeout(PROBE_TIMEOUT) {
        Ok(reply) => reply,
        Err(RecvTimeoutError::Timeout) => Reply::new(503, "the probe did not run in time\n"),
        Err(RecvTimeoutError::Disconnected) => Reply::new(503, "the session has ended\n"),
    }
}

/// Reads up to the end of the head. `Ok(None)`: the client closed (or
/// timed out) before sending a byte.
fn read_head(mut stream: &TcpStream) -> Result<Option<Head>, Reply> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        let n = match stream.read(&mut chunk) {
            Ok(0) if buf.is_empty() => return Ok(None),
            Ok(0) => return Err(Reply::new(400, "incomplete request\n")),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) if buf.is_empty() => return Ok(None),
            Err(_) => return Err(Reply::new(408, "request timed out\n")),
        };
        buf.extend_from_slice(&chunk[..n]);
        if let Some(head) = parse_head(&buf)? {
            return Ok(Some(head));
        }
        if buf.len() >= MAX_HEAD {
            return Err(Reply::new(431, "request head too large\n"));
        }
    }
}

/// Parses a complete head from `buf`; `Ok(None)` when more bytes are needed.
fn parse_head(buf: &[u8]) -> Result<Option<Head>, Reply> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut headers);
    let used = match request.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => {
            return Err(Reply::new(431, "too many headers\n"));
        }
        Err(e) => return Err(Reply::new(400, format!("malformed request: {e}\n"))),
    };
    let (Some(method), Some(path)) = (request.method, request.path) else {
        return Err(Reply::new(400, "malformed request line\n"));
    };
    let mut head = Head {
        method: method.to_string(),
        path: path.to_string(),
        content_length: None,
        chunked: false,
        expect_continue: false,
        body_start: buf[used..].to_vec(),
    };
    for header in request.headers.iter() {
        let value = String::from_utf8_lossy(header.value);
        let value = value.trim();
        if header.name.eq_ignore_ascii_case("content-length") {
            let length = value
                .parse::<usize>()
                .map_err(|_| Reply::new(400, "bad Content-Length\n"))?;
            if head.content_length.is_some_and(|l| l != length) {
                return Err(Reply::new(400, "conflicting Content-Length\n"));
            }
            head.content_length = Some(length);
        } else if header.name.eq_ignore_ascii_case("transfer-encoding") {
            head.chunked = true;
        } else if header.name.eq_ignore_ascii_case("expect") {
            head.expect_continue = value.eq_ignore_ascii_case("100-continue");
        }
    }
    Ok(Some(head))
}

/// The body of a write, at most `max` bytes.
fn read_body(mut stream: &TcpStream, head: &Head, max: usize) -> Result<Vec<u8>, Reply> {
    if head.chunked {
        return Err(Reply::new(
            411,
            "send the body with a Content-Length, not chunked\n",
        ));
    }
    let length = head.content_length.unwrap_or(head.body_start.len());
    if length > max {
        return Err(Reply::new(
            413,
            format!("the body is {length} bytes; this probe takes at most {max} (maxsize)\n"),
        ));
    }
    if head.expect_continue && head.body_start.len() < length {
        let _ = stream.write_all(b"HTTP/1.1 100 Continue\r\n\r\n");
    }
    let mut body = head.body_start.clone();
    body.truncate(length);
    let mut chunk = [0u8; 4096];
    while body.len() < length {
        let want = (length - body.len()).min(chunk.len());
        match stream.read(&mut chunk[..want]) {
            Ok(0) => {
                return Err(Reply::new(
                    400,
                    "the body is shorter than its Content-Length\n",
                ));
            }
            Ok(n) => body.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return Err(Reply::new(408, "request timed out\n")),
        }
    }
    Ok(body)
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        204 => "No Content",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        411 => "Length Required",
        413 => "Content Too Large",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        _ => "Service Unavailable",
    }
}

fn respond(mut stream: &TcpStream, reply: &Reply, head_only: bool) {
    // Prometheus's text exposition format names this content type.
    let head = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        reply.status,
        reason(reply.status),
        reply.body.len()
    );
    let _ = stream.write_all(head.as_bytes());
    if !head_only {
        let _ = stream.write_all(&reply.body);
    }
    let _ = stream.flush();
}

/// Whether serving on `addr` exposes the endpoints beyond this host.
pub fn is_exposed(addr: &SocketAddr) -> bool {
    !addr.ip().is_loopback()
}

/// `--http` values: `PORT`, `:PORT`, `ADDR:PORT`, `[V6]:PORT`; an address
/// left out is loopback.
pub fn parse_addr(text: &str) -> Result<SocketAddr, String> {
    let text = text.trim();
    let spelled = if let Ok(port) = text.trim_start_matches(':').parse::<u16>() {
        format!("127.0.0.1:{port}")
    } else {
        text.to_string()
    };
    if let Ok(addr) = spelled.parse::<SocketAddr>() {
        return Ok(addr);
    }
    if let Some((host, port)) = spelled.rsplit_once(':')
        && host == "localhost"
        && let Ok(port) = port.parse::<u16>()
    {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    Err(format!(
        "expected PORT or ADDR:PORT (e.g. 9900, 127.0.0.1:9900, [::1]:9900), got `{text}`"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_default_to_loopback() {
        assert_eq!(parse_addr("9900").unwrap().to_string(), "127.0.0.1:9900");
        assert_eq!(parse_addr(":9900").unwrap().to_string(), "127.0.0.1:9900");
        assert_eq!(
            parse_addr("localhost:1").unwrap().to_string(),
            "127.0.0.1:1"
        );
        assert_eq!(parse_addr("[::1]:80").unwrap().to_string(), "[::1]:80");
        assert!(is_exposed(&parse_addr("0.0.0.0:80").unwrap()));
        assert!(!is_exposed(&parse_addr("127.0.0.5:80").unwrap()));
        assert!(parse_addr("nonsense").is_err());
        assert!(parse_addr("1.2.3.4:99999").is_err());
    }

    #[test]
    fn heads_are_parsed_and_bounded() {
        let head = parse_head(b"PUT /x HTTP/1.1\r\nContent-Length: 3\r\n\r\nab")
            .unwrap()
            .unwrap();
        assert_eq!(head.method, "PUT");
        assert_eq!(head.content_length, Some(3));
        assert_eq!(head.body_start, b"ab");
        assert!(parse_head(b"GET /x HTTP/1.1\r\n").unwrap().is_none());
        assert_eq!(
            parse_head(b"\x00\x01 / HTTP/1.1\r\n\r\n")
                .err()
                .unwrap()
                .status,
            400
        );
        let many: String = (0..40).map(|i| format!("h{i}: v\r\n")).collect();
        let text = format!("GET / HTTP/1.1\r\n{many}\r\n");
        assert_eq!(parse_head(text.as_bytes()).err().unwrap().status, 431);
        let bad = parse_head(b"GET / HTTP/1.1\r\nContent-Length: -1\r\n\r\n");
        assert_eq!(bad.err().unwrap().status, 400);
    }
}
