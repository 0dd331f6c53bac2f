//! The rooms of the crate and the arrows allowed between them (docs/ARCHITECTURE.md draws
//! them). Every `crate::`/`super::` path in `src/` (test modules left out) is checked against
//! the table below, so an import that runs against an arrow fails here with the file, the
//! line and the rule it breaks.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Each room (a module path) and the rooms its files may name. A file belongs to the
/// longest room its module path starts with; `main.rs` and `lib.rs` stand above all rooms.
/// Keep docs/ARCHITECTURE.md's table in step.
const ROOMS: &[(&str, &[&str])] = &[
    ("api", &[]),
    ("telemetry", &[]),
    ("kafka", &["api"]),
    ("testkit", &["api", "kafka"]),
    ("controller", &["api", "telemetry"]),
    ("worker", &[]),
    ("worker::runtime", &[]),
    ("worker::validation", &["api"]),
    ("worker::error", &["kafka"]),
    ("worker::topic_filter", &["api", "kafka", "worker::error"]),
    (
        "worker::heartbeats",
        &["api", "kafka", "telemetry", "worker::error"],
    ),
    (
        "worker::acl_sync",
        &["api", "kafka", "worker::error", "worker::topic_filter"],
    ),
    (
        "worker::audit",
        &[
            "api",
            "kafka",
            "telemetry",
            "worker::replicate",
            "worker::topic_filter",
        ],
    ),
    (
        "worker::failover",
        &[
            "api",
            "kafka",
            "worker::checkpoint",
            "worker::replicate",
            "worker::topic_filter",
        ],
    ),
    (
        "worker::checkpoint",
        &[
            "api",
            "kafka",
            "telemetry",
            "worker::error",
            "worker::topic_filter",
        ],
    ),
    (
        "worker::replicate",
        &[
            "api",
            "kafka",
            "telemetry",
            "worker::error",
            "worker::topic_filter",
            "worker::validation",
        ],
    ),
    (
        "worker::process",
        &[
            "api",
            "kafka",
            "telemetry",
            "worker::acl_sync",
            "worker::audit",
            "worker::checkpoint",
            "worker::failover",
            "worker::heartbeats",
            "worker::replicate",
        ],
    ),
    (
        "cli",
        &[
            "api",
            "kafka",
            "worker::audit",
            "worker::checkpoint",
            "worker::failover",
            "worker::process",
            "worker::replicate",
            "worker::topic_filter",
            "worker::validation",
        ],
    ),
    (
        "demo",
        &[
            "api",
            "telemetry",
            "testkit",
            "worker::process",
            "worker::replicate",
        ],
    ),
];

/// Folders whose every module is a room of its own (listed in [`ROOMS`]): a new file there
/// must be given its arrows.
const FOLDERS_OF_ROOMS: &[&str] = &["worker"];

#[test]
fn imports_follow_the_arrows() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut broken = Vec::new();
    for file in source_files(&src) {
        let rel = file.strip_prefix(&src).unwrap().to_path_buf();
        let module = module_of(&rel);
        if module.is_empty() {
            continue; // lib.rs, main.rs
        }
        let unlisted = FOLDERS_OF_ROOMS
            .iter()
            .any(|f| module.len() > 1 && module[0] == *f && room_of(&module[..2]) == Some(f));
        let Some(room) = room_of(&module).filter(|_| !unlisted) else {
            broken.push(format!(
                "src/{}: module {} is in no room: add it to ROOMS in tests/architecture.rs \
                 (and to docs/ARCHITECTURE.md)",
                rel.display(),
                module.join("::")
            ));
            continue;
        };
        let allowed = allowed(room);
        let text = std::fs::read_to_string(&file).unwrap();
        for (line, path) in crate_paths(&text, &module) {
            let Some(target) = room_of(&path) else {
                continue; // the crate root itself
            };
            if target != room && !allowed.contains(target) {
                broken.push(format!(
                    "src/{}:{line}: `{}` is in room {target}; room {room} may only import {}",
                    rel.display(),
                    path.join("::"),
                    if allowed.is_empty() {
                        "nothing of the crate".to_string()
                    } else {
                        allowed.iter().copied().collect::<Vec<_>>().join(", ")
                    }
                ));
            }
        }
    }
    assert!(
        broken.is_empty(),
        "{} import(s) against the arrows of tests/architecture.rs:\n{}",
        broken.len(),
        broken.join("\n")
    );
}

