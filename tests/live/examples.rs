//! The example scripts in examples/, run as users would run them, each
//! against traffic the test makes itself. The scripts print until stopped,
//! so each test ends its session with SIGINT (which runs `end` probes).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
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

/// Runs `script` while 9 bytes cross a loopback connection, and checks it
/// printed exactly one `pid comm local:port -> remote:port 9` line, from
/// this process, with the client's end (or the server's) as the local end.
fn one_nine_byte_line(script: &str, client_is_local: bool) {
    let _one = serial();
    let mut session = Session::start(&[&example(script)]);
    session.wait_ready();
    let (mut client, mut server, client_addr, server_addr) = loopback_pair();
    client.write_all(b"123456789").expect("sending");
    let mut got = [0u8; 9];
    server.read_exact(&mut got).expect("receiving");
    interrupt(&session);
    let done = session.finish();
    assert_success(&done);
    let (local, remote) = if client_is_local {
        (client_addr, server_addr)
    } else {
        (server_addr, client_addr)
    };
    let tail = format!(
        "127.0.0.1:{} -> 127.0.0.1:{} 9",
        local.port(),
        remote.port()
    );
    let lines: Vec<&str> = done.stdout.lines().filter(|l| l.ends_with(&tail)).collect();
    assert_eq!(lines.len(), 1, "stdout:\n{}", done.stdout);
    let pid = lines[0].split(' ').next().unwrap_or_default();
    assert_eq!(pid, std::process::id().to_string(), "{}", lines[0]);
}

#[test]
fn tcp_send_prints_one_line_per_send_with_addresses_ports_and_bytes() {
    one_nine_byte_line("tcp_send.stp", true);
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

/// Runs `body` on a thread whose name (the kernel's comm, so `execname()`
/// in the scripts) is `comm`: the tests filter on it.
fn as_thread<T: Send + 'static>(comm: &str, body: impl FnOnce() -> T + Send + 'static) -> T {
    thread::Builder::new()
        .name(comm.to_string())
        .spawn(body)
        .expect("spawning a thread")
        .join()
        .expect("the traffic thread panicked")
}

/// `count` UDP datagrams of `payload` from a thread named `comm` to a
/// loopback port of our own; returns that port.
fn udp_from_thread(comm: &str, payload: &'static [u8], count: usize) -> u16 {
    let receiver = UdpSocket::bind("127.0.0.1:0").expect("binding a UDP port");
    let port = receiver.local_addr().expect("local address").port();
    as_thread(comm, move || {
        let sender = UdpSocket::bind("127.0.0.1:0").expect("binding the sender");
        for _ in 0..count {
            sender
                .send_to(payload, ("127.0.0.1", port))
                .expect("sending a datagram");
        }
    });
    let mut buf = [0u8; 2048];
    for _ in 0..count {
        receiver.recv(&mut buf).expect("receiving a datagram");
    }
    port
}

/// Why `kernel.function(NAME)` cannot be probed here, from stap-rs itself.
fn no_function_probes(name: &str) -> Option<String> {
    let script = format!("probe kernel.function(\"{name}\") {{ }}");
    let out = Command::new(env!("CARGO_BIN_EXE_stap-rs"))
        .args(["-p2", "-e", &script])
        .output()
        .expect("running stap-rs -p2");
    let stderr = String::from_utf8_lossy(&out.stderr);
    stderr
        .lines()
        .find(|l| l.contains("cannot be probed on this kernel"))
        .map(|l| l.trim_start_matches("error: ").to_string())
}

/// Why netfilter probes cannot run here, from stap-rs itself.
fn no_netfilter_probes() -> Option<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_stap-rs"))
        .args(["-p2", "-e", "probe netfilter.ip.local_out { }"])
        .output()
        .expect("running stap-rs -p2");
    let stderr = String::from_utf8_lossy(&out.stderr);
    stderr
        .lines()
        .find(|l| l.contains("netfilter probes are not available"))
        .map(|l| l.trim_start_matches("error: ").to_string())
}

#[test]
fn tcp_recv_prints_one_line_per_receive_with_addresses_ports_and_bytes() {
    // The receiving end is this host's end: server first.
    one_nine_byte_line("tcp_recv.stp", false);
}

