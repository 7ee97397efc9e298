//! `rocev2-sim`: runs scenario files of the network model (CLI in progress).
fn main() {}
