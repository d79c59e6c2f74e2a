//! The README's cluster guide, and its fenced blocks, prose and code spans.

use super::files::{read, repo};

/// The cluster guide: from its heading to the next top-level section.
pub fn guide() -> String {
    let readme = read(&repo("README.md"));
    let at = readme
        .find("\n## Cluster guide\n")
        .expect("README.md has a `## Cluster guide` section");
    let rest = &readme[at + 1..];
    let end = rest[3..].find("\n## ").map_or(rest.len(), |e| e + 4);
    rest[..end].to_string()
}

/// The fenced blocks whose info string is exactly `info` (`sh guide`, `json`, ``...).
pub fn blocks(text: &str, info: &str) -> Vec<String> {
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
pub fn prose(text: &str) -> String {
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
pub fn spans(text: &str) -> Vec<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .map(|s| s.replace('\n', " ").trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}
