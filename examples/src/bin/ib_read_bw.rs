//! `ib_read_bw`: perftest's tool of that name over rocev2 (`rocev2_examples::perftest`).

fn main() -> anyhow::Result<()> {
    rocev2_examples::perftest::main(rocev2_examples::perftest::Test {
        verb: rocev2_examples::perftest::Verb::Read,
        kind: rocev2_examples::perftest::Kind::Bw,
    })
}