#[test]
fn tcp_connections_shows_both_ends_of_a_loopback_connection() {
    let _one = serial();
    let mut session = Session::start(&[&example("tcp_connections.stp")]);
    session.wait_ready();
    let (_client, _server, client_addr, server_addr) = loopback_pair();
    interrupt(&session);
    let done = session.finish();
    assert_success(&done);
    let (c, s) = (client_addr.port(), server_addr.port());
    for expected in [
        format!("connected 127.0.0.1:{c} -> 127.0.0.1:{s}"),
        format!("accepted  127.0.0.1:{s} <- 127.0.0.1:{c}"),
    ] {
        let matching = done.stdout.lines().filter(|l| *l == expected).count();
        assert_eq!(matching, 1, "{expected:?}; stdout:\n{}", done.stdout);
    }
}

#[test]
fn nettop_reports_packets_and_kilobytes_per_process_and_device() {
    let _one = serial();
    let mut session = Session::start(&["-G", "interval=1", &example("nettop.stp")]);
    session.wait_ready();
    // 12 datagrams of 1000 bytes: 12 packets and 12 * 1042 bytes on lo
    // (Ethernet, IP and UDP headers included), so 12 KB.
    udp_from_thread("stapNtop", &[b'n'; 1000], 12);
    // Past one periodic report, then the report at exit.
    thread::sleep(Duration::from_millis(1500));
    interrupt(&session);
    let done = session.finish();
    assert_success(&done);
    let headers = done
        .stdout
        .lines()
        .filter(|l| {
            l.split_whitespace().collect::<Vec<_>>()[..]
                == [
                    "PID", "UID", "DEV", "XMIT_PK", "RECV_PK", "XMIT_KB", "RECV_KB", "COMMAND",
                ]
        })
        .count();
    assert!(
        headers >= 2,
        "a periodic report and one at exit; stdout:\n{}",
        done.stdout
    );
    let pid = std::process::id().to_string();
    let ours: Vec<Vec<&str>> = done
        .stdout
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|f| f.len() == 8 && f[0] == pid && f[2] == "lo" && f[7] == "stapNtop")
        .collect();
    // A report may fall between two sends: add up over the reports.
    let total = |i: usize| -> u64 {
        ours.iter()
            .map(|f| f[i].parse::<u64>().expect("a number"))
            .sum()
    };
    assert_eq!(total(3), 12, "XMIT_PK; stdout:\n{}", done.stdout);
    assert!(
        (11..=12).contains(&total(5)),
        "XMIT_KB; stdout:\n{}",
        done.stdout
    );
}

/// Why netfilter programs cannot read the current task (execname() and
/// pid()) on this kernel: older kernels' BPF_PROG_TYPE_NETFILTER lacks
/// bpf_get_current_comm, so loading such a probe fails.
fn netfilter_cannot_name_the_task() -> Option<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_stap-rs"))
        .args([
            "-T",
            "1",
            "-e",
            r#"probe netfilter.ip.local_out { if (execname() == "" && pid() == 0) print("") }"#,
        ])
        .output()
        .expect("running stap-rs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    stderr
        .lines()
        .find(|l| l.contains("cannot use helper"))
        .map(|l| l.trim_start_matches("error: ").to_string())
}

/// Runs wherever netfilter programs may read the current task (this host's
/// 6.18; not 6.12, whose netfilter programs lack bpf_get_current_comm, nor
/// 6.1, which has no netfilter links).
#[test]
fn who_sent_it_names_the_sender_of_packets_to_the_given_port() {
    let _one = serial();
    if let Some(reason) = no_netfilter_probes().or_else(netfilter_cannot_name_the_task) {
        eprintln!("stap-rs-skip: {reason}");
        return;
    }
    // Bind the port first so the -G filter can name it.
    let receiver = UdpSocket::bind("127.0.0.1:0").expect("binding a UDP port");
    let port = receiver.local_addr().expect("local address").port();
    let mut session = Session::start(&[
        "-G",
        &format!("port={port}"),
        "-G",
        "proto=17",
        &example("who_sent_it.stp"),
    ]);
    session.wait_ready();
    as_thread("stapWho", move || {
        let sender = UdpSocket::bind("127.0.0.1:0").expect("binding the sender");
        sender
            .send_to(b"stap-rs", ("127.0.0.1", port))
            .expect("sending a datagram");
    });
    let mut buf = [0u8; 16];
    receiver.recv(&mut buf).expect("receiving");
    interrupt(&session);
    let done = session.finish();
    assert_success(&done);
    let lines: Vec<&str> = done.stdout.lines().collect();
    // 35 bytes: IP header, UDP header and "stap-rs".
    let expected_start = format!("stapWho {} 17 127.0.0.1:", std::process::id());
    let expected_end = format!(" -> 127.0.0.1:{port} 35");
    assert_eq!(
        lines.len(),
        1,
        "only our datagram passes the filters; stdout:\n{}",
        done.stdout
    );
    assert!(
        lines[0].starts_with(&expected_start) && lines[0].ends_with(&expected_end),
        "{:?}",
        lines[0]
    );
}

