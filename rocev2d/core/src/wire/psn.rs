//! 24-bit sequence numbers: the packet sequence number (PSN) and message sequence number (MSN).
//!
//! Source: IBA Vol. 1 §9.7.1 (PSN: "a 24-bit value … incremented modulo 2^24") and §9.7.2
//! (the responder's 24-bit MSN, carried in the AETH). The spec judges whether a PSN is ahead of
//! or behind the expected one by splitting the circle into halves: a PSN up to 2^23 − 1 ahead is
//! "newer", anything else is "older" (a duplicate). [`Psn::distance`] and [`Psn::is_newer_than`]
//! implement that rule; nothing here panics or overflows.
//!
//! Deviations: none.

use core::fmt;

const MASK: u32 = 0x00ff_ffff;
const HALF: u32 = 1 << 23;

macro_rules! seq24 {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
        pub struct $name(u32);

        impl $name {
            /// The largest value, 2^24 − 1.
            pub const MAX: $name = $name(MASK);

            /// The low 24 bits of `v`; higher bits are discarded, as on the wire.
            pub const fn new(v: u32) -> Self {
                $name(v & MASK)
            }
            /// The 24-bit value.
            pub const fn value(self) -> u32 {
                self.0
            }
            /// `self + n` modulo 2^24.
            pub const fn add(self, n: u32) -> Self {
                $name(self.0.wrapping_add(n) & MASK)
            }
            /// `self − n` modulo 2^24.
            pub const fn sub(self, n: u32) -> Self {
                $name(self.0.wrapping_sub(n) & MASK)
            }
            /// The next value, wrapping from 2^24 − 1 to 0.
            pub const fn next(self) -> Self {
                self.add(1)
            }
            /// Signed distance from `other` to `self` on the 2^24 circle, in
            /// [−2^23, 2^23 − 1]: positive when `self` is ahead of `other`.
            pub const fn distance(self, other: Self) -> i32 {
                let d = self.0.wrapping_sub(other.0) & MASK;
                if d >= HALF { d as i32 - (1 << 24) } else { d as i32 }
            }
            /// True when `self` lies in the half-window after `other` (IBA §9.7.1).
            pub const fn is_newer_than(self, other: Self) -> bool {
                self.distance(other) > 0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{:#08x}", self.0)
            }
        }
    };
}

seq24! {
    /// Packet sequence number (IBA §9.7.1): 24 bits, compared with the half-window rule.
    Psn
}

seq24! {
    /// Message sequence number (IBA §9.7.2): the responder's count of completed messages,
    /// modulo 2^24, returned in every AETH.
    Msn
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn psn_add_wraps_at_2_pow_24() {
        assert_eq!(Psn::new(0xff_fffe).add(3), Psn::new(1));
        assert_eq!(Psn::MAX.next(), Psn::new(0));
        assert_eq!(Psn::new(0).sub(1), Psn::MAX);
        assert_eq!(Psn::new(0x1ff_ffff), Psn::MAX, "high bits are dropped");
    }

    #[test]
    fn psn_newer_across_wrap() {
        assert!(Psn::new(2).is_newer_than(Psn::new(0xff_fff0)));
        assert!(!Psn::new(0xff_fff0).is_newer_than(Psn::new(2)));
        assert_eq!(Psn::new(2).distance(Psn::new(0xff_fff0)), 18);
    }

    #[test]
    fn psn_half_window_boundary() {
        let base = Psn::new(100);
        // 2^23 − 1 ahead is the newest that still counts as newer; 2^23 ahead is behind.
        assert!(base.add(HALF - 1).is_newer_than(base));
        assert!(!base.add(HALF).is_newer_than(base));
        assert_eq!(base.add(HALF).distance(base), -(HALF as i32));
        assert!(!base.is_newer_than(base));
    }

    proptest! {
        #[test]
        fn psn_distance_inverts_add(a in 0u32..(1 << 24), n in 0u32..HALF) {
            let p = Psn::new(a);
            prop_assert_eq!(p.add(n).distance(p), n as i32);
            prop_assert_eq!(p.distance(p.add(n)), -(n as i32));
            prop_assert_eq!(p.add(n).sub(n), p);
        }
    }
}