/// The table itself: every room it names exists in it, and no circle of arrows.
#[test]
fn the_rooms_form_no_circle() {
    let names: BTreeSet<&str> = ROOMS.iter().map(|(r, _)| *r).collect();
    for (room, to) in ROOMS {
        for t in *to {
            assert!(names.contains(t), "{room} -> {t}: {t} is not a room");
        }
    }
    // Depth-first search for a back edge.
    fn visit<'a>(
        room: &'a str,
        stack: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
    ) -> Option<String> {
        if let Some(at) = stack.iter().position(|r| *r == room) {
            return Some(format!("{} -> {room}", stack[at..].join(" -> ")));
        }
        if !done.insert(room) {
            return None;
        }
        stack.push(room);
        for next in allowed(room) {
            if let Some(circle) = visit(next, stack, done) {
                return Some(circle);
            }
        }
        stack.pop();
        None
    }
    let mut done = BTreeSet::new();
    for room in &names {
        if let Some(circle) = visit(room, &mut Vec::new(), &mut done) {
            panic!("the table allows a circle: {circle}");
        }
    }
}

/// The parser finds what it is meant to find.
#[test]
fn paths_are_found_and_resolved() {
    let text = "//! crate::cli in a comment\n\
                use crate::api::{self, MirrorFlow};\n\
                use super::{io::TopicTail, select::{TopicFilter, TopicDecision}};\n\
                pub(crate) use super::super::validation::classify;\n\
                fn f() { crate::kafka::blocking(|| 1); let s = \"crate::demo\"; }\n\
                #[cfg(test)]\nmod tests {\n    use crate::testkit::brokers;\n}\n";
    let module = vec!["worker".to_string(), "replicate".into(), "engine".into()];
    let got: Vec<(usize, String)> = crate_paths(text, &module)
        .into_iter()
        .map(|(l, p)| (l, p.join("::")))
        .collect();
    let want = [
        (2, "api"),
        (2, "api::MirrorFlow"),
        (3, "worker::replicate::io::TopicTail"),
        (3, "worker::replicate::select::TopicFilter"),
        (3, "worker::replicate::select::TopicDecision"),
        (4, "worker::validation::classify"),
        (5, "kafka::blocking"),
    ];
    let want: Vec<(usize, String)> = want.iter().map(|(l, p)| (*l, p.to_string())).collect();
    assert_eq!(got, want);
    assert_eq!(
        room_of(&["worker".into(), "replicate".into(), "io".into()]),
        Some("worker::replicate")
    );
    assert_eq!(room_of(&["worker".into()]), Some("worker"));
    assert_eq!(room_of(&["nowhere".into()]), None);
}

fn allowed(room: &str) -> BTreeSet<&'static str> {
    ROOMS
        .iter()
        .find(|(r, _)| *r == room)
        .map(|(_, to)| to.iter().copied().collect())
        .unwrap_or_default()
}

/// The longest room `path` starts with.
fn room_of(path: &[String]) -> Option<&'static str> {
    ROOMS
        .iter()
        .map(|(r, _)| *r)
        .filter(|r| {
            let parts: Vec<&str> = r.split("::").collect();
            parts.len() <= path.len() && parts.iter().zip(path).all(|(a, b)| a == b)
        })
        .max_by_key(|r| r.len())
}

/// Every `.rs` file under `dir`, test-only files (`tests.rs`, declared `#[cfg(test)] mod
/// tests;`) left out.
fn source_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(source_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs")
            && path.file_name().is_some_and(|n| n != "tests.rs")
        {
            out.push(path);
        }
    }
    out.sort();
    out
}

