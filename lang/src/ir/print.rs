//! (in progress) The `--dump=ir` / `-p3` listing.

use super::Module;
use crate::source::SourceMap;

pub fn print_module(module: &Module, map: &SourceMap) -> String {
    let _ = (module, map);
    String::new()
}
