//! Elaboration errors, each snapshotted as `render_plain` prints it.

use stap_lang::kernel::KernelFacts;
use stap_lang::parse::parse_file;
use stap_lang::sema::{ElabOptions, elaborate};
use stap_lang::source::SourceMap;
use stap_lang::testing::FakeKernel;

mod common;

/// Elaborates `script` (with `tapsets`) and returns the rendered
/// diagnostics; panics if elaboration succeeded.
fn errors_with(
    script: &str,
    tapsets: &[(&str, &str)],
    facts: &dyn KernelFacts,
    opts: &ElabOptions,
) -> String {
    let elaborated = common::elaborate_text(script, tapsets, facts, opts);
    let rendered = elaborated.rendered();
    assert!(
        elaborated.program.is_none(),
        "elaboration unexpectedly succeeded:\n{rendered}"
    );
    assert!(!elaborated.diags.is_empty());
    rendered
}

fn errors(script: &str) -> String {
    errors_with(script, &[], &FakeKernel::new(), &ElabOptions::default())
}

#[test]
fn unknown_function() {
    insta::assert_snapshot!(errors("probe begin { printl(\"x\") }"));
}

/// Tapset functions stap-rs cannot run are known, and say why.
#[test]
fn refused_tapset_functions_say_why() {
    insta::assert_snapshot!(errors(
        "probe begin { set_kernel_int(0, 1); set_returnval(0); mdelay(1); kernel_buffer_quoted(0, 4, 8) }"
    ));
}

/// LSM probes: setting the verdict without -g, a hook the kernel lacks
/// and a missing hook name are errors at their line; `lsm.HOOK` with no
/// alias of that name is `kernel.lsm("HOOK")` and resolves.
#[test]
fn lsm_probe_errors_name_the_line() {
    insta::assert_snapshot!(errors(
        "probe kernel.lsm(\"socket_bind\") { $return = -1 }\n\
         probe lsm.socket_bind { $return += 1; println($addrlen) }\n\
         probe kernel.lsm(\"no_such_hook\") { }\n\
         probe kernel.lsm { }"
    ));
}

#[test]
fn unknown_variable() {
    // As stap: a warning (with the likely misspelling), and the local
    // reads as 0.
    let elaborated = common::elaborate_text(
        "global count\nprobe begin { count = 1; println(cuont + 1) }",
        &[],
        &FakeKernel::new(),
        &ElabOptions::default(),
    );
    assert!(elaborated.program.is_some(), "{}", elaborated.rendered());
    insta::assert_snapshot!(elaborated.rendered());
}

#[test]
fn unknown_array() {
    insta::assert_snapshot!(errors("global totals\nprobe begin { totls[1] = 2 }"));
}

#[test]
fn unknown_probe_family() {
    insta::assert_snapshot!(errors("probe kernel.tarce(\"kfree_skb\") { }"));
}

#[test]
fn unknown_tracepoint() {
    insta::assert_snapshot!(errors("probe kernel.trace(\"kfree_skbb\") { }"));
}

#[test]
fn unknown_tracepoint_wildcard() {
    insta::assert_snapshot!(errors("probe kernel.trace(\"nosuch:*\") { }"));
}

#[test]
fn unknown_kernel_function() {
    insta::assert_snapshot!(errors("probe kernel.function(\"tcp_sendmssg\") { }"));
}

#[test]
fn unknown_struct_member() {
    insta::assert_snapshot!(errors(
        "probe kernel.trace(\"kfree_skb\") { println($skb->lenn) }"
    ));
}

#[test]
fn member_of_non_pointer() {
    insta::assert_snapshot!(errors(
        "probe kernel.trace(\"net_dev_xmit\") { println($rc->x) }"
    ));
}

#[test]
fn pointer_local_of_two_types() {
    insta::assert_snapshot!(errors(
        "probe kernel.trace(\"kfree_skb\") {\n  p = $skb\n  if ($location) p = $skb->dev\n  p = 0\n  println(p->len)\n}"
    ));
}

