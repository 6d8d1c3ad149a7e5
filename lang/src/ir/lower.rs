//! (in progress) HIR to IR.

use super::Module;
use crate::diag::Diagnostic;
use crate::sema::hir::Program;

/// Lowers an elaborated program. Fails only on constructs the backends
/// cannot express yet, each with an `unsupported: ...` diagnostic.
pub fn lower(program: &Program) -> Result<Module, Vec<Diagnostic>> {
    let _ = program;
    Err(vec![Diagnostic::error("unsupported: IR lowering is not written yet")])
}
