//! Every external program the workspace's Rust code runs is in `deploy/tools.list`, so the
//! prerequisites script installs it on a fresh machine: a test that calls a program nobody
//! installs passes only where someone installed it by hand.
//!
//! It reads the sources as text: `Command::new("prog")`, `netns_command(…, "prog")` and
//! `.command(…, "prog")` with a literal program name on one line. Programs given by path (the
//! workspace's own binaries) are not external.

use std::path::{Path, PathBuf};

/// The `.rs` files below `dir`, skipping build output and fuzzing corpora.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        let name = e.file_name();
        let name = name.to_string_lossy();
        if path.is_dir() {
            if !matches!(name.as_ref(), "target" | ".git" | "corpus" | "artifacts") {
                sources(&path, out);
            }
        } else if name.ends_with(".rs") {
            out.push(path);
        }
    }
}

/// The program a call on `line` runs, when it is a literal name.
fn programs(line: &str) -> Vec<String> {
    let code = line.trim_start();
    if code.starts_with("//") {
        return Vec::new();
    }
    let mut found = Vec::new();
    for marker in ["Command::new(", "netns_command(", ".command("] {
        for (at, _) in code.match_indices(marker) {
            let args = &code[at + marker.len()..];
            let args = &args[..args.find(')').unwrap_or(args.len())];
            // The program is the call's last argument; a literal is the text between quotes.
            let last = args.rsplit(',').next().unwrap_or("").trim();
            if let Some(lit) = last.strip_prefix('"').and_then(|l| l.strip_suffix('"'))
                && !lit.is_empty()
                && lit
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
            {
                found.push(lit.to_owned());
            }
        }
    }
    found
}

#[test]
fn every_program_run_is_installed_by_prereqs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    sources(&root, &mut files);
    assert!(files.len() > 50, "the workspace's sources were not found");
    let mut seen = 0;
    let mut unlisted = Vec::new();
    for f in &files {
        // This scan and the module that reports missing programs name made-up ones in tests.
        if f.ends_with("integration/src/tools.rs") || f.ends_with("tests/tools_listed.rs") {
            continue;
        }
        let text = std::fs::read_to_string(f).unwrap();
        for (n, line) in text.lines().enumerate() {
            for prog in programs(line) {
                seen += 1;
                if rocev2_testbed::tools::package(&prog).is_none() {
                    unlisted.push(format!("{}:{}: {prog}", f.display(), n + 1));
                }
            }
        }
    }
    assert!(
        seen > 20,
        "only {seen} program calls found: the scan is broken"
    );
    assert!(
        unlisted.is_empty(),
        "programs run but not in deploy/tools.list (add each with its Debian package):\n{}",
        unlisted.join("\n")
    );
}

#[test]
fn scan_reads_the_call_shapes_in_use() {
    assert_eq!(
        programs(r#"let mut c = Command::new("tshark");"#),
        ["tshark"]
    );
    assert_eq!(
        programs(r#"let mut srv = tb.command("l1h0", "iperf3").expect("command");"#),
        ["iperf3"]
    );
    assert_eq!(
        programs(r#"netns_command(&node.netns, "sysctl").args(x)"#),
        ["sysctl"]
    );
    assert!(programs(r#"tb.command("h0", &rocev2d)"#).is_empty());
    assert!(programs(r#"//! tb.command("h1", "my-server")"#).is_empty());
}
