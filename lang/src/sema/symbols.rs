//! The symbol tables of elaboration: user definitions, and the tapset
//! library pulled in file by file, only when something the program uses is
//! defined there (stap's "tapset resolution").

use super::hir::{self, GlobalId, Sides, Type};
use super::library::{Library, plain_point_name};
use super::pointer_slots::PointerSlots;
use crate::ast;
use crate::diag::Diagnostic;
use crate::kernel::KernelFacts;
use crate::source::Span;
use std::collections::HashMap;

pub(crate) struct GlobalEntry {
    pub hir: hir::Global,
    /// Keys per use (0 for a scalar), with the first use that decided it.
    pub arity: Option<(usize, Span)>,
    /// Mentioned by some code (unused library globals are not checked).
    pub referenced: bool,
}

/// A function's AST: a script's or a tapset's, borrowed from its file, or
/// one the elaborator writes itself (`slices::membership`).
#[derive(Clone)]
pub(crate) enum FunctionAst<'a> {
    Parsed(&'a ast::Function),
    Synthesized(std::sync::Arc<ast::Function>),
}

impl std::ops::Deref for FunctionAst<'_> {
    type Target = ast::Function;
    fn deref(&self) -> &ast::Function {
        match self {
            FunctionAst::Parsed(f) => f,
            FunctionAst::Synthesized(f) => f,
        }
    }
}

pub(crate) struct FunctionEntry<'a> {
    pub ast: FunctionAst<'a>,
    pub from_tapset: bool,
    /// Called from somewhere; tapset functions are lowered only then.
    pub referenced: bool,
    /// Filled in once the body has been lowered.
    pub lowered: Option<hir::Function>,
}

pub(crate) struct AliasEntry<'a> {
    /// The dotted name being defined (`tcp.sendmsg`).
    pub name: String,
    pub ast: &'a ast::ProbeAlias,
}

/// A probe waiting to be resolved and lowered.
pub(crate) struct PendingProbe<'a> {
    pub ast: &'a ast::Probe,
}

/// Which tapset files may define each name (from the library's declared
/// names, in search order), so a use parses and pulls in just the file
/// that really defines it.
#[derive(Default)]
struct TapsetIndex {
    functions: HashMap<String, Vec<usize>>,
    globals: HashMap<String, Vec<usize>>,
    /// Alias names with their file; several files may extend one alias.
    aliases: Vec<(String, usize)>,
}

pub(crate) struct Elaborator<'a> {
    pub facts: &'a dyn KernelFacts,
    pub diags: Vec<Diagnostic>,
    tapsets: &'a Library<'a>,
    index: TapsetIndex,
    pulled: Vec<bool>,
    pub globals: Vec<GlobalEntry>,
    global_names: HashMap<String, GlobalId>,
    pub functions: Vec<FunctionEntry<'a>>,
    function_names: HashMap<String, hir::FunctionId>,
    /// Every function by name and parameter count: stap overloads a name
    /// by arity (`ansi_set_color(fg)`, `ansi_set_color(fg, bg)`).
    overloads: HashMap<(String, usize), hir::FunctionId>,
    pub aliases: Vec<AliasEntry<'a>>,
    pub pending_probes: Vec<PendingProbe<'a>>,
    /// `--kernel-probes`: how kernel.function probes attach.
    pub kernel_probes: super::KernelProbes,
    /// -g (see `ElabOptions::guru`).
    pub guru: bool,
    /// The files of the user's script (tapset code is privileged: its
    /// embedded C needs no -g in stap).
    pub user_files: hashbrown::HashSet<crate::source::FileId>,
    /// --skip-badvars (see `ElabOptions::skip_badvars`).
    pub skip_badvars: bool,
    /// -c/-x's program (see `ElabOptions::target_program`).
    pub target_program: Option<String>,
    /// Functions the kernel refused fentry/fexit on (see
    /// `ElabOptions::fentry_refused`).
    pub fentry_refused: Vec<(String, Option<String>)>,
    /// Wildcard matches left out because the kernel cannot probe them.
    pub skipped_functions: Vec<hir::SkippedFunctions>,
    /// How deep inside `?`/`!` points resolution is: their errors are
    /// dropped, so "did you mean" lists are not worth computing.
    pub optional_depth: usize,
    /// Errors in alias code that count only if the code survives elision
    /// (`sema::elide`): where the invalid expression is, and the error.
    pub alias_errors: Vec<(crate::source::Span, Diagnostic)>,
    /// The typed pointers stored in globals, parameters and returns.
    pub pointer_slots: PointerSlots,
}

