//! ARCHITECTURE.md's crate graph is what Cargo says: the block between its two
//! `crate-graph` markers lists every workspace crate's normal dependencies on the other
//! workspace crates, as `cargo metadata` reports them. `MIGRATORY_BLESS=1` rewrites the
//! block from Cargo; without it, a difference fails with the lines that differ.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

const BEGIN: &str = "<!-- crate-graph: begin (checked against `cargo metadata` by tests/tests/integration/crate_graph.rs) -->";
const END: &str = "<!-- crate-graph: end -->";

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate sits in the workspace")
        .to_path_buf()
}

/// `crate -> dep, dep` lines from Cargo: normal dependencies (optional ones included) on
/// other workspace members, in name order.
fn cargo_graph(root: &Path) -> Vec<String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--no-deps", "--offline"])
        .current_dir(root)
        .output()
        .expect("running cargo metadata");
    assert!(
        out.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).expect("cargo metadata's JSON");
    let packages = meta["packages"].as_array().expect("packages");
    let names: Vec<&str> = packages
        .iter()
        .map(|p| p["name"].as_str().expect("name"))
        .collect();
    let mut graph: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for p in packages {
        let name = p["name"].as_str().expect("name");
        let mut deps: Vec<&str> = p["dependencies"]
            .as_array()
            .expect("dependencies")
            .iter()
            .filter(|d| d["kind"].is_null())
            .map(|d| d["name"].as_str().expect("dependency name"))
            .filter(|d| *d != name && names.contains(d))
            .collect();
        deps.sort_unstable();
        deps.dedup();
        graph.insert(name, deps);
    }
    graph
        .into_iter()
        .map(|(name, deps)| format!("{name} -> {}", deps.join(", ")).trim_end().to_string())
        .collect()
}

#[test]
fn architecture_md_names_the_dependencies_cargo_has() {
    let root = workspace_root();
    let path = root.join("ARCHITECTURE.md");
    let text = std::fs::read_to_string(&path).expect("ARCHITECTURE.md");
    let (Some(begin), Some(end)) = (text.find(BEGIN), text.find(END)) else {
        panic!("{} has no block between `{BEGIN}` and `{END}`", path.display());
    };
    let block_start = begin + BEGIN.len();
    let wanted = cargo_graph(&root);
    if std::env::var("MIGRATORY_BLESS").is_ok_and(|v| v == "1") {
        let block = format!("\n```\n{}\n```\n", wanted.join("\n"));
        let rewritten = format!("{}{block}{}", &text[..block_start], &text[end..]);
        std::fs::write(&path, rewritten).expect("write ARCHITECTURE.md");
        return;
    }
    let written: Vec<String> = text[block_start..end]
        .lines()
        .map(str::trim)
        .filter(|l| l.contains(" -> ") || l.ends_with(" ->"))
        .map(str::to_string)
        .collect();
    let missing: Vec<&String> = wanted.iter().filter(|l| !written.contains(l)).collect();
    let stale: Vec<&String> = written.iter().filter(|l| !wanted.contains(l)).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "ARCHITECTURE.md's crate graph is not Cargo's; rerun with MIGRATORY_BLESS=1 and review.\n\
         Cargo has, ARCHITECTURE.md lacks:\n  {}\nARCHITECTURE.md has, Cargo lacks:\n  {}",
        missing
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join("\n  "),
        stale.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("\n  ")
    );
}
