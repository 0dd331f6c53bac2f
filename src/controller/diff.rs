//! Whether applying a child would change anything, decided locally so that an unchanged child
//! costs no request (and, on API servers that write on every apply, no watch event and no
//! reconcile loop: kubernetes/kubernetes#95460, #119304).
//!
//! A child is unchanged when (1) the live object carries the hash of the desired object in
//! [`APPLIED_HASH_ANNOTATION`] (so a field we stopped setting is still removed by an apply)
//! and (2) every value we set is in the live object ([`contains`]: maps as subsets, since the
//! server adds defaults and other managers add fields; lists of scalars equal; lists of
//! objects element-wise, or each desired element found, since our apply cannot remove others'
//! elements anyway). Quantities compare by value (`0.5` = `500m`: the server canonicalizes).

use serde_json::Value;

/// Annotation holding [`applied_hash`] of the desired object last applied.
pub const APPLIED_HASH_ANNOTATION: &str = "mirrorflow.io/applied-hash";

/// FNV-1a of the desired object's canonical JSON (without the annotation itself), hex.
pub fn applied_hash(desired: &Value) -> String {
    let mut v = desired.clone();
    if let Some(a) = v
        .pointer_mut("/metadata/annotations")
        .and_then(Value::as_object_mut)
    {
        a.remove(APPLIED_HASH_ANNOTATION);
    }
    super::build::json_hash(&v)
}

/// Whether an apply of `desired` (which carries its [`applied_hash`]) would leave `live` as
/// it is.
pub fn unchanged(desired: &Value, live: &Value) -> bool {
    let want = desired
        .pointer(&format!(
            "/metadata/annotations/{}",
            APPLIED_HASH_ANNOTATION.replace('/', "~1")
        ))
        .and_then(Value::as_str);
    let have = live
        .pointer(&format!(
            "/metadata/annotations/{}",
            APPLIED_HASH_ANNOTATION.replace('/', "~1")
        ))
        .and_then(Value::as_str);
    want.is_some() && want == have && contains(live, desired)
}

/// Whether every value of `want` is in `have` (see the module doc).
pub fn contains(have: &Value, want: &Value) -> bool {
    match (have, want) {
        (Value::Object(h), Value::Object(w)) => w.iter().all(|(k, wv)| match h.get(k) {
            Some(hv) => contains(hv, wv),
            // An empty value we set may be dropped by the server (e.g. `{}` or `[]`).
            None => is_empty(wv),
        }),
        (Value::Array(h), Value::Array(w)) => {
            if w.iter().all(|x| !x.is_object()) {
                return h == w;
            }
            if h.len() == w.len() {
                h.iter().zip(w).all(|(hv, wv)| contains(hv, wv))
            } else {
                w.iter().all(|wv| h.iter().any(|hv| contains(hv, wv)))
            }
        }
        (Value::String(h), Value::String(w)) => {
            h == w || matches!((quantity(h), quantity(w)), (Some(a), Some(b)) if a == b)
        }
        (Value::Number(h), Value::String(w)) | (Value::String(w), Value::Number(h)) => {
            quantity(w).is_some_and(|q| Some(q) == quantity(&h.to_string()))
        }
        _ => have == want,
    }
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Object(o) => o.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Null => true,
        _ => false,
    }
}