/// On kernels with function probes the script uses ip_output, elsewhere
/// the NF_INET_POST_ROUTING hook; the output is the same. Runs on the host
/// and in the VMs (`tests/vm/run 6.12 -- packet_filter`).
#[test]
fn packet_filter_prints_sender_and_payload_of_matching_udp_packets() {
    let _one = serial();
    if no_function_probes("ip_output").is_some()
        && let Some(reason) = no_netfilter_probes()
    {
        eprintln!("stap-rs-skip: neither ip_output nor netfilter hooks: {reason}");
        return;
    }
    let receiver = UdpSocket::bind("127.0.0.1:0").expect("binding a UDP port");
    let port = receiver.local_addr().expect("local address").port();
    let mut session = Session::start(&[
        "-G",
        "addr=127.0.0.1",
        "-G",
        &format!("port={port}"),
        &example("packet_filter.stp"),
    ]);
    session.wait_ready();
    as_thread("stapPkt", move || {
        let sender = UdpSocket::bind("127.0.0.1:0").expect("binding the sender");
        sender
            .send_to(b"surftrace-payload", ("127.0.0.1", port))
            .expect("sending a datagram");
    });
    let mut buf = [0u8; 32];
    receiver.recv(&mut buf).expect("receiving");
    interrupt(&session);
    let done = session.finish();
    assert_success(&done);
    let lines: Vec<&str> = done.stdout.lines().collect();
    assert_eq!(lines.len(), 1, "stdout:\n{}", done.stdout);
    let start = format!("stapPkt {} 127.0.0.1:", std::process::id());
    let end = format!(" -> 127.0.0.1:{port} len 45 payload \"surftrace-payload\"");
    assert!(
        lines[0].starts_with(&start) && lines[0].ends_with(&end),
        "{:?}",
        lines[0]
    );
}

/// The hops of one 9-byte send, in order, with their lengths: the
/// kernel.function hops in the VMs (`tests/vm/run 6.12 -- tcp_path`,
/// `tests/vm/run 6.1 -- tcp_path`), the tracepoint and netfilter stand-ins
/// on a kernel without function probes (this host).
#[test]
fn tcp_path_follows_one_send_through_the_stack() {
    let _one = serial();
    let functions = no_function_probes("__tcp_transmit_skb").is_none();
    if !functions && let Some(reason) = no_netfilter_probes() {
        eprintln!("stap-rs-skip: neither function probes nor netfilter hooks: {reason}");
        return;
    }
    let listener = TcpListener::bind("127.0.0.1:0").expect("binding a port");
    let server_addr = listener.local_addr().expect("local address");
    let mut session = Session::start(&[
        "-G",
        &format!("port={}", server_addr.port()),
        &example("tcp_path.stp"),
    ]);
    session.wait_ready();
    let client = TcpStream::connect(server_addr).expect("connecting");
    let (mut server, _) = listener.accept().expect("accepting");
    let client_port = client.local_addr().expect("client address").port();
    as_thread("stapPath", move || {
        let mut client = client;
        client.write_all(b"123456789").expect("sending");
        client
    });
    let mut got = [0u8; 9];
    server.read_exact(&mut got).expect("receiving");
    interrupt(&session);
    let done = session.finish();
    assert_success(&done);
    // (hop, skb length): 9 data bytes, + 32 TCP header bytes (timestamps),
    // + 20 IP, + 14 Ethernet.
    let expected: &[(&str, u64)] = if functions {
        &[
            ("tcp_sendmsg", 9),
            ("__tcp_transmit_skb", 9),
            ("ip_queue_xmit", 41),
            ("ip_output", 61),
            ("__dev_queue_xmit", 75),
        ]
    } else {
        &[
            ("tcp_sendmsg_locked", 9),
            ("NF_INET_LOCAL_OUT", 61),
            ("NF_INET_POST_ROUTING", 61),
            ("net_dev_queue", 75),
        ]
    };
    let conn = format!("{client_port}->{}", server_addr.port());
    // TIME_NS +DELTA_US COMM HOP sport->dport len LEN, our thread's only.
    let hops: Vec<(u64, &str, u64)> = done
        .stdout
        .lines()
        .map(|l| l.split(' ').collect::<Vec<_>>())
        .filter(|f| f.len() == 7 && f[2] == "stapPath" && f[4] == conn)
        .map(|f| {
            let number = |s: &str| s.parse::<u64>().expect("a number");
            (number(f[0]), f[3], number(f[6]))
        })
        .collect();
    let start = hops
        .iter()
        .position(|(_, hop, _)| *hop == expected[0].0)
        .unwrap_or_else(|| panic!("no {} hop; stdout:\n{}", expected[0].0, done.stdout));
    let seen: Vec<(&str, u64)> = hops[start..]
        .iter()
        .take(expected.len())
        .map(|(_, hop, len)| (*hop, *len))
        .collect();
    assert_eq!(seen, expected, "stdout:\n{}", done.stdout);
    let times: Vec<u64> = hops[start..start + expected.len()]
        .iter()
        .map(|h| h.0)
        .collect();
    assert!(
        times.windows(2).all(|w| w[0] <= w[1]),
        "timestamps: {times:?}"
    );
}

