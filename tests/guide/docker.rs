//! The container files: `docker/compose.yaml` is valid against the Compose Specification's
//! schema and consistent with itself; the Dockerfile has a build stage (the toolchain, set up
//! before the sources arrive, each build step a script or make target that `make test` runs)
//! and a runtime stage whose packages and files are what `ldd` says the binaries need, and
//! nothing else. No Docker engine runs here: the image itself is never built by these tests.
//! (`run` runs the compose job.)

use super::checks::{check_make, check_script, check_tigon, commands};
use super::compose::{arg_after, compose, strings, volumes};
use super::files::{read, repo};
use super::staged::{built_mtl, profile_dir};
use crate::common::TestDir;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

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
        // The image's entrypoint is `tigon`; the command is an agent and its options.
        let cmd = strings(&svc["command"]);
        let mut words = vec!["tigon"];
        words.extend(cmd.iter().map(String::as_str));
        assert_eq!(
            check_tigon(&words, &format!("compose service {name}")),
            ["agent"]
        );
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
    // The images the services use are built from the Dockerfile: the nodes' from its default
    // target, the job's from its `job` stage (NetPIPE on top of the runtime).
    assert_eq!(
        c["services"]["node1"]["build"]["dockerfile"],
        "docker/Dockerfile"
    );
    assert_eq!(job["build"]["dockerfile"], "docker/Dockerfile");
    assert_eq!(job["build"]["target"], "job");
    assert!(repo("docker/Dockerfile").is_file());
    // The results reach the host (a bind mount next to the compose file), not the job's
    // container, which `run --rm` removes.
    let out = arg_after(&job_args, "-o").expect("NetPIPE's -o");
    let results = strings(&job["volumes"]).into_iter().find_map(|v| {
        let (src, dst) = v.split_once(':')?;
        (src.starts_with("./") && out.starts_with(&format!("{dst}/"))).then_some(dst.to_string())
    });
    assert!(
        results.is_some(),
        "NetPIPE writes {out}, which is on no host directory the job mounts: {:?}",
        job["volumes"]
    );
}

/// One stage of the Dockerfile: `FROM base AS name` and its instructions (continuation lines
/// joined), comments dropped.
#[derive(Debug)]
struct Stage {
    name: String,
    base: String,
    steps: Vec<(String, String)>,
}

impl Stage {
    fn all(&self, instr: &str) -> Vec<&str> {
        self.steps
            .iter()
            .filter(|(i, _)| i == instr)
            .map(|(_, r)| r.as_str())
            .collect()
    }
    /// ENTRYPOINT + CMD (exec form) as one argument list.
    fn command(&self) -> Vec<String> {
        ["ENTRYPOINT", "CMD"]
            .iter()
            .flat_map(|i| self.all(i))
            .flat_map(|r| strings(&serde_json::from_str::<Value>(r).expect("exec form")))
            .collect()
    }
}

/// The Dockerfile's stages, and its global ARGs (name → default).
fn dockerfile() -> (Vec<Stage>, BTreeMap<String, String>) {
    let text = read(&repo("docker/Dockerfile")).replace("\\\n", " ");
    let mut stages: Vec<Stage> = Vec::new();
    let mut args = BTreeMap::new();
    for line in text.lines().map(str::trim) {
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let (instr, rest) = line.split_once(' ').unwrap_or((line, ""));
        match instr {
            "FROM" => {
                let w: Vec<&str> = rest.split_whitespace().collect();
                assert!(
                    w.len() == 3 && w[1] == "AS",
                    "`FROM {rest}`: every stage is named"
                );
                stages.push(Stage {
                    name: w[2].into(),
                    base: w[0].into(),
                    steps: Vec::new(),
                });
            }
            "ARG" if stages.is_empty() => {
                if let Some((k, v)) = rest.split_once('=') {
                    args.insert(k.to_string(), v.to_string());
                }
            }
            _ => stages
                .last_mut()
                .expect("an instruction before the first FROM")
                .steps
                .push((instr.to_string(), rest.to_string())),
        }
    }
    (stages, args)
}

/// The packages an `apt-get install` step installs.
fn apt_packages(run: &str) -> Vec<String> {
    let (_, after) = run
        .split_once("apt-get install")
        .unwrap_or_else(|| panic!("`RUN {run}` installs nothing"));
    after
        .split("&&")
        .next()
        .unwrap_or("")
        .split_whitespace()
        .filter(|w| !w.starts_with('-'))
        .map(str::to_string)
        .collect()
}

