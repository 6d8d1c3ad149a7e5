//! Tab completion from the running kernel: tracepoint names inside
//! `kernel.trace("`, function names from BTF inside `kernel.function("`,
//! struct members after `->` where the type is known (`$arg->` in a
//! tracepoint or function probe, `@cast(x, "struct T")->`, and chains of
//! members after either), and otherwise commands, keywords, built-in and
//! tapset function names and the session's globals.
//!
//! The kernel is opened on the first completion that needs it, in the
//! editor thread (its BTF reader is lazy, so this costs milliseconds).

use stap_lang::kernel::{self, KernelFacts, TracepointArgs, TypeId, TypeKind};
use stap_runtime::kernel::BtfKernel;
use std::cell::OnceCell;
use std::sync::{Arc, Mutex};

const COMMANDS: &[&str] = &[
    ":probes", ":detach", ":attach", ":globals", ":print", ":clear", ":save", ":load", ":help",
    ":quit",
];

const KEYWORDS: &[&str] = &[
    "global",
    "function",
    "probe",
    "private",
    "foreach",
    "delete",
    "return",
    "next",
    "break",
    "continue",
    "while",
    "for",
    "else",
    "begin",
    "end",
    "error",
    "kernel.trace(\"",
    "kernel.function(\"",
    "process(\"",
    "timer.s(",
    "timer.ms(",
    "timer.profile",
    "perf.",
    "netfilter.",
];

pub struct Completions {
    names: Arc<Mutex<Vec<String>>>,
    /// Keywords, builtins and tapset functions, sorted.
    words: Vec<String>,
    kernel: OnceCell<Option<BtfKernel>>,
    tracepoints: OnceCell<Vec<String>>,
    functions: OnceCell<Vec<String>>,
}

impl Completions {
    pub fn new(names: Arc<Mutex<Vec<String>>>) -> Completions {
        let mut words: Vec<String> = KEYWORDS
            .iter()
            .chain(COMMANDS)
            .map(|w| w.to_string())
            .chain(
                stap_lang::sema::builtins::all()
                    .iter()
                    .filter(|b| !b.internal)
                    .map(|b| b.name.to_string()),
            )
            .chain(tapset_functions())
            .collect();
        words.sort();
        words.dedup();
        Completions {
            names,
            words,
            kernel: OnceCell::new(),
            tracepoints: OnceCell::new(),
            functions: OnceCell::new(),
        }
    }

    fn kernel(&self) -> Option<&BtfKernel> {
        self.kernel
            .get_or_init(|| BtfKernel::open_default().ok())
            .as_ref()
    }

    /// The start of the text to replace, and the candidates.
    pub fn complete(&self, line: &str, pos: usize) -> (usize, Vec<String>) {
        let before = &line[..pos];
        if let Some(start) = open_string_after(before, "trace(\"") {
            return (start, self.matching(self.tracepoints(), &before[start..]));
        }
        if let Some(start) = open_string_after(before, "function(\"") {
            return (start, self.matching(self.functions(), &before[start..]));
        }
        let start = before.rfind(|c: char| !is_word_char(c)).map_or(0, |i| {
            i + before[i..].chars().next().map_or(1, char::len_utf8)
        });
        let word = &before[start..];
        if let Some(chain) = before[..start].strip_suffix("->") {
            return (start, self.members(line, chain, word));
        }
        if word.is_empty() {
            return (pos, Vec::new());
        }
        let globals = self.names.lock().map(|n| n.clone()).unwrap_or_default();
        let mut found: Vec<String> = self
            .words
            .iter()
            .cloned()
            .chain(globals)
            .filter(|w| w.starts_with(word))
            .collect();
        found.sort();
        found.dedup();
        (start, found)
    }

    fn matching(&self, all: &[String], prefix: &str) -> Vec<String> {
        let from = all.partition_point(|n| n.as_str() < prefix);
        all[from..]
            .iter()
            .take_while(|n| n.starts_with(prefix))
            .cloned()
            .collect()
    }

