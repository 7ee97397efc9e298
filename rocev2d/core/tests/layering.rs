//! The core's layers import downwards only: the endpoint drives QPs, the CM, regions, CQs,
//! congestion control and the wire, and none of those imports the endpoint (the vocabulary
//! they share with it, drop reasons, P_Key matching and QPN blocks, has modules of its own).
//! A back-reference would close an import circle; this test names the line that adds one.

use std::path::Path;

/// Every `.rs` file under `dir`.
fn sources(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("a source folder") {
        let path = entry.expect("a folder entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn lower_layers_never_import_the_endpoint() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    for lower in ["qp", "cm", "cc", "mprdma", "mr", "wire"] {
        sources(&src.join(lower), &mut files);
    }
    for single in [
        "qp.rs",
        "cm.rs",
        "mr.rs",
        "cq.rs",
        "drop_reason.rs",
        "qpn_block.rs",
    ] {
        let path = src.join(single);
        if path.exists() {
            files.push(path);
        }
    }
    assert!(files.len() > 40, "only {} files found", files.len());
    let mut found = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("a source file");
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            if code.contains("crate::endpoint") || code.contains("crate::Endpoint") {
                found.push(format!("{}:{}: {}", file.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "lower layers import the endpoint:\n{}",
        found.join("\n")
    );
}
