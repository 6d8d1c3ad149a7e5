//! A property test of the procfs HTTP server (`stap_runtime::http`):
//! thousands of malformed and mutated requests, an endless header line,
//! too many headers, bodies past maxsize, idle connections. Properties:
//! every request gets a well-formed reply (a 4xx for the malformed ones)
//! or a clean close, within the I/O timeout; the server still answers a
//! valid request afterwards; no thread or memory is left behind.
//! Deterministic (a fixed xorshift seed), no root needed.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use stap_runtime::http::{Config, Endpoint, IO_TIMEOUT, MAX_CONNECTIONS, Reply, Server};

/// The server, with a thread standing in for the session: read probe 0
/// answers "metric 1\n", write probe 1 echoes its body length.
struct Harness {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    session: Option<thread::JoinHandle<()>>,
}

impl Harness {
    fn start() -> Harness {
        let server = Server::start(Config {
            addr: "127.0.0.1:0".parse().unwrap(),
            allow_write: true,
            endpoints: vec![Endpoint {
                name: "metrics".into(),
                read: Some(0),
                write: Some(1),
                max_body: 64,
            }],
        })
        .expect("starting the server");
        let addr = server.local_addr();
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let session = thread::spawn(move || {
            while !stopping.load(Ordering::SeqCst) {
                for call in server.take_calls() {
                    let reply = if call.write {
                        Reply::new(200, format!("{} bytes\n", call.body.len()))
                    } else {
                        Reply::new(200, "metric 1\n")
                    };
                    call.answer(reply);
                }
                thread::sleep(Duration::from_millis(2));
            }
        });
        Harness {
            addr,
            stop,
            session: Some(session),
        }
    }

    /// Sends `bytes`, closes the sending half, and reads the reply.
    fn exchange(&self, bytes: &[u8]) -> Vec<u8> {
        let mut stream = TcpStream::connect(self.addr).expect("connecting");
        stream.set_read_timeout(Some(IO_TIMEOUT * 2)).unwrap();
        stream.set_write_timeout(Some(IO_TIMEOUT * 2)).unwrap();
        // The server may answer and close before reading everything.
        let _ = stream.write_all(bytes);
        let _ = stream.shutdown(Shutdown::Write);
        let mut reply = Vec::new();
        let _ = stream.read_to_end(&mut reply);
        reply
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(session) = self.session.take() {
            let _ = session.join();
        }
    }
}

fn status(reply: &[u8]) -> Option<u16> {
    let text = std::str::from_utf8(reply.get(..12)?).ok()?;
    let code = text.strip_prefix("HTTP/1.1 ")?;
    code.parse().ok()
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

const VALID: &[&[u8]] = &[
    b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
    b"PUT /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello",
    b"POST /metrics HTTP/1.0\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\nabc",
    b"HEAD / HTTP/1.1\r\n\r\n",
];

/// A valid request, damaged: bytes flipped, cut, duplicated or spliced
/// with protocol tokens.
fn mutate(rng: &mut Rng) -> Vec<u8> {
    let mut bytes = VALID[rng.below(VALID.len())].to_vec();
    const TOKENS: &[&[u8]] = &[
        b"\r\n",
        b"\n",
        b"\r",
        b":",
        b" ",
        b"\0",
        b"Content-Length: 99999999999999999999\r\n",
        b"Content-Length: -1\r\n",
        b"Content-Length: 4\r\nContent-Length: 5\r\n",
        b"Transfer-Encoding: chunked\r\n",
        b"%00/../..",
        b"\xff\xfe",
        b"HTTP/9.9",
    ];
    for _ in 0..1 + rng.below(4) {
        if bytes.is_empty() {
            bytes.push(b'G');
        }
        let at = rng.below(bytes.len() + 1);
        match rng.below(4) {
            0 => {
                let i = rng.below(bytes.len());
                bytes[i] = rng.next() as u8;
            }
            1 => bytes.truncate(at),
            2 => {
                let token = TOKENS[rng.below(TOKENS.len())];
                bytes.splice(at..at, token.iter().copied());
            }
            _ => {
                let copy = bytes[at..].to_vec();
                bytes.extend_from_slice(&copy);
            }
        }
    }
    bytes
}

fn threads() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    field(&status, "Threads:")
}

fn rss_kib() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    field(&status, "VmRSS:")
}

fn field(status: &str, name: &str) -> usize {
    status
        .lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// Waits until the connection threads are gone (they end with their
/// connection, in the background).
fn settle(baseline: usize) -> usize {
    let deadline = Instant::now() + Duration::from_secs(10);
    while threads() > baseline && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(20));
    }
    threads()
}

