//! The README's cluster guide cannot rot: its copy of `scripts/guide-local.sh` is the file;
//! every command of its `sh guide` blocks, and every `tigon` command and option, script, make
//! target, environment variable, agent.json key and installed file its text names, exists (in
//! the tree, in `tigon ... --help`, in a staged `scripts/install.sh`); its agent.env and
//! agent.json excerpts are the shipped ones. (`run` runs the guide's script.)
//!
//! Installs go to a temporary `--destdir`, never to the real /usr/local or /etc.

use super::checks::{check_command, check_span, commands, ompi_params, tigon_help};
use super::files::{read, repo};
use super::readme::{blocks, guide, prose, spans};
use super::staged::Staged;
use crate::common::TIGON;
use serde_json::Value;
use std::process::Command;

#[test]
fn readme_prints_guide_local_verbatim() {
    let printed = blocks(&guide(), "sh guide-local");
    assert_eq!(printed.len(), 1, "one `sh guide-local` block");
    let script = read(&repo("scripts/guide-local.sh"));
    assert!(
        printed[0] == script,
        "the README's copy of scripts/guide-local.sh differs from the file: copy the file into \
         the block again"
    );
}

#[test]
fn readme_guide_names_only_what_exists() {
    let staged = Staged::new("guide-names");
    let params = ompi_params(&staged);
    let g = guide();
    let cmds = blocks(&g, "sh guide");
    assert!(cmds.len() >= 6, "the guide's `sh guide` blocks: {cmds:?}");
    let mut checked = 0;
    for b in &cmds {
        for line in b.lines() {
            for c in commands(line) {
                let words: Vec<&str> = c.iter().map(String::as_str).collect();
                check_command(&staged, &params, &words, &format!("guide command `{line}`"));
                checked += 1;
            }
        }
    }
    let agent_help = tigon_help(&["agent"]).expect("tigon agent --help");
    let spans = spans(&prose(&g));
    for s in &spans {
        check_span(&staged, &params, &agent_help, s);
    }
    // The agent.json fragments the guide shows, together, are a configuration tigon accepts.
    let mut cfg = serde_json::Map::new();
    for s in spans
        .iter()
        .filter(|s| s.starts_with('"') && s.contains("\": "))
    {
        let v: Value = serde_json::from_str(&format!("{{{s}}}"))
            .unwrap_or_else(|e| panic!("README span `{s}` is not a JSON member: {e}"));
        cfg.extend(v.as_object().expect("object").clone());
    }
    assert!(cfg.len() >= 3, "{cfg:?}");
    let f = staged.dir.join("fragments.json");
    std::fs::write(&f, Value::Object(cfg.clone()).to_string()).expect("write");
    let o = Command::new(TIGON)
        .args(["doctor", "--json", "--config"])
        .arg(&f)
        .output()
        .expect("tigon doctor");
    let v: Value = serde_json::from_slice(&o.stdout).expect("doctor --json");
    assert_eq!(v["checks"][0]["name"], "config", "{v}");
    assert_eq!(
        v["checks"][0]["status"], "ok",
        "the guide's agent.json keys {cfg:?}: {v}"
    );
    println!("checked {checked} guide commands and {} spans", spans.len());
}

#[test]
fn readme_examples_are_the_shipped_config() {
    let g = guide();
    // The agent.env excerpt: its settings are docker/agent.env's.
    let env = read(&repo("docker/agent.env"));
    let settings: Vec<&str> = env
        .lines()
        .filter(|l| !l.starts_with('#') && l.contains('='))
        .collect();
    let excerpt = blocks(&g, "sh");
    assert_eq!(
        excerpt.len(),
        1,
        "one plain `sh` block: the agent.env excerpt"
    );
    for l in excerpt[0].lines() {
        let l = l.split('#').next().unwrap_or("").trim();
        assert!(
            settings.contains(&l),
            "README's `{l}` is not in docker/agent.env"
        );
    }
    // The agent.json excerpt is docker/agent.json.
    let json = blocks(&g, "json");
    assert_eq!(json.len(), 1, "one `json` block");
    let shown: Value = serde_json::from_str(&json[0]).expect("README's agent.json parses");
    let file: Value =
        serde_json::from_str(&read(&repo("docker/agent.json"))).expect("docker/agent.json");
    assert_eq!(shown, file, "README's agent.json vs docker/agent.json");
    // The two name the same NIC, and the socket is where the MTL looks by default.
    let nic = settings
        .iter()
        .find_map(|l| l.strip_prefix("TIGON_NIC="))
        .expect("TIGON_NIC");
    assert_eq!(file["port"], nic, "TIGON_NIC and \"port\" must match");
    assert_eq!(file["socket"], tigon_client::DEFAULT_SOCKET);
    // tigon accepts the file.
    let o = Command::new(TIGON)
        .args(["doctor", "--json", "--config"])
        .arg(repo("docker/agent.json"))
        .output()
        .expect("tigon doctor");
    let v: Value = serde_json::from_slice(&o.stdout).expect("doctor --json");
    assert_eq!(v["checks"][0]["status"], "ok", "{v}");
}
