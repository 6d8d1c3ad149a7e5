//! Pass 3: scripts elaborated against the fake kernel, lowered to the IR,
//! verified, and snapshotted as the `--dump=ir` listing. Every module
//! lowered here must pass `ir::verify`.

use stap_lang::diag::render_plain;
use stap_lang::ir::{
    self, Failure, Function, Module, Op, PrintArg, SortBy, Storage, SymbolText, Term,
};
use stap_lang::kernel::{KernelFacts, Mechanisms};
use stap_lang::sema::{ElabOptions, Placement};
use stap_lang::testing::FakeKernel;

mod common;

/// Parses and elaborates `script`, then lowers it: the module and its
/// listing, or the rendered lowering diagnostics.
fn lower_with(script: &str, facts: &dyn KernelFacts) -> Result<(Module, String), String> {
    let elaborated = common::elaborate_text(script, &[], facts, &ElabOptions::default());
    let map = &elaborated.map;
    let Some(program) = &elaborated.program else {
        panic!("elaboration failed:\n{}", elaborated.rendered());
    };
    match ir::lower::lower(program) {
        Ok(module) => {
            if let Err(errors) = ir::verify::verify(&module) {
                panic!(
                    "the lowered module fails verification:\n{}\n\n{}",
                    errors.join("\n"),
                    ir::print::print_module(&module, map)
                );
            }
            let listing = ir::print::print_module(&module, map);
            Ok((module, listing))
        }
        Err(diags) => Err(render_plain(map, &diags)),
    }
}

fn lower(script: &str) -> (Module, String) {
    lower_with(script, &FakeKernel::new()).unwrap_or_else(|d| panic!("lowering failed:\n{d}"))
}

fn listing(script: &str) -> String {
    lower(script).1
}

fn function<'m>(module: &'m Module, name: &str) -> &'m Function {
    module
        .functions
        .iter()
        .find(|f| f.name == name)
        .unwrap_or_else(|| panic!("no function {name}"))
}

fn ops(f: &Function) -> impl Iterator<Item = &Op> {
    f.blocks.iter().flat_map(|b| b.insts.iter().map(|i| &i.op))
}

#[test]
fn drops_seed_script() {
    let script = std::fs::read_to_string("../examples/drops.stp").expect("examples/drops.stp");
    let (module, text) =
        lower_with(&script, &FakeKernel::like_this_host()).expect("drops.stp lowers");
    assert_eq!(module.probes.len(), 2);
    assert_eq!(
        module.function(module.probes[0].function).side,
        Placement::Kernel
    );
    assert_eq!(
        module.function(module.probes[1].function).side,
        Placement::Host
    );
    // funcs is keyed by (location, device) and only counted.
    assert!(matches!(
        &module.globals[0].storage,
        Storage::Stats { keys, max_entries: 2048, .. } if keys.len() == 2
    ));
    insta::assert_snapshot!(text);
}

#[test]
fn arithmetic_with_checked_division() {
    let script = r#"
probe begin {
  a = 7; b = 2
  q = a / b
  r = a % (b - 2)
  a += 3; a -= 1; a *= 2; a /= b; a %= 5
  a <<= 2; a >>= 1; a &= 12; a |= 1; a ^= 3
  n = -a + ~b + !q
  t = a > b ? a : b
  ok = a && b || !q
  x = a++ + ++b
  println(q, r, n, t, ok, x)
}
"#;
    let (module, text) = lower(script);
    let handler = &module.functions[0];
    let divisions = ops(handler)
        .filter(|op| {
            matches!(
                op,
                Op::Binary {
                    op: ir::BinOp::Div | ir::BinOp::Mod,
                    ..
                }
            )
        })
        .count();
    let checks = handler
        .blocks
        .iter()
        .filter(|b| b.term == Term::Fail(Failure::DivisionByZero))
        .count();
    assert_eq!(divisions, 4);
    // `a %= 5` divides by a non-zero constant: no check needed.
    assert_eq!(checks, 3, "every other division has its zero check");
    insta::assert_snapshot!(text);
}