/// The netdev.* aliases on UDP datagrams over loopback: sent through
/// netdev.transmit and netdev.hard_transmit, received through netdev.rx
/// (loopback queues to the backlog) and netdev.receive.
#[test]
fn netdev_aliases_see_a_loopback_datagram_both_ways() {
    let _one = serial();
    let mut session = Session::start(&[
        "-e",
        r#"probe netdev.transmit { if (execname() == "stapNdev") printf("transmit %s %d %x %d\n", dev_name, length, ntohs(protocol), truesize > length) }
           probe netdev.hard_transmit { if (execname() == "stapNdev") printf("hard_transmit %s %d %x\n", dev_name, length, ntohs(protocol)) }
           probe netdev.rx { if (execname() == "stapNdev") printf("rx %s %s %x\n", dev_name, get_netdev_name(netdev), ntohs(protocol)) }
           probe netdev.receive { if (execname() == "stapNdev") printf("receive %s %d %x\n", dev_name, length, ntohs(protocol)) }"#,
    ]);
    session.wait_ready();
    // 100 bytes of data: 142 on the wire, 128 once the stack has taken the
    // Ethernet header off. Loopback receives in the sender's softirq, so
    // the receive side runs under our thread's name too.
    udp_from_thread("stapNdev", &[b'd'; 100], 1);
    interrupt(&session);
    let done = session.finish();
    assert_success(&done);
    for expected in [
        "transmit lo 142 800 1",
        "hard_transmit lo 142 800",
        "rx lo lo 800",
        "receive lo 128 800",
    ] {
        assert!(
            done.stdout.lines().any(|l| l == expected),
            "no line {expected:?}; stdout:\n{}",
            done.stdout
        );
    }
}

/// tcp.sendmsg.return and tcp.recvmsg.return, with the sizes done.
#[test]
fn tcp_return_aliases_give_bytes_sent_and_received() {
    let _one = serial();
    let mut session = Session::start(&[
        "-e",
        r#"probe tcp.sendmsg.return, tcp.recvmsg.return {
             if (size == 11) printf("%s %s:%d -> %s:%d %d\n", name, saddr, sport, daddr, dport, size)
           }"#,
    ]);
    session.wait_ready();
    let (mut client, mut server, client_addr, server_addr) = loopback_pair();
    client.write_all(b"hello world").expect("sending");
    let mut got = [0u8; 11];
    server.read_exact(&mut got).expect("receiving");
    interrupt(&session);
    let done = session.finish();
    assert_success(&done);
    let (c, s) = (client_addr.port(), server_addr.port());
    for expected in [
        format!("tcp.sendmsg 127.0.0.1:{c} -> 127.0.0.1:{s} 11"),
        format!("tcp.recvmsg 127.0.0.1:{s} -> 127.0.0.1:{c} 11"),
    ] {
        assert!(
            done.stdout.lines().any(|l| l == expected),
            "no line {expected:?}; stdout:\n{}",
            done.stdout
        );
    }
}

