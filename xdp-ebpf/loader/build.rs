//! Compiles `rocev2-ebpf`'s programs for the BPF target (nightly, `-Z build-std=core`,
//! `bpf-linker`) into `OUT_DIR`, where `include_bytes_aligned!` picks them up.
//! Prerequisites come from `deploy/prereqs.sh`.

use std::path::{Path, PathBuf};

const EBPF: &str = "rocev2-ebpf";

fn main() -> anyhow::Result<()> {
    let ebpf_dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../ebpf");
    println!("cargo:rerun-if-changed={ebpf_dir}/../common/src");
    share_ebpf_target_dir()?;
    aya_build::build_ebpf(
        [aya_build::Package {
            name: EBPF,
            root_dir: ebpf_dir,
            ..Default::default()
        }],
        aya_build::Toolchain::Nightly,
    )
}

/// aya-build gives its inner cargo a target dir inside `OUT_DIR`, and every build of this crate
/// that differs in flags (clippy, test, doc, a plain build, the fuzz crates, the public API
/// check) has an `OUT_DIR` of its own: each compiled the programs and `core` from scratch (~55 s
/// on two cores, 285 MB). The programs are the same in all of them (release, flags aya-build
/// sets, no features), so that path becomes a link to one target dir, `bpf` in the workspace's
/// target dir (`CARGO_TARGET_DIR` when it is absolute, else `target/`), where the inner cargo
/// finds them fresh; its lock serializes concurrent builds. Should a later aya-build move its
/// dir, the link goes unused and each build is whole again.
fn share_ebpf_target_dir() -> anyhow::Result<()> {
    println!("cargo:rerun-if-env-changed=CARGO_TARGET_DIR");
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    // A relative CARGO_TARGET_DIR is relative to where cargo started, which is not known here.
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .filter(|d| d.is_absolute())
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    let shared = target.join("bpf");
    let link = out_dir.join("aya-build").join("target").join(EBPF);
    if std::fs::read_link(&link).is_ok_and(|l| l == shared) {
        return Ok(());
    }
    std::fs::create_dir_all(&shared)?;
    std::fs::create_dir_all(link.parent().expect("a parent"))?;
    remove_any(&link)?;
    std::os::unix::fs::symlink(&shared, &link)?;
    Ok(())
}

/// Removes whatever is at `path` (an earlier build's own target dir, a stale link).
fn remove_any(path: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}
