//! Connection setup for rocev2 queue pairs.
//!
//! Two RC QPs can only talk once each knows the other's QP number, first PSN and address. This
//! crate provides the ways real tools exchange them:
//!
//! - [`oob`]: the TCP exchange of rdma-core's `ibv_rc_pingpong` (port 18515, one
//!   `LID:QPN:PSN:GID` text message each way), so rocev2's `rc_pingpong` pairs with
//!   `ibv_rc_pingpong` on a Linux soft-RoCE host or a RoCE NIC;
//! - [`perftest`]: the TCP exchange of linux-rdma/perftest (versions, MTU, the key message
//!   with QP, buffer and GID, bandwidth reports), so rocev2's `ib_*_bw` / `ib_*_lat` pair with
//!   perftest's.
//!
//! rocev2 programs pair with each other through `rocev2::connect` instead (one exchange of
//! `rocev2::Endpoint`s, remote regions included).
//!
//! NOT IMPLEMENTED (issue 16): the connection manager on QP1 (its state machine over the CM
//! MADs whose wire formats are in `rocev2_core::wire::mad`, as in
//! `../shared/captures/rping_cm.pcap`).

pub mod oob;
pub mod perftest;
