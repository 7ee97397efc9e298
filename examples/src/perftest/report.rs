//! perftest's output: the test header (`ctx_print_test_info`), the address lines
//! (`ctx_print_pingpong_data`, `BASIC_ADDR_FMT`, `RDMA_FMT`, `READ_FMT`, `PERF_GID_FMT`) and
//! the result tables (`print_report_bw`, `print_full_bw_report`, `print_report_lat`, the
//! `RESULT_FMT*` and `REPORT_FMT*` formats of `perftest_parameters.h`), perftest 6.06.
//!
//! Deviations: the header names our datapath in one extra line; `t_stdev` is the true standard
//! deviation (perftest truncates each difference to an integer first); times come from
//! `Instant` (nanoseconds) instead of the cycle counter.

use super::{Kind, Test, Verb};
use rdmacm_shim::perftest::{BwReport, KeyMsg};
use std::time::Instant;

/// `RESULT_LINE`.
pub const RULE: &str =
    "---------------------------------------------------------------------------------------";

/// C's `%#0<width>x`: `0x` and zero-padded hex to `width` characters, but a plain
/// zero-padded `0` for zero (the alternate form adds no prefix to 0).
fn c_alt_hex(v: u64, width: usize) -> String {
    if v == 0 {
        format!("{:0width$}", 0)
    } else {
        format!("{v:#0width$x}")
    }
}

/// What the header shows.
pub struct Header<'a> {
    /// The test.
    pub test: Test,
    /// Interface name.
    pub dev: &'a str,
    /// Whether this side is the client.
    pub client: bool,
    /// Run settings.
    pub params: &'a super::args::Params,
    /// Agreed MTU, bytes.
    pub mtu: u32,
    /// `-x`, if given.
    pub gid_index: Option<usize>,
    /// Datapath name.
    pub datapath: &'a str,
}

/// `ctx_print_test_info`.
pub fn print_header(h: &Header) {
    let t = h.test;
    let kind = match t.kind {
        Kind::Bw => "BW ",
        Kind::Lat => "Latency ",
    };
    println!("{RULE}");
    println!("                    {} {kind}Test", t.verb_name());
    println!(" Dual-port       : OFF\t\tDevice         : {}", h.dev);
    println!(" Number of qps   : 1\t\tTransport type : IB");
    println!(" Connection type : RC\t\tUsing SRQ      : OFF");
    println!(" PCIe relax order: Unsupported");
    println!(" ibv_wr* API     : OFF");
    if h.client || t.kind == Kind::Lat {
        println!(" TX depth        : {}", h.params.tx_depth);
    }
    if t.verb == Verb::Send && (!h.client || t.kind == Kind::Lat) {
        println!(" RX depth        : {}", h.params.rx_depth);
    }
    if t.kind == Kind::Bw {
        println!(" CQ Moderation   : {}", h.params.cq_mod);
    }
    println!(" Mtu             : {}[B]", h.mtu);
    println!(" Link type       : Ethernet");
    if let Some(i) = h.gid_index {
        println!(" GID index       : {i}");
    }
    if t.verb == Verb::Read {
        println!(" Outstand reads  : {}", h.params.out_reads);
    } else {
        println!(" Max inline data : 0[B]");
    }
    println!(" rdma_cm QPs\t : OFF");
    println!(" Data ex. method : Ethernet");
    println!(" rocev2 datapath : {}", h.datapath);
    println!("{RULE}");
}

/// One `local address:` / `remote address:` block (`ctx_print_pingpong_data`).
pub fn print_dest(side: &str, verb: Verb, k: &KeyMsg) {
    let mut l = format!(
        " {side} address: LID {} QPN {} PSN {}",
        c_alt_hex(k.lid.into(), 4),
        c_alt_hex(k.qpn.into(), 6),
        c_alt_hex(k.psn.into(), 6)
    );
    if verb == Verb::Read {
        l.push_str(&format!(" OUT {}", c_alt_hex(k.out_reads.into(), 4)));
    }
    if verb != Verb::Send {
        l.push_str(&format!(
            " RKey {} VAddr {}",
            c_alt_hex(k.rkey.into(), 8),
            c_alt_hex(k.vaddr, 16)
        ));
    }
    println!("{l}");
    let gid: Vec<String> = k.gid.iter().map(|b| format!("{b:02}")).collect();
    println!(" GID: {}", gid.join(":"));
}

/// The bw table's heading (`RESULT_FMT` / `RESULT_FMT_G`, then `RESULT_EXT`).
pub fn print_bw_heading(gbits: bool) {
    println!("{RULE}");
    let unit = if gbits { "Gb/sec" } else { "MB/sec" };
    println!(" #bytes     #iterations    BW peak[{unit}]    BW average[{unit}]   MsgRate[Mpps]");
}

/// The lat table's heading (`RESULT_FMT_LAT`, then `RESULT_EXT`).
pub fn print_lat_heading() {
    println!("{RULE}");
    println!(
        " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] "
    );
}

