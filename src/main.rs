//! `stap-rs`: the command-line front of the compiler and runtime.

mod callgraph;
mod cli;
mod driver;
mod frontend;
mod listing;
mod repl;
mod run;
mod tapsets;

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args = cli::Args::parse();
    let result = match &args.callgraph {
        Some(probe) => callgraph::run(&args, probe),
        None => driver::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(frontend::Failed) => ExitCode::FAILURE,
    }
}
