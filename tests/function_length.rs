//! No non-test function in `src/` is longer than [`MAX_LINES`] lines (signature to closing
//! brace): a long function is split along the decisions it makes.
//!
//! The crate's module tree is walked from `src/lib.rs` and `src/main.rs`; modules under
//! `#[cfg(test)]` (inline or in their own file) and `#[test]` functions are not counted.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use proc_macro2::Span;
use syn::spanned::Spanned;
use syn::visit::Visit;

mod source_support;
use source_support::{path_attr, test_only};

const MAX_LINES: usize = 120;

/// Functions allowed to stay longer for now: only in `src/worker/replicate/engine.rs` and
/// `src/worker/replicate/pipeline/`, which the engine/pipeline seam task reworks (issue 52,
/// part 2). Entries are `file::function` (methods as `file::Type::method`), e.g.
/// `"src/worker/replicate/pipeline/finish.rs::Pipeline::finish_inner"`. Empty today.
const ALLOWED: &[&str] = &[];

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct LongFn {
    file: String,
    line: usize,
    name: String,
    lines: usize,
}

impl LongFn {
    fn key(&self) -> String {
        format!("{}::{}", self.file, self.name)
    }
}

struct Walker<'a> {
    root: &'a Path,
    file: String,
    /// Where `mod x;` declared at the current nesting level finds `x.rs` / `x/mod.rs`.
    dir: PathBuf,
    /// Enclosing items, for names like `Type::method`.
    scope: Vec<String>,
    found: Vec<LongFn>,
    /// Files still to read: (path, directory of their child modules).
    pending: Vec<(PathBuf, PathBuf)>,
}

impl Walker<'_> {
    fn record(&mut self, name: &str, start: Span, end: Span) {
        let (first, last) = (start.start().line, end.end().line);
        let lines = last - first + 1;
        if lines > MAX_LINES {
            let mut path = self.scope.clone();
            path.push(name.to_string());
            self.found.push(LongFn {
                file: self.file.clone(),
                line: first,
                name: path.join("::"),
                lines,
            });
        }
    }

    fn nested<F: FnOnce(&mut Self)>(&mut self, name: String, f: F) {
        self.scope.push(name);
        f(self);
        self.scope.pop();
    }
}

/// The first token of a signature, visibility included (attributes and doc comments are not
/// part of the length).
fn sig_start(vis: Option<&syn::Visibility>, sig: &syn::Signature) -> Span {
    match vis {
        Some(v @ (syn::Visibility::Public(_) | syn::Visibility::Restricted(_))) => v.span(),
        _ => sig.span(),
    }
}

impl<'ast> Visit<'ast> for Walker<'_> {
    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        if test_only(&m.attrs) {
            return;
        }
        let name = m.ident.to_string();
        match &m.content {
            Some((_, items)) => {
                let outer = self.dir.clone();
                self.dir = match path_attr(&m.attrs) {
                    Some(p) => outer.join(p),
                    None => outer.join(&name),
                };
                self.nested(name, |w| {
                    for item in items {
                        w.visit_item(item);
                    }
                });
                self.dir = outer;
            }
            None => {
                let file = match path_attr(&m.attrs) {
                    Some(p) => self.dir.join(p),
                    None if self.dir.join(format!("{name}.rs")).exists() => {
                        self.dir.join(format!("{name}.rs"))
                    }
                    None => self.dir.join(&name).join("mod.rs"),
                };
                let child_dir = if file.file_name().is_some_and(|f| f == "mod.rs") {
                    file.parent().unwrap().to_path_buf()
                } else {
                    file.with_extension("")
                };
                assert!(
                    file.exists(),
                    "{}: `mod {name};` has no file {}",
                    self.file,
                    file.display()
                );
                self.pending.push((file, child_dir));
            }
        }
    }

    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        if test_only(&f.attrs) {
            return;
        }
        let name = f.sig.ident.to_string();
        self.record(&name, sig_start(Some(&f.vis), &f.sig), f.block.span());
        self.nested(name, |w| syn::visit::visit_item_fn(w, f));
    }

    fn visit_item_impl(&mut self, i: &'ast syn::ItemImpl) {
        if test_only(&i.attrs) {
            return;
        }
        let ty = match &*i.self_ty {
            syn::Type::Path(p) => p
                .path
                .segments
                .last()
                .map(|s| s.ident.to_string())
                .unwrap_or_default(),
            _ => "impl".to_string(),
        };
        self.nested(ty, |w| syn::visit::visit_item_impl(w, i));
    }

    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        if test_only(&f.attrs) {
            return;
        }
        let name = f.sig.ident.to_string();
        self.record(&name, sig_start(Some(&f.vis), &f.sig), f.block.span());
        self.nested(name, |w| syn::visit::visit_impl_item_fn(w, f));
    }

    fn visit_item_trait(&mut self, t: &'ast syn::ItemTrait) {
        if test_only(&t.attrs) {
            return;
        }
        self.nested(t.ident.to_string(), |w| syn::visit::visit_item_trait(w, t));
    }

    fn visit_trait_item_fn(&mut self, f: &'ast syn::TraitItemFn) {
        if test_only(&f.attrs) {
            return;
        }
        let name = f.sig.ident.to_string();
        if let Some(body) = &f.default {
            self.record(&name, sig_start(None, &f.sig), body.span());
        }
        self.nested(name, |w| syn::visit::visit_trait_item_fn(w, f));
    }
}

