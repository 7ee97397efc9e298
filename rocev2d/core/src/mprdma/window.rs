//! MP-RDMA's one congestion window for all virtual paths, and the available window that
//! multipath ACK clocking spends.
//!
//! Source: seed 001 §3.2 ("MP-RDMA uses one congestion window for all paths"; the per-ACK rule;
//! awnd with NewReno-style `inflate`), §3.3 (an out-of-order ACK takes one packet off the
//! window) and §3.4 ("use it or lose it", "restart from IW after idle").
//!
//! Deviations:
//! * the window never drops below one packet (the paper states no floor; with none, a run of
//!   ECN ACKs could stop the connection for good, since only ACKs open the window);
//! * `inflate` is kept non-negative, and each retransmission takes one from it: a retransmitted
//!   packet occupies the network like a new one, but does not move `snd_nxt`, so without this
//!   it would be sent for free (the paper does not say how retransmissions count).

/// The congestion window state (seed 001 §3.2). Units are packets.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Window {
    /// cwnd: the congestion window, in packets, shared by all VPs (§3.2).
    cwnd: f64,
    /// inflate: ACKs received that have not yet moved `snd_una` (§3.2, as TCP NewReno).
    inflate: u32,
    /// IW: the initial window, and the window after a restart (§3.2, §3.4).
    iw: f64,
}

/// The smallest window (one packet, see the module's deviations).
pub const MIN_CWND: f64 = 1.0;

impl Window {
    /// A window of `iw` packets.
    pub fn new(iw: u32) -> Window {
        let iw = (iw as f64).max(MIN_CWND);
        Window {
            cwnd: iw,
            inflate: 0,
            iw,
        }
    }

    /// cwnd, packets.
    pub fn cwnd(&self) -> f64 {
        self.cwnd
    }

    /// inflate, packets.
    pub fn inflate(&self) -> u32 {
        self.inflate
    }

    /// An ACK arrived (seed 001 §3.2):
    ///
    /// ```text
    /// cwnd ← cwnd + 1/cwnd   if ECN = 0
    /// cwnd ← cwnd − 1/2      if ECN = 1
    /// ```
    /// and "inflate … increases by one for each received ACK".
    pub fn on_ack(&mut self, ece: bool) {
        if ece {
            self.cwnd -= 0.5;
        } else {
            self.cwnd += 1.0 / self.cwnd;
        }
        self.cwnd = self.cwnd.max(MIN_CWND);
        self.inflate = self.inflate.saturating_add(1);
    }

    /// A NACK arrived: the packet it names left the network without an ACK, so it frees its
    /// place as an ACK would (inflate + 1), with no change to cwnd.
    pub fn on_ack_of_nothing(&mut self) {
        self.inflate = self.inflate.saturating_add(1);
    }

    /// The cumulative ACK moved `snd_una` forward by `advanced` packets (seed 001 §3.2: "once
    /// an ACK moves snd_una, inflate is decreased by (ack_aack − snd_una)").
    pub fn on_una_advanced(&mut self, advanced: u32) {
        self.inflate = self.inflate.saturating_sub(advanced);
    }

    /// A retransmission left: it takes the window a new packet would (module deviations).
    pub fn on_retransmit_sent(&mut self) {
        self.inflate = self.inflate.saturating_sub(1);
    }

    /// Takes `packets` off cwnd: an out-of-order ACK (§3.3: "the sender reduces cwnd by one")
    /// or an ACK with nothing to clock out ("use it or lose it", §3.4).
    pub fn reduce(&mut self, packets: f64) {
        self.cwnd = (self.cwnd - packets).max(MIN_CWND);
    }

    /// awnd = cwnd + inflate − (snd_nxt − snd_una) (seed 001 §3.2), where `in_flight` is
    /// `snd_nxt − snd_una`. May be negative.
    pub fn awnd(&self, in_flight: u32) -> f64 {
        self.cwnd + self.inflate as f64 - in_flight as f64
    }

    /// Restart after idle (seed 001 §3.4: "MP-RDMA will restart from IW").
    pub fn restart(&mut self) {
        self.cwnd = self.iw;
        self.inflate = 0;
    }