/// A build stage that sets up the toolchain before the sources arrive (a source edit reruns
/// only the steps after `COPY . .`), builds with the scripts and make targets `make test`
/// runs, and stages the install; a runtime stage that installs runtime packages only, takes
/// only files from the build stage, and by default runs an agent that needs no NIC.
#[test]
fn dockerfile_stages_and_layer_order() {
    let (stages, _) = dockerfile();
    let names: Vec<&str> = stages.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["build", "runtime", "job", "node"], "the stages");
    let [build, runtime, job, node] = &stages[..] else {
        unreachable!()
    };
    assert_eq!(build.base, "debian:12");
    assert_eq!(runtime.base, "debian:12-slim");
    assert_eq!(job.base, "runtime");
    assert_eq!(node.base, "runtime");
    assert!(
        node.steps.is_empty(),
        "the default target is the runtime as it is"
    );

    // build: COPY setup.sh → RUN setup.sh → COPY . . → RUN make release && install.sh.
    let order: Vec<String> = build
        .steps
        .iter()
        .filter(|(i, _)| i == "COPY" || i == "RUN")
        .map(|(i, r)| format!("{i} {r}"))
        .collect();
    assert_eq!(order.len(), 4, "build stage steps: {order:#?}");
    assert_eq!(
        order[0], "COPY scripts/setup.sh scripts/setup.sh",
        "{order:#?}"
    );
    assert_eq!(
        order[2], "COPY . .",
        "the sources arrive after the set-up: {order:#?}"
    );
    let env: BTreeMap<String, String> = build
        .all("ENV")
        .iter()
        .flat_map(|r| r.split_whitespace())
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    for (i, step) in [&order[1], &order[3]].into_iter().enumerate() {
        let rest = step.strip_prefix("RUN ").expect("RUN");
        // Cache mounts are BuildKit options of the step, not commands.
        let rest: String = rest
            .split_whitespace()
            .filter(|w| !w.starts_with("--mount="))
            .collect::<Vec<_>>()
            .join(" ");
        let cmds = commands(&rest);
        let what = format!("Dockerfile `{step}`");
        let firsts: Vec<&str> = cmds.iter().map(|c| c[0].as_str()).collect();
        assert_eq!(
            firsts,
            if i == 0 {
                &["scripts/setup.sh"][..]
            } else {
                &["make", "scripts/install.sh"][..]
            },
            "{what}"
        );
        for c in &cmds {
            let words: Vec<&str> = c.iter().map(String::as_str).collect();
            match words[0] {
                "make" => check_make(&words, &what),
                w => {
                    check_script(&repo(w), &words, &what);
                    if let Some(from) = words.windows(2).find(|w| w[0] == "--from").map(|w| w[1]) {
                        let target = env.get("CARGO_TARGET_DIR").expect("ENV CARGO_TARGET_DIR");
                        assert_eq!(from, format!("{target}/release"), "{what}");
                    }
                }
            }
        }
    }
    // make test sets a host up with the same script.
    assert!(read(&repo("Makefile")).contains("SETUP = env_out=$$(scripts/setup.sh)"));

    // runtime: one apt-get install of runtime packages, files only from the build stage.
    let runs = runtime.all("RUN");
    assert_eq!(runs.len(), 1, "one RUN in the runtime stage: {runs:?}");
    for p in apt_packages(runs[0]) {
        assert!(
            !p.ends_with("-dev")
                && ![
                    "cargo",
                    "rustc",
                    "clang",
                    "gcc",
                    "make",
                    "python3",
                    "netpipe-openmpi"
                ]
                .contains(&p.as_str()),
            "the runtime stage installs the build or test tool {p}"
        );
    }
    for c in runtime.all("COPY") {
        assert!(
            c.starts_with("--from=build "),
            "the runtime copies `{c}` from the build context, not from the build stage"
        );
    }
    // Its default command: an agent on the container's own interface through af_packet,
    // which needs no NIC (and, with no hugepages, runs on ordinary memory).
    let cmd = runtime.command();
    let words: Vec<&str> = cmd.iter().map(String::as_str).collect();
    assert_eq!(
        check_tigon(&words, "ENTRYPOINT + CMD"),
        ["agent"],
        "{cmd:?}"
    );
    let port = arg_after(&cmd, "--port").expect("--port");
    assert!(
        port.starts_with("net_af_packet") && port.contains("iface=eth0"),
        "the default agent needs a NIC: --port {port}"
    );
    assert!(
        runtime
            .all("VOLUME")
            .iter()
            .any(|v| v.contains("/run/tigon")),
        "the agent's socket directory is a volume"
    );

    // job: the runtime plus NetPIPE, running mpirun.
    let runs = job.all("RUN");
    assert_eq!(runs.len(), 1);
    assert_eq!(apt_packages(runs[0]), ["netpipe-openmpi"]);
    assert_eq!(job.command().first().map(String::as_str), Some("mpirun"));

    // BuildKit reads <Dockerfile>.dockerignore; the build trees stay out of the context.
    let ignore = read(&repo("docker/Dockerfile.dockerignore"));
    assert!(ignore.lines().any(|l| l == "target"), "{ignore}");
}

