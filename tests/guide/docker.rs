//! The container files: `docker/compose.yaml` is valid against the Compose Specification's
//! schema and consistent with itself, and every `RUN` step of the Dockerfile is a script or
//! make target that `make test` runs. (`run` runs the compose job.)

use super::checks::{check_make, check_script, check_tigon, commands};
use super::compose::{arg_after, compose, strings, volumes};
use super::files::{read, repo};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

#[test]
fn compose_file_is_valid_and_consistent() {
    let c = compose();
    let services = c["services"].as_object().expect("services");
    let job = &c["services"]["job"];
    let job_args = [strings(&job["entrypoint"]), strings(&job["command"])].concat();
    let job_vols = volumes(job);
    let mut nodes = 0;
    for (name, svc) in services.iter().filter(|(n, _)| n.starts_with("node")) {
        nodes += 1;
        assert_eq!(svc["image"], "tigon:latest", "{name}");
        assert_eq!(svc["privileged"], true, "{name}");
        assert_eq!(
            svc["pid"], "host",
            "{name}: agents reach their ranks' memory"
        );
        assert!(
            strings(&svc["volumes"]).contains(&"/dev/hugepages:/dev/hugepages".to_string()),
            "{name}: hugepages from the host"
        );
        // The image's entrypoint is `tigon agent`; the command is its options.
        let cmd = strings(&svc["command"]);
        let mut words = vec!["tigon", "agent"];
        words.extend(cmd.iter().map(String::as_str));
        check_tigon(&words, &format!("compose service {name}"));
        let port = arg_after(&cmd, "--port").expect("--port");
        assert_eq!(
            port, "net_af_packet0,iface=eth0",
            "{name}: af_packet on eth0"
        );
        let hc = strings(&svc["healthcheck"]["test"]);
        let hc: Vec<&str> = hc.iter().skip(1).map(String::as_str).collect();
        check_tigon(&hc, &format!("{name}'s healthcheck"));
        // The socket is in a named volume that the job mounts; the job's rank for this node
        // attaches there.
        let sock = Path::new(arg_after(&cmd, "--socket").expect("--socket"));
        assert_eq!(
            hc.last().copied(),
            sock.to_str(),
            "{name}: healthcheck socket"
        );
        let dir = sock.parent().expect("dir").to_str().expect("utf-8");
        let vol = &volumes(svc)[dir];
        let (at, _) = job_vols
            .iter()
            .find(|(_, v)| *v == vol)
            .unwrap_or_else(|| panic!("the job does not mount {vol}"));
        let env = format!(
            "TIGON_SOCKET={at}/{}",
            sock.file_name().expect("name").to_str().expect("utf-8")
        );
        assert!(
            job_args.contains(&env),
            "the job has no rank with {env}: {job_args:?}"
        );
        assert!(
            job["depends_on"][name]["condition"] == "service_healthy",
            "the job waits for {name}'s agent"
        );
    }
    assert_eq!(nodes, 2, "two node services");
    assert_eq!(job_args[0], "mpirun");
    let line = job_args.join(" ");
    assert!(line.contains("--mca pml cm --mca mtl tigon"), "{line}");
    assert_eq!(
        job_args.iter().filter(|a| *a == "NPopenmpi").count(),
        2,
        "{line}"
    );
    // The image the services use is the one the node services build from the Dockerfile.
    assert_eq!(
        c["services"]["node1"]["build"]["dockerfile"],
        "docker/Dockerfile"
    );
    assert!(repo("docker/Dockerfile").is_file());
}

#[test]
fn dockerfile_runs_only_tested_steps() {
    let text = read(&repo("docker/Dockerfile")).replace("\\\n", " ");
    let example_cfg = read(&repo("docker/agent.json"));
    let mut env: BTreeMap<String, String> = BTreeMap::new();
    let mut runs = 0;
    let mut entry: Vec<String> = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let (instr, rest) = line.split_once(' ').unwrap_or((line, ""));
        match instr {
            "ENV" => {
                for kv in rest.split_whitespace() {
                    if let Some((k, v)) = kv.split_once('=') {
                        env.insert(k.into(), v.into());
                    }
                }
            }
            "RUN" => {
                runs += 1;
                for c in commands(rest) {
                    let words: Vec<&str> = c.iter().map(String::as_str).collect();
                    let what = format!("Dockerfile `RUN {rest}`");
                    match words[0] {
                        "make" => check_make(&words, &what),
                        "rm" => {}
                        w if w.starts_with("scripts/") => {
                            check_script(&repo(w), &words, &what);
                            if let Some(from) =
                                words.windows(2).find(|w| w[0] == "--from").map(|w| w[1])
                            {
                                let target =
                                    env.get("CARGO_TARGET_DIR").expect("ENV CARGO_TARGET_DIR");
                                assert_eq!(from, format!("{target}/release"), "{what}");
                            }
                        }
                        w => panic!(
                            "{what}: `{w}` is not a script or make target that make test runs"
                        ),
                    }
                }
            }
            "ENTRYPOINT" | "CMD" => {
                let v: Value = serde_json::from_str(rest).expect("exec form");
                entry.extend(strings(&v));
            }
            _ => {}
        }
    }
    assert_eq!(runs, 2, "setup.sh, then make release + install.sh");
    // The image runs `tigon agent --config /etc/tigon/agent.json`: what install.sh installs.
    let words: Vec<&str> = entry.iter().map(String::as_str).collect();
    assert_eq!(check_tigon(&words, "ENTRYPOINT + CMD"), ["agent"]);
    assert_eq!(arg_after(&entry, "--config"), Some("/etc/tigon/agent.json"));
    assert!(read(&repo("scripts/install.sh")).contains("\"$ROOT/docker/$f\" \"/etc/tigon/$f\""));
    assert!(example_cfg.contains("\"socket\": \"/run/tigon/agent.sock\""));
    // make test runs the same set-up script.
    assert!(read(&repo("Makefile")).contains("SETUP = env_out=$$(scripts/setup.sh)"));
    // BuildKit reads <Dockerfile>.dockerignore; the build trees stay out of the context.
    let ignore = read(&repo("docker/Dockerfile.dockerignore"));
    assert!(ignore.lines().any(|l| l == "target"), "{ignore}");
}
