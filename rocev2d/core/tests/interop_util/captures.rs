//! Reading the rdma_rxe captures in `../shared/captures/` (see that folder's README), for the
//! capture tests (`interop_captures.rs`, `interop_cm_mads.rs`).

use pcap_file::pcap::PcapReader;
use std::fs::File;
use std::path::PathBuf;

fn captures_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/captures")
}

/// Every frame of a capture, whole (Ethernet up), in order; fails on a truncated record.
pub fn frames(name: &str) -> Vec<Vec<u8>> {
    let path = captures_dir().join(name);
    let file = File::open(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (is ../shared beside the repo?)", path.display()));
    let mut reader = PcapReader::new(file).expect("pcap header");
    let mut out = Vec::new();
    while let Some(pkt) = reader.next_packet() {
        let pkt = pkt.expect("pcap record");
        assert_eq!(
            pkt.orig_len as usize,
            pkt.data.len(),
            "{name}: capture truncated a frame"
        );
        out.push(pkt.data.into_owned());
    }
    assert!(!out.is_empty(), "{name} holds no frames");
    out
}
