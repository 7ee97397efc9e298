//! Dart's sender (seed 000 §III): DASR's cap on top of DCQCN.
//!
//! Source: seed 000 §III-A/§III-C. The receiver counts its active unique senders N and
//! piggybacks N on every ACK ([`super::dasr`]); the sender caps its rate at line/N and keeps
//! DCQCN ([`super::dcqcn`]) for congestion elsewhere than at the receiver, so its rate is
//! min(DCQCN, line/N).
//!
//! Deviations: none beyond those of [`super::dasr`] and [`super::dcqcn`].

use super::{AckInfo, CcSnapshot, CnpInfo, CongestionController, DasrSender, Dcqcn};
use crate::time::{Instant, Rate};

/// Dart's sender (seed 000 §III): DCQCN for non-receiver congestion, capped at line/N by DASR.
#[derive(Debug, Clone, PartialEq)]
pub struct Dart {
    /// The DCQCN fall-back.
    pub dcqcn: Dcqcn,
    /// The DASR cap.
    pub dasr: DasrSender,
}

impl CongestionController for Dart {
    fn rate(&self) -> Rate {
        self.dcqcn.rate().min(self.dasr.cap())
    }
    fn on_packet_sent(&mut self, _now: Instant, bytes: u64) {
        self.dcqcn.on_sent(bytes);
    }
    fn on_ack(&mut self, _now: Instant, ack: &AckInfo) {
        if let Some(n) = ack.dasr_n {
            self.dasr.on_n(n);
        }
    }
    fn on_cnp(&mut self, now: Instant, _cnp: &CnpInfo) {
        self.dcqcn.on_cnp(now);
    }
    fn poll_timeout(&self) -> Option<Instant> {
        self.dcqcn.poll_timeout()
    }
    fn handle_timeout(&mut self, now: Instant) {
        self.dcqcn.handle_timeout(now);
    }
    fn snapshot(&self, now: Instant) -> CcSnapshot {
        CcSnapshot {
            n: Some(self.dasr.n),
            rate: self.rate(),
            ..self.dcqcn.snapshot(now)
        }
    }
}
