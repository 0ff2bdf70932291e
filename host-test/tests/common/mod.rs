//! Shared test helpers: fixture modules are built on demand (once per test binary).
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::Mutex;

use fusewire_host_test::WasmModule;

static BUILD: Mutex<()> = Mutex::new(());

/// Path of fixture `name` (`noop`, `probe`) built for `target`, building it if missing.
pub fn fixture_path(name: &str, target: &str) -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let target_dir = root.join("../target/fixtures");
    let file = target_dir
        .join(target)
        .join("release")
        .join(format!("fixture_{name}.wasm"));
    let _g = BUILD.lock().unwrap_or_else(|e| e.into_inner());
    if std::env::var_os("FUSEWIRE_FIXTURES_PREBUILT").is_none() || !file.exists() {
        let status = std::process::Command::new(std::env::var("CARGO").unwrap_or("cargo".into()))
            .args([
                "build",
                "--quiet",
                "--release",
                "--target",
                target,
                "--manifest-path",
            ])
            .arg(root.join("fixtures/Cargo.toml"))
            .arg("--target-dir")
            .arg(&target_dir)
            .status()
            .expect("running cargo to build fixtures");
        assert!(status.success(), "building fixtures for {target} failed");
    }
    assert!(file.exists(), "fixture {} missing", file.display());
    file
}

/// Fixture `name` for wasm32-wasip1, compiled.
pub fn fixture(name: &str) -> WasmModule {
    WasmModule::from_file(fixture_path(name, "wasm32-wasip1")).expect("load fixture")
}
