//! Parser snapshots: each construct family parsed and printed back with the
//! `-p1` printer (binary operations fully parenthesised).

use stap_lang::ast_print::print_file;
use stap_lang::diag::render_plain;
use stap_lang::kernel::KernelVersion;
use stap_lang::parse::parse_file;
use stap_lang::preprocess::PreprocessEnv;
use stap_lang::source::SourceMap;

fn config(name: &str) -> Option<String> {
    match name {
        "CONFIG_BPF" => Some("y".into()),
        "CONFIG_NET_MODULE" => Some("m".into()),
        "CONFIG_NR_CPUS" => Some("64".into()),
        _ => None,
    }
}

/// Parses `text` with script arguments `args` on a 6.12.48 x86_64 kernel;
/// panics with the rendered diagnostics if anything was reported.
fn listing_with_args(text: &str, args: &[&str]) -> String {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let env = PreprocessEnv {
        kernel: KernelVersion {
            major: 6,
            minor: 12,
            patch: 48,
            release: "6.12.48+deb12-amd64".into(),
        },
        arch: "x86_64".into(),
        config: &config,
        args: &args,
    };
    let mut map = SourceMap::new();
    let file = map.add("test.stp", text);
    let parsed = parse_file(&map, file, &env);
    assert!(
        parsed.diags.is_empty(),
        "unexpected diagnostics:\n{}",
        render_plain(&map, &parsed.diags)
    );
    let printed = print_file(&parsed.file);
    // The listing is itself stap source that parses to the same listing.
    let mut again = SourceMap::new();
    let reparsed_id = again.add("printed.stp", printed.clone());
    let reparsed = parse_file(&again, reparsed_id, &env);
    assert!(
        reparsed.diags.is_empty(),
        "the listing does not parse back:\n{printed}\n{}",
        render_plain(&again, &reparsed.diags)
    );
    assert_eq!(print_file(&reparsed.file), printed, "listing is not stable");
    printed
}

fn listing(text: &str) -> String {
    listing_with_args(text, &[])
}

macro_rules! snapshot {
    ($name:literal, $text:expr) => {
        snapshot!($name, $text, &[])
    };
    ($name:literal, $text:expr, $args:expr) => {{
        let text: &str = $text;
        insta::with_settings!({ description => text, omit_expression => true }, {
            insta::assert_snapshot!($name, listing_with_args(text, $args));
        });
    }};
}

#[test]
fn globals() {
    snapshot!(
        "parse_globals",
        r#"global a, b = 5, c[100], d%[10], s = "x"
private global p
global neg = -3, hex = 0x10, oct = 010, wrapped = 0xffffffffffffffff
global empty[];"#
    );
}

#[test]
fn functions() {
    snapshot!(
        "parse_functions",
        r#"function add:long(a:long, b) { return a + b }
private function greet:string(name:string) { return "hi " . name }
function nothing() { return }
function c_code() %{ /* C */ %}
%{ #include <linux/x.h> %}"#
    );
}

#[test]
fn probe_points() {
    snapshot!(
        "parse_probe_points",
        r#"probe begin, end, error {}
probe begin(-1) {}
probe kernel.function("tcp_*").return {}
probe kernel.function("f").call?, module("ext4").function("*")! {}
probe timer.ms(100), timer.sec(5), timer.profile {}
probe kernel.trace("net:*") {}
probe syscall.*, tcp.*.return, nfs.proc*.read {}
probe kernel.{function("a"),function("b")}.return? {}
probe process("/bin/ls").statement("*@ls.c:12") {}
probe timer.s(1) if (enabled) {}
probe perf.sw.cpu_clock.sample(1000) {}"#
    );
}

#[test]
fn aliases() {
    snapshot!(
        "parse_aliases",
        r#"probe tcp.sendmsg = kernel.function("tcp_sendmsg") { name = "tcp.sendmsg"; size = $size }
probe tcp.sendmsg.return += kernel.function("tcp_sendmsg").return { done = 1 }
probe a, b = kernel.function("x"), kernel.function("y")? { }"#
    );
}

#[test]
fn statements() {
    snapshot!(
        "parse_statements",
        r#"probe begin {
  x = 1 y = 2
  z = x
  ++z
  if (x) y++ else if (y) z-- else { z = 0 }
  if (a) if (b) c = 1 else c = 2
  if (a) b = 1; else b = 2;
  if (a) ; else { }
  if (n) ++count
  while (i > 0) --i
  while (i < 10) i++
  for (i = 0; i < 10; i++) { continue }
  for (;;) break
  delete arr[1, "a"]
  delete arr
  next;
  ;
  { nested = 1; }
  if (done) ;
  %{ embedded %}
  return
}"#
    );
}