impl<'a> Elaborator<'a> {
    pub fn new(facts: &'a dyn KernelFacts, tapsets: &'a Library<'a>) -> Elaborator<'a> {
        let mut index = TapsetIndex::default();
        for file_index in 0..tapsets.len() {
            let declared = tapsets.declared(file_index);
            for name in &declared.functions {
                index
                    .functions
                    .entry(name.clone())
                    .or_default()
                    .push(file_index);
            }
            for name in &declared.globals {
                index
                    .globals
                    .entry(name.clone())
                    .or_default()
                    .push(file_index);
            }
            for name in &declared.aliases {
                index.aliases.push((name.clone(), file_index));
            }
        }
        Elaborator {
            facts,
            diags: Vec::new(),
            tapsets,
            index,
            pulled: vec![false; tapsets.len()],
            globals: Vec::new(),
            global_names: HashMap::new(),
            functions: Vec::new(),
            function_names: HashMap::new(),
            overloads: HashMap::new(),
            aliases: Vec::new(),
            pending_probes: Vec::new(),
            kernel_probes: super::KernelProbes::Auto,
            guru: false,
            user_files: Default::default(),
            skip_badvars: false,
            target_program: None,
            fentry_refused: Vec::new(),
            skipped_functions: Vec::new(),
            optional_depth: 0,
            alias_errors: Vec::new(),
            pointer_slots: PointerSlots::default(),
        }
    }

    pub fn error(&mut self, d: Diagnostic) {
        self.diags.push(d);
    }

    /// Registers every definition of one file.
    pub fn add_file(&mut self, file: &'a ast::File, from_tapset: bool) {
        for item in &file.items {
            if !from_tapset {
                let span = match item {
                    ast::Item::Global(g) => g.span,
                    ast::Item::Function(f) => f.span,
                    ast::Item::Probe(p) => p.span,
                    ast::Item::Alias(a) => a.span,
                    ast::Item::EmbeddedC(span) => *span,
                };
                self.user_files.insert(span.file);
            }
            match item {
                ast::Item::Global(g) => self.add_global(g, from_tapset),
                ast::Item::Function(f) => self.add_function(f, from_tapset),
                ast::Item::Probe(p) => self.pending_probes.push(PendingProbe { ast: p }),
                ast::Item::Alias(a) => {
                    for n in &a.names {
                        match plain_point_name(n) {
                            Some(name) => self.aliases.push(AliasEntry { name, ast: a }),
                            None => self.error(
                                Diagnostic::error("an alias name must be a plain dotted name")
                                    .at(n.span, "has arguments or braces"),
                            ),
                        }
                    }
                }
                // A tapset's top-level C (headers, helpers) only serves its
                // embedded-C functions, which are refused where they are used.
                ast::Item::EmbeddedC(_) if from_tapset => {}
                ast::Item::EmbeddedC(span) => {
                    let d = self.guru_refusal("embedded C (`%{ %}`)", *span);
                    self.error(d)
                }
            }
        }
    }

    /// The error for a construct that needs guru mode: without `-g` it
    /// says so; with `-g` it says why this runtime still cannot do it.
    pub fn guru_refusal(&self, what: &str, span: Span) -> Diagnostic {
        if self.guru || !self.user_files.contains(&span.file) {
            let why = if what.contains("embedded C") {
                "a BPF runtime cannot run C code"
            } else {
                "BPF programs cannot write kernel memory"
            };
            let context = if self.guru {
                "guru mode is on"
            } else {
                "it is tapset code"
            };
            Diagnostic::unsupported(what, span).note(format!("{context}, but {why}"))
        } else {
            Diagnostic::error(format!("{what} requires guru mode (-g)"))
                .at(span, "needs guru mode")
                .note("stap runs this only with -g")
        }
    }

    fn add_global(&mut self, g: &'a ast::Global, from_tapset: bool) {
        if let Some(&existing) = self.global_names.get(&g.name.node) {
            let first = &self.globals[existing.0 as usize];
            if from_tapset && !first.hir.from_tapset {
                return; // the user's definition shadows the library's
            }
            let first_span = first.hir.span;
            self.error(
                Diagnostic::error(format!("duplicate global `{}`", g.name.node))
                    .at(g.name.span, "defined again here")
                    .also(first_span, "first defined here"),
            );
            return;
        }
        let init = g.init.as_ref().map(|l| match &l.node {
            ast::Literal::Number(n) => hir::Constant::Long(*n),
            ast::Literal::String(s) => hir::Constant::String(s.clone()),
        });
        let ty = match &init {
            Some(hir::Constant::Long(_)) => Type::Long,
            Some(hir::Constant::String(_)) => Type::String,
            None => Type::Unknown,
        };
        let id = GlobalId(self.globals.len() as u32);
        self.global_names.insert(g.name.node.clone(), id);
        self.globals.push(GlobalEntry {
            hir: hir::Global {
                name: g.name.node.clone(),
                ty,
                keys: Vec::new(),
                is_array: g.array || g.size.is_some(),
                size: g.size,
                wrap: g.wrap,
                init,
                private: g.private,
                from_tapset,
                used_by: Sides::default(),
                span: g.name.span,
            },
            // An initial value makes it a scalar.
            arity: g.init.as_ref().map(|_| (0, g.name.span)),
            referenced: false,
        });
    }

    fn add_function(&mut self, f: &'a ast::Function, from_tapset: bool) {
        let key = (f.name.node.clone(), f.params.len());
        if let Some(&existing) = self.function_names.get(&f.name.node) {
            let first = &self.functions[existing.0 as usize];
            if from_tapset && !first.from_tapset {
                return; // the user's definition shadows the library's
            }
            if let Some(&same) = self.overloads.get(&key) {
                let first_span = self.functions[same.0 as usize].ast.name.span;
                self.error(
                    Diagnostic::error(format!("duplicate function `{}`", f.name.node))
                        .at(f.name.span, "defined again here")
                        .also(first_span, "first defined here"),
                );
                return;
            }
        }
        self.push_function(FunctionAst::Parsed(f), from_tapset);
    }

    /// Adds a function the elaborator wrote (`slices::membership`), named
    /// after the code it stands for: a second request for the same name
    /// (the same code lowered again) keeps the first.
    pub fn add_synthesized_function(&mut self, f: ast::Function) {
        if !self.function_names.contains_key(&f.name.node) {
            self.push_function(FunctionAst::Synthesized(std::sync::Arc::new(f)), false);
        }
    }

    fn push_function(&mut self, f: FunctionAst<'a>, from_tapset: bool) {
        let key = (f.name.node.clone(), f.params.len());
        let id = hir::FunctionId(self.functions.len() as u32);
        self.function_names.entry(f.name.node.clone()).or_insert(id);
        self.overloads.insert(key, id);
        self.functions.push(FunctionEntry {
            ast: f,
            from_tapset,
            referenced: false,
            lowered: None,
        });
    }

    fn pull(&mut self, file_index: usize) {
        if self.pulled[file_index] {
            return;
        }
        self.pulled[file_index] = true;
        let tapsets = self.tapsets;
        if let Some(file) = tapsets.file(file_index) {
            self.add_file(file, true);
        }
    }

    /// The first tapset file (in search order) that really defines `name`
    /// as `defines` says, parsing the candidates the declared names give.
    fn first_definer(
        &self,
        candidates: Option<&Vec<usize>>,
        defines: impl Fn(&ast::Item) -> bool,
    ) -> Option<usize> {
        candidates?.iter().copied().find(|&file| {
            self.tapsets
                .file(file)
                .is_some_and(|f| f.items.iter().any(&defines))
        })
    }

    /// Private definitions are visible only inside their own file.
    fn visible(def_span: Span, private: bool, from: Span) -> bool {
        !private || def_span.file == from.file
    }

    /// A global by name, pulling in the tapset that defines it if needed.
    pub fn lookup_global(&mut self, name: &str, from: Span) -> Option<GlobalId> {
        if !self.global_names.contains_key(name)
            && let Some(file) = self.first_definer(
                self.index.globals.get(name),
                |item| matches!(item, ast::Item::Global(g) if !g.private && g.name.node == name),
            )
        {
            self.pull(file);
        }
        let id = *self.global_names.get(name)?;
        let entry = &mut self.globals[id.0 as usize];
        let visible = Self::visible(entry.hir.span, entry.hir.private, from);
        entry.referenced |= visible;
        visible.then_some(id)
    }

    /// The function a call with `arity` arguments means: the overload with
    /// that many parameters, else the first of that name (whose arity the
    /// caller then checks).
    pub fn lookup_function_for_call(
        &mut self,
        name: &str,
        arity: usize,
        from: Span,
    ) -> Option<hir::FunctionId> {
        let first = self.lookup_function(name, from)?;
        let Some(&id) = self.overloads.get(&(name.to_string(), arity)) else {
            return Some(first);
        };
        let entry = &mut self.functions[id.0 as usize];
        let visible = Self::visible(entry.ast.name.span, entry.ast.private, from);
        entry.referenced |= visible;
        Some(if visible { id } else { first })
    }

    /// A user or tapset function by name (builtins are looked up separately).
    pub fn lookup_function(&mut self, name: &str, from: Span) -> Option<hir::FunctionId> {
        if !self.function_names.contains_key(name)
            && let Some(file) = self.first_definer(
                self.index.functions.get(name),
                |item| matches!(item, ast::Item::Function(f) if f.name.node == name),
            )
        {
            self.pull(file);
        }
        let id = *self.function_names.get(name)?;
        let entry = &mut self.functions[id.0 as usize];
        let visible = Self::visible(entry.ast.name.span, entry.ast.private, from);
        entry.referenced |= visible;
        visible.then_some(id)
    }

    /// Pulls in every tapset file defining an alias that `matches` accepts.
    pub fn pull_aliases(&mut self, matches: impl Fn(&str) -> bool) {
        let mut files: Vec<usize> = self
            .index
            .aliases
            .iter()
            .filter(|(name, _)| matches(name))
            .map(|(_, f)| *f)
            .collect();
        files.dedup();
        for f in files {
            let defines = self
                .tapsets
                .file(f)
                .is_some_and(|file| alias_names(file).any(|name| matches(&name)));
            if defines {
                self.pull(f);
            }
        }
    }

    /// Every tapset file, parsed (for "did you mean", an error path: it
    /// parses the whole library).
    fn all_tapset_files(&self) -> impl Iterator<Item = &'a ast::File> {
        let tapsets = self.tapsets;
        (0..tapsets.len()).filter_map(move |i| tapsets.file(i))
    }