#[test]
fn strings() {
    let script = r#"
global greeting = "hello"
probe begin {
  s = greeting . ", " . execname()
  s .= "!"
  if (s == "x" || s < greeting) println("odd")
  greeting .= "?"
  println(strlen(s), substr(s, 0, 2), sprint(42))
  printf("%s has %d bytes and 100%% of them\n", s, strlen(s))
}
"#;
    insta::assert_snapshot!(listing(script));
}

#[test]
fn arrays_with_multiple_keys_and_atomic_updates() {
    let script = r#"
global bytes, names[100], hits
probe kernel.trace("net_dev_xmit") {
  bytes[pid(), execname()] += $skb_len
  bytes[pid(), "total"]++
  hits++
  hits -= 2
  seen = bytes[pid(), execname()]++
  if ([pid(), "total"] in bytes) names[pid()] = execname()
}
probe end {
  bytes[1, "x"] += 5
  hits++
  println(bytes[1, "x"], names[1], hits)
}
"#;
    let (module, text) = lower(script);
    let kernel = &module.functions[0];
    assert!(ops(kernel).any(|op| matches!(op, Op::MapAdd { .. })));
    assert!(ops(kernel).any(|op| matches!(op, Op::AddGlobal { .. })));
    let host = &module.functions[1];
    assert!(
        !ops(host).any(|op| matches!(op, Op::MapAdd { .. } | Op::AddGlobal { .. })),
        "host code updates with load-op-store"
    );
    insta::assert_snapshot!(text);
}

#[test]
fn statistics_with_every_extractor() {
    let script = r#"
global latency, by_cpu
probe kernel.trace("net_dev_xmit") {
  latency <<< $skb_len
  by_cpu[cpu()] <<< 1
}
probe end {
  printf("%d %d %d %d %d %d\n", @count(latency), @sum(latency), @min(latency),
         @max(latency), @avg(latency), @variance(latency, 2))
  print(@hist_log(latency))
  println(@hist_linear(latency, 0, 1000, 100))
  println(@count(by_cpu[0]))
}
"#;
    let (module, text) = lower(script);
    let Storage::Stats { needs, .. } = &module.globals[0].storage else {
        panic!("latency is a statistic");
    };
    assert!(needs.min_max && needs.variance && needs.hist_log);
    assert!(needs.hist_linear.is_some());
    let Storage::Stats { needs, .. } = &module.globals[1].storage else {
        panic!("by_cpu is a statistic");
    };
    assert_eq!(*needs, ir::StatNeeds::default(), "by_cpu only counts");
    insta::assert_snapshot!(text);
}

#[test]
fn foreach_sorted_and_limited() {
    let script = r#"
global counts, pairs, stats
probe begin {
  counts["a"] = 1; counts["b"] = 2
  pairs[1, "x"] = "one"
  stats["k"] <<< 3
}
probe end {
  foreach (k in counts) println(k)
  foreach ([k] in counts-) println(k)
  foreach (v = [k] in counts limit 1) printf("%s=%d\n", k, v)
  foreach ([n+, s] in pairs) printf("%d %s %s\n", n, s, pairs[n, s])
  foreach (m = [k] in stats @max -) printf("%s %d\n", k, m)
  foreach ([k] in counts) { if (k == "a") continue; if (k == "b") break }
}
"#;
    let (module, text) = lower(script);
    let end = &module.functions[1];
    assert_eq!(end.iters, 6);
    let sorts: Vec<_> = ops(end)
        .filter_map(|op| match op {
            Op::IterStart { sort, .. } => Some(sort.map(|s| (s.by, s.descending))),
            _ => None,
        })
        .collect();
    assert_eq!(
        sorts,
        [
            None,
            Some((SortBy::Value, true)),
            None,
            Some((SortBy::Key(0), false)),
            Some((SortBy::Aggregate(ir::StatValue::Max), true)),
            None,
        ]
    );
    insta::assert_snapshot!(text);
}

