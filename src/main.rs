//! `stap-rs`: the command-line front of the compiler and runtime.

// `print!`/`eprint!` panic on a closed pipe: everything goes through
// `out`'s macros instead (src/out.rs).
#![deny(clippy::print_stdout, clippy::print_stderr)]

mod callgraph;
mod cli;
mod driver;
mod frontend;
mod listing;
mod out;
mod privilege;
mod repl;
mod run;
mod tapsets;

use clap::Parser;
use out::errln;
use std::process::ExitCode;

/// The stack of the thread that runs every pass. The passes recurse over
/// the program's tree, whose depth `stap_lang::nesting::MAX_NESTING`
/// bounds; this is sized for that depth with room to spare in a debug
/// build (measured: docs/reliability.md). Only touched pages cost memory.
const COMPILER_STACK: usize = 256 << 20;

fn main() -> ExitCode {
    let args = cli::Args::parse();
    let worker = std::thread::Builder::new()
        .name("stap-rs".into())
        .stack_size(COMPILER_STACK)
        .spawn(move || match &args.callgraph {
            Some(probe) => callgraph::run(&args, probe),
            None => driver::run(&args),
        });
    let worker = match worker {
        Ok(worker) => worker,
        Err(e) => {
            errln!("ERROR: cannot start the compiler thread: {e}");
            return ExitCode::FAILURE;
        }
    };
    // This thread only waits. It blocks the stop signals so that they
    // reach the worker: by their default action while it compiles, through
    // the session's signalfd once it runs (which needs every thread of the
    // process to block them).
    block_stop_signals();
    match worker.join() {
        Ok(Ok(())) => ExitCode::SUCCESS,
        Ok(Err(frontend::Failed)) => ExitCode::FAILURE,
        // The panic message was printed by the hook.
        Err(_) => ExitCode::from(101),
    }
}

fn block_stop_signals() {
    // SAFETY: sigset operations on a zeroed local set, then a mask change
    // for this thread only.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT] {
            libc::sigaddset(&mut set, signal);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}
