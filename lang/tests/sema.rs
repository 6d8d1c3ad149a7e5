//! `-p2` snapshots: elaboration of the seed script and of each construct
//! family against the fake kernel (`testing::FakeKernel`).

use stap_lang::kernel::KernelFacts;
use stap_lang::sema::{ElabOptions, Placement, Program, print::print_program};
use stap_lang::testing::FakeKernel;

mod common;

/// Elaborates the script with the tapsets and returns the program and its
/// listing; panics with the rendered diagnostics if elaboration failed.
fn elaborate_with(
    script: &str,
    tapsets: &[(&str, &str)],
    facts: &dyn KernelFacts,
    opts: &ElabOptions,
) -> (Program, String) {
    let elaborated = common::elaborate_text(script, tapsets, facts, opts);
    let rendered = elaborated.rendered();
    let Some(program) = elaborated.program else {
        panic!("elaboration failed:\n{rendered}");
    };
    let mut listing = print_program(&program, &elaborated.map);
    if !elaborated.diags.is_empty() {
        listing.push_str("\n# diagnostics\n");
        listing.push_str(&rendered);
    }
    (program, listing)
}

fn listing(script: &str) -> String {
    elaborate_with(script, &[], &FakeKernel::new(), &ElabOptions::default()).1
}

#[test]
fn drops_seed_script() {
    let script = std::fs::read_to_string("../examples/drops.stp").expect("examples/drops.stp");
    let (program, text) = elaborate_with(
        &script,
        &[],
        &FakeKernel::like_this_host(),
        &ElabOptions::default(),
    );
    assert_eq!(program.probes.len(), 2);
    assert_eq!(program.probes[0].placement, Placement::Kernel);
    assert_eq!(program.probes[1].placement, Placement::Host);
    insta::assert_snapshot!(text);
}

/// The tapset fixtures, as the CLI would load a stdlib directory.
fn fixture_tapsets() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for name in ["net.stp", "tcp.stp", "udp.stp"] {
        let path = format!("tests/fixtures/tapsets/{name}");
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        out.push((name.to_string(), text));
    }
    out
}

fn listing_with_tapsets(script: &str) -> String {
    let tapsets = fixture_tapsets();
    let refs: Vec<(&str, &str)> = tapsets
        .iter()
        .map(|(n, t)| (n.as_str(), t.as_str()))
        .collect();
    elaborate_with(script, &refs, &FakeKernel::new(), &ElabOptions::default()).1
}

#[test]
fn globals_arrays_and_stats() {
    let script = r#"
global count = 0, name = "stap"
global sizes[100], recent%[16]
private global secret
global latency
probe begin {
  count++
  sizes[execname(), pid()] = 10
  recent[count] = name . "!"
  secret = -1
  latency <<< 5
  latency <<< count
}
probe end {
  printf("%d %d %d\n", @count(latency), @avg(latency), @max(latency))
  print(@hist_log(latency))
  print(@hist_linear(latency, 0, 100, 10))
  println(secret, sizes["x", 1])
}
"#;
    insta::assert_snapshot!(listing(script));
}

/// stap's end display of the globals a program writes and never reads:
/// one `end` probe per global after the script's own, in declaration
/// order. Read globals (`++`, `+=`, a `foreach`, a read in a called
/// function) and a global only written by a tapset get none.
#[test]
fn unread_globals_get_end_probes_that_print_them() {
    let script = r#"
global count, name, sizes, latency, per_cpu, seen, total, shown_by_f, never
function show() { println(shown_by_f) }
probe begin {
  count = 3
  name = "stap"
  sizes[execname(), 1] = 10
  latency <<< 5
  per_cpu[cpu()] <<< 1
  seen++
  total += 2
  shown_by_f = 1
  show()
}
probe end { println("script's end") }
"#;
    let opts = ElabOptions {
        display_unread_globals: true,
        ..ElabOptions::default()
    };
    let (program, text) = elaborate_with(script, &[], &FakeKernel::new(), &opts);
    let ends = program.probes.iter().filter(|p| p.written == "end").count();
    assert_eq!(ends, 6, "the script's end probe and five displays");
    insta::assert_snapshot!(text);
}

