//! The README's cluster guide is what these tests run, so it cannot rot:
//! - `scripts/guide-local.sh` (printed verbatim at the end of the guide) runs on a staged
//!   install: two nodes (namespaces joined by a veth pair), each prepared by the pre-start
//!   script and its agent started from its configuration as the systemd unit does, `tigon
//!   doctor` on each, NetPIPE across them with the MTL, `tigon stats` — whose counters the
//!   guide's table names;
//! - every command of the guide's `sh guide` blocks, and every `tigon` command and option,
//!   script, make target, environment variable, agent.json key and installed file its text
//!   names, exists (in the tree, in `tigon ... --help`, in a staged `scripts/install.sh`);
//! - the pre-start script's `--dry-run` on the example configuration, as the guide shows it;
//! - the systemd unit passes `systemd-analyze verify`;
//! - `docker/compose.yaml` is valid against the Compose Specification's schema and
//!   consistent with itself, its job's `mpirun` command runs against two local agents, and
//!   every `RUN` step of the Dockerfile is a script or make target that `make test` runs.
//!
//! Installs go to a temporary `--destdir`, never to the real /usr/local or /etc.

mod common;
use common::{TIGON, TestDir, memif_pair};
use serde_json::Value;
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
/// Open MPI's own component directory (Debian 12), where scripts/install.sh puts the MTL.
const OMPI_DIR: &str = "/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3";

