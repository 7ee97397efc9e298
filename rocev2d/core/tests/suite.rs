//! The core's integration tests, one binary (see Cargo.toml).

mod cc_engine;
mod cm_engine;
mod interop_captures;
mod interop_cm_mads;
mod interop_scapy;
mod interop_tshark;
mod interop_util;
mod layering;
mod mp_engine;
mod rc_errors;
mod rc_faults;
mod rc_verbs;
mod soak;
mod srq;
mod ud_verbs;
mod wire_props;