/// The udp.* send and receive aliases, entries and returns, on a
/// connected UDP pair.
#[test]
fn udp_aliases_see_a_send_and_its_receive() {
    let _one = serial();
    let mut session = Session::start(&[
        "-e",
        r#"probe udp.sendmsg, udp.recvmsg {
             if (execname() == "stapUdp") printf("call %s %s:%d -> %s:%d %d\n", name, saddr, sport, daddr, dport, family)
           }
           probe udp.sendmsg.return, udp.recvmsg.return {
             if (execname() == "stapUdp") printf("return %s %s:%d -> %s:%d %d %d\n", name, saddr, sport, daddr, dport, size, family)
           }"#,
    ]);
    session.wait_ready();
    let receiver = UdpSocket::bind("127.0.0.1:0").expect("binding a UDP port");
    let sender = UdpSocket::bind("127.0.0.1:0").expect("binding the sender");
    let (r, s) = (
        receiver.local_addr().expect("address").port(),
        sender.local_addr().expect("address").port(),
    );
    sender.connect(("127.0.0.1", r)).expect("connecting");
    receiver.connect(("127.0.0.1", s)).expect("connecting");
    as_thread("stapUdp", move || {
        sender.send(b"1234567").expect("sending");
        let mut buf = [0u8; 16];
        receiver.recv(&mut buf).expect("receiving")
    });
    interrupt(&session);
    let done = session.finish();
    assert_success(&done);
    for expected in [
        format!("call udp.sendmsg 127.0.0.1:{s} -> 127.0.0.1:{r} 2"),
        format!("call udp.recvmsg 127.0.0.1:{r} -> 127.0.0.1:{s} 2"),
        format!("return udp.sendmsg 127.0.0.1:{s} -> 127.0.0.1:{r} 7 2"),
        format!("return udp.recvmsg 127.0.0.1:{r} -> 127.0.0.1:{s} 7 2"),
    ] {
        let matching = done.stdout.lines().filter(|l| *l == expected).count();
        assert_eq!(matching, 1, "{expected:?}; stdout:\n{}", done.stdout);
    }
}

/// socket.sendmsg, socket.send, socket.recvmsg and socket.receive
/// (__sock_sendmsg and sock_recvmsg, or their tracepoints) with the
/// socket's protocol, family, state and type.
#[test]
fn socket_send_and_receive_give_size_and_socket_values() {
    let _one = serial();
    let mut session = Session::start(&[
        "-e",
        r#"probe socket.send, socket.receive {
             if (execname() == "stapSock") printf("%s %d %d p%d f%d s%d t%d\n", name, size, success, protocol, family, state, type)
           }
           probe socket.sendmsg, socket.recvmsg {
             if (execname() == "stapSock") printf("%s %d p%d f%d s%d t%d\n", name, size, protocol, family, state, type)
           }"#,
    ]);
    session.wait_ready();
    let (client, server, _, _) = loopback_pair();
    as_thread("stapSock", move || {
        let (mut client, mut server) = (client, server);
        client.write_all(b"12345").expect("sending");
        let mut got = [0u8; 5];
        server.read_exact(&mut got).expect("receiving");
    });
    interrupt(&session);
    let done = session.finish();
    assert_success(&done);
    // TCP (6) over AF_INET (2), SS_CONNECTED (3), SOCK_STREAM (1).
    for expected in [
        "socket.sendmsg 5 p6 f2 s3 t1",
        "socket.send 5 1 p6 f2 s3 t1",
        "socket.recvmsg 5 p6 f2 s3 t1",
        "socket.receive 5 1 p6 f2 s3 t1",
    ] {
        assert!(
            done.stdout.lines().any(|l| l == expected),
            "no line {expected:?}; stdout:\n{}",
            done.stdout
        );
    }
}

/// Aliases with no tracepoint of the same meaning fail clearly on a kernel
/// without function probes (this host).
#[test]
fn function_only_aliases_fail_clearly_without_function_probes() {
    if no_function_probes("tcp_disconnect").is_none() {
        eprintln!("stap-rs-skip: this kernel can probe functions");
        return;
    }
    for alias in [
        "tcp.disconnect",
        "tcp.setsockopt",
        "tcp.receive",
        "udp.disconnect",
        "socket.create",
        "socket.close",
    ] {
        let script = format!("probe {alias} {{ print(name) }}");
        let out = Command::new(env!("CARGO_BIN_EXE_stap-rs"))
            .args(["-p2", "-e", &script])
            .output()
            .expect("running stap-rs -p2");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{alias}");
        assert!(
            stderr.contains("cannot be probed on this kernel")
                && stderr.contains(&format!("in probe alias `{alias}`")),
            "{alias}: {stderr}"
        );
    }
}

