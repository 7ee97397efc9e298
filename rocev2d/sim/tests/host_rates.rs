//! `[host] line_gbps` and `min_rate_mbps`: a scenario models a 100 Mbit/s testbed port with
//! DCQCN, whose paper R_min (100 Mbit/s, seed 002 Table I) is the whole port and would keep
//! every flow at line rate. The keys are the daemon's `[cc]` ones, so the testbed runner passes
//! a variant's values through.

use rocev2_sim::{Scenario, Sim};

/// Four long flows into one receiver on a 100 Mbit/s star with RED, under `host` (TOML lines).
fn testbed_incast(host: &str) -> Scenario {
    Scenario::from_toml(&format!(
        "name = \"t\"\nseed = 1\nduration_ns = 20_000_000\n\
         [topology]\nkind = \"star\"\nhosts = 5\nrate_gbps = 0.1\ndelay_ns = 1000\n\
         [switch]\nbuffer_bytes = 500_000\n\
         red = {{ kmin_bytes = 5_000, kmax_bytes = 50_000, pmax_percent = 10.0 }}\n\
         [host]\ncc = \"dcqcn\"\n{host}\n\
         [[workload]]\nkind = \"long_lived\"\npairs = [[1, 0], [2, 0], [3, 0], [4, 0]]\n\
         [output]\nsample_interval_ns = 0\nplots = false\n"
    ))
    .unwrap()
}

/// The lowest rate (Mbit/s) any flow's controller reports, sampled every 100 µs over 20 ms.
fn lowest_rate_mbps(s: &Scenario) -> f64 {
    let mut sim = Sim::new(s).unwrap();
    let mut lowest = f64::MAX;
    for t in (100_000..=20_000_000).step_by(100_000) {
        sim.run_until(t);
        for f in 0..4 {
            if let Some(c) = sim.cc_snapshot(f) {
                lowest = lowest.min(c.rate.as_bps() as f64 / 1e6);
            }
        }
    }
    lowest
}

/// With the paper's R_min no DCQCN flow can go below the 100 Mbit/s port's rate; with
/// `min_rate_mbps = 5` they are cut toward the fair share of 25 Mbit/s.
#[test]
fn min_rate_mbps_lets_dcqcn_cut_below_a_100_mbit_port() {
    let paper = lowest_rate_mbps(&testbed_incast(""));
    let low = lowest_rate_mbps(&testbed_incast("min_rate_mbps = 5"));
    eprintln!("lowest DCQCN rate: paper R_min {paper:.1} Mbit/s, R_min 5: {low:.1} Mbit/s");
    assert!(paper >= 100.0 - 1e-6, "paper R_min held: {paper}");
    assert!(low < 60.0, "R_min 5 Mbit/s lets flows go below 60: {low}");
    assert!(low >= 5.0 - 1e-6, "never below R_min: {low}");
}

/// `line_gbps` sets R_l, where flows start and what increases are capped at, independently of
/// the link (here 10 Gbit/s links, R_l 100 Mbit/s).
#[test]
fn line_gbps_sets_where_flows_start() {
    let text = "name = \"t\"\nduration_ns = 1_000_000\n\
                [topology]\nkind = \"star\"\nhosts = 2\nrate_gbps = 10\ndelay_ns = 1000\n\
                [host]\ncc = \"dcqcn\"\nline_gbps = 0.1\n\
                [[workload]]\nkind = \"long_lived\"\npairs = [[1, 0]]\n\
                [output]\nsample_interval_ns = 0\nplots = false\n";
    let mut sim = Sim::new(&Scenario::from_toml(text).unwrap()).unwrap();
    sim.run_until(500_000);
    let c = sim.cc_snapshot(0).unwrap();
    assert_eq!(c.rate.as_bps(), 100_000_000, "{c:?}");
    // 500 µs at 100 Mbit/s is about 6 KB of frames; at the link's 10 Gbit/s it would be 600 KB.
    let sent = sim.ports()[1].stats.tx_bytes;
    assert!(sent < 10_000, "paced at R_l: {sent} bytes");
}

/// Out-of-range values are refused, naming the key (the daemon's ranges).
#[test]
fn host_rates_out_of_range_name_the_key() {
    for (line, key) in [
        ("line_gbps = 0", "host.line_gbps"),
        ("line_gbps = 2000", "host.line_gbps"),
        ("min_rate_mbps = 0", "host.min_rate_mbps"),
        ("min_rate_mbps = -1", "host.min_rate_mbps"),
        ("dcqcn_plus_ai_scale = 0", "host.dcqcn_plus_ai_scale"),
        ("dcqcn_plus_delta_ns = 0", "host.dcqcn_plus_delta_ns"),
    ] {
        let e = Sim::new(&testbed_incast(line)).unwrap_err().to_string();
        assert!(e.contains(key), "{line}: {e}");
    }
}
