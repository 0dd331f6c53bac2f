//! Client properties the testkit's helpers (create topics, produce, consume, ...) use for a
//! bootstrap address: a secured listener of a Kafka cluster, or a proxy in front of one, is
//! reached with what a test registers for it ([`register_client_properties`]).

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

type Registry = Mutex<HashMap<String, Vec<(String, String)>>>;

fn registry() -> &'static Registry {
    static R: OnceLock<Registry> = OnceLock::new();
    R.get_or_init(Default::default)
}

/// Registers (or, with an empty list, forgets) the client properties the testkit's helpers
/// use for `bootstrap` (e.g. a proxy in front of a broker).
pub fn register_client_properties(bootstrap: &str, props: Vec<(String, String)>) {
    let mut r = registry().lock().unwrap_or_else(|e| e.into_inner());
    if props.is_empty() {
        r.remove(bootstrap);
    } else {
        r.insert(bootstrap.to_string(), props);
    }
}

/// The security properties the testkit's clients use for `bootstrap` (empty: plaintext).
pub fn client_properties_for(bootstrap: &str) -> Vec<(String, String)> {
    registry()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(bootstrap)
        .cloned()
        .unwrap_or_default()
}