#[test]
fn command_line_defines_and_overrides() {
    let opts = ElabOptions {
        defines: vec![
            ("MAXSTRINGLEN".into(), "128".into()),
            ("MAXMAPENTRIES".into(), "10000".into()),
            ("MAXERRORS".into(), "3".into()),
            ("SOMETHING_ELSE".into(), "1".into()),
        ],
        global_overrides: vec![
            ("threshold".into(), "0x40".into()),
            ("label".into(), "eth0".into()),
        ],
        ..ElabOptions::default()
    };
    let script =
        "global threshold = 10, label = \"lo\"\nprobe begin { if (threshold > 5) println(label) }";
    let (program, text) = elaborate_with(script, &[], &FakeKernel::new(), &opts);
    assert_eq!(program.limits.max_string_len, 128);
    insta::assert_snapshot!(text);
}

#[test]
fn inference_through_functions() {
    let script = r#"
function join(a, b) { return a . ":" . b }
function twice(n) { return n * 2 }
function fact(n) { if (n <= 1) return 1; return n * fact(n - 1) }
function unused(x) { return x }
function describe(n) {
  label = join("n", sprint(n))
  return label
}
probe begin {
  total = twice(fact(5))
  println(describe(total))
  s = join(execname(), "x")
  println(s)
}
"#;
    insta::assert_snapshot!(listing(script));
}

#[test]
fn aliases_with_prologue_and_epilogue() {
    let script = r#"
global bytes
probe tcp.sendmsg {
  bytes[name] += size
}
probe tcp.counted_send {
  println(tcp_double(size))
}
probe netdev.any_drop {
  printf("%s at %p\n", kind, location)
}
"#;
    insta::assert_snapshot!(listing_with_tapsets(script));
}

#[test]
fn wildcards_expand_to_each_match() {
    let script = r#"
global hits
probe kernel.trace("net:*") { hits[pp()]++ }
probe kernel.function("tcp_v4_c*").return { hits[ppfunc()]++ }
probe tcp.* { hits[name] += size }
probe kernel.{trace("consume_skb"), function("ip_rcv")} { hits["brace"]++ }
"#;
    insta::assert_snapshot!(listing_with_tapsets(script));
}

#[test]
fn optional_and_sufficient_points() {
    let script = r#"
probe kernel.trace("no_such_event")?, kernel.trace("kfree_skb") { println("first") }
probe kernel.function("no_such_function")!, kernel.trace("consume_skb")!, kernel.trace("kfree_skb") {
  println("second")
}
probe kernel.trace("missing:*")? { println("never resolved") }
"#;
    insta::assert_snapshot!(listing(script));
}

#[test]
fn optional_kernel_function_skipped_without_mechanism() {
    let script =
        "probe kernel.function(\"tcp_sendmsg\")?, kernel.trace(\"kfree_skb\") { println(pid()) }";
    let (program, text) = elaborate_with(
        script,
        &[],
        &FakeKernel::like_this_host(),
        &ElabOptions::default(),
    );
    assert_eq!(program.probes.len(), 1);
    insta::assert_snapshot!(text);
}

#[test]
fn foreach_forms() {
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
  foreach ([k] in stats @sum -) printf("%s %d\n", k, @sum(stats[k]))
  if (["a"] in counts) delete counts["a"]
  delete pairs
}
"#;
    insta::assert_snapshot!(listing(script));
}

