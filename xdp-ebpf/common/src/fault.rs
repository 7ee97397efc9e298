//! Seeded fault draws for the switch program's fault injection: loss, bit corruption,
//! duplication (and blackhole, which needs no draw).
//!
//! Source: the faults smoltcp's `phy::FaultInjector` and our `testing::Link` inject, applied at
//! a switch port so that real endpoints see them. Each draw is a pure function of
//! `(seed, stream, sequence, kind)` through SplitMix64 (Steele, Lea, Flood, "Fast splittable
//! pseudorandom number generators", OOPSLA 2014), so a run is reproducible: the eBPF program
//! uses the CPU as `stream` and that CPU's packet count as `sequence`, so the same seed and the
//! same per-CPU packet order give the same faults. The model can use its own streams.
//!
//! Probabilities are Q32: `p` out of 2^32 (`u32::MAX` is 1 − 2^-32, close enough to "always";
//! blackhole mode is the "always"). Q16, as RED uses, could not express the 10^-4–10^-6 loss
//! rates loss-recovery experiments need.
//!
//! Deviations: none.

/// The probability 1.0 as Q32 would be 2^32; the largest expressible is this (1 − 2^-32).
pub const PROB_MAX: u32 = u32::MAX;

/// SplitMix64's finaliser: a bijective mix of all 64 bits.
pub const fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Which fault a draw decides; each kind draws independently of the others.
#[repr(u64)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Drop the packet.
    Loss = 1,
    /// Flip one bit.
    Corrupt = 2,
    /// Which bit to flip.
    CorruptBit = 3,
    /// Send the packet twice.
    Duplicate = 4,
}

/// A uniform 32-bit draw for `kind` of packet `sequence` on `stream` under `seed`.
pub const fn draw(seed: u64, stream: u32, sequence: u64, kind: Kind) -> u32 {
    let x = splitmix64(seed ^ ((stream as u64) << 48) ^ sequence);
    (splitmix64(x ^ (kind as u64)) >> 32) as u32
}

/// True with probability `p` (Q32) for a uniform `draw`.
pub const fn hits(p: u32, draw: u32) -> bool {
    draw < p
}

/// A probability in `[0, 1]`, given as parts per billion, as Q32 (for configuration; hosts
/// parse decimal fractions into parts per billion without floats reaching this crate).
pub const fn from_ppb(ppb: u64) -> u32 {
    if ppb >= 1_000_000_000 {
        PROB_MAX
    } else {
        // ppb < 10^9 < 2^30, so the product is below 2^62.
        ((ppb << 32) / 1_000_000_000) as u32
    }
}

/// Fault-injection settings of one port.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultConfig {
    /// Loss probability, Q32.
    pub loss: u32,
    /// Probability of flipping one bit, Q32.
    pub corrupt: u32,
    /// Duplication probability, Q32.
    pub duplicate: u32,
    /// Drop every affected packet.
    pub blackhole: bool,
    /// The seed of all draws.
    pub seed: u64,
}

/// What fault injection does to one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Nothing.
    None,
    /// Dropped by blackhole mode.
    Blackhole,
    /// Dropped by random loss.
    Loss,
    /// Flip bit `bit` (counted from the first byte of the corruptible range, MSB first) of a
    /// range of `range_bits` bits; possibly also duplicated.
    Corrupt {
        /// Bit index below the range's length.
        bit: u32,
        /// Also send a copy (of the corrupted packet).
        duplicate: bool,
    },
    /// Send the packet twice.
    Duplicate,
}