    /// Every alias name known (user and tapset), for "did you mean".
    pub fn all_alias_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.aliases.iter().map(|a| a.name.clone()).collect();
        names.extend(self.all_tapset_files().flat_map(alias_names));
        names.sort();
        names.dedup();
        names
    }

    /// Every global and function name, for "did you mean".
    pub fn global_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.globals.iter().map(|g| g.hir.name.clone()).collect();
        names.extend(self.all_tapset_files().flat_map(|f| {
            f.items.iter().filter_map(|item| match item {
                ast::Item::Global(g) if !g.private => Some(g.name.node.clone()),
                _ => None,
            })
        }));
        names.sort();
        names.dedup();
        names
    }

    pub fn function_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.function_names.keys().cloned().collect();
        names.extend(self.all_tapset_files().flat_map(|f| {
            f.items.iter().filter_map(|item| match item {
                ast::Item::Function(f) => Some(f.name.node.clone()),
                _ => None,
            })
        }));
        names.sort();
        names.dedup();
        names
    }
}

/// The plain alias names a parsed file defines.
fn alias_names(file: &ast::File) -> impl Iterator<Item = String> + '_ {
    file.items.iter().flat_map(|item| match item {
        ast::Item::Alias(a) => a.names.iter().filter_map(plain_point_name).collect(),
        _ => Vec::new(),
    })
}