/// The module path of a file under src/: `worker/replicate/mod.rs` is `worker::replicate`.
fn module_of(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .with_extension("")
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// `(line, absolute module path)` of each `crate::` and `super::` path in `text`, a file of
/// module `module`: `use` trees expanded, comments, string literals and `#[cfg(test)]`
/// modules left out.
fn crate_paths(text: &str, module: &[String]) -> Vec<(usize, Vec<String>)> {
    let code = blank_out(text);
    let bytes = code.as_bytes();
    let line_of = |at: usize| code[..at].matches('\n').count() + 1;
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if !code.is_char_boundary(i) {
            i += 1;
            continue;
        }
        let boundary = i == 0 || !(ident(bytes[i - 1]) || bytes[i - 1] == b':');
        if boundary && code[i..].starts_with("use ") {
            let end = code[i..].find(';').map_or(bytes.len(), |e| i + e);
            for path in expand_use(&code[i + 4..end]) {
                if let Some(abs) = absolute(&path, module) {
                    out.push((line_of(i), abs));
                }
            }
            i = end;
            continue;
        }
        if boundary && (code[i..].starts_with("crate::") || code[i..].starts_with("super::")) {
            let end = code[i..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
                .map_or(bytes.len(), |e| i + e);
            let path: Vec<String> = code[i..end]
                .split("::")
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect();
            if let Some(abs) = absolute(&path, module) {
                out.push((line_of(i), abs));
            }
            i = end;
            continue;
        }
        i += 1;
    }
    out
}

/// `crate::a::b` → `[a, b]`; `super::b` from module `[x, y]` → `[x, b]`; others `None`.
fn absolute(path: &[String], module: &[String]) -> Option<Vec<String>> {
    match path.first().map(String::as_str) {
        Some("crate") => Some(path[1..].to_vec()),
        Some("super") => {
            let ups = path.iter().take_while(|p| *p == "super").count();
            let base = module.len().checked_sub(ups)?;
            let mut abs = module[..base].to_vec();
            abs.extend(path[ups..].iter().cloned());
            Some(abs)
        }
        _ => None,
    }
}

/// The paths of a use tree: `crate::a::{b, c::{d, e}}` → `crate::a::b`, `crate::a::c::d`,
/// `crate::a::c::e`; `self` names the prefix, `*` and renames are dropped.
fn expand_use(tree: &str) -> Vec<Vec<String>> {
    fn split_top(s: &str) -> Vec<&str> {
        let (mut depth, mut start, mut out) = (0, 0, Vec::new());
        for (i, c) in s.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    out.push(&s[start..i]);
                    start = i + 1;
                }
                _ => {}
            }
        }
        out.push(&s[start..]);
        out
    }
    fn walk(prefix: &[String], tree: &str, out: &mut Vec<Vec<String>>) {
        let tree = tree.trim();
        if tree.is_empty() {
            return;
        }
        if let Some(inner) = tree.strip_prefix('{') {
            let inner = inner.strip_suffix('}').unwrap_or(inner);
            for part in split_top(inner) {
                walk(prefix, part, out);
            }
            return;
        }
        match tree.split_once("::") {
            Some((head, rest)) => {
                let mut p = prefix.to_vec();
                p.push(head.trim().to_string());
                walk(&p, rest, out);
            }
            None => {
                let name = tree.split(" as ").next().unwrap_or(tree).trim();
                let mut p = prefix.to_vec();
                if name != "self" && name != "*" {
                    p.push(name.to_string());
                }
                out.push(p);
            }
        }
    }
    let tree: String = tree.split_whitespace().collect::<Vec<_>>().join(" ");
    let tree = tree.replace(":: ", "::").replace(" ::", "::");
    let mut out = Vec::new();
    walk(&[], &tree, &mut out);
    out
}

/// `text` with comments, string and char literals and `#[cfg(test)] mod x { ... }` blocks
/// replaced by spaces (newlines kept, so lines still count).
fn blank_out(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = b.to_vec();
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        for c in &mut out[from..to] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    };
    let mut i = 0;
    while i < b.len() {
        if !text.is_char_boundary(i) {
            i += 1;
            continue;
        }
        let rest = &text[i..];
        if rest.starts_with("//") {
            let end = rest.find('\n').map_or(b.len(), |e| i + e);
            blank(&mut out, i, end);
            i = end;
        } else if rest.starts_with("/*") {
            let end = rest.find("*/").map_or(b.len(), |e| i + e + 2);
            blank(&mut out, i, end);
            i = end;
        } else if rest.starts_with("r#\"") || rest.starts_with("r\"") {
            let hashes = rest[1..].chars().take_while(|c| *c == '#').count();
            let close = format!("\"{}", "#".repeat(hashes));
            let open = 2 + hashes;
            let end = rest[open..]
                .find(&close)
                .map_or(b.len(), |e| i + open + e + close.len());
            blank(&mut out, i, end);
            i = end;
        } else if b[i] == b'"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            blank(&mut out, i, (j + 1).min(b.len()));
            i = j + 1;
        } else if b[i] == b'\'' && (b.get(i + 2) == Some(&b'\'') || b.get(i + 1) == Some(&b'\\')) {
            // A char literal ('x', '\n'); a lifetime ('a) has no closing quote there.
            let end = rest[1..].find('\'').map_or(b.len(), |e| i + e + 2);
            blank(&mut out, i, end);
            i = end;
        } else if rest.starts_with("#[cfg(test)]") {
            let after = i + "#[cfg(test)]".len();
            let item = text[after..].trim_start();
            let item_at = b.len() - item.len();
            let is_mod = item.starts_with("mod ") || item.starts_with("pub(crate) mod ");
            match (is_mod, item.find(['{', ';'])) {
                (true, Some(k)) if item.as_bytes()[k] == b'{' => {
                    let open = item_at + k;
                    let mut depth = 0;
                    let mut j = open;
                    while j < b.len() {
                        match b[j] {
                            b'{' => depth += 1,
                            b'}' => {
                                depth -= 1;
                                if depth == 0 {
                                    break;
                                }
                            }
                            _ => {}
                        }
                        j += 1;
                    }
                    blank(&mut out, i, (j + 1).min(b.len()));
                    i = j + 1;
                }
                _ => i = after,
            }
        } else {
            i += 1;
        }
    }
    String::from_utf8(out).expect("blanking keeps UTF-8: only ASCII bytes are replaced")
}