/// `print_report_bw` for one run: the average from the first post to the last completion,
/// and (unless `no_peak`) the peak, the best per-message time over any stretch from a post
/// to a signaled completion. `tcompleted[j]` is when message `j`'s completion (or a later
/// one covering it) was seen; `signaled` lists the messages that generate completions.
pub fn bw_report(
    size: u64,
    tposted: &[Instant],
    tcompleted: &[Instant],
    signaled: &[usize],
    no_peak: bool,
    gbits: bool,
) -> BwReport {
    let n = tposted.len();
    let unit = if gbits { 125e6 } else { f64::from(1u32 << 20) };
    let total = (tcompleted[n - 1] - tposted[0]).as_secs_f64().max(1e-9);
    let mut peak = 0.0;
    if !no_peak {
        let mut best = total;
        for (i, tp) in tposted.iter().enumerate() {
            let from = signaled.partition_point(|&j| j < i);
            for &j in &signaled[from..] {
                let t = (tcompleted[j] - *tp).as_secs_f64() / (j - i + 1) as f64;
                if t < best {
                    best = t;
                }
            }
        }
        peak = size as f64 / best.max(1e-12) / unit;
    }
    BwReport {
        size,
        iters: n as u64,
        bw_peak: peak,
        bw_avg: size as f64 * n as f64 / total / unit,
        msg_rate: n as f64 / total / 1e6,
    }
}

/// A bw row (`print_full_bw_report`: `REPORT_FMT`, or `REPORT_FMT_EXT` below 0.1 Gb/s).
pub fn print_bw_row(r: &BwReport, gbits: bool) {
    if gbits && r.bw_avg < 0.1 {
        println!(
            " {:<7}    {}           {:<7.6}            {:<7.6}            {:<7.6}",
            r.size, r.iters, r.bw_peak, r.bw_avg, r.msg_rate
        );
    } else {
        println!(
            " {:<7}    {:<10}       {:<7.2}            {:<7.2}\t\t   {:<7.6}",
            r.size, r.iters, r.bw_peak, r.bw_avg, r.msg_rate
        );
    }
}

/// `print_report_lat`: from the `n` post times, the `n − 1` intervals divided by
/// `rtt_factor` (2 for ping-pongs, whose interval is a round trip; 1 for READ), sorted, the
/// two largest dropped (`LAT_MEASURE_TAIL`); min, max, median (`get_median`), mean, standard
/// deviation and the 99 % / 99.9 % entries (`ceil(count · p)`), in µs.
pub fn print_lat_row(size: u64, tposted: &[Instant], rtt_factor: f64) {
    let mut d: Vec<f64> = tposted
        .windows(2)
        .map(|w| (w[1] - w[0]).as_secs_f64() * 1e6 / rtt_factor)
        .collect();
    d.sort_by(f64::total_cmp);
    let cnt = d.len() - 2;
    let median = if (cnt - 1) % 2 == 1 {
        (d[cnt / 2] + d[cnt / 2 - 1]) / 2.0
    } else {
        d[cnt / 2]
    };
    let avg = d[..cnt].iter().sum::<f64>() / cnt as f64;
    let stdev = (d[..cnt].iter().map(|x| (avg - x).powi(2)).sum::<f64>() / cnt as f64).sqrt();
    let p99 = d[(cnt as f64 * 0.99).ceil() as usize];
    let p999 = d[(cnt as f64 * 0.999).ceil() as usize];
    println!(
        " {:<7} {}          {:<7.2}        {:<7.2}      {:<7.2}  \t       {:<7.2}     \t{:<7.2}\t\t{:<7.2} \t\t{:<7.2}",
        size,
        tposted.len(),
        d[0],
        d[cnt],
        median,
        avg,
        stdev,
        p99,
        p999
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn c_alt_hex_as_printf() {
        // printf("%#04x", 0) = "0000", printf("%#06x", 0x11) = "0x0011",
        // printf("%#016llx", 0x55812f0c2000ULL) = "0x0055812f0c2000".
        assert_eq!(c_alt_hex(0, 4), "0000");
        assert_eq!(c_alt_hex(0x11, 6), "0x0011");
        assert_eq!(c_alt_hex(0x7d2a9e, 6), "0x7d2a9e");
        assert_eq!(c_alt_hex(0x5581_2f0c_2000, 16), "0x0055812f0c2000");
    }

    #[test]
    fn bw_report_average_and_peak() {
        // 4 messages of 1 MiB posted at 0 ms, completions at 1, 2, 3, 4 ms, all signaled:
        // the average is 4 MiB in 4 ms = 1000 MiB/s; the best stretch is one message in
        // 1 ms (post 0 → completion 0), also 1000 MiB/s.
        let t0 = Instant::now();
        let ms = |m: u64| t0 + Duration::from_millis(m);
        let tp = [ms(0); 4];
        let tc = [ms(1), ms(2), ms(3), ms(4)];
        let r = bw_report(1 << 20, &tp, &tc, &[0, 1, 2, 3], false, false);
        assert!((r.bw_avg - 1000.0).abs() < 1e-6, "{r:?}");
        assert!((r.bw_peak - 1000.0).abs() < 1e-6, "{r:?}");
        assert!((r.msg_rate - 0.001).abs() < 1e-9, "{r:?}");
        assert_eq!(r.iters, 4);
        let r = bw_report(1 << 20, &tp, &tc, &[3], true, true);
        assert_eq!(r.bw_peak, 0.0);
        // 4 MiB in 4 ms in Gb/s: 4·2^20·8 / 4e-3 / 1e9.
        assert!((r.bw_avg - 8.388608).abs() < 1e-9, "{r:?}");
    }
}
