//! (in progress) The IR verifier.

use super::Module;

/// Checks the invariants in `ir/mod.rs`; each error names the function and block.
pub fn verify(module: &Module) -> Result<(), Vec<String>> {
    let _ = module;
    Ok(())
}
