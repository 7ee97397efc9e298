//! QPN blocks: how the engine shards of one interface split the 2^24 QP numbers, so that a
//! frame's destination QPN names the shard that owns it. Shared by the endpoint, which hands
//! out QPNs of its block, and the CM, which tags its Communication IDs with the block.
//!
//! Source: none (our sharding; docs/datapath.md, "Several queues").
//!
//! Deviations: none.

/// Number of QPN blocks ([`crate::Endpoint::with_qpn_block`]): the 2^24 QPNs split by their top six
/// bits, one block per receive queue the AF_XDP steering program serves (64).
pub const QPN_BLOCKS: u32 = 64;
/// log2 of the QPNs in one block: 2^24 / [`QPN_BLOCKS`] = 2^18; a QPN's block is
/// `qpn >> QPN_BLOCK_SHIFT`.
pub const QPN_BLOCK_SHIFT: u32 = 18;
