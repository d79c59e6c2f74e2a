//! Checks that what the guide names exists: `tigon` subcommands and options, make targets,
//! scripts and their options, environment variables, Open MPI parameters, installed paths.

use super::files::{OMPI_DIR, is_executable, read, repo};
use super::staged::Staged;
use crate::common::TIGON;
use std::path::Path;
use std::process::Command;

/// `tigon PATH... --help`, or `None` if there is no such subcommand.
pub fn tigon_help(path: &[&str]) -> Option<String> {
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
pub fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| l.trim() != "Commands:")
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect()
}

/// Whether `text` offers the option `opt` (`--name`, as a word of its own).
pub fn offers(text: &str, opt: &str) -> bool {
    text.split(|c: char| c.is_whitespace() || "[]()<>,|=\"'`;".contains(c))
        .any(|w| w == opt)
}

/// Checks a `tigon ...` command line: each subcommand exists, and each option is one of its
/// options. Returns the subcommand path.
pub fn check_tigon(words: &[&str], what: &str) -> Vec<String> {
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
pub fn check_make(words: &[&str], what: &str) {
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
pub fn check_script(path: &Path, words: &[&str], what: &str) {
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
pub fn env_var_is_read(name: &str) -> bool {
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
pub fn ompi_params(staged: &Staged) -> String {
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
pub fn check_mca(params: &str, name: &str, value: Option<&str>, what: &str) {
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
pub fn check_abs_path(staged: &Staged, p: &str, what: &str) {
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
pub fn commands(line: &str) -> Vec<Vec<String>> {
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
pub fn check_command(staged: &Staged, params: &str, words: &[&str], what: &str) {
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
pub fn is_systemd_directive(s: &str) -> bool {
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
pub fn check_span(staged: &Staged, params: &str, agent_help: &str, s: &str) {
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
