//! Model throughput benchmarks (in progress).
fn main() {}
