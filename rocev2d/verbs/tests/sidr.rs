//! Service ID Resolution (SIDR) between the two ends of a `Device::pair` (no root): the
//! scenario of `scenarios/sidr.rs`, which the daemon's tests run through two daemons.

#[path = "scenarios/sidr.rs"]
mod sidr;
use rocev2::Device;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(10);

#[test]
fn sidr_resolves_a_ud_service_and_a_datagram_reaches_it() {
    let (a, b) = Device::pair().unwrap();
    let (a_ip, b_ip) = (a.interface().addrs[0].ip, b.interface().addrs[0].ip);
    sidr::resolve_and_send((&a, a_ip), (&b, b_ip), 7174, WAIT, |_, _| {});
}

#[test]
fn sidr_for_a_service_nobody_listens_on_is_unsupported() {
    let (a, b) = Device::pair().unwrap();
    b.enable_cm().unwrap();
    let (a_ip, b_ip) = (a.interface().addrs[0].ip, b.interface().addrs[0].ip);
    sidr::unlistened_is_unsupported(&a, a_ip, b_ip, WAIT);
}