fn repo(p: &str) -> PathBuf {
    Path::new(ROOT).join(p)
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn is_executable(p: &Path) -> bool {
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

// --- the build and a staged install ------------------------------------------------------------

/// `target/<profile>`, where cargo put `tigon` and `libmca_mtl_tigon.so`.
fn profile_dir() -> PathBuf {
    Path::new(TIGON)
        .parent()
        .expect("tigon lives in target/<profile>")
        .to_path_buf()
}

/// The built component (`cargo nextest run --workspace` builds it; built here when only this
/// package's tests were built).
fn built_mtl() -> PathBuf {
    let so = profile_dir().join("libmca_mtl_tigon.so");
    if !so.exists() {
        let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
        c.args(["build", "-j2", "-p", "tigon-ompi-mtl", "--lib"]);
        if profile_dir().file_name().is_some_and(|n| n == "release") {
            c.arg("--release");
        }
        c.env(
            "CARGO_TARGET_DIR",
            profile_dir().parent().expect("target dir"),
        );
        let st = c.status().expect("running cargo build -p tigon-ompi-mtl");
        assert!(st.success(), "cargo build -p tigon-ompi-mtl failed");
    }
    assert!(so.exists(), "{} missing", so.display());
    so
}

/// `scripts/install.sh --from target/<profile> --destdir <temp>`: the files a node gets,
/// under a scratch root (removed on drop).
struct Staged {
    dir: TestDir,
}

impl Staged {
    fn new(name: &str) -> Staged {
        built_mtl();
        let dir = TestDir::new(name);
        let o = Command::new("bash")
            .arg(repo("scripts/install.sh"))
            .arg("--from")
            .arg(profile_dir())
            .arg("--destdir")
            .arg(dir.join("root"))
            .output()
            .expect("running scripts/install.sh");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "scripts/install.sh failed:\n{err}");
        println!(
            "scripts/install.sh --destdir {}:\n{err}",
            dir.join("root").display()
        );
        Staged { dir }
    }
    /// Where the installed `abs` (e.g. `/usr/local/bin/tigon`) is.
    fn path(&self, abs: &str) -> PathBuf {
        self.dir.join("root").join(abs.trim_start_matches('/'))
    }
    fn root(&self) -> String {
        self.dir.join("root").display().to_string()
    }
    /// `text` with the installed paths moved into the staged root.
    fn relocate(&self, text: &str) -> String {
        let r = self.root();
        text.replace("/usr/local/", &format!("{r}/usr/local/"))
            .replace("/etc/tigon/", &format!("{r}/etc/tigon/"))
    }
}

// --- the README --------------------------------------------------------------------------------

/// The cluster guide: from its heading to the next top-level section.
fn guide() -> String {
    let readme = read(&repo("README.md"));
    let at = readme
        .find("\n## Cluster guide\n")
        .expect("README.md has a `## Cluster guide` section");
    let rest = &readme[at + 1..];
    let end = rest[3..].find("\n## ").map_or(rest.len(), |e| e + 4);
    rest[..end].to_string()
}

/// The fenced blocks whose info string is exactly `info` (`sh guide`, `json`, ``...).
fn blocks(text: &str, info: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur: Option<(String, String)> = None;
    for line in text.lines() {
        match &mut cur {
            None => {
                if let Some(i) = line.strip_prefix("```") {
                    cur = Some((i.trim().to_string(), String::new()));
                }
            }
            Some((i, body)) => {
                if line == "```" {
                    if i == info {
                        out.push(std::mem::take(body));
                    }
                    cur = None;
                } else {
                    body.push_str(line);
                    body.push('\n');
                }
            }
        }
    }
    out
}

/// The prose: `text` without its fenced blocks.
fn prose(text: &str) -> String {
    let mut out = String::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// The inline code spans of `text` (line breaks inside a span become spaces).
fn spans(text: &str) -> Vec<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .map(|s| s.replace('\n', " ").trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

// --- what exists -------------------------------------------------------------------------------

/// `tigon PATH... --help`, or `None` if there is no such subcommand.
fn tigon_help(path: &[&str]) -> Option<String> {
    let o = Command::new(TIGON)
        .args(path)
        .arg("--help")
        .output()
        .expect("tigon --help");
    o.status
        .success()
        .then(|| String::from_utf8_lossy(&o.stdout).into_owned())
}

/// The subcommands a help text lists under `Commands:`.
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| l.trim() != "Commands:")
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect()
}

/// Whether `text` offers the option `opt` (`--name`, as a word of its own).
fn offers(text: &str, opt: &str) -> bool {
    text.split(|c: char| c.is_whitespace() || "[]()<>,|=\"'`;".contains(c))
        .any(|w| w == opt)
}

/// Checks a `tigon ...` command line: each subcommand exists, and each option is one of its
/// options. Returns the subcommand path.
fn check_tigon(words: &[&str], what: &str) -> Vec<String> {
    assert_eq!(words.first(), Some(&"tigon"), "{what}");
    let mut path: Vec<&str> = Vec::new();
    let mut help = tigon_help(&[]).expect("tigon --help");
    let mut i = 1;
    while i < words.len() && !words[i].starts_with('-') {
        if !subcommands(&help).iter().any(|s| s == words[i]) {
            break;
        }
        path.push(words[i]);
        help = tigon_help(&path).unwrap_or_else(|| panic!("{what}: tigon {path:?} --help"));
        i += 1;
    }
    if path.is_empty() && words.len() > 1 && !words[1].starts_with('-') {
        panic!("{what}: `tigon {}` is not a subcommand of tigon", words[1]);
    }
    for w in &words[i..] {
        if let Some(opt) = w.strip_prefix("--") {
            let name = format!("--{}", opt.split('=').next().unwrap_or(""));
            assert!(
                offers(&help, &name),
                "{what}: `tigon {}` has no option {name}:\n{help}",
                path.join(" ")
            );
        }
    }
    path.iter().map(|s| s.to_string()).collect()
}

/// Checks `make T...`: each target is in the Makefile.
fn check_make(words: &[&str], what: &str) {
    let mk = read(&repo("Makefile"));
    for t in &words[1..] {
        assert!(
            mk.lines().any(|l| l.starts_with(&format!("{t}:"))),
            "{what}: no target `{t}` in the Makefile"
        );
    }
}

/// Checks a script (in the tree or installed): it exists, is executable, and knows the
/// options given to it.
fn check_script(path: &Path, words: &[&str], what: &str) {
    assert!(
        is_executable(path),
        "{what}: {} is not an executable file",
        path.display()
    );
    let text = read(path);
    for w in &words[1..] {
        if w.starts_with("--") {
            assert!(text.contains(*w), "{what}: {} knows no {w}", path.display());
        }
    }
}

/// Whether the environment variable `name` is read by a script, the example agent.env or the
/// Rust sources (tigon, the client library, the port layer, the MTL).
fn env_var_is_read(name: &str) -> bool {
    let mut texts = vec![
        read(&repo("scripts/tigon-prestart.sh")),
        read(&repo("scripts/guide-local.sh")),
        read(&repo("scripts/install.sh")),
        read(&repo("docker/agent.env")),
    ];
    for dir in ["src", "client/src", "pmd/src", "ompi-mtl/src"] {
        let mut stack = vec![repo(dir)];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).expect("read_dir").flatten() {
                let p = e.path();
                if p.is_dir() {
                    stack.push(p);
                } else if p.extension().is_some_and(|x| x == "rs") {
                    texts.push(read(&p));
                }
            }
        }
    }
    texts.iter().any(|t| {
        t.contains(&format!("${{{name}"))
            || t.contains(&format!("${name}"))
            || t.contains(&format!("\"{name}\""))
            || t.lines()
                .any(|l| l.trim_start().starts_with(&format!("{name}=")))
    })
}

