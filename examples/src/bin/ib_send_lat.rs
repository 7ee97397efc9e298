//! `ib_send_lat`: perftest's tool of that name over rocev2 (`rocev2_examples::perftest`).

fn main() -> anyhow::Result<()> {
    rocev2_examples::perftest::main(rocev2_examples::perftest::Test {
        verb: rocev2_examples::perftest::Verb::Send,
        kind: rocev2_examples::perftest::Kind::Lat,
    })
}
