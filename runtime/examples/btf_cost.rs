//! What reading BTF costs: the questions `examples/drops.stp` asks, answered
//! lazily, against decoding every type.
//!
//! Run with `cargo run --release -p stap-runtime --example btf_cost [BTF_FILE]`.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use stap_lang::kernel::{KernelFacts, TracepointArgs, find_member};
use stap_runtime::btf::{Btf, Kind};
use stap_runtime::kernel::{BtfKernel, DEFAULT_VMLINUX};

const RUNS: usize = 15;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = PathBuf::from(
        std::env::args()
            .nth(1)
            .unwrap_or_else(|| DEFAULT_VMLINUX.to_string()),
    );

    let open = measure(|| {
        let btf = Btf::open(&path).expect("BTF opens");
        assert!(btf.type_count() > 0);
    });

    let drops = measure(|| {
        let kernel = BtfKernel::open(&path).expect("BTF opens");
        drops_questions(&kernel).expect("drops.stp's questions have answers");
    });

    let full = measure(|| {
        let btf = Btf::open(&path).expect("BTF opens");
        btf.decode_all().expect("every type decodes");
    });

    // The fifth and later lookups of a kind go through a name index, built
    // once per kind: this is its cost for FUNC, the largest kind.
    let function_index = measure(|| {
        let btf = Btf::open(&path).expect("BTF opens");
        for _ in 0..5 {
            btf.find_by_name(Kind::Func, "tcp_sendmsg")
                .expect("no error")
                .expect("tcp_sendmsg is there");
        }
    });

    let btf = Btf::open(&path)?;
    let (types, strings) = btf.section_sizes();
    println!(
        "{}: {} types, {} KiB of types, {} KiB of strings",
        path.display(),
        btf.type_count(),
        types / 1024,
        strings / 1024
    );
    println!("min / median over {RUNS} runs:");
    report("open (header + record offsets)", &open);
    report("open + drops.stp's questions", &drops);
    report("open + FUNC name index + 5 lookups", &function_index);
    report("open + full decode of every type", &full);

    let kernel = BtfKernel::open(&path)?;
    let fentry = measure_once(|| kernel.fentry().clone());
    println!(
        "fentry probe (first call): {:.2} ms: {:?}",
        ms(fentry.0),
        fentry.1
    );
    Ok(())
}

/// What elaborating drops.stp asks: kfree_skb's args, sk_buff.dev,
/// net_device.name.
fn drops_questions(kernel: &BtfKernel) -> Result<(), String> {
    let tp = kernel
        .tracepoint(None, "kfree_skb")
        .map_err(|e| e.0)?
        .ok_or("no kfree_skb")?;
    let TracepointArgs::Raw(params) = &tp.args else {
        return Err("kfree_skb is not a raw tracepoint".into());
    };
    if !params.iter().any(|p| p.name == "location") {
        return Err("kfree_skb has no $location".into());
    }
    let skb = kernel
        .find_type("struct sk_buff")
        .map_err(|e| e.0)?
        .ok_or("no struct sk_buff")?;
    find_member(kernel, skb, "dev").ok_or("no sk_buff.dev")?;
    let dev = kernel
        .find_type("struct net_device")
        .map_err(|e| e.0)?
        .ok_or("no struct net_device")?;
    find_member(kernel, dev, "name").ok_or("no net_device.name")?;
    Ok(())
}

fn measure(mut f: impl FnMut()) -> Vec<Duration> {
    let mut times: Vec<Duration> = (0..RUNS)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed()
        })
        .collect();
    times.sort();
    times
}

fn measure_once<T>(f: impl FnOnce() -> T) -> (Duration, T) {
    let start = Instant::now();
    let value = f();
    (start.elapsed(), value)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn report(what: &str, times: &[Duration]) {
    println!(
        "  {what:<36} {:>7.2} ms / {:>7.2} ms",
        ms(times[0]),
        ms(times[times.len() / 2])
    );
}
