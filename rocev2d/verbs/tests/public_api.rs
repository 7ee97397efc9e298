//! The public API of `rocev2`, as `cargo public-api` lists it, equals the checked-in listing
//! `rocev2d/verbs/public-api.txt`: any change of the API shows as a diff in review.
//!
//! The listing covers the features `tokio` and `serde` (not `xdp`, which adds no item of its
//! own here and would build the eBPF programs) and omits blanket impls (`-s`); auto traits
//! (`Send`, `Sync`, …) stay, since losing one breaks users. `cargo public-api` needs the nightly
//! toolchain's rustdoc JSON; deploy/prereqs.sh installs the version pinned there, which reads
//! that nightly's format. It builds into `target/public-api`, away from the `cargo test` that
//! runs this (which holds the lock of its own target directory).
//!
//! Missing tool: a loud skip, or a failure under `ROCEV2_REQUIRE_TOOLS=1` (CI).

use std::path::Path;
use std::process::Command;

/// The arguments that produce the listing; the update command in the failure message is
/// `cargo` followed by these.
const ARGS: [&str; 7] = [
    "public-api",
    "-p",
    "rocev2",
    "--no-default-features",
    "--features",
    "tokio,serde",
    "-s",
];

#[test]
fn public_api_matches_the_checked_in_listing() {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let listing = here.join("public-api.txt");
    let update = format!(
        "cargo {} > rocev2d/verbs/public-api.txt   (from the repository root)",
        ARGS.join(" ")
    );
    let exe = std::env::current_exe().expect("test binary");
    // The test binary is TARGET/debug/deps/public_api-HASH.
    let target = exe.ancestors().nth(3).expect("target directory");
    let out = Command::new(env!("CARGO"))
        .args(ARGS)
        .arg("--target-dir")
        .arg(target.join("public-api"))
        .current_dir(here)
        .output();
    let out = match out {
        Ok(o) if o.status.success() => o,
        other => {
            let why = match other {
                Ok(o) => String::from_utf8_lossy(&o.stderr).into_owned(),
                Err(e) => e.to_string(),
            };
            let msg = format!(
                "cargo public-api could not list the API (install it with bash deploy/prereqs.sh): {why}"
            );
            if std::env::var_os("ROCEV2_REQUIRE_TOOLS").is_some_and(|v| v == "1") {
                panic!("{msg}");
            }
            use std::io::Write as _;
            let _ = writeln!(
                std::io::stderr(),
                "\nSKIPPED (needs cargo-public-api): public_api_matches_the_checked_in_listing: {msg}"
            );
            return;
        }
    };
    let now = String::from_utf8(out.stdout).expect("UTF-8 listing");
    let was = std::fs::read_to_string(&listing).unwrap_or_default();
    if now == was {
        return;
    }
    let (now_lines, was_lines): (Vec<&str>, Vec<&str>) =
        (now.lines().collect(), was.lines().collect());
    let added: Vec<&str> = now_lines
        .iter()
        .filter(|l| !was_lines.contains(l))
        .copied()
        .collect();
    let removed: Vec<&str> = was_lines
        .iter()
        .filter(|l| !now_lines.contains(l))
        .copied()
        .collect();
    let show = |lines: Vec<&str>, sign: &str| {
        if lines.is_empty() {
            "(none)".to_string()
        } else {
            lines
                .iter()
                .map(|l| format!("{sign} {l}"))
                .collect::<Vec<_>>()
                .join("\n")
        }
    };
    panic!(
        "rocev2's public API changed. If that is intended, update the listing and review its diff:\n    {update}\nadded:\n{}\nremoved:\n{}",
        show(added, "+"),
        show(removed, "-")
    );
}
