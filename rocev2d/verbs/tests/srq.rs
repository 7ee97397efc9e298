//! Shared receive queues on an in-process pair (the scenario in `scenarios/srq.rs`, which the
//! daemon's tests run attached too).

#[path = "scenarios/srq.rs"]
mod scenario;

#[test]
fn srq_two_peers_share_one_queue_in_process() {
    let (server, client) = rocev2::Device::pair().unwrap();
    scenario::two_peers_share_one_srq(&server, &client);
}