/// The function-only aliases and the `.return` aliases that use
/// `@entry`, in the VMs (`tests/vm/run 6.12 -- function_only_aliases`,
/// `tests/vm/run 6.1 -- function_only_aliases`), with fentry/fexit.
#[test]
fn function_only_aliases_see_connect_setsockopt_receive_disconnect_and_close() {
    function_only_aliases(&[]);
}

/// The same with kprobes and kretprobes, where the arguments of a
/// `.return` alias come from `@entry`.
#[test]
fn function_only_aliases_with_kprobes() {
    if !Path::new("/sys/bus/event_source/devices/kprobe").exists() {
        eprintln!("stap-rs-skip: no kprobe PMU (/sys/bus/event_source/devices/kprobe)");
        return;
    }
    function_only_aliases(&["--kernel-probes=kprobe"]);
}

/// One run of `trigger sockops` makes each alias's event happen.
fn function_only_aliases(options: &[&str]) {
    let _one = serial();
    if let Some(reason) = no_function_probes("tcp_disconnect") {
        eprintln!("stap-rs-skip: {reason}");
        return;
    }
    let trigger = super::build("trigger");
    let listener = TcpListener::bind("127.0.0.1:0").expect("binding a port");
    let port = listener.local_addr().expect("local address").port();
    let script = format!(
        r#"global seen
probe tcp.setsockopt {{ if (execname() == "stapFunc" && !seen[name]++) printf("%s %s %d %d\n", name, optstr, level, optlen) }}
probe tcp.sendmsg.return {{ if (execname() == "stapFunc" && !seen[name]++) printf("%s.return %d %s:%d\n", name, size, daddr, dport) }}
probe tcp.setsockopt.return, tcp.disconnect.return, udp.disconnect.return {{
  if (execname() == "stapFunc" && !seen[name . ".return"]++) printf("%s.return %d\n", name, ret)
}}
probe tcp.disconnect, udp.disconnect {{ if (execname() == "stapFunc" && !seen[name]++) printf("%s %s:%d\n", name, daddr, dport) }}
probe tcp.receive {{ if (dport == {port} && syn && !ack && !seen[name]++) printf("%s syn %s -> %s:%d\n", name, saddr, daddr, dport) }}
probe socket.create {{ if (execname() == "stapFunc" && !seen[name]++) printf("%s f%d t%d r%d\n", name, family, type, requester) }}
probe socket.create.return {{ if (execname() == "stapFunc" && !seen[name . ".return"]++) printf("%s.return %d\n", name, success) }}
probe socket.close {{ if (execname() == "stapFunc" && !seen[name]++) printf("%s f%d t%d\n", name, family, type) }}
probe socket.close.return {{ if (execname() == "stapFunc" && !seen[name . ".return"]++) printf("%s.return\n", name) }}"#
    );
    let mut args = options.to_vec();
    args.extend(["-e", &script]);
    let mut session = Session::start(&args);
    session.wait_ready();
    let status = Command::new(&trigger)
        .args(["stapFunc", "sockops", &port.to_string()])
        .status()
        .expect("running the trigger");
    assert!(status.success(), "trigger sockops failed: {status}");
    drop(listener);
    interrupt(&session);
    let done = session.finish();
    assert_success(&done);
    let expected = [
        "tcp.setsockopt TCP_NODELAY 6 4".to_string(),
        format!("tcp.sendmsg.return 5 127.0.0.1:{port}"),
        "tcp.setsockopt.return 0".to_string(),
        format!("tcp.disconnect 127.0.0.1:{port}"),
        "tcp.disconnect.return 0".to_string(),
        format!("udp.disconnect 127.0.0.1:{port}"),
        "udp.disconnect.return 0".to_string(),
        format!("tcp.ipv4.receive syn 127.0.0.1 -> 127.0.0.1:{port}"),
        "socket.create f2 t1 r0".to_string(),
        "socket.create.return 1".to_string(),
        "socket.close f2 t1".to_string(),
        "socket.close.return".to_string(),
    ];
    for line in expected {
        assert!(
            done.stdout.lines().any(|l| l == line),
            "no line {line:?}; stdout:\n{}",
            done.stdout
        );
    }
}
