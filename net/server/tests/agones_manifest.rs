//! The Agones deployment checked against the Agones it follows (v1.56.0), without a
//! cluster: `deploy/agones/fleet.yaml` validates against the Fleet CRD's schema (vendored
//! in `deploy/agones/schema/`) with unknown fields refused, as `kubectl apply`'s strict
//! field validation refuses them; it uses no field whose feature gate is off by default
//! in that version (the admission webhook refuses those); and it agrees with the server's
//! own config (the players List holds every client slot, health fits the check).

use std::path::{Path, PathBuf};

use serde_json::Value;

/// The Agones version the deployment follows.
const AGONES_VERSION: &str = "1.56.0";

fn deploy(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy/agones")
        .join(file)
}

/// The vendored Fleet schema, made strict: every object below the root that lists its
/// properties and does not say it keeps unknown fields refuses any other (Kubernetes prunes or, with strict
/// field validation, refuses them; JSON Schema would let them through).
fn strict_fleet_schema() -> Value {
    let path = deploy(&format!("schema/fleet.agones.dev-v{AGONES_VERSION}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut vendored: Value = serde_json::from_str(&text).expect("the vendored schema is JSON");
    let mut schema = vendored["openAPIV3Schema"].take();
    fn strict(v: &mut Value) {
        match v {
            Value::Object(map) => {
                let keeps_unknown = map
                    .get("x-kubernetes-preserve-unknown-fields")
                    .is_some_and(|b| b == true);
                if map.contains_key("properties")
                    && !map.contains_key("additionalProperties")
                    && !keeps_unknown
                {
                    map.insert("additionalProperties".into(), Value::Bool(false));
                }
                map.values_mut().for_each(strict);
            }
            Value::Array(items) => items.iter_mut().for_each(strict),
            _ => {}
        }
    }
    // Not at the root: `apiVersion`, `kind` and `metadata` are every object's, checked by
    // Kubernetes itself and absent from a CRD's schema.
    if let Value::Object(root) = &mut schema {
        root.values_mut().for_each(strict);
    }
    schema
}

fn manifest() -> Value {
    let path = deploy("fleet.yaml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_yaml::from_str(&text).expect("fleet.yaml is YAML")
}

/// Every problem the schema finds in `fleet`, one line each.
fn schema_errors(fleet: &Value) -> Vec<String> {
    let validator = jsonschema::validator_for(&strict_fleet_schema()).expect("a usable schema");
    validator
        .iter_errors(fleet)
        .map(|e| format!("{}: {e}", e.instance_path))
        .collect()
}

/// GameServer spec fields behind a feature gate, with the gate and whether Agones
/// `AGONES_VERSION` turns it on by default (`install/helm/agones/defaultfeaturegates.yaml`).
const GATED_FIELDS: &[(&str, &str, bool)] = &[
    ("players", "PlayerTracking (alpha)", false),
    ("counters", "CountsAndLists (beta)", true),
    ("lists", "CountsAndLists (beta)", true),
];

/// The gated fields `fleet`'s GameServer template uses whose gate is off by default.
fn gates_off(fleet: &Value) -> Vec<String> {
    let spec = &fleet["spec"]["template"]["spec"];
    GATED_FIELDS
        .iter()
        .filter(|(field, _, on)| !on && spec.get(field).is_some())
        .map(|(field, gate, _)| format!("spec.template.spec.{field} needs the {gate} feature gate, off by default in Agones {AGONES_VERSION}"))
        .collect()
}

#[test]
fn the_fleet_manifest_is_one_agones_would_accept() {
    let fleet = manifest();
    assert_eq!(schema_errors(&fleet), Vec::<String>::new());
    assert_eq!(gates_off(&fleet), Vec::<String>::new());
}

/// The checks can fail: what today's manifest replaced, and typical mistakes, are refused.
#[test]
fn the_checks_refuse_what_agones_would_refuse() {
    let mut typo = manifest();
    typo["spec"]["template"]["spec"]["lists"]["players"]["capcity"] = 1024.into();
    assert!(!schema_errors(&typo).is_empty(), "an unknown field passed");
    let mut wrong_type = manifest();
    wrong_type["spec"]["replicas"] = "two".into();
    assert!(
        !schema_errors(&wrong_type).is_empty(),
        "a string replica count passed"
    );
    let mut bad_policy = manifest();
    bad_policy["spec"]["template"]["spec"]["ports"][0]["portPolicy"] = "Sometimes".into();
    assert!(
        !schema_errors(&bad_policy).is_empty(),
        "an unknown port policy passed"
    );
    // The alpha player tracking the manifest used before (and the server called).
    let mut alpha = manifest();
    alpha["spec"]["template"]["spec"]["players"] = serde_json::json!({ "initialCapacity": 256 });
    assert!(schema_errors(&alpha).is_empty(), "the schema itself allows it");
    assert_eq!(gates_off(&alpha).len(), 1);
}

#[test]
fn the_manifest_agrees_with_the_servers_config() {
    let fleet = manifest();
    let spec = &fleet["spec"]["template"]["spec"];
    let config = migratory_server::ServerConfig::from_file(&deploy("server.toml")).expect("server.toml");
    // Every client slot fits in the players List (addValue fails past its capacity).
    assert_eq!(
        spec["lists"]["players"]["capacity"].as_u64(),
        Some(u64::from(config.world.client_slots_max)),
        "lists.players.capacity must be the world's client_slots_max"
    );
    // Health is sent more often than Agones checks for it.
    let period_s = spec["health"]["periodSeconds"]
        .as_f64()
        .expect("health.periodSeconds");
    assert!(config.server.agones.health_period_seconds < period_s);
    // The container listens where the manifest says.
    let port = spec["ports"][0]["containerPort"].as_u64().expect("containerPort");
    assert!(
        config.server.listen.ends_with(&format!(":{port}")),
        "{}",
        config.server.listen
    );
    // A clean stop (clients closed, the final checkpoint) fits the termination grace.
    let grace_s = spec["template"]["spec"]["terminationGracePeriodSeconds"]
        .as_f64()
        .expect("terminationGracePeriodSeconds");
    assert!(config.server.shutdown_timeout_seconds * 5.0 <= grace_s);
}
