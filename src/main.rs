//! `stap-rs`: the command-line front of the compiler and runtime.

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
    match driver::run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(frontend::Failed) => ExitCode::FAILURE,
    }
}
