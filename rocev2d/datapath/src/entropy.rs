//! The one place in rocev2 that asks the OS for randomness: seeds for the core's key generator
//! (R_Keys and L_Keys must be unpredictable) and initial PSNs. The core itself holds no source
//! of randomness (STYLE.md §4.4); its callers pass what this returns.
//!
//! Source: urandom(4): once the pool is initialised, reads of up to 256 bytes never block and
//! are never short.
//!
//! Deviations: none.

use std::io::{self, Read};

/// 64 random bits from `/dev/urandom`.
///
/// # Errors
/// The device cannot be opened or read (a chroot or sandbox without `/dev`).
pub fn os_seed() -> io::Result<u64> {
    let mut b = [0u8; 8];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut b)?;
    Ok(u64::from_ne_bytes(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn os_seed_differs_between_calls() {
        // Two equal 64-bit draws happen with probability 2^-64.
        assert_ne!(os_seed().unwrap(), os_seed().unwrap());
    }
}
