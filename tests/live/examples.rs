//! The example scripts in examples/, run as users would run them, each
//! against traffic the test makes itself. The scripts print until stopped,
//! so each test ends its session with SIGINT (which runs `end` probes).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::Command;
use std::thread;
use std::time::Duration;

use super::{INNER_ADDR, OUTER_ADDR, Session, VethPair, assert_success, serial};

fn example(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples")
        .join(name)
        .display()
        .to_string()
}

/// Lets the last events reach the session, then stops it as Ctrl-C would.
fn interrupt(session: &Session) {
    thread::sleep(Duration::from_millis(500));
    let status = Command::new("kill")
        .args(["-INT", &session.pid().to_string()])
        .status()
        .expect("running kill");
    assert!(status.success(), "kill -INT failed");
}

/// A loopback connection: (client, server side, client address, server address).
fn loopback_pair() -> (TcpStream, TcpStream, SocketAddr, SocketAddr) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("binding a port");
    let server_addr = listener.local_addr().expect("local address");
    let client = TcpStream::connect(server_addr).expect("connecting");
    let (server, _) = listener.accept().expect("accepting");
    let client_addr = client.local_addr().expect("client address");
    (client, server, client_addr, server_addr)
}

#[test]
fn tcp_send_prints_one_line_per_send_with_addresses_ports_and_bytes() {
    let _one = serial();
    let mut session = Session::start(&[&example("tcp_send.stp")]);
    session.wait_ready();
    let (mut client, mut server, client_addr, server_addr) = loopback_pair();
    client.write_all(b"123456789").expect("sending");
    let mut got = [0u8; 9];
    server.read_exact(&mut got).expect("receiving");
    interrupt(&session);
    let done = session.finish();
    assert_success(&done);
    let tail = format!(
        "127.0.0.1:{} -> 127.0.0.1:{} 9",
        client_addr.port(),
        server_addr.port()
    );
    let lines: Vec<&str> = done.stdout.lines().filter(|l| l.ends_with(&tail)).collect();
    assert_eq!(lines.len(), 1, "stdout:\n{}", done.stdout);
    let pid = lines[0].split(' ').next().unwrap_or_default();
    assert_eq!(pid, std::process::id().to_string(), "{}", lines[0]);
}

#[test]
fn tcp_states_follows_a_connection_through_its_states() {
    let _one = serial();
    let mut session = Session::start(&[&example("tcp_states.stp")]);
    session.wait_ready();
    let (client, server, client_addr, server_addr) = loopback_pair();
    drop(client);
    drop(server);
    interrupt(&session);
    let done = session.finish();
    assert_success(&done);
    let (c, s) = (client_addr.port(), server_addr.port());
    for expected in [
        format!("127.0.0.1:{c} -> 127.0.0.1:{s} TCP_SYN_SENT -> TCP_ESTABLISHED"),
        format!("127.0.0.1:{s} -> 127.0.0.1:{c} TCP_SYN_RECV -> TCP_ESTABLISHED"),
        format!("127.0.0.1:{c} -> 127.0.0.1:{s} TCP_ESTABLISHED -> TCP_FIN_WAIT1"),
    ] {
        assert!(
            done.stdout.lines().any(|l| l.ends_with(&expected)),
            "no line ending in {expected:?}; stdout:\n{}",
            done.stdout
        );
    }
}

#[test]
fn tcp_retransmits_counts_syn_retransmits_to_a_silent_peer() {
    let _one = serial();
    let veth = VethPair::create();
    // The peer's replies (SYN-ACK or RST) are dropped on their way back,
    // so our SYN is retransmitted after its 1 s timeout.
    let blackhole = format!("{OUTER_ADDR}/32");
    let status = Command::new("ip")
        .args([
            "-n",
            &veth.namespace,
            "route",
            "add",
            "blackhole",
            &blackhole,
        ])
        .status()
        .expect("running ip");
    assert!(status.success(), "ip route add blackhole failed");
    let mut session = Session::start(&[&example("tcp_retransmits.stp")]);
    session.wait_ready();
    let peer: SocketAddr = format!("{INNER_ADDR}:9").parse().expect("address");
    let result = TcpStream::connect_timeout(&peer, Duration::from_millis(2500));
    assert!(result.is_err(), "the connection should time out");
    interrupt(&session);
    let done = session.finish();
    assert_success(&done);
    let event = format!("-> {INNER_ADDR}:9 TCP_SYN_SENT");
    assert!(
        done.stdout
            .lines()
            .any(|l| l.starts_with(&format!("retransmit {OUTER_ADDR}:")) && l.ends_with(&event)),
        "stdout:\n{}",
        done.stdout
    );
    assert!(
        done.stdout
            .lines()
            .any(|l| l.starts_with(&format!("{INNER_ADDR}:9: ")) && l.ends_with(" retransmits")),
        "stdout:\n{}",
        done.stdout
    );
}

#[test]
fn drop_reasons_names_the_function_and_the_reason() {
    let _one = serial();
    let mut session = Session::start(&[&example("drop_reasons.stp")]);
    session.wait_ready();
    // A connect to a closed loopback port: the SYN is dropped in
    // tcp_v4_rcv because no socket listens there.
    let port = super::closed_port();
    let refused = TcpStream::connect(("127.0.0.1", port));
    assert!(refused.is_err(), "port {port} should be closed");
    interrupt(&session);
    let done = session.finish();
    assert_success(&done);
    assert!(
        done.stdout.lines().any(|l| {
            let fields: Vec<&str> = l.split(' ').collect();
            matches!(fields[..], [count, "tcp_v4_rcv", "SKB_DROP_REASON_NO_SOCKET"]
                if count.parse::<u64>().is_ok_and(|n| n >= 1))
        }),
        "stdout:\n{}",
        done.stdout
    );
}

/// The stdlib's tcp.recvmsg alias gives stap's variables on the receiving
/// socket (on this host through the sock:sock_recv_length fallback).
#[test]
fn tcp_recvmsg_alias_gives_addresses_ports_size_and_family() {
    let _one = serial();
    let mut session = Session::start(&[
        "-e",
        r#"probe tcp.recvmsg {
             if (size == 7) printf("%s %s:%d -> %s:%d %d %d\n", name, saddr, sport, daddr, dport, size, family)
           }"#,
    ]);
    session.wait_ready();
    let (mut client, mut server, client_addr, server_addr) = loopback_pair();
    client.write_all(b"1234567").expect("sending");
    let mut got = [0u8; 7];
    server.read_exact(&mut got).expect("receiving");
    interrupt(&session);
    let done = session.finish();
    assert_success(&done);
    let expected = format!(
        "tcp.recvmsg 127.0.0.1:{} -> 127.0.0.1:{} 7 2",
        server_addr.port(),
        client_addr.port()
    );
    assert!(
        done.stdout.lines().any(|l| l == expected),
        "no line {expected:?}; stdout:\n{}",
        done.stdout
    );
}
