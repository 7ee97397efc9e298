//! The crate's layers import downwards only. At the bottom, the vocabulary every layer shares
//! (errors, handles, the UD and CM-wait types, wake-ups, the in-process engine's state); above
//! it the seam between a device and where its verbs run (`backend.rs`); above that the two
//! backends (`local.rs` in-process, `attached.rs` the daemon), which never import each other;
//! on top the `Device` (`device/`) and what is built on it (`connect.rs`, `pair.rs`). An
//! import from a lower layer to a higher one (or between the backends) would close an import
//! circle; this test names the line that adds one.

use std::path::Path;

/// Each top-level module of the crate and its layer: a file may import only modules of a
/// lower layer, or, in the vocabulary (layer 0), other vocabulary.
const LAYERS: &[(&str, u8)] = &[
    ("error", 0),
    ("mr", 0),
    ("qp", 0),
    ("ud", 0),
    ("cm_wait", 0),
    ("wakeup", 0),
    ("engine", 0),
    ("random", 0),
    ("endpoint", 0),
    ("backend", 1),
    ("local", 2),
    ("attached", 2),
    ("device", 3),
    ("connect", 4),
    ("pair", 4),
];

/// Items the crate root re-exports from modules above the vocabulary, so that
/// `crate::Device` counts as importing `device`. Other root items are vocabulary or come
/// from other crates.
const ROOT_ITEMS: &[(&str, &str)] = &[
    ("Device", "device"),
    ("DeviceConfig", "device"),
    ("Completions", "device"),
    ("MrGuard", "device"),
    ("ConnectConfig", "connect"),
    ("ConnectError", "connect"),
    ("Connection", "connect"),
];

fn layer(module: &str) -> Option<u8> {
    LAYERS.iter().find(|(m, _)| *m == module).map(|(_, l)| *l)
}

/// The crate modules a line of code names: `crate::x…`, and each first segment of a
/// `crate::{x, y}` group closed on the same line (an unclosed one is reported as such).
fn named(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (i, _) in code.match_indices("crate::") {
        let rest = &code[i + "crate::".len()..];
        let firsts: Vec<&str> = if let Some(group) = rest.strip_prefix('{') {
            match group.split_once('}') {
                Some((inner, _)) => inner.split(',').map(str::trim).collect(),
                None => {
                    out.push("an unclosed `crate::{` group".to_string());
                    continue;
                }
            }
        } else {
            vec![rest]
        };
        for path in firsts {
            let end = path
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(path.len());
            let ident = &path[..end];
            let module = ROOT_ITEMS
                .iter()
                .find(|(item, _)| *item == ident)
                .map_or(ident, |(_, m)| m);
            out.push(module.to_string());
        }
    }
    out
}

#[test]
fn every_module_has_a_layer() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    for entry in std::fs::read_dir(&src).expect("the source folder") {
        let path = entry.expect("a folder entry").path();
        let name = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
        if name == "lib" {
            continue;
        }
        assert!(
            layer(name).is_some(),
            "{} has no layer: add it to LAYERS in tests/layering.rs",
            path.display()
        );
    }
}

#[test]
fn lower_layers_never_import_higher_ones() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut checked = 0;
    let mut found = Vec::new();
    for (module, own) in LAYERS {
        let file = src.join(format!("{module}.rs"));
        if !file.exists() {
            continue;
        }
        checked += 1;
        let text = std::fs::read_to_string(&file).expect("a source file");
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for target in named(code) {
                let ok = target == *module
                    || match layer(&target) {
                        Some(0) => true,
                        Some(l) => l < *own,
                        // Root items from other crates, `crate::Error` and the like.
                        None => !target.contains(' '),
                    };
                if !ok {
                    found.push(format!(
                        "{}:{}: {} (imports {target})",
                        file.display(),
                        n + 1,
                        line.trim()
                    ));
                }
            }
        }
    }
    assert!(checked >= 12, "only {checked} modules found");
    assert!(
        found.is_empty(),
        "a lower layer imports a higher one:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_rule_sees_upward_imports() {
    assert_eq!(named("use crate::device::Device;"), ["device"]);
    assert_eq!(named("let d: crate::Device;"), ["device"]);
    assert_eq!(
        named("use crate::{error::Error, local::Local};"),
        ["error", "local"]
    );
    assert_eq!(named("use crate::{"), ["an unclosed `crate::{` group"]);
    assert_eq!(named("crate::random_psn()"), ["random_psn"]);
}
