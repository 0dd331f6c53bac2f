//! A bounded memo for the controller's pure computations that every reconcile repeats (it
//! looks at every flow): answers kept by key, all dropped at once when `max` are kept.
//! Edited specs leave stale keys; computing again is always correct.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Mutex, MutexGuard};

pub struct Memo<K, V> {
    max: usize,
    map: Mutex<Option<HashMap<K, V>>>,
}

impl<K: Eq + Hash, V: Clone> Memo<K, V> {
    /// An empty memo keeping at most `max` answers (usable in a `static`).
    pub const fn new(max: usize) -> Self {
        Self {
            max,
            map: Mutex::new(None),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Option<HashMap<K, V>>> {
        // A panic while holding the lock leaves plain data behind: keep using it.
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The answer kept for `key`, or `compute`'s (run without the lock held), then kept.
    pub fn get_or_compute<Q>(&self, key: &Q, compute: impl FnOnce() -> V) -> V
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        if let Some(hit) = self.lock().as_ref().and_then(|m| m.get(key)) {
            return hit.clone();
        }
        let value = compute();
        let mut guard = self.lock();
        let map = guard.get_or_insert_with(HashMap::new);
        if map.len() >= self.max {
            map.clear();
        }
        map.insert(key.to_owned(), value.clone());
        value
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[test]
    fn computes_once_per_key_and_starts_over_when_full() {
        let memo: Memo<String, usize> = Memo::new(2);
        let calls = Cell::new(0);
        let get = |k: &str| {
            memo.get_or_compute(k, || {
                calls.set(calls.get() + 1);
                k.len()
            })
        };
        let cases = [
            ("a", 1, 1),   // computed
            ("a", 1, 1),   // kept
            ("bb", 2, 2),  // computed: 2 kept
            ("ccc", 3, 3), // full: dropped all, computed
            ("bb", 2, 4),  // dropped before: computed again
            ("ccc", 3, 4), // still kept
        ];
        for (key, want, calls_after) in cases {
            assert_eq!(get(key), want, "{key}");
            assert_eq!(calls.get(), calls_after, "calls after {key}");
        }
    }
}