/// Every non-test function of the crate longer than [`MAX_LINES`].
fn long_functions(root: &Path) -> Vec<LongFn> {
    let src = root.join("src");
    let mut w = Walker {
        root,
        file: String::new(),
        dir: src.clone(),
        scope: Vec::new(),
        found: Vec::new(),
        pending: vec![
            (src.join("lib.rs"), src.clone()),
            (src.join("main.rs"), src.clone()),
        ],
    };
    let mut seen = BTreeSet::new();
    while let Some((file, dir)) = w.pending.pop() {
        if !seen.insert(file.clone()) {
            continue;
        }
        let text =
            std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let ast = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        w.file = file
            .strip_prefix(w.root)
            .unwrap_or(&file)
            .display()
            .to_string();
        w.dir = dir;
        w.scope.clear();
        if test_only(&ast.attrs) {
            continue;
        }
        w.visit_file(&ast);
    }
    w.found.sort();
    w.found
}

#[test]
fn no_non_test_function_is_longer_than_the_limit() {
    let found = long_functions(Path::new(env!("CARGO_MANIFEST_DIR")));
    let too_long: Vec<String> = found
        .iter()
        .filter(|f| !ALLOWED.contains(&f.key().as_str()))
        .map(|f| format!("  {}:{} {} ({} lines)", f.file, f.line, f.name, f.lines))
        .collect();
    assert!(
        too_long.is_empty(),
        "{} non-test functions are longer than {MAX_LINES} lines; split each along the \
         decisions it makes:\n{}",
        too_long.len(),
        too_long.join("\n")
    );
    let elsewhere: Vec<&&str> = ALLOWED
        .iter()
        .filter(|a| {
            !a.starts_with("src/worker/replicate/engine.rs::")
                && !a.starts_with("src/worker/replicate/pipeline/")
        })
        .collect();
    assert!(
        elsewhere.is_empty(),
        "only the engine and the pipeline may be allowed (see ALLOWED): {elsewhere:?}"
    );
    // An allow-list entry that no longer matches a long function is stale: remove it.
    let stale: Vec<&&str> = ALLOWED
        .iter()
        .filter(|a| !found.iter().any(|f| f.key() == **a))
        .collect();
    assert!(
        stale.is_empty(),
        "allowed but no longer over {MAX_LINES} lines (remove from ALLOWED): {stale:?}"
    );
}

/// The walker itself: it measures what it should and skips test code.
#[test]
fn the_walker_counts_signature_to_closing_brace_and_skips_test_code() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("a")).unwrap();
    let body = |n: usize| "    let _x = 1;\n".repeat(n);
    // `long` is 2 + 119 = 121 lines; `edge` is exactly 120.
    std::fs::write(
        src.join("lib.rs"),
        format!(
            "/// doc\n#[inline]\npub fn long() {{\n{}}}\nfn edge() {{\n{}}}\nmod a;\n\
             #[cfg(test)]\nmod tests;\n#[cfg(test)]\nmod inline {{ fn t() {{\n{}}} }}\n\
             #[cfg(any(test, feature = \"x\"))]\nfn either() {{\n{}}}\n",
            body(119),
            body(118),
            body(200),
            body(130),
        ),
    )
    .unwrap();
    std::fs::write(
        src.join("a.rs"),
        format!(
            "struct S;\nimpl S {{\n    pub(crate) fn m(&self) {{\n{}    }}\n}}\n\
             #[test]\nfn t() {{\n{}}}\nmod b;\n",
            body(125),
            body(200)
        ),
    )
    .unwrap();
    std::fs::write(
        src.join("a").join("b.rs"),
        format!("trait T {{\n    fn d() {{\n{}    }}\n}}\n", body(121)),
    )
    .unwrap();
    std::fs::write(
        src.join("tests.rs"),
        format!("fn t() {{\n{}}}\n", body(300)),
    )
    .unwrap();
    std::fs::write(src.join("main.rs"), "fn main() {}\n").unwrap();

    let found: Vec<(String, String, usize, usize)> = long_functions(dir.path())
        .into_iter()
        .map(|f| (f.file, f.name, f.line, f.lines))
        .collect();
    let want = vec![
        ("src/a.rs".to_string(), "S::m".to_string(), 3, 127),
        ("src/a/b.rs".to_string(), "T::d".to_string(), 2, 123),
        ("src/lib.rs".to_string(), "long".to_string(), 3, 121),
        ("src/lib.rs".to_string(), "either".to_string(), 451, 132),
    ];
    assert_eq!(found, want);
}
