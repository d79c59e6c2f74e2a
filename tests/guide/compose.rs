//! `docker/compose.yaml`, validated against the Compose Specification, as JSON.

use super::files::repo;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

pub fn python() -> &'static str {
    // Debian's, where scripts/setup.sh installed python3-yaml and python3-jsonschema.
    if Path::new("/usr/bin/python3").exists() {
        "/usr/bin/python3"
    } else {
        "python3"
    }
}

/// docker/compose.yaml as JSON, after validating it against docker/compose-spec.json (and
/// checking that the validator rejects a service with an unknown key).
pub fn compose() -> Value {
    const SCRIPT: &str = r#"
import copy, json, sys
import jsonschema, yaml
doc = yaml.safe_load(open(sys.argv[1]))
schema = json.load(open(sys.argv[2]))
jsonschema.Draft7Validator.check_schema(schema)
v = jsonschema.Draft7Validator(schema)
errors = sorted(v.iter_errors(doc), key=str)
for e in errors:
    print("compose.yaml: %s: %s" % ("/".join(map(str, e.absolute_path)), e.message), file=sys.stderr)
bad = copy.deepcopy(doc)
bad["services"]["job"]["no_such_key"] = 1
if v.is_valid(bad):
    sys.exit("the schema accepts an unknown service key: it checks nothing")
json.dump(doc, sys.stdout)
sys.exit(1 if errors else 0)
"#;
    let o = Command::new(python())
        .args(["-c", SCRIPT])
        .arg(repo("docker/compose.yaml"))
        .arg(repo("docker/compose-spec.json"))
        .output()
        .expect("python3");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !err.contains("No module named"),
        "python3-yaml / python3-jsonschema missing (scripts/setup.sh installs them): {err}"
    );
    assert!(
        o.status.success(),
        "docker/compose.yaml is not valid:\n{err}"
    );
    serde_json::from_slice(&o.stdout).expect("compose as JSON")
}

pub fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap_or_else(|| panic!("a list of strings: {v}"))
        .iter()
        .map(|s| s.as_str().expect("string").to_string())
        .collect()
}

/// The value after `opt` in an argument list.
pub fn arg_after<'a>(args: &'a [String], opt: &str) -> Option<&'a str> {
    args.iter()
        .position(|a| a == opt)
        .and_then(|i| args.get(i + 1))
        .map(String::as_str)
}

/// The named volumes of a service: target directory → volume.
pub fn volumes(svc: &Value) -> BTreeMap<String, String> {
    strings(&svc["volumes"])
        .into_iter()
        .filter_map(|v| {
            let (src, dst) = v.split_once(':')?;
            (!src.starts_with('/')).then(|| (dst.to_string(), src.to_string()))
        })
        .collect()
}
