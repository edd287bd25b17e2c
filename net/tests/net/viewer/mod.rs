//! The browser viewer's tests: the JavaScript decoders against the Rust ones on
//! cross-language vectors this crate generates (`vectors`: snapshots and protocol;
//! `terrain`: the terrain wire in every combination), and the viewer in Debian's Chromium
//! (`browser`: live play and spectating; `replay`: the replay viewer).
//! `MIGRATORY_BLESS=1` rewrites the committed vectors.

mod browser;
mod replay;
mod terrain;
mod vectors;

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

fn viewer_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../view/web")
}

/// Compares a committed vectors file with `generated`, or rewrites it under `MIGRATORY_BLESS=1`.
fn check_vectors(name: &str, generated: &Value) {
    let path = viewer_dir().join("test/vectors").join(name);
    let text = serde_json::to_string(generated).expect("json") + "\n";
    if std::env::var("MIGRATORY_BLESS").is_ok_and(|v| v == "1") {
        std::fs::create_dir_all(path.parent().expect("parent")).expect("vectors folder");
        std::fs::write(&path, &text).expect("write vectors");
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == text,
        "{} differs from what the Rust side makes now: rerun with MIGRATORY_BLESS=1 and review",
        path.display()
    );
}

#[test]
fn the_javascript_decoders_agree_with_the_rust_ones() {
    check_vectors("snapshots.json", &vectors::snapshots());
    check_vectors("protocol.json", &vectors::protocol());
    check_vectors("terrain.json", &terrain::vectors());
    ensure_npm_packages();
    let out = Command::new("node")
        .arg("--test")
        .arg(viewer_dir().join("test/snapshot.test.mjs"))
        .arg(viewer_dir().join("test/protocol.test.mjs"))
        .arg(viewer_dir().join("test/terrain_wire.test.mjs"))
        .output()
        .unwrap_or_else(|e| panic!("running node (install Debian's nodejs; .ci/run does): {e}"));
    assert!(
        out.status.success(),
        "the JavaScript tests failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Installs the tests' npm packages (playwright-core for the browser, fzstd for the zstd
/// payloads of the terrain vectors; pinned by the lockfile) when they are not there yet,
/// once per test process: the tests run in parallel, and two `npm ci` in one folder delete
/// each other's files.
fn ensure_npm_packages() {
    static INSTALLED: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    INSTALLED.get_or_init(install_npm_packages);
}

fn install_npm_packages() {
    let dir = viewer_dir();
    if ["playwright-core", "fzstd"]
        .iter()
        .all(|p| dir.join("node_modules").join(p).exists())
    {
        return;
    }
    let status = Command::new("npm")
        .args(["ci", "--no-audit", "--no-fund", "--prefix"])
        .arg(&dir)
        .status()
        .unwrap_or_else(|e| panic!("running npm (install Debian's nodejs and npm; .ci/run does): {e}"));
    assert!(status.success(), "npm ci in {} failed", dir.display());
}