fn output(cmd: &str, args: &[&str]) -> String {
    let o = Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{cmd}: {e}"));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The Debian package that ships `path` (the path itself, its real path, or either without
/// the /usr of a merged /usr).
fn package_of(path: &str) -> Option<String> {
    let real = std::fs::canonicalize(path)
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let mut tries = vec![path.to_string(), real.clone()];
    for p in [path, real.as_str()] {
        if let Some(rest) = p.strip_prefix("/usr") {
            tries.push(rest.to_string());
        } else if !p.is_empty() {
            tries.push(format!("/usr{p}"));
        }
    }
    tries.iter().find_map(|p| {
        let out = output("dpkg", &["-S", p]);
        let first = out.lines().next()?;
        let (pkg, _) = first.split_once(": ")?;
        Some(pkg.split(':').next()?.split(',').next()?.trim().to_string())
    })
}

/// The shared libraries `elf` links, as `ldd` resolves them.
fn linked(elf: &Path) -> Vec<String> {
    let out = output("ldd", &[elf.to_str().expect("utf-8")]);
    assert!(
        !out.contains("not found"),
        "ldd {}: a library is missing:
{out}",
        elf.display()
    );
    out.lines()
        .filter_map(|l| l.split(" => ").nth(1))
        .filter_map(|r| r.split_whitespace().next())
        .filter(|p| p.starts_with('/'))
        .map(str::to_string)
        .collect()
}

/// `pkgs` and every package they depend on (no recommends), from the local apt cache.
fn closure(pkgs: &[String]) -> BTreeSet<String> {
    let mut args = vec![
        "depends",
        "--recurse",
        "--no-recommends",
        "--no-suggests",
        "--no-conflicts",
        "--no-breaks",
        "--no-replaces",
        "--no-enhances",
    ];
    args.extend(pkgs.iter().map(String::as_str));
    output("apt-cache", &args)
        .lines()
        .filter(|l| !l.starts_with(' ') && !l.starts_with('<'))
        .map(|l| l.trim().split(':').next().unwrap_or("").to_string())
        .chain(pkgs.iter().cloned())
        .collect()
}

/// The runtime stage, as its build stage would fill it: the files it copies are exactly
/// tigon, the MTL and the MTL's help file; every library `ldd` finds for them comes from a
/// package the runtime installs (or one of their dependencies, or one every Debian image has:
/// priority `required`); and every package it installs is one `ldd` asks for, a DPDK driver
/// the EAL loads from its PMD directory (which `ldd` cannot see), or Open MPI's `mpirun` /
/// `ompi_info`.
#[test]
fn runtime_stage_has_what_the_binaries_need_and_nothing_else() {
    let (stages, args) = dockerfile();
    let runtime = stages
        .iter()
        .find(|s| s.name == "runtime")
        .expect("runtime stage");
    let ompi_dir = args.get("OMPI_DIR").expect("ARG OMPI_DIR=...");
    // The build stage's install, here: the files a node gets, under a scratch root.
    built_mtl();
    let dir = TestDir::new("docker-runtime");
    let staging = dir.join("staging");
    let o = Command::new("bash")
        .arg(repo("scripts/install.sh"))
        .arg("--from")
        .arg(profile_dir())
        .arg("--destdir")
        .arg(&staging)
        .args(["--ompi-dir", ompi_dir])
        .output()
        .expect("scripts/install.sh");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // What the runtime stage copies out of /staging.
    let mut files = Vec::new();
    for c in runtime.all("COPY") {
        let words: Vec<String> = c
            .replace("${OMPI_DIR}", ompi_dir)
            .split_whitespace()
            .skip(1)
            .map(str::to_string)
            .collect();
        let (dest, srcs) = words.split_last().expect("COPY src... dest");
        for src in srcs {
            let rel = src
                .strip_prefix("/staging/")
                .unwrap_or_else(|| panic!("COPY --from=build {src}: not from /staging"));
            let p = staging.join(rel);
            assert!(p.is_file(), "the build stage stages no {src}");
            assert!(dest.starts_with('/'), "{dest}");
            files.push(p);
        }
    }
    let mut names: Vec<String> = files
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["help-mtl-tigon.txt", "mca_mtl_tigon.so", "tigon"],
        "the runtime's files from the build stage"
    );

    let installed = apt_packages(runtime.all("RUN")[0]);
    let available = closure(&installed);
    let mut needed: BTreeSet<String> = BTreeSet::new();
    for elf in files
        .iter()
        .filter(|p| !p.to_string_lossy().ends_with(".txt"))
    {
        for lib in linked(elf) {
            let pkg = package_of(&lib)
                .unwrap_or_else(|| panic!("{}: no package ships {lib}", elf.display()));
            needed.insert(pkg);
        }
    }
    let missing: Vec<&String> = needed
        .iter()
        .filter(|p| !available.contains(*p))
        .filter(|p| output("dpkg-query", &["-W", "-f", "${Priority}", p]).trim() != "required")
        .collect();
    assert!(
        missing.is_empty(),
        "the binaries need {missing:?}, which the runtime stage does not install"
    );
    let pmd_dir = "/dpdk/pmds-";
    for p in &installed {
        let why = if needed.contains(p) {
            "linked"
        } else if output("dpkg", &["-L", p]).contains(pmd_dir) {
            "a DPDK driver"
        } else if p == "openmpi-bin" {
            "mpirun, ompi_info"
        } else {
            panic!("the runtime stage installs {p}, which neither binary needs")
        };
        println!("runtime package {p}: {why}");
    }
}
