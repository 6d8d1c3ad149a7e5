//! Netfilter probes through BPF netfilter links (Linux 6.4+): the test
//! sends UDP datagrams to a loopback port of its own and the script sees
//! them on the way out (the `netfilter.ip.local_out` alias) and on the way
//! in (a raw `netfilter.hook` point).

use std::net::UdpSocket;
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use super::{FINISH_TIMEOUT, Session, assert_success, serial};

/// Why this kernel cannot run netfilter probes, from stap-rs itself.
fn unavailable() -> Option<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_stap-rs"))
        .args(["-p2", "-e", "probe netfilter.ip.local_out { }"])
        .output()
        .expect("running stap-rs -p2");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = stderr
        .lines()
        .find(|l| l.contains("netfilter probes are not available"))?;
    Some(line.trim_start_matches("error: ").to_string())
}

#[test]
fn udp_to_a_loopback_port_is_seen_at_local_out_and_local_in() {
    let _one = serial();
    if let Some(reason) = unavailable() {
        eprintln!("stap-rs-skip: {reason}");
        return;
    }
    let receiver = UdpSocket::bind("127.0.0.1:0").expect("binding a UDP port");
    let port = receiver.local_addr().expect("local address").port();
    let script = format!(
        r#"global out, inp
probe netfilter.ip.local_out {{
  if (protocol == 17 && dport == {port} && !out++)
    printf("out %s:%d dev %s\n", daddr, dport, outdev_name)
}}
probe netfilter.hook("NF_INET_LOCAL_IN").pf("NF_INET").priority("-5") {{
  if (ntohs(@cast(__get_skb_iphdr($skb) + 20, "struct udphdr")->dest) == {port} && !inp++)
    printf("in hook %d dev %s\n", $hooknum, __nf_dev_name($indev))
}}
probe netfilter.ip.local_out, netfilter.ip.local_in {{
  if (out && inp) exit()
}}"#
    );
    let mut session = Session::start(&["-e", &script]);
    session.wait_ready();
    let sender = UdpSocket::bind("127.0.0.1:0").expect("binding the sender");
    let deadline = Instant::now() + FINISH_TIMEOUT;
    while !session.has_exited() && Instant::now() < deadline {
        sender
            .send_to(b"stap-rs", ("127.0.0.1", port))
            .expect("sending a datagram");
        thread::sleep(Duration::from_millis(200));
    }
    let done = session.finish();
    assert_success(&done);
    // The two handlers may print in either order.
    let mut lines: Vec<&str> = done.stdout.lines().collect();
    lines.sort_unstable();
    let out = format!("out 127.0.0.1:{port} dev lo");
    assert_eq!(
        lines,
        ["in hook 1 dev lo", out.as_str()],
        "stderr:\n{}",
        done.stderr
    );
}

/// Under -g, `$verdict = nf_drop` drops the packet: the script drops the
/// first 7-byte datagram to the test's port at local_in and exits. Each
/// round sends that datagram, then a 12-byte marker, and reads what
/// arrives first: the marker, in the round whose datagram the script
/// dropped (loopback UDP keeps order). Without -g the line is an error.
#[test]
fn a_guru_netfilter_probe_drops_a_datagram() {
    let _one = serial();
    if let Some(reason) = unavailable() {
        eprintln!("stap-rs-skip: {reason}");
        return;
    }
    let receiver = UdpSocket::bind("127.0.0.1:0").expect("binding a UDP port");
    let port = receiver.local_addr().expect("local address").port();
    receiver
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("read timeout");
    // The IP length of a 7-byte UDP payload: 20 + 8 + 7.
    let script = format!(
        r#"probe netfilter.ipv4.local_in {{
  if (protocol == 17 && dport == {port} && length == 35) {{
    $verdict = nf_drop
    printf("dropped %d bytes to port %d\n", length, dport)
    exit()
  }}
}}"#
    );
    let refused = Command::new(env!("CARGO_BIN_EXE_stap-rs"))
        .args(["-p2", "-e", &script])
        .output()
        .expect("running stap-rs -p2");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("setting the probe's verdict requires guru mode (-g)"),
        "{stderr}"
    );
    let mut session = Session::start(&["-g", "-e", &script]);
    session.wait_ready();
    let sender = UdpSocket::bind("127.0.0.1:0").expect("binding the sender");
    let deadline = Instant::now() + FINISH_TIMEOUT;
    let mut rounds_dropped = 0;
    let mut buffer = [0u8; 64];
    while !session.has_exited() && Instant::now() < deadline {
        sender
            .send_to(b"drop-me", ("127.0.0.1", port))
            .expect("send");
        sender
            .send_to(b"marker-12345", ("127.0.0.1", port))
            .expect("send");
        let n = receiver.recv(&mut buffer).expect("a datagram arrives");
        if &buffer[..n] == b"marker-12345" {
            rounds_dropped += 1;
        } else {
            assert_eq!(&buffer[..n], b"drop-me");
            let n = receiver.recv(&mut buffer).expect("the marker arrives");
            assert_eq!(&buffer[..n], b"marker-12345");
        }
        thread::sleep(Duration::from_millis(100));
    }
    let done = session.finish();
    assert_success(&done);
    assert_eq!(done.stdout, format!("dropped 35 bytes to port {port}\n"));
    assert_eq!(rounds_dropped, 1, "one datagram dropped, in one round");
}
