//! The network model's integration tests, one binary (see Cargo.toml).

mod cc_validation;
mod common;
mod conservation;
mod determinism;
mod dvl;
mod ecmp;
mod experiments_jobs;
mod host_rates;
mod iofd;
mod line_rate;
mod lookahead;
mod multipath;
mod pfc;
mod rc_end_to_end;
mod red_curve;
mod scale_experiments;
mod shipped_scenarios;
