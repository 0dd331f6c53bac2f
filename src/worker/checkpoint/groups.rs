//! Which source consumer groups each OffsetCheckpoint checkpoints. Pure.
//!
//! A group is selected by an OffsetCheckpoint when it fully matches one of `groups.include`
//! and none of `groups.exclude`. A group selected by several OffsetCheckpoints of the flow is
//! handled by the first of them in name order only, so it gets one interval, one sync setting
//! and one status entry.

use std::collections::{BTreeMap, BTreeSet};

use regex::Regex;

use crate::api::validate::full_match_regex;
use crate::api::GroupSelector;

/// Compiled `spec.groups` of one OffsetCheckpoint.
#[derive(Debug, Clone)]
pub struct GroupSelection {
    include: Vec<Regex>,
    exclude: Vec<Regex>,
}

impl GroupSelection {
    /// Compiles the patterns as full-match regexes; errors name the field and pattern.
    pub fn new(selector: &GroupSelector) -> Result<Self, crate::worker::error::Error> {
        let compile = |field: &str, patterns: &[String]| {
            patterns
                .iter()
                .enumerate()
                .map(|(i, p)| {
                    full_match_regex(p).map_err(|e| {
                        crate::worker::error::Error::Spec(format!(
                            "spec.groups.{field}[{i}] {p:?}: {e}"
                        ))
                    })
                })
                .collect::<Result<Vec<_>, _>>()
        };
        Ok(Self {
            include: compile("include", &selector.include)?,
            exclude: compile("exclude", &selector.exclude)?,
        })
    }

    /// Whether `group` is selected.
    pub fn matches(&self, group: &str) -> bool {
        self.include.iter().any(|r| r.is_match(group))
            && !self.exclude.iter().any(|r| r.is_match(group))
    }
}

/// Splits `groups` between OffsetCheckpoints: `selections` are `(name, selection)`, and each
/// group goes to the first selection in name order that matches it. Every name gets an entry
/// (possibly empty), so "no group matched" is visible.
pub fn assign_groups<'a>(
    selections: &[(String, GroupSelection)],
    groups: impl IntoIterator<Item = &'a str>,
) -> BTreeMap<String, BTreeSet<String>> {
    let mut order: Vec<&(String, GroupSelection)> = selections.iter().collect();
    order.sort_by(|a, b| a.0.cmp(&b.0));
    let mut out: BTreeMap<String, BTreeSet<String>> = order
        .iter()
        .map(|(name, _)| (name.clone(), BTreeSet::new()))
        .collect();
    for group in groups {
        if let Some((name, _)) = order.iter().find(|(_, s)| s.matches(group)) {
            out.entry(name.clone())
                .or_default()
                .insert(group.to_string());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::defaults;
    use pretty_assertions::assert_eq;

    fn selector(include: &[&str], exclude: &[&str]) -> GroupSelector {
        GroupSelector {
            include: include.iter().map(|s| s.to_string()).collect(),
            exclude: exclude.iter().map(|s| s.to_string()).collect(),
            refresh_interval_seconds: 30,
        }
    }

    #[test]
    fn matches_table() {
        let defaults_excl: Vec<&str> = defaults::GROUP_EXCLUDES.to_vec();
        let cases: Vec<(Vec<&str>, Vec<&str>, &str, bool)> = vec![
            (vec![".*"], defaults_excl.clone(), "orders-app", true),
            (
                vec![".*"],
                defaults_excl.clone(),
                "console-consumer-123",
                false,
            ),
            (vec![".*"], defaults_excl.clone(), "connect-sink", false),
            (vec![".*"], defaults_excl.clone(), "__internal", false),
            (vec![".*"], defaults_excl.clone(), "my-connect-app", true),
            // Full match: a pattern does not match a substring.
            (vec!["orders"], vec![], "orders-app", false),
            (vec!["orders"], vec![], "orders", true),
            (vec!["orders-.*", "billing"], vec![], "billing", true),
            (vec!["orders-.*", "billing"], vec![], "billing-2", false),
            // Exclude wins over include.
            (vec!["orders-.*"], vec!["orders-test"], "orders-test", false),
            (vec!["orders-.*"], vec!["orders-test"], "orders-test2", true),
            // Alternation is anchored as a whole.
            (vec!["a|b"], vec![], "ab", false),
            (vec!["a|b"], vec![], "b", true),
            (vec![], vec![], "anything", false),
        ];
        for (include, exclude, group, want) in cases {
            let sel = GroupSelection::new(&selector(&include, &exclude)).unwrap();
            assert_eq!(sel.matches(group), want, "{include:?} {exclude:?} {group}");
        }
    }

    #[test]
    fn bad_pattern_names_field() {
        let err = GroupSelection::new(&selector(&["ok", "("], &[])).unwrap_err();
        assert!(err.to_string().contains("spec.groups.include[1]"), "{err}");
        let err = GroupSelection::new(&selector(&[".*"], &["[z-a]"])).unwrap_err();
        assert!(err.to_string().contains("spec.groups.exclude[0]"), "{err}");
    }

    #[test]
    fn assignment_table() {
        let sel = |i: &[&str], e: &[&str]| GroupSelection::new(&selector(i, e)).unwrap();
        type Case = (
            &'static str,
            Vec<(&'static str, GroupSelection)>,
            Vec<&'static str>,
            Vec<(&'static str, Vec<&'static str>)>,
        );
        let cases: Vec<Case> = vec![
            (
                "one selection",
                vec![("cp", sel(&[".*"], &["console-consumer-.*"]))],
                vec!["a", "console-consumer-1", "b"],
                vec![("cp", vec!["a", "b"])],
            ),
            (
                "overlap goes to the first name, not the first listed",
                vec![
                    ("zeta", sel(&[".*"], &[])),
                    ("alpha", sel(&["orders-.*"], &[])),
                ],
                vec!["orders-1", "billing"],
                vec![("alpha", vec!["orders-1"]), ("zeta", vec!["billing"])],
            ),
            (
                "excluded by the first falls through to the next",
                vec![("a", sel(&["x.*"], &["xy"])), ("b", sel(&["x.*"], &[]))],
                vec!["xy", "xz"],
                vec![("a", vec!["xz"]), ("b", vec!["xy"])],
            ),
            (
                "no match keeps an empty entry",
                vec![("cp", sel(&["orders"], &[]))],
                vec!["billing"],
                vec![("cp", vec![])],
            ),
            ("no selections", vec![], vec!["a"], vec![]),
        ];
        for (name, selections, groups, want) in cases {
            let selections: Vec<(String, GroupSelection)> = selections
                .into_iter()
                .map(|(n, s)| (n.to_string(), s))
                .collect();
            let got = assign_groups(&selections, groups.iter().copied());
            let want: BTreeMap<String, BTreeSet<String>> = want
                .into_iter()
                .map(|(n, gs)| (n.to_string(), gs.into_iter().map(String::from).collect()))
                .collect();
            assert_eq!(got, want, "{name}");
        }
    }
}
