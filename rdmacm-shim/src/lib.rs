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
//! - [`cm`]: rdma_cm's connect/listen over the IB CM on QP1 (CM MADs, the CMA header), so
//!   rocev2 programs connect with an address and a port, as librdmacm programs do;
//! - [`ud`]: rdma_cm's `RDMA_PS_UDP` resolution (SIDR), so a UD program finds a peer's QPN and
//!   Q_Key from its address and port, as `udaddy` does.
//!
//! rocev2 programs can also pair through `rocev2::connect` (one TCP exchange of
//! `rocev2::Endpoint`s, remote regions included).

pub mod cm;
pub mod oob;
pub mod perftest;
pub mod ud;