    /// `system:name` and the bare `name`, sorted.
    fn tracepoints(&self) -> &[String] {
        self.tracepoints.get_or_init(|| {
            let mut names: Vec<String> = self
                .kernel()
                .and_then(|k| k.tracepoint_names().ok())
                .unwrap_or_default()
                .into_iter()
                .flat_map(|(system, name)| [format!("{system}:{name}"), name])
                .collect();
            names.sort();
            names.dedup();
            names
        })
    }

    fn functions(&self) -> &[String] {
        self.functions.get_or_init(|| {
            let mut names = self
                .kernel()
                .and_then(|k| k.function_names().ok())
                .unwrap_or_default();
            names.sort();
            names.dedup();
            names
        })
    }

    /// Members of the struct `chain` (the text before `->`) points to.
    fn members(&self, line: &str, chain: &str, prefix: &str) -> Vec<String> {
        let Some(kernel) = self.kernel() else {
            return Vec::new();
        };
        let Some(ty) = chain_type(kernel, line, chain) else {
            return Vec::new();
        };
        let Some(ty) = struct_of(kernel, ty) else {
            return Vec::new();
        };
        let mut names: Vec<String> = kernel::member_names(kernel, ty)
            .into_iter()
            .filter(|n| n.starts_with(prefix))
            .collect();
        names.sort();
        names.dedup();
        names
    }
}

fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || matches!(c, '_' | '.' | ':' | '@' | '$')
}

/// Where the string opened by the last `opener` starts, if it is still
/// open at the end of `before`.
fn open_string_after(before: &str, opener: &str) -> Option<usize> {
    let at = before.rfind(opener)? + opener.len();
    (!before[at..].contains('"')).then_some(at)
}

/// Function names defined by the embedded tapsets (not `_private` ones).
fn tapset_functions() -> Vec<String> {
    crate::tapsets::TAPSETS
        .iter()
        .flat_map(|t| t.functions.iter())
        .filter(|name| !name.starts_with('_'))
        .map(|name| name.to_string())
        .collect()
}

/// The type of a `$var->a->b` or `@cast(x, "struct T")->a` chain.
fn chain_type(kernel: &dyn KernelFacts, line: &str, chain: &str) -> Option<TypeId> {
    let mut rest = chain.trim_end();
    let mut members = Vec::new();
    // Peel `->name` and `.name` from the right.
    loop {
        let name_start = rest
            .rfind(|c: char| !(c.is_alphanumeric() || c == '_'))
            .map_or(0, |i| i + 1);
        let name = &rest[name_start..];
        let head = &rest[..name_start];
        let Some(head) = head.strip_suffix("->").or_else(|| head.strip_suffix('.')) else {
            break;
        };
        if name.is_empty() {
            return None;
        }
        members.push(name.to_string());
        rest = head;
    }
    let mut ty = root_type(kernel, line, rest)?;
    for name in members.iter().rev() {
        let inner = struct_of(kernel, ty)?;
        ty = kernel::find_member(kernel, inner, name)?.ty;
    }
    Some(ty)
}

/// The type of `$var` (from the enclosing probe) or of an `@cast`.
fn root_type(kernel: &dyn KernelFacts, line: &str, root: &str) -> Option<TypeId> {
    if let Some(inside) = root.strip_suffix(')') {
        let open = matching_paren(inside)?;
        let call = inside[..open].trim_end();
        if !call.ends_with("@cast") {
            return None;
        }
        let args = &inside[open + 1..];
        let quoted = args.split_once(',')?.1;
        let type_name = quoted.split('"').nth(1)?;
        return kernel.find_type(type_name.trim()).ok().flatten();
    }
    let var_start = root.rfind('$')?;
    let var = &root[var_start + 1..];
    if var.is_empty() || !var.chars().all(|c| c.is_alphanumeric() || c == '_') {
        return None;
    }
    let point = enclosing_point(&line[..line.len().min(root.len())])?;
    if let Some(name) = quoted_after(point, "trace(\"") {
        let (system, name) = match name.split_once(':') {
            Some((system, name)) => (Some(system), name),
            None => (None, name),
        };
        let tracepoint = kernel.tracepoint(system, name).ok().flatten()?;
        return match tracepoint.args {
            TracepointArgs::Raw(params) => params.into_iter().find(|p| p.name == var).map(|p| p.ty),
            TracepointArgs::Classic(fields) => {
                fields.into_iter().find(|f| f.name == var).map(|f| f.ty)
            }
        };
    }
    let function = quoted_after(point, "function(\"")?;
    let proto = kernel.function(function).ok().flatten()?;
    proto
        .params
        .into_iter()
        .find(|p| p.name == var)
        .map(|p| p.ty)
}

