//! `rocev2d run --config` on arbitrary text: `Config::parse` never panics, and a configuration
//! it accepts gives congestion-control settings the engine can use: the QP's controller builds
//! and starts at or below the configured line rate, and the receiver side builds.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rocev2d::config::Config;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(c) = Config::parse(text) else {
        return;
    };
    if let Some(cc) = c.cc.qp_config() {
        let ctl = cc.build();
        let rate = ctl.as_dyn().rate();
        assert!(rate <= cc.line_rate(), "{cc:?} starts at {rate:?}");
    }
    let _ = c.cc.receiver();
});
