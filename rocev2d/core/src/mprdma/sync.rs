//! The synchronise mechanism: in-order memory update for the operations that ask for it.
//!
//! Source: seed 001 §3.4: "a synchronise operation updates the memory only after all previous
//! operations are completed". The sender delays it by
//!
//! ```text
//! Δt = α · Δ / R_s = α · Δ / (cwnd / RTT)
//! ```
//! and "the receiver may drop the synchronise message and send a NACK, which allows the sender
//! to retransmit the message later" when it still arrives early.
//!
//! Deviations: the paper gives no value for α; [`super::MpConfig::sync_alpha`] defaults to 2.

use crate::time::Duration;
use crate::wire::Psn;

/// Δt = α · Δ / (cwnd / RTT) (seed 001 §3.4), the time a synchronise message waits after the
/// message before it was sent.
pub fn delay(alpha: f64, delta: u16, cwnd: f64, rtt: Duration) -> Duration {
    let dt = alpha * delta as f64 * rtt.as_nanos() as f64 / cwnd.max(1.0);
    Duration::from_nanos(dt as u64)
}

/// The receiver's rule (§3.4): a packet of a synchronise message whose first PSN is
/// `msg_first` may touch memory only when every earlier PSN has arrived, i.e. `rcv_nxt` has
/// reached `msg_first`.
pub fn may_apply(msg_first: Psn, rcv_nxt: Psn) -> bool {
    msg_first.distance(rcv_nxt) <= 0
}

#[cfg(test)]
mod tests {
    use super::*;

    // §3.4: α = 2, Δ = 32, cwnd = 64 packets, RTT = 12 µs: R_s = 64 / 12 µs, Δt = 2·32·12/64 µs.
    #[test]
    fn sync_s3_4_delay() {
        let d = delay(2.0, 32, 64.0, Duration::from_nanos(12_000));
        assert_eq!(d, Duration::from_nanos(12_000));
    }

    #[test]
    fn sync_s3_4_only_after_all_earlier() {
        assert!(may_apply(Psn::new(10), Psn::new(10)));
        assert!(may_apply(Psn::new(10), Psn::new(12)));
        assert!(!may_apply(Psn::new(10), Psn::new(9)));
    }
}