#[test]
fn pointer_local_reassigned_to_another_type() {
    insta::assert_snapshot!(errors(
        "probe kernel.trace(\"kfree_skb\") {\n  p = $skb\n  p = p->dev\n  println(p->mtu)\n}"
    ));
}

#[test]
fn pointer_parameter_and_global_of_two_types() {
    // Each error names both stores: the calls' arguments, the assignments.
    insta::assert_snapshot!(errors(
        "global g\nfunction len(t) { return t->len }\nprobe kernel.trace(\"sched_switch\") {\n  g = $next\n  println(len($next))\n}\nprobe kernel.trace(\"kfree_skb\") {\n  g = $skb\n  println(len($skb) + g->pid)\n}"
    ));
}

#[test]
fn untyped_returns_parameters_and_globals() {
    // A function that returns no typed pointer, a built-in that returns a
    // plain number, a parameter only ever given numbers, a global likewise.
    insta::assert_snapshot!(errors(
        "global g\nfunction five() { return 5 }\nfunction pid_of(t) { return t->pid }\nprobe kernel.trace(\"sched_switch\") {\n  g = 5\n  println(five()->pid + execname()->pid + pid_of(3) + g->pid)\n}"
    ));
}

#[test]
fn pointer_local_without_type() {
    insta::assert_snapshot!(errors(
        "probe kernel.trace(\"kfree_skb\") {\n  p = $location\n  q = p\n  println(q->len)\n}"
    ));
}

#[test]
fn unknown_cast_type() {
    insta::assert_snapshot!(errors(
        "probe kernel.trace(\"kfree_skb\") { println(@cast($skb, \"struct sk_bufff\")->len) }"
    ));
}

#[test]
fn type_conflict_on_global() {
    insta::assert_snapshot!(errors(
        "global x\nprobe begin { x = 1 }\nprobe end { x = \"one\" }"
    ));
}

#[test]
fn type_conflict_on_array_key() {
    insta::assert_snapshot!(errors(
        "global a\nprobe begin { a[1] = 1 }\nprobe end { a[\"k\"] = 2 }"
    ));
}

#[test]
fn type_conflict_on_function_return() {
    insta::assert_snapshot!(errors(
        "function f(x) {\n  if (x) return 1\n  return \"one\"\n}\nprobe begin { f(1) }"
    ));
}

#[test]
fn wrong_arity_user_function() {
    insta::assert_snapshot!(errors(
        "function add(a, b) { return a + b }\nprobe begin { println(add(1)) }"
    ));
}

#[test]
fn wrong_arity_builtin() {
    insta::assert_snapshot!(errors("probe begin { println(strlen(\"a\", \"b\")) }"));
}

#[test]
fn wrong_argument_type_to_builtin() {
    insta::assert_snapshot!(errors("probe begin { println(strlen(42)) }"));
}

#[test]
fn printf_too_few_arguments() {
    insta::assert_snapshot!(errors("probe begin { printf(\"%d %s\\n\", 1) }"));
}

#[test]
fn printf_too_many_arguments() {
    insta::assert_snapshot!(errors("probe begin { printf(\"%d\\n\", 1, 2) }"));
}

#[test]
fn printf_d_given_a_string() {
    insta::assert_snapshot!(errors("probe begin { printf(\"%d\\n\", \"ten\") }"));
}

#[test]
fn printf_non_literal_format() {
    insta::assert_snapshot!(errors("probe begin { fmt = \"%d\\n\"; printf(fmt, 1) }"));
}

#[test]
fn context_var_not_in_probe() {
    insta::assert_snapshot!(errors(
        "probe kernel.trace(\"kfree_skb\") { println($sbk) }"
    ));
}

#[test]
fn context_var_in_begin() {
    insta::assert_snapshot!(errors("probe begin { println($skb) }"));
}

#[test]
fn context_var_in_function() {
    insta::assert_snapshot!(errors(
        "function f() { return $skb }\nprobe kernel.trace(\"kfree_skb\") { f() }"
    ));
}