#[test]
fn loops_tick_on_every_back_edge() {
    let script = r#"
probe begin {
  i = 0
  while (i < 10) { i++; if (i == 3) continue; if (i == 8) break }
  for (j = 0; j < 5; j++) total += j
  for (;;) { if (total > 100) break; total *= 2 }
  println(i, total)
}
"#;
    let (module, text) = lower(script);
    let ticks = ops(&module.functions[0])
        .filter(|op| matches!(op, Op::Tick))
        .count();
    assert_eq!(ticks, 3, "one latch per loop");
    insta::assert_snapshot!(text);
}

#[test]
fn functions_called_from_both_sides() {
    let script = r#"
global total
function label:string(n) { if (n > 10) return "big"; return "small" }
function add(n) { total += n; return total }
probe kernel.trace("net_dev_xmit") { add($skb_len); println(label($skb_len)) }
probe timer.s(1) { println(label(add(1))) }
"#;
    let (module, text) = lower(script);
    let names: Vec<&str> = module.functions.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "probe0 kernel.trace(\"net:net_dev_xmit\")",
            "probe1 timer.s(1)",
            "label@kernel",
            "label@host",
            "add@kernel",
            "add@host",
        ]
    );
    // `total += n` is atomic in the kernel copy only.
    let atomic = |name| ops(function(&module, name)).any(|op| matches!(op, Op::AddGlobal { .. }));
    assert!(atomic("add@kernel"));
    assert!(!atomic("add@host"));
    for f in &module.functions {
        for op in ops(f) {
            if let Op::Call { func, .. } = op {
                assert_eq!(
                    module.function(*func).side,
                    f.side,
                    "{} calls across",
                    f.name
                );
            }
        }
    }
    insta::assert_snapshot!(text);
}

#[test]
fn context_member_chains_and_bitfields() {
    let script = r#"
probe kernel.trace("net_dev_xmit") {
  printf("%s %d %d %d\n", kernel_string($dev->name), $skb->len, $skb_len, $rc)
  println($skb->cb[2], $skb->fclone)
  println($$parms)
}
probe kernel.trace("syscalls:sys_enter_openat") {
  println(user_string($filename), $flags)
}
"#;
    let (module, text) = lower(script);
    let reads: Vec<(u32, bool)> = ops(&module.functions[0])
        .filter_map(|op| match op {
            Op::ReadKernel { size, signed, .. } => Some((*size, *signed)),
            _ => None,
        })
        .collect();
    // len (u32), cb[2] (char), fclone (one byte holding bits 2..4).
    assert_eq!(reads, [(4, false), (1, true), (1, false)]);
    insta::assert_snapshot!(text);
}

#[test]
fn fexit_members_and_trivial_entry() {
    let script = r#"
probe kernel.function("tcp_sendmsg").return {
  printf("%d -> %d\n", @entry($size), $return)
  println($sk->__sk_common->skc_family)
}
"#;
    insta::assert_snapshot!(listing(script));
}

/// fexit sees the arguments, not what they point to at entry: an `@entry`
/// of more than a plain argument is saved by an fentry companion.
#[test]
fn fexit_entry_expressions_saved_by_an_fentry_probe() {
    let script = r#"
probe kernel.function("tcp_sendmsg").return {
  printf("%d %d\n", @entry($size), @entry($sk->__sk_common->skc_family))
}
"#;
    insta::assert_snapshot!(listing(script));
}

/// A kretprobe sees the registers at the return: an entry kprobe saves
/// each `@entry` value by thread id, and the return handler loads it first.
#[test]
fn kretprobe_entry_values_saved_by_an_entry_probe() {
    let script = r#"
probe kernel.function("tcp_sendmsg").return {
  printf("%d -> %d %s\n", @entry($size), $return, @entry(execname()))
  if (@entry($sk->__sk_common->skc_family) == 2) exit()
}
"#;
    let no_fentry = FakeKernel::new().with_mechanisms(Mechanisms {
        tracepoints: true,
        raw_tracepoints: true,
        tp_btf: true,
        fentry: false,
        kprobes: true,
        uprobes: true,
        perf_events: true,
    });
    let (module, text) = lower_with(script, &no_fentry).unwrap_or_else(|d| panic!("{d}"));
    assert_eq!(module.probes.len(), 2, "{text}");
    insta::assert_snapshot!(text);
}