    /// The retransmission timer fired: everything in flight is taken as lost, so the whole
    /// window is available again, at most IW (§3.4: "RTO … retransmit all unacknowledged
    /// packets"; the size after an RTO is our choice, as TCP's restart).
    pub fn on_timeout(&mut self, in_flight: u32) {
        self.cwnd = self.cwnd.min(self.iw);
        self.inflate = in_flight;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // seed 001 §3.2: with cwnd = 4, a clean ACK adds 1/4, an ECN ACK takes 1/2.
    #[test]
    fn window_s3_2_per_ack_rule() {
        let mut w = Window::new(4);
        w.on_ack(false);
        assert_eq!(w.cwnd(), 4.25);
        w.on_ack(true);
        assert_eq!(w.cwnd(), 3.75);
        assert_eq!(w.inflate(), 2);
    }

    // §3.2: awnd = cwnd + inflate − (snd_nxt − snd_una); the cumulative ACK moving by 3 takes 3
    // from inflate. cwnd 10, 10 in flight, 4 ACKs (SACKs above a hole): awnd = 10.4 + 4 − 10.
    #[test]
    fn window_s3_2_awnd_and_inflate() {
        let mut w = Window::new(10);
        assert_eq!(w.awnd(10), 0.0);
        for _ in 0..4 {
            w.on_ack(false);
        }
        assert!((w.awnd(10) - (w.cwnd() + 4.0 - 10.0)).abs() < 1e-12);
        assert!(w.awnd(10) > 4.0);
        w.on_una_advanced(3);
        assert_eq!(w.inflate(), 1);
        w.on_una_advanced(5);
        assert_eq!(w.inflate(), 0, "never negative");
    }

    #[test]
    fn window_never_below_one_packet() {
        let mut w = Window::new(2);
        for _ in 0..10 {
            w.on_ack(true);
        }
        assert_eq!(w.cwnd(), MIN_CWND);
        w.reduce(5.0);
        assert_eq!(w.cwnd(), MIN_CWND);
    }

    /// The operation-sequence model test of every controller (STYLE §4.5): any sequence of
    /// window events keeps cwnd finite and at least one packet, and awnd consistent with it.
    #[derive(Debug, Clone)]
    enum Op {
        Ack(bool),
        AckOfNothing,
        UnaAdvanced(u32),
        Retransmit,
        Reduce(u8),
        Restart,
        Timeout(u32),
    }

    fn op() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        prop_oneof![
            any::<bool>().prop_map(Op::Ack),
            Just(Op::AckOfNothing),
            (0u32..200).prop_map(Op::UnaAdvanced),
            Just(Op::Retransmit),
            any::<u8>().prop_map(Op::Reduce),
            Just(Op::Restart),
            (0u32..1000).prop_map(Op::Timeout),
        ]
    }

    proptest::proptest! {
        #[test]
        fn window_invariants_hold_for_any_event_sequence(
            iw in 0u32..512,
            ops in proptest::collection::vec(op(), 0..400),
        ) {
            let mut w = Window::new(iw);
            for o in ops {
                match o {
                    Op::Ack(ece) => w.on_ack(ece),
                    Op::AckOfNothing => w.on_ack_of_nothing(),
                    Op::UnaAdvanced(n) => w.on_una_advanced(n),
                    Op::Retransmit => w.on_retransmit_sent(),
                    Op::Reduce(n) => w.reduce(n as f64),
                    Op::Restart => w.restart(),
                    Op::Timeout(n) => w.on_timeout(n),
                }
                proptest::prop_assert!(w.cwnd().is_finite() && w.cwnd() >= MIN_CWND);
                proptest::prop_assert!(w.cwnd() <= (iw.max(1) as f64) + 400.0);
                let awnd = w.awnd(7);
                proptest::prop_assert_eq!(awnd, w.cwnd() + w.inflate() as f64 - 7.0);
            }
        }
    }

    #[test]
    fn window_restart_returns_to_iw() {
        let mut w = Window::new(16);
        for _ in 0..100 {
            w.on_ack(false);
        }
        assert!(w.cwnd() > 16.0);
        w.restart();
        assert_eq!((w.cwnd(), w.inflate()), (16.0, 0));
    }
}
