//! The core compiled for wasm32-unknown-unknown imports nothing.
//!
//! Builds `core/wasm-probe` (a cdylib that exercises the whole API) in release
//! for wasm32-unknown-unknown, then reads its import section with `wasmparser`.

use std::path::PathBuf;
use std::process::Command;

#[test]
fn core_for_wasm32_unknown_unknown_imports_nothing() {
    let probe = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("wasm-probe");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args([
            "build",
            "--release",
            "--quiet",
            "--target",
            "wasm32-unknown-unknown",
        ])
        .arg("--manifest-path")
        .arg(probe.join("Cargo.toml"))
        .env("CARGO_TARGET_DIR", probe.join("target"))
        .env_remove("RUSTFLAGS")
        .status()
        .expect("run cargo");
    assert!(status.success(), "building the wasm probe failed (is the wasm32-unknown-unknown target installed? scripts/setup.sh adds it)");
    let wasm = probe.join("target/wasm32-unknown-unknown/release/fusewire_wasm_probe.wasm");
    let bytes = std::fs::read(&wasm).expect("probe .wasm exists");
    let mut imports = vec![];
    let mut exports = vec![];
    for payload in wasmparser::Parser::new(0).parse_all(&bytes) {
        match payload.expect("valid wasm") {
            wasmparser::Payload::ImportSection(reader) => {
                for imp in reader.into_imports() {
                    let imp = imp.expect("import entry");
                    imports.push(format!("{}::{}", imp.module, imp.name));
                }
            }
            wasmparser::Payload::ExportSection(reader) => {
                for exp in reader {
                    exports.push(exp.expect("export entry").name.to_string());
                }
            }
            _ => {}
        }
    }
    assert!(
        exports.iter().any(|e| e == "fusewire_probe"),
        "the probe export is present (so the core was linked in): {exports:?}"
    );
    assert!(
        bytes.len() > 20_000,
        "the core's code is in the module ({} bytes)",
        bytes.len()
    );
    assert!(imports.is_empty(), "unexpected imports: {imports:?}");
}