#[test]
fn context_variables() {
    let script = r#"
probe kernel.trace("net_dev_xmit") {
  printf("%s %d %d\n", kernel_string($dev->name), $skb->len, $skb_len)
  println($$parms)
  println($skb$)
  println(@defined($skb) ? 1 : 0, @defined($nope), @choose_defined($nope, $rc))
  println($skb->cb[2], $skb->fclone)
}
probe kernel.function("tcp_sendmsg").return {
  printf("%d -> %d\n", @entry($size), $return)
  println($sk->__sk_common->skc_family)
}
probe kernel.trace("syscalls:sys_enter_openat") {
  println(user_string($filename), $flags)
}
"#;
    insta::assert_snapshot!(listing(script));
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
fn pointer_locals_are_autocast() {
    // Each local is typed by the pointers assigned to it, wherever they
    // stand: `d` is used in the loop before its assignment in the text.
    let script = r#"
function len_of(p) {
  skb = @cast(p, "sk_buff")
  return skb->len
}
probe kernel.trace("kfree_skb") {
  s = $skb
  dev = s->dev
  common = &$skb->sk->__sk_common
  s2 = s
  n = 0
  while (n < 2) { if (n) println(d->mtu); d = @cast($skb, "struct sk_buff")->dev; n++ }
  printf("%d %d %d %d %d\n", dev->mtu, common->skc_family, s2->len, len_of($skb), s->next->len)
  s = s->next
  # A cycle through two locals: each is typed by the other's `$skb`.
  x = $skb
  y = x
  x = y
  println(x->len + y->len)
}
"#;
    insta::assert_snapshot!(listing(script));
}

#[test]
fn pointers_through_functions_and_globals_are_autocast() {
    // A built-in's BTF-typed return (`task_current()`), a function's
    // return typed by its `return`s, a parameter typed by what its calls
    // pass (and by its own `t = t->real_parent`), and a global typed by
    // assignments in another probe; the host reads `last` too. And a
    // chain from `@choose_defined`, which starts at the defined operand.
    let script = r#"
global last
function parent_of(t) { return t->real_parent }
function depth(t) {
  n = 0
  while (t->pid > 1) { t = t->real_parent; n++ }
  return n
}
probe kernel.trace("sched_switch") {
  printf("%d %d %d\n", task_current()->tgid, parent_of($next)->pid, depth(task_current()))
  p = parent_of(task_current())
  println(p->comm)
  println(@choose_defined($no_such, $prev)->pid)
}
probe kernel.trace("sched_process_exec") { last = $p }
probe end { println(last->tgid) }
"#;
    insta::assert_snapshot!(listing(script));
}

#[test]
fn placement_of_probes_functions_and_globals() {
    let script = r#"
global events, started
function bump(key) { events[key]++ }
function report() { foreach ([k] in events-) printf("%s %d\n", k, events[k]) }
probe begin(-1) { started = gettimeofday_s() }
probe oneshot { bump("oneshot") }
probe kernel.trace("kfree_skb") { bump("drop") }
probe timer.ms(100).randomize(20) { report() }
probe timer.hz(4) { bump("tick") }
probe timer.profile { bump("sample") }
probe perf.sw.cpu_clock.sample(100000) { bump("clock") }
probe perf.type(1).config(3) { bump("switch") }
probe process("/bin/true").function("main") { bump("uprobe") }
probe process("/bin/true").statement("*@true.c:10") { bump("line") }
probe end(10) { report() }
probe error { println("error") }
probe never { println(started) }
"#;
    insta::assert_snapshot!(listing(script));
}

/// Every `.stp` file under the stdlib directory, as the CLI loads it.
fn stdlib_tapsets() -> Vec<(String, String)> {
    let mut files = Vec::new();
    let mut dirs = vec![std::path::PathBuf::from("../stdlib")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("stdlib dir").flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "stp" || e == "stpm") {
                let text = std::fs::read_to_string(&path).expect("stdlib file");
                files.push((path.display().to_string(), text));
            }
        }
    }
    files.sort();
    files
}

