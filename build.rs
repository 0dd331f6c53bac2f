//! Links the `mirrorflow` binary with `link/symbol-order.txt` (made by `scripts/symbol-order.sh`):
//! the functions a worker runs, packed at the start of its code. The kernel maps code in runs of
//! 64 KiB or more around each page a process touches, so a worker's 3 MiB of executed code spread
//! over 20 MiB of text kept 14 MiB resident; packed, it keeps about 4.
//!
//! Release builds on x86-64 Linux with Rust ≥ 1.90 only, where rustc links with its own lld, which
//! reads the file and skips the names a build does not have. `MIRRORFLOW_SYMBOL_ORDER=off` links
//! without it (for a linker without `--symbol-ordering-file`: GNU ld).

use std::path::Path;

const ORDER_FILE: &str = "link/symbol-order.txt";

fn main() {
    println!("cargo:rerun-if-changed={ORDER_FILE}");
    println!("cargo:rerun-if-env-changed=MIRRORFLOW_SYMBOL_ORDER");
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let version = std::process::Command::new(&rustc)
        .arg("--version")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    // tests/generated.rs compares it with the toolchain the order file was made with.
    println!("cargo:rustc-env=MIRRORFLOW_RUSTC_VERSION={version}");

    let env = |k: &str| std::env::var(k).unwrap_or_default();
    // "rustc 1.95.0 (…)": lld is the default linker from 1.90 on.
    let minor = version
        .split(['.', ' '])
        .nth(2)
        .and_then(|m| m.parse::<u32>().ok());
    let wanted = env("PROFILE") == "release"
        && env("TARGET") == "x86_64-unknown-linux-gnu"
        && minor.is_some_and(|m| m >= 90)
        && env("MIRRORFLOW_SYMBOL_ORDER") != "off";
    let path = Path::new(&env("CARGO_MANIFEST_DIR")).join(ORDER_FILE);
    if !wanted || !path.is_file() {
        return;
    }
    let made_with = std::fs::read_to_string(&path)
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("# toolchain: ").map(str::to_string));
    if made_with.as_deref() != Some(version.as_str()) {
        println!(
            "cargo:warning={ORDER_FILE} was made with {}, this build is {version}: its names will \
             not match; run scripts/symbol-order.sh",
            made_with.as_deref().unwrap_or("an unknown toolchain")
        );
    }
    let path = path.display();
    println!("cargo:rustc-link-arg-bin=mirrorflow=-Wl,--symbol-ordering-file={path}");
    println!("cargo:rustc-link-arg-bin=mirrorflow=-Wl,--no-warn-symbol-ordering");
}
