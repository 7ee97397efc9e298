//! Per-QP counters, the numbers `rocev2d stats` and the model's reports print.
//!
//! Source: the names follow rdma-core's `rxe` hardware counters and IBA §9.7 events
//! (retransmissions, NAKs, duplicates, out-of-sequence requests); CNP counts from RoCEv2
//! Annex A17.9.
//!
//! Deviations: none.

/// Per-QP counters, with the names `rocev2d stats` prints.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QpCounters {
    /// Packets sent (all kinds).
    pub tx_packets: u64,
    /// Packets accepted by the QP.
    pub rx_packets: u64,
    /// Request packets sent again after a NAK, implied NAK or timeout.
    pub retransmits: u64,
    /// Retransmission timer expiries.
    pub timeouts: u64,
    /// NAKs sent (sequence, RNR and errors).
    pub naks_sent: u64,
    /// NAKs received.
    pub naks_received: u64,
    /// RNR NAKs received.
    pub rnr_naks_received: u64,
    /// Duplicate requests answered.
    pub duplicate_requests: u64,
    /// Out-of-sequence requests dropped while a NAK for the gap was outstanding.
    pub out_of_sequence: u64,
    /// Responses that matched no outstanding request (stale duplicates included).
    pub unexpected_responses: u64,
    /// CE-marked data packets received.
    pub ce_received: u64,
    /// CNPs sent to the peer.
    pub cnps_sent: u64,
    /// CNPs received from the peer.
    pub cnps_received: u64,
}