#[test]
fn stdlib_is_pulled_in_only_when_used() {
    let tapsets = stdlib_tapsets();
    let refs: Vec<(&str, &str)> = tapsets
        .iter()
        .map(|(n, t)| (n.as_str(), t.as_str()))
        .collect();
    let script = std::fs::read_to_string("../examples/drops.stp").expect("examples/drops.stp");
    let (program, _) = elaborate_with(
        &script,
        &refs,
        &FakeKernel::like_this_host(),
        &ElabOptions::default(),
    );
    let names: Vec<&str> = program.functions.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, ["devname", "print_drops"]);
    assert!(program.globals.iter().all(|g| !g.from_tapset));

    let script = "probe kernel.trace(\"kfree_skb\") { println(ip_ntop(0x0100007f)) }";
    let (program, _) = elaborate_with(
        script,
        &refs,
        &FakeKernel::like_this_host(),
        &ElabOptions::default(),
    );
    let ip_ntop = program
        .functions
        .iter()
        .find(|f| f.name == "ip_ntop")
        .expect("ip_ntop pulled in");
    assert!(ip_ntop.from_tapset);
    assert!(ip_ntop.runs_on.kernel && !ip_ntop.runs_on.host);
    assert_eq!(ip_ntop.ret, stap_lang::sema::Type::String);
}

/// Process probes take their context variables from the binary's DWARF
/// (the fake's `/bin/fake`: `int f(int n, const char *s)`), read from
/// argument registers; `int_arg(N)` and friends need no DWARF.
#[test]
fn uprobe_context_variables_from_dwarf() {
    let script = r#"
probe process("/bin/fake").function("f") {
  printf("f %d %s\n", $n, user_string($s))
  println($$parms)
}
probe process("/bin/fake").function("f").return {
  printf("%d\n", $return)
}
probe process("/bin/nodwarf").function("main") {
  printf("%d %s\n", int_arg(1), user_string(pointer_arg(2)))
}
"#;
    let (program, text) = elaborate_with(
        script,
        &[],
        &FakeKernel::like_this_host(),
        &ElabOptions::default(),
    );
    assert_eq!(program.probes.len(), 3);
    assert!(
        program
            .probes
            .iter()
            .all(|p| p.placement == Placement::Kernel)
    );
    insta::assert_snapshot!(text);
}

/// Elaborates `script` and returns its rendered diagnostics, which must
/// include an error.
fn elaboration_errors(script: &str) -> String {
    let elaborated =
        common::elaborate_text(script, &[], &FakeKernel::new(), &ElabOptions::default());
    assert!(elaborated.program.is_none() && elaborated.diags.iter().any(|d| d.is_error()));
    elaborated.rendered()
}

/// `$var` without DWARF says how to build the binary or what to use
/// instead; user structs are not expanded; registers that cannot hold a
/// parameter are named.
#[test]
fn uprobe_context_variable_errors() {
    let script = r#"
probe process("/bin/nodwarf").function("main") { println($argc) }
probe process("/bin/fake").function("nope") { println($x) }
probe process("/bin/fake").function("g") { println($p->x, $len) }
probe process("/bin/fake").function("g").return { println($return) }
probe process("/bin/fake").function("f") { println($m) }
probe process("/bin/fake").function("h") { println($p, $n) }
probe process("/bin/fake").function("h").return { println($return) }
probe process("/bin/fake").function("f").return { println($n) }
"#;
    insta::assert_snapshot!(elaboration_errors(script));
}

/// The `-p2` listing of every script in examples/, against the fake kernel
/// as this host looks (no kprobes, no fentry) and the real stdlib: each
/// example must elaborate unmodified, and its listing is a snapshot.
#[test]
fn every_example_elaborates() {
    let tapsets = stdlib_tapsets();
    let refs: Vec<(&str, &str)> = tapsets
        .iter()
        .map(|(n, t)| (n.as_str(), t.as_str()))
        .collect();
    let mut examples: Vec<_> = std::fs::read_dir("../examples")
        .expect("examples dir")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "stp"))
        .collect();
    examples.sort();
    assert!(examples.len() >= 2, "no examples found");
    for path in examples {
        let script = std::fs::read_to_string(&path).expect("example");
        // The fake kernel has no `struct bpf_nf_ctx`, so no netfilter
        // probes: tests/live/examples.rs runs those examples.
        if script.contains("netfilter.") {
            continue;
        }
        let (_, text) = elaborate_with(
            &script,
            &refs,
            &FakeKernel::like_this_host(),
            &ElabOptions::default(),
        );
        let name = path.file_stem().expect("file name").to_string_lossy();
        insta::assert_snapshot!(format!("example_{name}"), text);
    }
}