#[test]
fn operator_precedence() {
    snapshot!(
        "parse_precedence",
        r#"probe begin {
  a = 1 + 2 * 3 - 4 / 5 % 6
  b = x << 1 + 2 . "s" . "t"
  c = a < b == c != d >= e
  d = a & b | c ^ d && e || f
  e = f ? g : h ? i : j
  f = g = h += 1
  s .= "x" "y"
  st <<< 5
  g = !a && ~b || -c + +d
  h = -x - -y
  i = k in arr && [a, b] in arr2
  j = s =~ "^a.*" || s !~ "b"
  k = a[i]++ + --b
  l = (1 + 2) * 3
  m <<= 2 n >>= 1 o %= 3 p &= 1 q |= 2 r ^= 3 t -= 1 u *= 2 v /= 2
}"#
    );
}

#[test]
fn foreach_forms() {
    snapshot!(
        "parse_foreach",
        r#"probe end {
  foreach (x in a) print(x)
  foreach ([a, b-] in arr+ limit 5) { println(a, b) }
  foreach (v = [a, b] in arr) println(v)
  foreach ([k] in s @sum -) println(k)
  foreach (x in a limit n + 1) {}
  foreach (x- in a) {}
  foreach ([k] in s @count) {}
}"#
    );
}

#[test]
fn statistics() {
    snapshot!(
        "parse_statistics",
        r#"global s, t
probe end {
  s <<< 1
  t[execname(), pid()] <<< $len
  println(@count(s), @sum(s), @min(s), @max(s), @avg(s))
  println(@variance(s), @variance(s, 1))
  print(@hist_log(s))
  print(@hist_linear(t["a", 1], 0, 100, 10))
}"#
    );
}

#[test]
fn context_variables() {
    snapshot!(
        "parse_context",
        r#"probe kernel.function("tcp_sendmsg").return {
  a = $sk->__sk_common->skc_family
  b = $skb->data[0]
  c = $var$ d = $var->f$$
  e = $$vars f = $$parms$ g = $$locals$$ h = $$return
  i = $return
  j = @entry($size)
  k = @defined($foo) ? $foo : 0
  l = @choose_defined($a, $b)
  m = @var("jiffies")
  n = $list->next->prev
}"#
    );
}

#[test]
fn casts() {
    snapshot!(
        "parse_casts",
        r#"probe begin {
  dev = @cast(skb, "struct sk_buff", "kernel<linux/skbuff.h>")->dev
  name = @cast(dev, "struct net_device")->name
  addr = &@cast(p, "struct task_struct")->comm
  first = @cast(p, "struct foo")->items[2]->val
  mask = a & b
}"#
    );
}

#[test]
fn macros() {
    snapshot!(
        "parse_macros",
        r#"@define LIMIT %( 100 %)
@define bigger(a, b) %( ((@a) > (@b) ? (@a) : (@b)) %)
@define twice(x) %( @max(@x, @x) %)
probe begin {
  x = @LIMIT
  y = @bigger(x, 2 + 3)
  z = @twice(y)
}"#
    );
}