#[test]
fn cast_chains() {
    let script = r#"
function dev_of(skb) {
  return @cast(skb, "struct sk_buff", "kernel<linux/skbuff.h>")->dev
}
probe kernel.trace("kfree_skb") {
  name = kernel_string(@cast(dev_of($skb), "struct net_device")->name)
  mtu = @cast($skb, "struct sk_buff")->dev->mtu
  len_addr = &@cast($skb, "struct sk_buff", "kernel")->len
  printf("%s %d %p\n", name, mtu, len_addr)
}
"#;
    insta::assert_snapshot!(listing(script));
}

#[test]
fn symbols_in_kernel_printf_travel_as_addresses() {
    let script = r#"
probe kernel.trace("kfree_skb") {
  printf("%s %s %s %s\n", symname($location), symdata($location), modname($location), execname())
  s = symname($location)
}
probe end { printf("%s\n", symname(0)) }
"#;
    let (module, text) = lower(script);
    let kernel_args: Vec<_> = ops(&module.functions[0])
        .filter_map(|op| match op {
            Op::Printf { args, .. } => Some(args.clone()),
            _ => None,
        })
        .flatten()
        .collect();
    let hows: Vec<_> = kernel_args
        .iter()
        .filter_map(|a| match a {
            PrintArg::Symbol { how, .. } => Some(*how),
            PrintArg::Value(_) => None,
        })
        .collect();
    assert_eq!(
        hows,
        [SymbolText::Name, SymbolText::Data, SymbolText::Module]
    );
    // Outside printf, and on the host, symname stays a built-in call.
    assert!(
        ops(&module.functions[0])
            .any(|op| matches!(op, Op::Builtin { name, .. } if name == "symname"))
    );
    assert!(
        ops(&module.functions[1])
            .any(|op| matches!(op, Op::Builtin { name, .. } if name == "symname"))
    );
    insta::assert_snapshot!(text);
}

#[test]
fn exit_error_next_and_conditions() {
    let script = r#"
global armed = 1
probe kernel.trace("kfree_skb") if (armed) {
  if (pid() == 0) next
  if (pid() == 1) error("pid one")
  armed = 0
  exit()
  println("after exit, as in stap")
}
probe begin {
  printd(", ", 1, "two", 3)
  printdln("|", "a", "b")
  s = sprintd(":", 1, 2)
  println(s)
  return
}
"#;
    let (module, text) = lower(script);
    let handler = &module.functions[0];
    assert!(
        handler
            .blocks
            .iter()
            .any(|b| matches!(b.term, Term::Fail(Failure::Explicit(_))))
    );
    assert!(ops(handler).any(|op| matches!(op, Op::Exit)));
    insta::assert_snapshot!(text);
}

#[test]
fn delete_forms_and_membership() {
    let script = r#"
global arr, counter, stats
probe begin {
  arr[1, "a"] = 5
  counter = 3
  stats[2] <<< 1
  local_var = 9
  if ([1, "a"] in arr) delete arr[1, "a"]
  delete arr
  delete counter
  delete stats[2]
  delete stats
  delete local_var
  println(local_var, !([2] in stats))
}
"#;
    insta::assert_snapshot!(listing(script));
}

#[test]
fn evaluation_order_keeps_earlier_values() {
    let script = r#"
probe begin {
  x = 1
  y = x + (x = 5)
  println(x, y)
}
"#;
    let (module, text) = lower(script);
    // `x` is copied before the assignment on the right changes it.
    assert!(ops(&module.functions[0]).any(|op| matches!(op, Op::Move { .. })));
    insta::assert_snapshot!(text);
}

#[test]
fn unsupported_constructs_are_diagnosed() {
    let script = r#"
probe kernel.trace("net_dev_xmit") {
  if (execname() =~ "^ssh") println(matched(0), $skb$)
}
global lat
function bail() { next }
probe end {
  lat <<< 1
  print(@hist_linear(lat, 0, 100, 10))
  print(@hist_linear(lat, 0, 50, 5))
  bail()
}
"#;
    let diags = lower_with(script, &FakeKernel::new()).expect_err("lowering must refuse");
    insta::assert_snapshot!(diags);
}