#[test]
fn malformed_requests_get_4xx_and_nothing_leaks() {
    let harness = Harness::start();
    let base_threads = threads();
    let base_rss = rss_kib();
    let mut rng = Rng(0x5eed_cafe_f00d_0017);
    let mut statuses = std::collections::BTreeMap::new();
    for case in 0..3000 {
        let garbage = case % 2 == 0;
        let bytes = if garbage {
            let len = rng.below(2048);
            (0..len).map(|_| rng.next() as u8).collect()
        } else {
            mutate(&mut rng)
        };
        let started = Instant::now();
        let reply = harness.exchange(&bytes);
        assert!(
            started.elapsed() < IO_TIMEOUT + Duration::from_secs(2),
            "case {case} took {:?}: {bytes:?}",
            started.elapsed()
        );
        if reply.is_empty() {
            // Only a request that sent nothing is closed without a reply.
            assert!(bytes.is_empty(), "case {case}: no reply to {bytes:?}");
            continue;
        }
        let code = status(&reply)
            .unwrap_or_else(|| panic!("case {case}: malformed reply {reply:?} to {bytes:?}"));
        *statuses.entry(code).or_insert(0) += 1;
        if garbage {
            assert!(
                (400..500).contains(&code),
                "case {case}: {code} for garbage {bytes:?}"
            );
        } else {
            assert!(
                code == 200 || (400..500).contains(&code),
                "case {case}: {code} for {bytes:?}"
            );
        }
    }
    eprintln!("statuses: {statuses:?}");
    assert!(statuses.contains_key(&400) && statuses.contains_key(&200));
    assert_eq!(status(&harness.exchange(VALID[0])), Some(200));
    let left = settle(base_threads);
    assert!(
        left <= base_threads,
        "threads: {base_threads} before, {left} after"
    );
    let grown = rss_kib().saturating_sub(base_rss);
    assert!(grown < 32 * 1024, "RSS grew by {grown} KiB");
}

#[test]
fn oversized_heads_and_bodies_are_refused_without_buffering_them() {
    let harness = Harness::start();
    let base_rss = rss_kib();
    // An endless header line: refused once MAX_HEAD bytes arrived.
    let mut endless = b"GET /metrics HTTP/1.1\r\nX-Long: ".to_vec();
    endless.resize(8 * 1024 * 1024, b'a');
    assert_eq!(status(&harness.exchange(&endless)), Some(431));
    let many: String = (0..100).map(|i| format!("H{i}: v\r\n")).collect();
    let reply = harness.exchange(format!("GET /metrics HTTP/1.1\r\n{many}\r\n").as_bytes());
    assert_eq!(status(&reply), Some(431));
    // A body past maxsize (64): refused from its Content-Length.
    let mut big = b"PUT /metrics HTTP/1.1\r\nContent-Length: 10000000\r\n\r\n".to_vec();
    big.resize(big.len() + 1024 * 1024, b'b');
    assert_eq!(status(&harness.exchange(&big)), Some(413));
    let chunked =
        b"PUT /metrics HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n";
    assert_eq!(status(&harness.exchange(chunked)), Some(411));
    let ok = harness.exchange(
        b"PUT /metrics HTTP/1.1\r\nContent-Length: 64\r\n\r\n"
            .iter()
            .copied()
            .chain([b'c'; 64])
            .collect::<Vec<u8>>()
            .as_slice(),
    );
    assert_eq!(status(&ok), Some(200));
    assert!(String::from_utf8_lossy(&ok).ends_with("64 bytes\n"));
    let grown = rss_kib().saturating_sub(base_rss);
    assert!(grown < 32 * 1024, "RSS grew by {grown} KiB");
}

#[test]
fn idle_connections_time_out_and_never_block_the_server_for_long() {
    let harness = Harness::start();
    let idle: Vec<TcpStream> = (0..MAX_CONNECTIONS)
        .map(|_| TcpStream::connect(harness.addr).expect("connecting"))
        .collect();
    thread::sleep(Duration::from_millis(200));
    // Every slot is held: a newcomer is told so at once, not left hanging.
    let started = Instant::now();
    let reply = harness.exchange(VALID[0]);
    assert_eq!(status(&reply), Some(503));
    assert!(started.elapsed() < Duration::from_secs(2));
    // The idle ones are dropped after the I/O timeout; then all is well.
    thread::sleep(IO_TIMEOUT + Duration::from_secs(1));
    assert_eq!(status(&harness.exchange(VALID[0])), Some(200));
    drop(idle);
}