/// Open MPI's parameters (`ompi_info --all --parsable`, the staged MTL included).
fn ompi_params(staged: &Staged) -> String {
    let path = format!("{}:{OMPI_DIR}", staged.path(OMPI_DIR).display());
    let o = Command::new("ompi_info")
        .args(["--all", "--parsable"])
        .env("OMPI_MCA_mca_base_component_path", path)
        .output()
        .expect("running ompi_info");
    assert!(o.status.success(), "ompi_info --all failed");
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Checks `--mca NAME VALUE`: NAME is a parameter; for a framework (pml, mtl), VALUE is one
/// of its components.
fn check_mca(params: &str, name: &str, value: Option<&str>, what: &str) {
    assert!(
        params.contains(&format!(":param:{name}:")),
        "{what}: Open MPI has no MCA parameter {name}"
    );
    if let (Some(v), true) = (value, ["pml", "mtl", "btl"].contains(&name)) {
        assert!(
            params
                .lines()
                .any(|l| l.starts_with(&format!("mca:{name}:{v}:"))),
            "{what}: Open MPI has no {name} component {v}"
        );
    }
}

/// Checks an absolute path the guide names.
fn check_abs_path(staged: &Staged, p: &str, what: &str) {
    let p = p.trim_end_matches(['.', ',', ')', ':', ';']);
    let installed = [
        "/usr/local/",
        "/etc/tigon/",
        "/etc/systemd/system/",
        OMPI_DIR,
    ];
    if installed.iter().any(|i| p.starts_with(i)) {
        assert!(
            staged.path(p).exists(),
            "{what}: {p} is not among the files scripts/install.sh installs"
        );
        return;
    }
    let unit = read(&staged.path("/etc/systemd/system/tigon-agent.service"));
    match p {
        "/run/tigon/agent.sock" => assert_eq!(p, tigon_client::DEFAULT_SOCKET, "{what}"),
        "/run/tigon" => assert!(unit.contains("RuntimeDirectory=tigon\n"), "{what}"),
        "/dev/hugepages" => assert!(
            read(&repo("scripts/tigon-prestart.sh")).contains("HUGE_DIR:-/dev/hugepages"),
            "{what}"
        ),
        _ => panic!("{what}: tests/guide.rs does not know how to check the path {p}: teach it"),
    }
}

/// Splits a shell line into simple commands (`;`, `&&`, `||`, `|`) of words.
fn commands(line: &str) -> Vec<Vec<String>> {
    let line = line.split(" #").next().unwrap_or("");
    line.replace("&&", ";")
        .replace("||", ";")
        .replace('|', ";")
        .split(';')
        .map(|c| {
            c.split_whitespace()
                .skip_while(|w| {
                    w.split_once('=').is_some_and(|(k, _)| {
                        !k.is_empty() && k.bytes().all(|b| b.is_ascii_uppercase() || b == b'_')
                    })
                })
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .filter(|c| !c.is_empty())
        .collect()
}

/// Checks one command of a `sh guide` block.
fn check_command(staged: &Staged, params: &str, words: &[&str], what: &str) {
    let compose = read(&repo("docker/compose.yaml"));
    let guide_local = read(&repo("scripts/guide-local.sh"));
    match words[0] {
        "make" => check_make(words, what),
        "tigon" => {
            check_tigon(words, what);
        }
        "set" => {}
        "." | "source" => check_abs_path(staged, words[1], what),
        "editor" => words[1..]
            .iter()
            .for_each(|p| check_abs_path(staged, p, what)),
        "systemctl" => {
            let unit = words.last().expect("unit");
            check_abs_path(staged, &format!("/etc/systemd/system/{unit}.service"), what);
        }
        "dpdk-devbind.py" => {
            let o = Command::new("dpdk-devbind.py")
                .arg("--help")
                .output()
                .unwrap_or_else(|e| panic!("{what}: dpdk-devbind.py (package dpdk): {e}"));
            let help = String::from_utf8_lossy(&o.stdout);
            for w in words.iter().filter(|w| w.starts_with("--")) {
                assert!(offers(&help, w), "{what}: dpdk-devbind.py has no {w}");
            }
        }
        "docker" => {
            // No Docker engine here: the files and names the commands use must exist.
            for w in words.windows(2) {
                if w[0] == "-f" {
                    assert!(repo(w[1]).is_file(), "{what}: no {}", w[1]);
                }
                if w[0] == "-t" {
                    assert!(
                        compose.contains(&format!("image: {}\n", w[1])),
                        "{what}: compose.yaml does not use the image {}",
                        w[1]
                    );
                }
            }
            if words[1] == "compose" && words.contains(&"run") {
                let svc = words.last().expect("service");
                assert!(
                    compose.contains(&format!("\n  {svc}:\n")),
                    "{what}: compose.yaml has no service {svc}"
                );
            }
        }
        "mpirun" => {
            // The options the guide gives mpirun are the ones guide-local.sh runs it with.
            let mut i = 1;
            while i < words.len() {
                if words[i] == "--mca" {
                    check_mca(params, words[i + 1], Some(words[i + 2]), what);
                    let triple = words[i..i + 3].join(" ");
                    assert!(
                        guide_local.contains(&triple),
                        "{what}: scripts/guide-local.sh does not run mpirun with {triple}"
                    );
                    i += 3;
                } else {
                    if words[i].starts_with("--") {
                        assert!(
                            guide_local.contains(&format!("{} ", words[i])),
                            "{what}: scripts/guide-local.sh does not run mpirun with {}",
                            words[i]
                        );
                    }
                    i += 1;
                }
            }
        }
        w if w.starts_with("scripts/") => check_script(&repo(w), words, what),
        w if w.starts_with('/') => {
            check_abs_path(staged, w, what);
            check_script(&staged.path(w), words, what);
        }
        w => panic!("{what}: tests/guide.rs does not know how to check `{w}`: teach it"),
    }
}

/// `Key=value` with a CamelCase key (`RuntimeDirectory=tigon`), as in a systemd unit.
fn is_systemd_directive(s: &str) -> bool {
    let Some((k, _)) = s.split_once('=') else {
        return false;
    };
    let mut c = k.chars();
    c.next().is_some_and(|c| c.is_ascii_uppercase())
        && k.chars().any(|c| c.is_ascii_lowercase())
        && c.any(|c| c.is_ascii_uppercase())
        && k.chars().all(|c| c.is_ascii_alphanumeric())
}

/// Checks one inline code span of the guide's prose.
fn check_span(staged: &Staged, params: &str, agent_help: &str, s: &str) {
    let what = format!("README span `{s}`");
    let words: Vec<&str> = s.split_whitespace().collect();
    // Environment variables, wherever they appear.
    for w in s.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
        if w.starts_with("TIGON_") {
            assert!(env_var_is_read(w), "{what}: nothing reads {w}");
        }
    }
    for w in &words {
        if w.starts_with('/') {
            check_abs_path(staged, w, &what);
        }
    }
    // Command lines (`make release && scripts/install.sh`): tigon, make targets, scripts.
    for c in commands(s) {
        let w: Vec<&str> = c.iter().map(String::as_str).collect();
        match w[0] {
            "tigon" => {
                check_tigon(&w, &what);
            }
            "make" => check_make(&w, &what),
            x if x.starts_with("scripts/") => check_script(&repo(x), &w, &what),
            _ => {}
        }
    }
    let first = words[0];
    if ["tigon", "make"].contains(&first) || first.starts_with("scripts/") {
        // Checked above.
    } else if first == "--mca" {
        check_mca(params, words[1], words.get(2).copied(), &what);
    } else if first.starts_with("--") {
        // An option of tigon, of a script or of mpirun.
        let mut texts: Vec<String> = ["agent", "doctor", "stats", "run", "demo", "bench"]
            .iter()
            .filter_map(|c| tigon_help(&[c]))
            .collect();
        for p in ["install.sh", "tigon-prestart.sh", "guide-local.sh"] {
            texts.push(read(&repo(&format!("scripts/{p}"))));
        }
        assert!(
            texts.iter().any(|t| offers(t, first)),
            "{what}: no tigon subcommand or script offers {first}"
        );
    } else if ["docker/", "tests/", "ompi-mtl/", "src/"]
        .iter()
        .any(|d| first.starts_with(d))
    {
        assert!(repo(first).exists(), "{what}: no {first} in the tree");
    } else if first == "mca_mtl_tigon.so" || first == "help-mtl-tigon.txt" {
        assert!(
            staged.path(OMPI_DIR).join(first).is_file(),
            "{what}: not installed in {OMPI_DIR}"
        );
    } else if let Some(rest) = first.strip_prefix('"') {
        // An agent.json key (an option of `tigon agent`), or a value of "idle".
        let key = rest.split('"').next().unwrap_or("");
        assert!(
            offers(agent_help, &format!("--{key}")) || agent_help.contains(&format!("`{key}`")),
            "{what}: `{key}` is neither an option of tigon agent nor one of its values"
        );
    } else if is_systemd_directive(first) {
        // A systemd directive with its value (RuntimeDirectory=tigon).
        let unit = read(&staged.path("/etc/systemd/system/tigon-agent.service"));
        assert!(
            unit.contains(&format!("\n{first}\n")),
            "{what}: not in the unit"
        );
    }
}

// --- running things ----------------------------------------------------------------------------

/// Every process: (pid, parent pid, start time in clock ticks).
fn processes() -> Vec<(i32, i32, u64)> {
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    rd.flatten()
        .filter_map(|e| {
            let pid: i32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            // After the command name's closing parenthesis: state, ppid, ... starttime (20th).
            let f: Vec<&str> = stat[stat.rfind(')')? + 1..].split_whitespace().collect();
            Some((pid, f.get(1)?.parse().ok()?, f.get(19)?.parse().ok()?))
        })
        .collect()
}

/// The descendants of `root` (pid and start time, so that a reused pid is never signalled).
fn descendants(root: i32) -> Vec<(i32, u64)> {
    let all = processes();
    let mut out: Vec<(i32, u64)> = Vec::new();
    let mut frontier = vec![root];
    while let Some(p) = frontier.pop() {
        for &(pid, ppid, start) in &all {
            if ppid == p && !out.iter().any(|(q, _)| *q == pid) {
                out.push((pid, start));
                frontier.push(pid);
            }
        }
    }
    out
}

fn signal_if_same(procs: &[(i32, u64)], sig: libc::c_int) {
    let now = processes();
    for &(pid, start) in procs {
        if now.iter().any(|&(p, _, s)| p == pid && s == start) {
            // SAFETY: a process we started (directly or not), identified by pid and start time.
            unsafe { libc::kill(pid, sig) };
        }
    }
}

/// A command with its output in a file. It stays in the test's process group, so that
/// nextest's signals (its timeout, Ctrl-C) reach it and its children too; when it outlives
/// its timeout or the test panics, it and every process it started get SIGTERM (the guide's
/// script then removes its namespaces and stops its agents), then SIGKILL.
struct Job {
    child: Option<Child>,
    log: PathBuf,
}

impl Job {
    fn spawn(mut cmd: Command, log: PathBuf) -> Job {
        let out = std::fs::File::create(&log).expect("log file");
        cmd.stdin(Stdio::null())
            .stdout(out.try_clone().expect("dup"))
            .stderr(out);
        Job {
            child: Some(cmd.spawn().expect("spawn")),
            log,
        }
    }

    fn output(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn kill_tree(&mut self) {
        let Some(mut c) = self.child.take() else {
            return;
        };
        let tree = descendants(c.id() as i32);
        // SAFETY: our own child, not yet reaped.
        unsafe { libc::kill(c.id() as libc::pid_t, libc::SIGTERM) };
        signal_if_same(&tree, libc::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline && matches!(c.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = c.kill();
        let _ = c.wait();
        signal_if_same(&tree, libc::SIGKILL);
    }

    /// Waits for the exit status. After `timeout`, panics with the output and what `why`
    /// says (called while everything still runs), and kills the job.
    fn wait(
        &mut self,
        timeout: Duration,
        why: impl FnOnce() -> String,
    ) -> std::process::ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            let c = self.child.as_mut().expect("running");
            if let Some(st) = c.try_wait().expect("try_wait") {
                self.child = None;
                return st;
            }
            if Instant::now() > deadline {
                let why = why();
                self.kill_tree();
                panic!("still running after {timeout:?}:\n{}\n{why}", self.output());
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        self.kill_tree();
    }
}

fn python() -> &'static str {
    // Debian's, where scripts/setup.sh installed python3-yaml and python3-jsonschema.
    if Path::new("/usr/bin/python3").exists() {
        "/usr/bin/python3"
    } else {
        "python3"
    }
}

/// docker/compose.yaml as JSON, after validating it against docker/compose-spec.json (and
/// checking that the validator rejects a service with an unknown key).
fn compose() -> Value {
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

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap_or_else(|| panic!("a list of strings: {v}"))
        .iter()
        .map(|s| s.as_str().expect("string").to_string())
        .collect()
}

/// The value after `opt` in an argument list.
fn arg_after<'a>(args: &'a [String], opt: &str) -> Option<&'a str> {
    args.iter()
        .position(|a| a == opt)
        .and_then(|i| args.get(i + 1))
        .map(String::as_str)
}

/// The named volumes of a service: target directory → volume.
fn volumes(svc: &Value) -> BTreeMap<String, String> {
    strings(&svc["volumes"])
        .into_iter()
        .filter_map(|v| {
            let (src, dst) = v.split_once(':')?;
            (!src.starts_with('/')).then(|| (dst.to_string(), src.to_string()))
        })
        .collect()
}

// --- the tests ---------------------------------------------------------------------------------

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
fn guide_local_two_agents_one_job() {
    let staged = Staged::new("guide-run");
    let log = staged.dir.join("guide-local.log");
    let mut cmd = Command::new("bash");
    cmd.arg(repo("scripts/guide-local.sh"))
        .env("TIGON_PREFIX", staged.path("/usr/local"))
        .env("TIGON_MTL_DIR", staged.path(OMPI_DIR));
    let mut job = Job::spawn(cmd, log);
    let st = job.wait(Duration::from_secs(480), String::new);
    let out = job.output();
    println!("{out}");
    assert!(st.success(), "scripts/guide-local.sh failed ({st})");

    // Each node's doctor passed, the job ran to its largest message, the script finished.
    assert_eq!(
        out.matches("this node can run tigon (").count(),
        2,
        "doctor on each node"
    );
    assert!(
        out.lines()
            .any(|l| l.contains(" 1048576 bytes ") && l.contains("Mbps")),
        "NetPIPE reached 1 MiB"
    );
    assert!(out.ends_with("== guide-local: done\n"));

    // Both agents' stats: the job's traffic, nothing failed; and every counter the guide's
    // table explains exists.
    let stats = |n: u32| -> Value {
        let head = format!("== node{n}: tigon stats\n");
        let from = &out[out.find(&head).expect("stats printed") + head.len()..];
        let end = from.find("\n== ").map_or(from.len(), |e| e + 1);
        serde_json::from_str(&from[..end]).expect("tigon stats prints JSON")
    };
    let g = guide();
    let table = &g[g.find("### 6.").expect("section 6: tigon stats")..];
    for n in [1, 2] {
        let s = stats(n);
        assert_eq!(s["messages"]["failed"], 0, "node{n}: {s}");
        assert_eq!(s["peers"], 1, "node{n}: {s}");
        assert!(
            s["messages"]["rendezvous"].as_u64() > Some(0),
            "node{n}: {s}"
        );
        assert!(s["frames"]["rx"].as_u64() > Some(0), "node{n}: {s}");
        for row in table.lines().filter(|l| l.starts_with("| `")) {
            let cells: Vec<&str> = row.split('|').collect();
            let mut prefix = String::new();
            let mut names: Vec<String> = Vec::new();
            for c in spans(cells[1]) {
                let full = if let Some(rest) = c.strip_prefix('.') {
                    format!("{prefix}.{rest}")
                } else {
                    prefix = c.split('.').next().unwrap_or("").to_string();
                    c.trim_end_matches(".*").to_string()
                };
                names.push(full);
            }
            if cells[1].contains("`drops.*`") {
                // The meaning column names the kinds of drops.
                names.extend(
                    spans(cells[2])
                        .into_iter()
                        .filter(|w| w.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'))
                        .map(|w| format!("drops.{w}")),
                );
            }
            for name in names {
                let ptr = format!("/{}", name.replace('.', "/"));
                assert!(
                    s.pointer(&ptr).is_some(),
                    "the guide's stats table names `{name}`, which tigon stats does not print: {s}"
                );
            }
        }
    }

    // Nothing left behind: the namespaces and the script's scratch directory are gone.
    let first = out.lines().next().expect("output");
    let ns: Vec<&str> = first
        .split("namespaces ")
        .nth(1)
        .and_then(|r| r.split(", joined").next())
        .expect("the namespaces line")
        .split_whitespace()
        .collect();
    let list = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("ip netns");
    let list = String::from_utf8_lossy(&list.stdout);
    for n in ns {
        assert!(
            !list.lines().any(|l| l.split_whitespace().next() == Some(n)),
            "namespace {n} left behind"
        );
    }
    let work = out
        .split("--config ")
        .nth(1)
        .and_then(|r| r.split("/node1/").next())
        .expect("the script's scratch directory");
    assert!(!Path::new(work).exists(), "{work} left behind");
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

#[test]
fn prestart_dry_run_on_the_example_config() {
    let staged = Staged::new("guide-prestart");
    let g = guide();
    let line = blocks(&g, "sh guide")
        .iter()
        .flat_map(|b| b.lines().map(str::to_string).collect::<Vec<_>>())
        .find(|l| l.contains("--dry-run"))
        .expect("the guide shows the pre-start script's --dry-run");
    let env_file = staged.path("/etc/tigon/agent.env");
    let original = read(&env_file);
    // The guide's line on the staged install, with agent.env as shipped and as edited the
    // ways the guide suggests.
    let run = |extra: &str| -> String {
        std::fs::write(&env_file, format!("{original}{extra}")).expect("agent.env");
        let mut c = Command::new("bash");
        c.args(["-euo", "pipefail", "-c", &staged.relocate(&line)]);
        for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("TIGON_")) {
            c.env_remove(k);
        }
        let o = c.output().expect("bash");
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        let err = String::from_utf8_lossy(&o.stderr);
        println!("--- agent.env +{extra:?}:\n{out}{err}");
        assert!(o.status.success(), "the dry run failed:\n{out}{err}");
        assert!(err.contains("tigon-prestart: ready"), "{err}");
        out
    };
    let pages_before = read(Path::new("/proc/sys/vm/nr_hugepages"));

    let out = run("");
    assert!(out.contains("modprobe vfio-pci\n"), "{out}");
    assert!(
        out.contains("dpdk-devbind.py -b vfio-pci 0000:3b:00.0\n"),
        "{out}"
    );
    if pages_before.trim().parse::<u64>().expect("nr_hugepages") < 1024 {
        assert!(
            out.contains("echo 1024 > /proc/sys/vm/nr_hugepages\n"),
            "{out}"
        );
    }

    let out = run("TIGON_VFIO_NOIOMMU=1\n");
    assert!(
        out.contains("modprobe vfio enable_unsafe_noiommu_mode=1\n"),
        "{out}"
    );
    assert!(
        out.contains("echo 1 > /sys/module/vfio/parameters/enable_unsafe_noiommu_mode\n"),
        "{out}"
    );

    let out = run("TIGON_DRIVER=uio_pci_generic\n");
    assert!(out.contains("modprobe uio_pci_generic\n"), "{out}");
    assert!(
        out.contains("dpdk-devbind.py -b uio_pci_generic 0000:3b:00.0\n"),
        "{out}"
    );

    let out = run("TIGON_NIC=eth1\nTIGON_MTU=9000\n");
    assert!(
        out.contains("ip link set eth1 mtu 9000\nip link set eth1 up\n"),
        "{out}"
    );
    assert!(
        !out.contains("dpdk-devbind.py"),
        "af_packet binds nothing: {out}"
    );

    assert_eq!(
        read(Path::new("/proc/sys/vm/nr_hugepages")),
        pages_before,
        "a dry run changes nothing"
    );
}

#[test]
fn systemd_unit_verifies() {
    let staged = Staged::new("guide-unit");
    let unit_path = staged.path("/etc/systemd/system/tigon-agent.service");
    let unit = read(&unit_path);
    // What the issue asks of it, and the paths it names installed.
    for want in [
        "EnvironmentFile=/etc/tigon/agent.env\n",
        "ExecStartPre=/usr/local/lib/tigon/tigon-prestart.sh\n",
        "ExecStart=/usr/local/bin/tigon agent --config /etc/tigon/agent.json\n",
        "Restart=on-failure\n",
        "RuntimeDirectory=tigon\n",
        "WantedBy=multi-user.target\n",
    ] {
        assert!(unit.contains(want), "the unit lacks {want}");
        for w in want.trim().split(['=', ' ']).filter(|w| w.starts_with('/')) {
            check_abs_path(&staged, w, want);
        }
    }
    let exec = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart=/usr/local/bin/"))
        .expect("ExecStart");
    let words: Vec<&str> = exec.split_whitespace().collect();
    check_tigon(&words, "the unit's ExecStart");
    // The agent's socket is in the unit's RuntimeDirectory.
    let cfg: Value =
        serde_json::from_str(&read(&staged.path("/etc/tigon/agent.json"))).expect("agent.json");
    assert_eq!(cfg["socket"], "/run/tigon/agent.sock");

    let Ok(o) = Command::new("systemd-analyze").arg("--version").output() else {
        println!("systemd-analyze not found: `systemd-analyze verify` skipped");
        return;
    };
    assert!(o.status.success());
    // The unit as `install.sh --prefix` writes it for the staged prefix, so that the
    // programs it starts exist.
    let dir = staged.dir.join("verify");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let copy = dir.join("tigon-agent.service");
    std::fs::write(&copy, staged.relocate(&unit)).expect("write");
    let o = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&copy)
        .output()
        .expect("systemd-analyze verify");
    let err = String::from_utf8_lossy(&o.stderr);
    println!("systemd-analyze verify {}:\n{err}", copy.display());
    assert!(o.status.success(), "systemd-analyze verify failed:\n{err}");
    assert!(
        !err.contains("tigon-agent.service"),
        "systemd-analyze complains about the unit:\n{err}"
    );
}

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
fn compose_job_runs_against_two_local_agents() {
    let c = compose();
    let job = &c["services"]["job"];
    let args = [strings(&job["entrypoint"]), strings(&job["command"])].concat();
    let dir = TestDir::new("guide-compose");
    let (a, b) = memif_pair(&dir, &[]);
    // The job's command line, with the node containers' sockets (in the job's volumes) and
    // its output file moved here; the component is not installed in Open MPI's directory
    // here, so mpirun is told where it is.
    let comp = dir.join("ompi");
    std::fs::create_dir_all(&comp).expect("mkdir");
    std::fs::copy(built_mtl(), comp.join("mca_mtl_tigon.so")).expect("copy");
    std::fs::copy(
        repo("ompi-mtl/help-mtl-tigon.txt"),
        comp.join("help-mtl-tigon.txt"),
    )
    .expect("copy");
    let vols = volumes(job);
    let out_file = dir.join("np.out");
    let mut argv: Vec<String> = Vec::new();
    for arg in &args {
        let mut arg = arg.clone();
        for (at, vol) in &vols {
            let agent = if vol.starts_with("node1") { &a } else { &b };
            let sock = agent.socket.to_str().expect("utf-8");
            arg = arg.replace(&format!("{at}/agent.sock"), sock);
        }
        if arg == "/tmp/np.out" {
            arg = out_file.display().to_string();
        }
        argv.push(arg);
        if argv.len() == 1 {
            argv.extend([
                "--mca".into(),
                "mca_base_component_path".into(),
                format!("{}:{OMPI_DIR}", comp.display()),
            ]);
        }
    }
    assert!(
        !argv.iter().any(|x| x.contains("/nodes/")),
        "every socket moved: {argv:?}"
    );
    println!("$ {}", argv.join(" "));
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..]).current_dir(&dir.path);
    let mut job = Job::spawn(cmd, dir.join("job.log"));
    let st = job.wait(Duration::from_secs(420), || {
        format!(
            "agent a: {:?}\nagent b: {:?}",
            tigon_client::agent_stats(&a.socket),
            tigon_client::agent_stats(&b.socket)
        )
    });
    let out = job.output();
    println!("{out}");
    assert!(
        st.success(),
        "the compose job's mpirun failed ({st})\nagent a:\n{}\nagent b:\n{}",
        a.log_tail(),
        b.log_tail()
    );
    let np = read(&out_file);
    assert!(
        np.lines()
            .any(|l| l.split_whitespace().next() == Some("1048576")),
        "NetPIPE's output reaches 1 MiB:\n{np}"
    );
    for x in [&a, &b] {
        let s = x.stats();
        assert_eq!(s["messages"]["failed"], 0, "{s}");
        assert!(s["messages"]["rendezvous"].as_u64() > Some(0), "{s}");
    }
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
