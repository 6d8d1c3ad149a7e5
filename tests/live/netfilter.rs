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