#[test]
fn regex_in_host_code_is_a_builtin_call() {
    let script = r#"
function tcp(name) { return name =~ "^tcp_(v[46])" }
probe begin {
  if (tcp("tcp_v4_rcv") && "udp" !~ "^tcp") println(matched(1))
}
"#;
    let (module, text) = lower(script);
    let calls_regex = |f: &Function| {
        ops(f).any(|op| matches!(op, Op::Builtin { name, .. } if name == "regex_match"))
    };
    assert!(module.functions.iter().all(calls_regex));
    insta::assert_snapshot!(text);
}

#[test]
fn uprobe_handlers_read_user_memory() {
    let script = r#"
probe process("/bin/true").function("main") {
  println(@cast(pid(), "struct sk_buff")->len)
}
"#;
    let (module, text) = lower(script);
    let handler = &module.functions[0];
    assert!(ops(handler).any(|op| matches!(op, Op::ReadUser { size: 4, .. })));
    assert!(!ops(handler).any(|op| matches!(op, Op::ReadKernel { .. })));
    insta::assert_snapshot!(text);
}

#[test]
fn every_probe_family() {
    let script = r#"
global events, started
function bump(key) { events[key]++ }
function report() { foreach ([k] in events-) printf("%s %d\n", k, events[k]) }
probe begin(-1) { started = gettimeofday_s() }
probe oneshot { bump("oneshot") }
probe kernel.trace("kfree_skb") { bump("drop") }
probe timer.ms(100).randomize(20) { report() }
probe timer.profile { bump("sample") }
probe perf.sw.cpu_clock.sample(100000) { bump("clock") }
probe process("/bin/true").function("main") { bump("uprobe") }
probe end(10) { report() }
probe error { println("error") }
probe never { println(started) }
"#;
    let (module, text) = lower(script);
    assert_eq!(module.probes.len(), 10);
    insta::assert_snapshot!(text);
}

#[test]
fn pretty_printing_walks_the_btf_layout_inside_an_implicit_try() {
    // `$dev$` follows the pointer and prints each member with its own
    // directive; `char[16]` is read as a string; a fault gives "ERROR".
    let text = listing(
        r#"
probe kernel.trace("net_dev_xmit") {
  println($dev$)
}
"#,
    );
    insta::assert_snapshot!(text);
}

#[test]
fn pretty_printed_bulk_variables_and_nested_structs() {
    let (module, _) = lower(
        r#"
probe kernel.trace("net_dev_xmit") {
  println($$parms$)
  println(@cast($skb->sk, "struct sock_common")$)
  println(@cast($skb->sk, "struct sock_common")$$)
}
"#,
    );
    let formats: Vec<&str> = module.formats.iter().map(|f| f.text.as_str()).collect();
    let has = |text: &str| formats.iter().any(|f| f.contains(text));
    // Anonymous unions are listed in line; `char[48]` is a string and
    // bitfields are read as such.
    assert!(
        has("{.next=%p, .prev=%p, .dev=%p, .dev_scratch=%u, .sk=%p"),
        "{formats:#?}"
    );
    assert!(has(".cb=\"%s"), "{formats:#?}");
    assert!(has(".cloned=%u, .nohdr=%u"), "{formats:#?}");
    // The device is followed by `$$parms$` (a struct pointer at the top).
    assert!(
        has("{.mtu=%u, .flags=%u, .ifindex=%d, .name=\"%s\""),
        "{formats:#?}"
    );
    // One `$` leaves an embedded struct as `{...}`; `$$` expands it, and a
    // `__u8[16]` is bytes, not text.
    assert!(has(".skc_v6_daddr={...}"), "{formats:#?}");
    assert!(
        has(".skc_v6_daddr={.in6_u={.u6_addr8=[%u, %u"),
        "{formats:#?}"
    );
}
