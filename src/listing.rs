//! `-l` and `-L`: list the probe points a pattern matches, by elaborating
//! `probe PATTERN {}` exactly as a script would be, so the listing and real
//! scripts can never disagree.

use crate::cli::Args;
use crate::frontend::{Failed, Frontend};
use crate::out::outln;
use stap_lang::kernel::KernelFacts;
use stap_lang::sema::hir::Probe;
use stap_lang::source::SourceMap;

pub fn run(
    pattern: &str,
    with_vars: bool,
    kernel: &dyn KernelFacts,
    args: &Args,
) -> Result<(), Failed> {
    let mut map = SourceMap::new();
    let file = map.add("<probe point>", format!("probe {pattern} {{}}\n"));
    let front = Frontend::new(kernel, &[]);
    let library = front.load_tapsets(args, &mut map)?;
    let user = front.parse_one(&map, file)?;
    let program = front.elaborate(&map, &[user], &library, args, &[])?;

    let mut lines: Vec<String> = program
        .probes
        .iter()
        .map(|probe| describe(probe, with_vars))
        .collect();
    lines.sort();
    lines.dedup();
    for line in lines {
        outln!("{line}");
    }
    Ok(())
}

/// One line as stap prints it: the point, then with `-L` each variable as
/// `$name:type` (context) or `name:type` (an alias's locals).
fn describe(probe: &Probe, with_vars: bool) -> String {
    let (mut line, locals) = match probe.alias_chain.first() {
        Some(alias) => (alias.clone(), true),
        None => (probe.resolved.clone(), false),
    };
    if with_vars {
        if locals {
            for local in &probe.locals {
                line.push_str(&format!(" {}:{}", local.name, local.ty.name()));
            }
        } else {
            // A raw tracepoint's classic record fields stay out: the
            // listing names the arguments (`-p2` shows both).
            let raw = matches!(
                &probe.kind,
                stap_lang::sema::hir::ProbeKind::Tracepoint {
                    args: stap_lang::kernel::TracepointArgs::Raw(_),
                    ..
                }
            );
            for var in &probe.context {
                let classic = matches!(
                    var.source,
                    stap_lang::sema::hir::ContextSource::ClassicField { .. }
                );
                if raw && classic {
                    continue;
                }
                line.push_str(&format!(" ${}:{}", var.name, var.type_name));
            }
        }
    }
    line
}
