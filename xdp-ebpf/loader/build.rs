//! Compiles `rocev2-ebpf`'s programs for the BPF target (nightly, `-Z build-std=core`,
//! `bpf-linker`) into `OUT_DIR`, where `include_bytes_aligned!` picks them up.
//! Prerequisites come from `deploy/prereqs.sh`.

fn main() -> anyhow::Result<()> {
    let ebpf_dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../ebpf");
    println!("cargo:rerun-if-changed={ebpf_dir}/../common/src");
    aya_build::build_ebpf(
        [aya_build::Package {
            name: "rocev2-ebpf",
            root_dir: ebpf_dir,
            ..Default::default()
        }],
        aya_build::Toolchain::Nightly,
    )
}
