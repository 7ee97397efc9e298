//! Random numbers from the OS: initial PSNs and seeds, for the device and both backends.

/// 64 random bits from the OS ([`rocev2_datapath::entropy::os_seed`]), or from std's
/// per-process hash keys if that cannot be read.
pub fn random_u64() -> u64 {
    rocev2_datapath::entropy::os_seed().unwrap_or_else(|_| {
        use std::hash::{BuildHasher, RandomState};
        RandomState::new().hash_one(std::process::id())
    })
}

/// A random 24-bit initial PSN, as `ibv_rc_pingpong` draws with `lrand48() & 0xffffff`.
pub fn random_psn() -> u32 {
    (random_u64() & 0xff_ffff) as u32
}