/// A Kubernetes quantity (`500m`, `1.5`, `64Mi`, `1G`, `1e3`) in thousandths, exactly, when it
/// is one and fits; `None` otherwise (so ordinary strings never compare equal by accident).
pub fn quantity(s: &str) -> Option<i128> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(split);
    if number.is_empty() || number == "." || number == "+" || number == "-" {
        return None;
    }
    // (multiplier numerator in thousandths of a unit, decimal exponent)
    let (mult, exp): (i128, i32) = match suffix {
        "" => (1000, 0),
        "m" => (1, 0),
        "k" => (1000, 3),
        "M" => (1000, 6),
        "G" => (1000, 9),
        "T" => (1000, 12),
        "P" => (1000, 15),
        "E" => (1000, 18),
        "Ki" => (1000 << 10, 0),
        "Mi" => (1000 << 20, 0),
        "Gi" => (1000 << 30, 0),
        "Ti" => (1000 << 40, 0),
        "Pi" => (1000i128 << 50, 0),
        "Ei" => (1000i128 << 60, 0),
        s if s.starts_with(['e', 'E']) => (1000, s[1..].parse().ok()?),
        _ => return None,
    };
    let negative = number.starts_with('-');
    let digits = number.trim_start_matches(['+', '-']);
    let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
    if !int.chars().chain(frac.chars()).all(|c| c.is_ascii_digit()) {
        return None;
    }
    let scale = i32::try_from(frac.len()).ok()?;
    let mantissa: i128 = format!("{int}{frac}").parse().ok()?;
    let mut value = mantissa.checked_mul(mult)?;
    let e = exp - scale;
    if e >= 0 {
        value = value.checked_mul(10i128.checked_pow(e as u32)?)?;
    } else {
        let d = 10i128.checked_pow((-e) as u32)?;
        if value % d != 0 {
            return None; // finer than a thousandth: not something we compare
        }
        value /= d;
    }
    Some(if negative { -value } else { value })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn quantities() {
        let rows = [
            ("500m", Some(500)),
            ("0.5", Some(500)),
            ("1", Some(1000)),
            ("64Mi", Some(64 * 1000 * (1 << 20))),
            ("1k", Some(1_000_000)),
            ("1e3", Some(1_000_000)),
            ("1.5G", Some(1_500_000_000_000)),
            ("-2", Some(-2000)),
            ("abc", None),
            ("12x", None),
            ("", None),
            ("0.0001", None),
        ];
        for (s, want) in rows {
            assert_eq!(quantity(s), want, "{s}");
        }
    }

    #[test]
    fn containment_table() {
        let rows: Vec<(&str, Value, Value, bool)> = vec![
            (
                "server defaults",
                json!({"a": 1, "b": {"c": 2, "d": 3}}),
                json!({"b": {"c": 2}}),
                true,
            ),
            ("changed value", json!({"a": 1}), json!({"a": 2}), false),
            ("missing key", json!({}), json!({"a": 1}), false),
            (
                "empty value dropped by the server",
                json!({}),
                json!({"a": {}}),
                true,
            ),
            (
                "scalar lists are atomic",
                json!({"args": ["a", "b", "c"]}),
                json!({"args": ["a", "b"]}),
                false,
            ),
            (
                "scalar lists equal",
                json!({"args": ["a", "b"]}),
                json!({"args": ["a", "b"]}),
                true,
            ),
            (
                "object lists element-wise, with defaults",
                json!({"c": [{"name": "w", "image": "i", "imagePullPolicy": "IfNotPresent"}]}),
                json!({"c": [{"name": "w", "image": "i"}]}),
                true,
            ),
            (
                "object list element changed",
                json!({"c": [{"name": "w", "image": "old"}]}),
                json!({"c": [{"name": "w", "image": "new"}]}),
                false,
            ),
            (
                "someone else's extra element is not ours to remove",
                json!({"o": [{"uid": "x"}, {"uid": "ours"}]}),
                json!({"o": [{"uid": "ours"}]}),
                true,
            ),
            (
                "a missing element of ours",
                json!({"o": [{"uid": "x"}, {"uid": "y"}]}),
                json!({"o": [{"uid": "ours"}]}),
                false,
            ),
            (
                "canonical quantity",
                json!({"cpu": "500m"}),
                json!({"cpu": "0.5"}),
                true,
            ),
            (
                "integer quantity",
                json!({"cpu": 1}),
                json!({"cpu": "1"}),
                true,
            ),
            (
                "different quantity",
                json!({"memory": "64Mi"}),
                json!({"memory": "128Mi"}),
                false,
            ),
            (
                "strings are not quantities",
                json!({"s": "a"}),
                json!({"s": "b"}),
                false,
            ),
        ];
        for (name, have, want, expect) in rows {
            assert_eq!(contains(&have, &want), expect, "{name}");
        }
    }

    #[test]
    fn unchanged_needs_the_hash_and_the_values() {
        let mut desired = json!({"metadata": {"name": "x", "annotations": {}}, "data": {"k": "v"}});
        let h = applied_hash(&desired);
        desired["metadata"]["annotations"][APPLIED_HASH_ANNOTATION] = json!(h);
        assert_eq!(
            applied_hash(&desired),
            h,
            "the annotation is not part of the hash"
        );

        let live = json!({"metadata": {"name": "x", "resourceVersion": "5",
                                       "annotations": {APPLIED_HASH_ANNOTATION: h, "other": "1"}},
                          "data": {"k": "v"}});
        assert!(unchanged(&desired, &live));

        let mut drifted = live.clone();
        drifted["data"]["k"] = json!("edited by hand");
        assert!(!unchanged(&desired, &drifted), "drift is repaired");

        let mut old_hash = live.clone();
        old_hash["metadata"]["annotations"][APPLIED_HASH_ANNOTATION] = json!("0");
        assert!(
            !unchanged(&desired, &old_hash),
            "a field we no longer set must be removed by an apply"
        );

        let mut unannotated = live;
        unannotated["metadata"]["annotations"]
            .as_object_mut()
            .unwrap()
            .remove(APPLIED_HASH_ANNOTATION);
        assert!(!unchanged(&desired, &unannotated));
    }
}