impl FaultConfig {
    /// The faults for packet `sequence` on `stream`, whose corruptible range is `range_bits`
    /// long (0: cannot be corrupted). Loss wins over corruption and duplication; a corrupted
    /// packet may also be duplicated.
    pub const fn decide(&self, stream: u32, sequence: u64, range_bits: u32) -> Fault {
        if self.blackhole {
            return Fault::Blackhole;
        }
        if self.loss != 0 && hits(self.loss, draw(self.seed, stream, sequence, Kind::Loss)) {
            return Fault::Loss;
        }
        let duplicate = self.duplicate != 0
            && hits(
                self.duplicate,
                draw(self.seed, stream, sequence, Kind::Duplicate),
            );
        if range_bits != 0
            && self.corrupt != 0
            && hits(
                self.corrupt,
                draw(self.seed, stream, sequence, Kind::Corrupt),
            )
        {
            let bit = draw(self.seed, stream, sequence, Kind::CorruptBit) % range_bits;
            return Fault::Corrupt { bit, duplicate };
        }
        if duplicate {
            Fault::Duplicate
        } else {
            Fault::None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rate(cfg: &FaultConfig, n: u64, want: impl Fn(Fault) -> bool) -> f64 {
        (0..n).filter(|&s| want(cfg.decide(3, s, 8000))).count() as f64 / n as f64
    }

    #[test]
    fn fault_rates_match_probabilities() {
        let cfg = FaultConfig {
            loss: from_ppb(10_000_000),      // 1%
            corrupt: from_ppb(50_000_000),   // 5%
            duplicate: from_ppb(20_000_000), // 2%
            blackhole: false,
            seed: 42,
        };
        let n = 1_000_000;
        let loss = rate(&cfg, n, |f| f == Fault::Loss);
        // Corruption and duplication are drawn only for packets not lost (99%).
        let corrupt = rate(&cfg, n, |f| matches!(f, Fault::Corrupt { .. }));
        let dup = rate(&cfg, n, |f| {
            matches!(
                f,
                Fault::Duplicate
                    | Fault::Corrupt {
                        duplicate: true,
                        ..
                    }
            )
        });
        // Binomial standard deviations at n = 10^6: 1e-4, 2.2e-4, 1.4e-4; allow 5σ.
        assert!((loss - 0.01).abs() < 5e-4, "{loss}");
        assert!((corrupt - 0.99 * 0.05).abs() < 1.1e-3, "{corrupt}");
        assert!((dup - 0.99 * 0.02).abs() < 7e-4, "{dup}");
    }

    #[test]
    fn fault_same_seed_same_faults_other_seed_differs() {
        let a = FaultConfig {
            loss: from_ppb(100_000_000),
            seed: 7,
            ..FaultConfig::default()
        };
        let b = FaultConfig { seed: 8, ..a };
        let run =
            |c: &FaultConfig| -> [Fault; 64] { core::array::from_fn(|s| c.decide(0, s as u64, 0)) };
        assert_eq!(run(&a), run(&a));
        assert_ne!(run(&a), run(&b));
        // Streams are independent too.
        let stream1: [Fault; 64] = core::array::from_fn(|s| a.decide(1, s as u64, 0));
        assert_ne!(run(&a), stream1);
    }

    #[test]
    fn fault_corrupt_bit_within_range_and_spread() {
        let cfg = FaultConfig {
            corrupt: PROB_MAX,
            ..FaultConfig::default()
        };
        let mut seen = [0u32; 16];
        for s in 0..16_000 {
            match cfg.decide(0, s, 16) {
                Fault::Corrupt {
                    bit,
                    duplicate: false,
                } => seen[bit as usize] += 1,
                other => panic!("{other:?}"),
            }
        }
        // Every bit position about 1000 times.
        assert!(seen.iter().all(|&n| (850..1150).contains(&n)), "{seen:?}");
        // No range, no corruption.
        assert_eq!(cfg.decide(0, 1, 0), Fault::None);
    }

    #[test]
    fn fault_blackhole_and_zero_config() {
        let off = FaultConfig::default();
        assert!((0..10_000).all(|s| off.decide(0, s, 100) == Fault::None));
        let bh = FaultConfig {
            blackhole: true,
            ..off
        };
        assert_eq!(bh.decide(0, 0, 100), Fault::Blackhole);
    }

    #[test]
    fn fault_ppb_conversion() {
        assert_eq!(from_ppb(0), 0);
        assert_eq!(from_ppb(500_000_000), 1 << 31);
        assert_eq!(from_ppb(2_000_000_000), PROB_MAX);
        // 10^-6 → 4294.97 → 4294.
        assert_eq!(from_ppb(1_000), 4294);
    }
}
