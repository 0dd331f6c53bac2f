//! The Argo CD health checks shipped in `charts/mirrorflow/health/`, run the way Argo CD runs
//! them: a Lua 5.1 chunk with the object in the global `obj`, returning `{status, message}`.

use mlua::{Lua, LuaSerdeExt, SerializeOptions};
use serde_json::Value;

/// The health script of `kind` (`MirrorFlow` or `OffsetCheckpoint`).
pub fn script(kind: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("charts/mirrorflow/health")
        .join(format!("{}.lua", kind.to_lowercase()));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `(status, message)` Argo CD would show for `obj` (its `kind` picks the script).
pub fn health(obj: &Value) -> (String, String) {
    let kind = obj["kind"].as_str().expect("an object with a kind");
    let lua = Lua::new();
    // JSON null is Lua nil, as in Argo CD.
    let options = SerializeOptions::new()
        .serialize_none_to_null(false)
        .serialize_unit_to_null(false);
    let value = lua.to_value_with(obj, options).expect("object to Lua");
    lua.globals().set("obj", value).expect("set obj");
    let hs: mlua::Table = lua
        .load(script(kind))
        .set_name(kind)
        .eval()
        .unwrap_or_else(|e| panic!("{kind} health script: {e}"));
    (
        hs.get::<String>("status").expect("hs.status"),
        hs.get::<Option<String>>("message")
            .expect("hs.message")
            .unwrap_or_default(),
    )
}