#[test]
fn entry_outside_return_probe() {
    insta::assert_snapshot!(errors(
        "probe kernel.function(\"tcp_sendmsg\") { println(@entry($size)) }"
    ));
}

#[test]
fn return_outside_return_probe() {
    insta::assert_snapshot!(errors(
        "probe kernel.function(\"tcp_sendmsg\") { println($return) }"
    ));
}

#[test]
fn embedded_c_in_function() {
    insta::assert_snapshot!(errors(
        "function f() %{ STAP_RETURN(0); %}\nprobe begin { f() }"
    ));
}

#[test]
fn embedded_c_at_top_level() {
    insta::assert_snapshot!(errors("%{\n#include <linux/skbuff.h>\n%}\nprobe begin { }"));
}

#[test]
fn guru_mode_assignment() {
    insta::assert_snapshot!(errors(
        "probe kernel.trace(\"kfree_skb\") { $location = 0 }"
    ));
}

#[test]
fn inline_probe() {
    insta::assert_snapshot!(errors("probe kernel.function(\"tcp_sendmsg\").inline { }"));
}

#[test]
fn source_file_selector() {
    insta::assert_snapshot!(errors("probe kernel.function(\"*@net/ipv4/tcp.c\") { }"));
}

#[test]
fn duplicate_function() {
    insta::assert_snapshot!(errors(
        "function f() { return 1 }\nfunction f() { return 2 }\nprobe begin { f() }"
    ));
}

#[test]
fn duplicate_global() {
    insta::assert_snapshot!(errors("global x = 1\nglobal x = 2\nprobe begin { x++ }"));
}

#[test]
fn alias_with_unknown_target() {
    insta::assert_snapshot!(errors(
        "probe mydrops = kernel.trace(\"kfree_skbx\") { }\nprobe mydrops { }"
    ));
}

#[test]
fn recursive_alias() {
    insta::assert_snapshot!(errors(
        "probe ping = pong { }\nprobe pong = ping { }\nprobe ping { }"
    ));
}

#[test]
fn stats_used_as_value() {
    insta::assert_snapshot!(errors("global s\nprobe begin { s <<< 1; println(s + 1) }"));
}

#[test]
fn array_used_as_scalar() {
    insta::assert_snapshot!(errors("global a\nprobe begin { a[1] = 1; println(a) }"));
}

#[test]
fn scalar_used_as_array() {
    insta::assert_snapshot!(errors("global n = 0\nprobe begin { n[1] = 1 }"));
}

#[test]
fn kernel_function_without_fentry_or_kprobes() {
    insta::assert_snapshot!(errors_with(
        "probe kernel.function(\"tcp_sendmsg\") { println(pid()) }",
        &[],
        &FakeKernel::like_this_host(),
        &ElabOptions::default(),
    ));
}

#[test]
fn unresolved_type() {
    insta::assert_snapshot!(errors("global g\nprobe begin { g = h; h = g }"));
}

#[test]
fn histogram_not_printed() {
    insta::assert_snapshot!(errors(
        "global s\nprobe begin { s <<< 1; x = @hist_log(s) }"
    ));
}

#[test]
fn unknown_timer_unit() {
    insta::assert_snapshot!(errors("probe timer.sek(5) { }"));
}

#[test]
fn dollar_locals_needs_dwarf() {
    insta::assert_snapshot!(errors(
        "probe kernel.trace(\"kfree_skb\") { println($$locals) }"
    ));
}

#[test]
fn override_of_unknown_global() {
    let opts = ElabOptions {
        defines: vec![],
        global_overrides: vec![("maxm".into(), "5".into())],
        ..ElabOptions::default()
    };
    insta::assert_snapshot!(errors_with(
        "global maxn = 10\nprobe begin { println(maxn) }",
        &[],
        &FakeKernel::new(),
        &opts
    ));
}