/// The probe point of the last `probe ... {` in `text`.
fn enclosing_point(text: &str) -> Option<&str> {
    let start = text.rfind("probe ")?;
    let rest = &text[start + "probe ".len()..];
    Some(rest.split('{').next().unwrap_or(rest))
}

fn quoted_after<'t>(text: &'t str, opener: &str) -> Option<&'t str> {
    let at = text.find(opener)? + opener.len();
    text[at..].split('"').next()
}

/// The index of the `(` matching a `)` just past the end of `text`.
fn matching_paren(text: &str) -> Option<usize> {
    let mut depth = 0;
    for (i, c) in text.char_indices().rev() {
        match c {
            ')' => depth += 1,
            '(' if depth == 0 => return Some(i),
            '(' => depth -= 1,
            _ => {}
        }
    }
    None
}

/// The struct a type is or points to (through typedefs and pointers).
fn struct_of(kernel: &dyn KernelFacts, ty: TypeId) -> Option<TypeId> {
    let mut ty = ty;
    for _ in 0..4 {
        match kernel.kind(ty) {
            TypeKind::Struct { .. } => return Some(ty),
            TypeKind::Pointer(to) => ty = to,
            _ => return None,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use stap_lang::testing::FakeKernel;

    /// The members offered after the `->` that ends `line`.
    fn members_after(kernel: &dyn KernelFacts, line: &str) -> Vec<String> {
        let chain = line.strip_suffix("->").unwrap();
        let ty = chain_type(kernel, line, chain).expect("a known type");
        let ty = struct_of(kernel, ty).expect("a struct");
        kernel::member_names(kernel, ty)
    }

    #[test]
    fn members_come_from_the_probe_argument_or_the_cast() {
        let kernel = FakeKernel::new();
        let skb = members_after(&kernel, "probe kernel.trace(\"kfree_skb\") {\n x = $skb->");
        assert!(skb.iter().any(|m| m == "truesize"), "{skb:?}");
        // Anonymous unions are looked through.
        assert!(skb.iter().any(|m| m == "dev"), "{skb:?}");
        let cast = members_after(&kernel, "x = @cast(p, \"struct sk_buff\")->");
        assert_eq!(cast, skb);
        let line = "probe kernel.trace(\"skb:kfree_skb\") { x = $skb->sk->";
        let sk = members_after(&kernel, line);
        assert!(!sk.is_empty() && sk != skb, "{sk:?}");
    }

    #[test]
    fn contexts_are_found_from_the_text_before_the_cursor() {
        assert_eq!(
            open_string_after("probe kernel.trace(\"net:", "trace(\""),
            Some(20)
        );
        assert_eq!(
            open_string_after("probe kernel.trace(\"a\") {", "trace(\""),
            None
        );
        assert_eq!(
            enclosing_point("probe a {} probe kernel.trace(\"x\") { $s"),
            Some("kernel.trace(\"x\") ")
        );
        assert_eq!(matching_paren("@cast(f(x), \"t\""), Some(5));
        let kernel = FakeKernel::new();
        // No probe, or an unknown variable: no type, no candidates.
        assert_eq!(chain_type(&kernel, "$skb", "$skb"), None);
        assert_eq!(
            chain_type(
                &kernel,
                "probe kernel.trace(\"kfree_skb\") { $nope",
                "probe kernel.trace(\"kfree_skb\") { $nope"
            ),
            None
        );
    }
}
