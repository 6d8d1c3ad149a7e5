//! `try`/`catch` on both sides: a run-time error inside `try` runs the
//! `catch` block (with the error's text in `catch (msg)`) instead of
//! ending the probe and counting towards MAXERRORS. A `try` whose body
//! cannot fail leaves its `catch` as dead code, which the kernel side
//! must not emit (the verifier rejects unreachable instructions).

use super::{Session, assert_success, build, closed_port, serial, trigger_until_done};

#[test]
fn try_catch_in_a_host_probe() {
    let _one = serial();
    let done = Session::start(&[
        "-e",
        r#"global zero
           function divide(x) { return 10 / x }
           probe begin {
             try { println(divide(zero)) } catch (m) { println("caught: ", m) }
             try { error("explicit") } catch (m) { println("caught: ", m) }
             try { try { error("inner") } catch (m) { error("again " . m) } }
             catch (m) { println("caught: ", m) }
             try { println(1 / zero) } catch { println("caught without a variable") }
             println("after")
             exit()
           }"#,
    ])
    .finish();
    assert_success(&done);
    assert_eq!(
        done.stdout,
        "caught: division by zero\ncaught: explicit\ncaught: again inner\n\
         caught without a variable\nafter\n",
        "stderr:\n{}",
        done.stderr
    );
    assert!(!done.stderr.contains("ERROR"), "{}", done.stderr);
}

#[test]
fn try_catch_in_a_kernel_trace_probe() {
    let _one = serial();
    let trigger = build("trigger");
    let port = closed_port().to_string();
    let script = r#"global zero
           function divide(x) { return 10 / x }
           probe kernel.trace("raw_syscalls:sys_enter") {
             if (execname() != "stapTryCatch") next
             try { println("nothing to catch") } catch (m) { println("not reached: ", m) }
             try { println(divide(zero)) } catch (m) { println("caught: ", m) }
             try { error("explicit") } catch (m) { println("caught: ", m) }
             try { x = kernel_long(0) } catch (m) { println("caught: ", m) }
             try { println(1 / zero) } catch { println("caught without a variable") }
             println("after")
             exit()
           }"#;
    let mut session = Session::start(&["-e", script]);
    session.wait_ready();
    trigger_until_done(
        &mut session,
        &trigger,
        &["stapTryCatch", "udp", "127.0.0.1", &port],
    );
    let done = session.finish();
    assert_success(&done);
    assert_eq!(
        done.stdout,
        "nothing to catch\ncaught: division by zero\ncaught: explicit\ncaught: kernel read fault\n\
         caught without a variable\nafter\n",
        "stderr:\n{}",
        done.stderr
    );
    assert!(!done.stderr.contains("ERROR"), "{}", done.stderr);
}