#[test]
fn private_tapset_function_is_invisible() {
    let tapset = "private function helper() { return 1 }\nfunction visible() { return helper() }";
    insta::assert_snapshot!(errors_with(
        "probe begin { println(visible() + helper()) }",
        &[("lib.stp", tapset)],
        &FakeKernel::new(),
        &ElabOptions::default()
    ));
}

/// Odd but parseable scripts: elaboration must answer (a program, or at
/// least one error) without panicking.
#[test]
fn odd_inputs_do_not_panic() {
    let scripts = [
        "",
        "global x",
        "probe begin { }",
        "probe never { @count(x) }",
        "probe begin { x <<< 1 }",
        "global s\nprobe begin { s <<< 1; s <<< \"a\"; foreach (v = [k] in s) println(v) }",
        "function f(a) { return f(a) }\nprobe begin { f(1) }",
        "function f(a, a) { return a }\nprobe begin { f(1, 2) }",
        "probe kernel.trace(\"kfree_skb\") { println($skb->dev->name$$, &$skb->len, $skb[1]) }",
        "probe kernel.trace(\"kfree_skb\") { println(@cast(0, \"int\")->x) }",
        "probe kernel.trace(\"kfree_skb\") { println(&$skb) }",
        "probe begin(1), end(2), error(3), timer.s(0) { }",
        "probe timer.ms(-5) { }",
        "probe perf.sw.nothing { }",
        "probe process.function(\"main\") { }",
        "probe process(\"/bin/sh\").function(\"main\") { println($argc) }",
        "probe kernel.function(\"tcp_close\").return { println($return) }",
        "probe a = a { }\nprobe a { }",
        "probe a.b = begin { x = 1 }\nprobe a.* { println(x) }",
        "global a\nprobe begin { a[1] = 1; a[1, 2] = 2; delete a[1, 2, 3] }",
        "probe begin { printf(\"%*d %.*s\\n\", 5, 1, 2, \"abc\") }",
        "probe begin { printf(\"%z\\n\", 1) }",
        "probe begin { x = @entry(1); y = @defined(zz) }",
        "probe begin { println(@hist_linear(1, 2, 3, 4)) }",
    ];
    for script in scripts {
        let envp = common::fake_env();
        let mut map = SourceMap::new();
        let id = map.add("odd.stp", script);
        let parsed = parse_file(&map, id, &envp);
        let (program, diags) = elaborate(
            &[parsed.file],
            &[],
            &FakeKernel::new(),
            &ElabOptions::default(),
        );
        assert!(
            program.is_some() || diags.iter().any(|d| d.is_error()),
            "no program and no error for {script:?}"
        );
    }
}

#[test]
fn internal_regex_builtin_is_not_callable() {
    let text = errors("probe begin { println(regex_match(\"a\", \"a\")) }");
    assert!(text.contains("unknown function `regex_match`"), "{text}");
}

#[test]
fn guru_mode_on_still_refuses_embedded_c_and_kernel_writes() {
    let opts = ElabOptions {
        guru: true,
        ..ElabOptions::default()
    };
    insta::assert_snapshot!(errors_with(
        "function f() %{ STAP_RETURN(0); %}\nprobe kernel.trace(\"kfree_skb\") { f(); $location = 0; x = %{ 1 %} }",
        &[],
        &FakeKernel::new(),
        &opts,
    ));
}

#[test]
fn tapset_embedded_c_is_refused_only_where_used() {
    // The tapset's unused embedded-C function and top-level C are fine;
    // the used one is refused without asking for -g (tapsets need none).
    insta::assert_snapshot!(errors_with(
        "probe begin { println(used()) }",
        &[(
            "lib.stp",
            "%{ #include <linux/sched.h> %}\nfunction unused() %{ STAP_RETURN(1); %}\nfunction used() %{ STAP_RETURN(2); %}",
        )],
        &FakeKernel::new(),
        &ElabOptions::default(),
    ));
}

#[test]
fn operators_that_need_headers_or_dwarf() {
    insta::assert_snapshot!(errors(
        "global a\nprobe begin { x = @const(\"NR_CPUS\"); v = a[1, *]; y = @var(\"jiffies\", \"kernel\") }"
    ));
}