#[test]
fn entry_pointer_followed_at_return_and_try_catch() {
    insta::assert_snapshot!(listing(
        r#"probe kernel.function("tcp_sendmsg").return {
  rcvbuf = @entry($sk)->sk_rcvbuf
  try { x = 100 / $return } catch (msg) { println(msg) }
  println(rcvbuf, x)
}"#
    ));
}

/// A system call without a stdlib alias: `syscall.NAME` (and its synonyms)
/// take their variables from the trace event; what the body does not read
/// (`argstr`, `mode`) is elided.
#[test]
fn generic_syscall_points_from_the_trace_event() {
    let helpers = "function __sys_ustr:string (a:long) { return user_string(a, \"\") }\n\
                   function return_str:string (f:long, r:long) { return sprintf(\"%d\", r) }\n";
    let script = "probe tp_syscall.openat { printf(\"%s %s %d\\n\", name, filename, flags) }\n\
                  probe nd_syscall.open*.return { println(retstr) }\n";
    let (program, text) = elaborate_with(
        script,
        &[("syscall-helpers.stp", helpers)],
        &FakeKernel::new(),
        &ElabOptions::default(),
    );
    assert_eq!(program.probes.len(), 2);
    insta::assert_snapshot!(text);
}

#[test]
fn overloads_defined_pruning_and_type_macros() {
    // The branch `@defined` rules out is dropped before `$nosuch` resolves;
    // `f` is overloaded by arity; `&@cast(p, "T")` is `p` once `T` exists.
    insta::assert_snapshot!(listing(
        r#"function f(a) { return a + 1 }
function f(a, b) { return a * b }
probe kernel.trace("kfree_skb") {
  x = @defined($nosuch) ? $nosuch : f(1)
  if (!@defined($nosuch)) y = f(2, 3) else y = $nosuch
  z = &@cast($skb, "sk_buff") + @defined(&@cast(0, "struct no_such_type"))
  println(x, y, z)
}"#
    ));
}

/// A format chosen between literals (`c ? "%x" : ":%x"`, as stap's
/// tapsets write it) splits into the choice between two calls, each with
/// a literal format checked against the arguments.
#[test]
fn a_format_chosen_between_literals_splits_the_call() {
    insta::assert_snapshot!(listing(
        r#"probe begin {
  i = 1
  s = sprintf(i == 0 ? "%x" : ":%x", 255)
  printf(i ? "%s|\n" : i > 1 ? "%s/\n" : "%s-\n", s)
}"#
    ));
}

/// `int_arg(N)` in a system call's return reads the call's argument at its
/// enter event: an implicit `@entry`.
#[test]
fn register_arguments_in_a_syscall_return_are_entry_values() {
    let helpers = "function return_str:string (f:long, r:long) { return sprintf(\"%d\", r) }\n";
    let script =
        "probe nd_syscall.openat.return { println(int_arg(3), @entry(pointer_arg(2)), retstr) }\n";
    let (_, text) = elaborate_with(
        script,
        &[("syscall-helpers.stp", helpers)],
        &FakeKernel::new(),
        &ElabOptions::default(),
    );
    insta::assert_snapshot!(text);
}

/// A function with no `return EXPR` takes the type its uses give its
/// value, as in stap: a long (returning 0) under `%d` and arithmetic, a
/// string (returning "") under `%s`.
#[test]
fn a_function_that_returns_nothing_is_typed_by_its_uses() {
    insta::assert_snapshot!(listing(
        "function n() { }\nfunction s() { }\nprobe begin { printf(\"%d %s\\n\", n() + 1, s()); exit() }"
    ));
}