#[test]
fn conditionals() {
    snapshot!(
        "parse_conditionals",
        r#"probe begin {
  %( kernel_v >= "5.10" %? new = 1 %: old = 1 %)
  %( kernel_v < "5.9" %? old2 = 1 %: new2 = 1 %)
  %( kernel_vr == "6.12.*" %? glob = 1 %)
  %( arch == "x86_64" && runtime == "bpf" %? x86 = 1 %: other = 1 %)
  %( arch != "arm*" || systemtap_v < "4.0" %? notarm = 1 %)
  %( CONFIG_BPF == "y" %? bpf = 1 %)
  %( CONFIG_NET_MODULE == "m" && CONFIG_NR_CPUS >= 32 %? many = 1 %)
  %( CONFIG_MISSING == "y" %? missing = 1 %: unset = 1 %)
  %( !(systemtap_v >= "4.0") %? ancient = 1 %: modern = 1 %)
  %( $# > 1 %? two_args = 1 %: fewer = 1 %)
  %( @# == 2 %? %( arch == "x86_64" %? nested = 1 %) %)
}"#,
        &["10", "eth0"]
    );
}

#[test]
fn script_arguments() {
    snapshot!(
        "parse_script_arguments",
        r#"probe timer.ms($1) {
  n = $1 + $3
  dev = @2
  count = $# + @#
  if (execname() == @2 "-suffix") exit()
}"#,
        &["100", "eth0", "-7"]
    );
}

#[test]
fn seed_script() {
    let text = include_str!("../../examples/drops.stp");
    insta::assert_snapshot!("parse_drops_stp", listing(text));
}

/// Every prefix of the seed script parses without panicking, and every
/// prefix that stops inside a `{ }` block reports an error.
#[test]
fn truncated_seed_script_never_panics() {
    let text = include_str!("../../examples/drops.stp");
    let env = PreprocessEnv {
        kernel: KernelVersion {
            major: 6,
            minor: 12,
            patch: 48,
            release: "6.12.48".into(),
        },
        arch: "x86_64".into(),
        config: &config,
        args: &[],
    };
    for (cut, _) in text.char_indices() {
        let prefix = &text[..cut];
        let mut map = SourceMap::new();
        let file = map.add("cut.stp", prefix);
        let parsed = parse_file(&map, file, &env);
        let open_braces = prefix.matches('{').count() > prefix.matches('}').count();
        if open_braces {
            assert!(
                !parsed.diags.is_empty(),
                "no error for a prefix cut inside a block:\n{prefix}"
            );
        }
        // Rendering must not panic either (spans stay inside the text).
        let _ = render_plain(&map, &parsed.diags);
    }
}

#[test]
fn declarations_from_the_tapset_library() {
    snapshot!(
        "parse_library_declarations",
        r#"global a%, b%[10]
private hidden, count = 0
probe x.y = kernel.trace("a") { v = 1 }, { v = 2 }
probe tp.z = kernel.{trace("a")!, trace("b")?}, timer.s(1) { }
probe netfilter.arp.in = begin { }
function f:long() %{ /* pure */ STAP_RETURN(1); %}
function g() { if (%{ 1 %} + 1) return %{ 2 %} }
%{ #include <linux/sched.h> %}
probe begin { x = dtv$pointer$val }"#
    );
}

#[test]
fn member_chains_on_any_value() {
    snapshot!(
        "parse_autocast_chains",
        r#"probe kernel.function("f").return {
  a = @entry($sk)->sk_rcvbuf
  b = (@cast(p, "sock"))->sk_family
  c = task_current()->pid
  d = t->mm->mmap[2]->vm_start$
  e = @var("jiffies", "kernel") + @var("x@file.c")
  f = &@cast(0, "task_struct")[1]
  g = @const("NR_CPUS") + @probewrite(x) + @perf("cycles")
  h = $$name . $$provider
}"#
    );
}

#[test]
fn try_catch_foreach_sorted_by_value_and_slices() {
    snapshot!(
        "parse_try_foreach_slices",
        r#"probe begin {
  try { x = 1 / 0 } catch (msg) { println(msg) }
  try { error("e") } catch { }
  foreach (v+ = [k1, k2] in a) println(v)
  foreach (v- = k in b limit 3) println(v)
  foreach ([i, c+] in spec[id, *]) println(i)
  delete spec[id, *]
  if ([*, 2] in spec) println("yes")
}"#
    );
}

#[test]
fn dollar_arguments_are_tokens() {
    snapshot!(
        "parse_dollar_arguments",
        "probe $1 { x = $2 + $3 }",
        &["kernel.function(\"vfs_*\").return", "-5", "len($return)"]
    );
}