/// A function known only by its compiler clone, with no BTF record: its
/// parameters cannot be read.
#[test]
fn parameter_of_a_clone_without_a_prototype() {
    let facts = FakeKernel::new().with_traceable(&["tcp_sendmsg", "tcp_options_write.isra.0"]);
    insta::assert_snapshot!(errors_with(
        "probe kernel.function(\"tcp_options_write\") { println($opts) }",
        &[],
        &facts,
        &ElabOptions::default()
    ));
}

/// An element keyed by a parameter that every call fills with `tid()`
/// belongs to the calling thread, as one keyed by `tid()` does: no racy
/// update warning (stdlib's `thread_indent` keeps its depth this way).
/// The same helper called with another key anywhere does warn.
#[test]
fn racy_update_warnings_follow_tid_through_parameters() {
    let helper = "global depth\n\
                  function level(key, delta) { d = depth[key]; depth[key] = d + delta; return d }\n\
                  function mine(delta) { return level(tid(), delta) }\n";
    let per_thread =
        format!("{helper}probe kernel.function(\"tcp_sendmsg\") {{ println(mine(1)) }}");
    let facts = FakeKernel::new();
    let opts = ElabOptions::default();
    let quiet = common::elaborate_text(&per_thread, &[], &facts, &opts);
    assert!(quiet.program.is_some());
    assert!(quiet.diags.is_empty(), "{}", quiet.rendered());
    let shared = format!(
        "{helper}probe kernel.function(\"tcp_sendmsg\") {{ println(mine(1)) }}\n\
         probe kernel.function(\"tcp_close\") {{ println(level(-1, 1)) }}"
    );
    let warned = common::elaborate_text(&shared, &[], &facts, &opts);
    assert!(warned.program.is_some());
    insta::assert_snapshot!(warned.rendered());
}

/// An alias over a function known only by its clone, with no prototype:
/// its code reading a parameter is an error only where the script uses
/// what it computes (stdlib's `scheduler.cpu_on` and its `task_prev`).
#[test]
fn an_alias_reading_a_parameter_of_a_clone_errs_only_when_used() {
    let facts = FakeKernel::new().with_traceable(&["tcp_sendmsg", "finish_task_switch.isra.0"]);
    let tapset = (
        "sched.stp",
        "probe sched.on = kernel.function(\"finish_task_switch\") { prev = $prev; idle = pid() == 0 }",
    );
    let opts = ElabOptions::default();
    let unused =
        common::elaborate_text("probe sched.on { println(idle) }", &[tapset], &facts, &opts);
    assert!(unused.program.is_some(), "{}", unused.rendered());
    insta::assert_snapshot!(errors_with(
        "probe sched.on { println(prev) }",
        &[tapset],
        &facts,
        &opts
    ));
}

/// `break` and `continue` outside `while`, `for` and `foreach` are pass-2
/// errors, in probes and functions alike, with stap's wording.
#[test]
fn break_and_continue_outside_a_loop() {
    insta::assert_snapshot!(errors(
        "function f() { continue }\nprobe begin { while (1) { break }; if (1) break; f() }"
    ));
}

/// A built-in that returns nothing has no value to use (stap: unresolved
/// type); as a statement of its own, or in `for`'s first and third
/// clauses, it is fine.
#[test]
fn a_builtin_that_returns_nothing_used_as_a_value() {
    insta::assert_snapshot!(errors(
        "probe begin { for (exit(); 0; exit()) {}; y = exit(); println(printf(\"x\")) }"
    ));
}

/// A script function with no `return EXPR` used as a value where nothing
/// gives that value a type is stap's unresolved type, at each such call
/// (`y = f()` also leaves `y` untyped); as a statement it is fine.
#[test]
fn a_function_that_returns_nothing_used_as_a_value() {
    insta::assert_snapshot!(errors(
        "function f() { }\nfunction g() { f() }\nprobe begin { g(); println(f()); y = f(); if (f() == g()) exit() }"
    ));
}
