//! What `rocev2d stats` prints: a snapshot of the endpoint's, the datapath's and every QP's
//! counters, served by the running daemon on a unix socket (one JSON document per connection)
//! and printed as text or JSON. `rocev2-wiretest` answers its client's `stats` question with
//! the same document.
//!
//! Counter names are the keys STYLE.md §3 fixes: drop reasons are [`DropReason::name`],
//! per-QP counters the field names of `rocev2_core::qp::QpCounters`, datapath counters
//! [`DatapathStats::named`].
//!
//! A QP with congestion control also shows its controller (`Qp::cc_snapshot`): allowed rate,
//! target rate, α, DASR's N and the CNPs it reacted to, beside the `cnps_sent` and
//! `cnps_received` counters.
//!
//! Deviations: none.

use rocev2_core::qp::QpState;
use rocev2_core::time::Instant;
use rocev2_core::{DropReason, Endpoint};
use rocev2_datapath::DatapathStats;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::time::Duration;

/// One QP's state and counters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QpSnapshot {
    /// QP state (`Rts`, `Error`, …).
    pub state: String,
    /// The engine shard of the QP (`docs/daemon.md`, "Several queues"; 0 with one).
    #[serde(default)]
    pub shard: u32,
    /// Payload bytes per packet (the path MTU), once the QP has a path.
    #[serde(default)]
    pub path_mtu: Option<u32>,
    /// Counters by name.
    pub counters: BTreeMap<String, u64>,
    /// The congestion controller, when the QP has one.
    #[serde(default)]
    pub cc: Option<CcStats>,
}

/// A QP's congestion controller as `rocev2d stats` shows it (docs/congestion.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CcStats {
    /// Allowed rate, bit/s.
    pub rate_bps: u64,
    /// Target rate R_T, bit/s (DCQCN, DCQCN+).
    pub target_bps: Option<u64>,
    /// α (DCQCN, DCQCN+).
    pub alpha: Option<f64>,
    /// DASR's N (Dart).
    pub n: Option<u16>,
    /// CNPs that reached the controller.
    pub cnps: u64,
}

/// Everything `rocev2d stats` shows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// Interface served.
    pub iface: String,
    /// Datapath name.
    pub datapath: String,
    /// Why that datapath.
    pub datapath_reason: String,
    /// Milliseconds since the daemon started.
    pub uptime_ms: u64,
    /// Engine shards serving the interface (`rocev2d run --queues`); every count below is
    /// their sum.
    #[serde(default = "one")]
    pub shards: u32,
    /// Frames and bytes through the endpoint: `rx_packets`, `rx_bytes`, `tx_packets`,
    /// `tx_bytes`.
    pub packets: BTreeMap<String, u64>,
    /// Drops by reason, every reason listed.
    pub drops: BTreeMap<String, u64>,
    /// Frames whose ICRC did not verify (`drops.icrc_error`).
    pub icrc_errors: u64,
    /// UDP mode: frames accepted without a verifiable ICRC.
    pub icrc_unverifiable: u64,
    /// Retransmitted request packets, all QPs.
    pub retransmits: u64,
    /// NAKs sent, all QPs.
    pub naks_sent: u64,
    /// NAKs received, all QPs.
    pub naks_received: u64,
    /// The datapath's own counters.
    pub datapath_counters: BTreeMap<String, u64>,
    /// Per QP, keyed by QPN in hex.
    pub qps: BTreeMap<String, QpSnapshot>,
    /// Attached applications, their QPs and resources (empty where nothing attaches, as in
    /// the wire-test tool).
    #[serde(default)]
    pub apps: Vec<crate::host::AppSnapshot>,
    /// Attachments opened and closed, and what they got refused.
    #[serde(default)]
    pub host: crate::host::HostCounters,
}

/// Where a snapshot's identity fields come from.
#[derive(Debug, Clone)]
pub struct Identity {
    /// Interface.
    pub iface: String,
    /// Datapath name.
    pub datapath: String,
    /// Why.
    pub reason: String,
    /// Start time.
    pub started: std::time::Instant,
}

/// Takes a snapshot of every QP of `ep` at `now` (the controllers' α decays with time).
pub fn snapshot(id: &Identity, ep: &Endpoint, now: Instant, dp: &DatapathStats) -> Snapshot {
    let s = ep.stats();
    let drops: BTreeMap<String, u64> = DropReason::ALL
        .iter()
        .map(|r| (r.name().to_string(), s.drops(*r)))
        .collect();
    let mut qps = BTreeMap::new();
    let (mut retransmits, mut naks_sent, mut naks_received) = (0, 0, 0);
    for qp in ep.qps() {
        let c = qp.counters();
        retransmits += c.retransmits;
        naks_sent += c.naks_sent;
        naks_received += c.naks_received;
        let counters = [
            ("tx_packets", c.tx_packets),
            ("rx_packets", c.rx_packets),
            ("retransmits", c.retransmits),
            ("timeouts", c.timeouts),
            ("naks_sent", c.naks_sent),
            ("naks_received", c.naks_received),
            ("rnr_naks_received", c.rnr_naks_received),
            ("duplicate_requests", c.duplicate_requests),
            ("out_of_sequence", c.out_of_sequence),
            ("unexpected_responses", c.unexpected_responses),
            ("ce_received", c.ce_received),
            ("cnps_sent", c.cnps_sent),
            ("cnps_received", c.cnps_received),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let cc = qp.cc_snapshot(now).map(|s| CcStats {
            rate_bps: s.rate.as_bps(),
            target_bps: s.target.map(|t| t.as_bps()),
            alpha: s.alpha,
            n: s.n,
            cnps: s.cnps,
        });
        qps.insert(
            format!("{:#08x}", qp.qpn().value()),
            QpSnapshot {
                state: state_name(qp.state()).to_string(),
                shard: 0,
                path_mtu: qp.path_mtu(),
                counters,
                cc,
            },
        );
    }
    Snapshot {
        iface: id.iface.clone(),
        datapath: id.datapath.clone(),
        datapath_reason: id.reason.clone(),
        uptime_ms: u64::try_from(id.started.elapsed().as_millis()).unwrap_or(u64::MAX),
        shards: 1,
        packets: [
            ("rx_packets", s.rx_frames),
            ("rx_bytes", s.rx_bytes),
            ("tx_packets", s.tx_frames),
            ("tx_bytes", s.tx_bytes),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect(),
        icrc_errors: s.drops(DropReason::BadIcrc),
        icrc_unverifiable: dp.icrc_unverifiable,
        drops,
        retransmits,
        naks_sent,
        naks_received,
        datapath_counters: dp
            .named()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
        qps,
        apps: Vec::new(),
        host: Default::default(),
    }
}

fn one() -> u32 {
    1
}

/// One document for the host from its engine shards' snapshots, shard k's at index k: every
/// counter summed, except the steering program's (`steer_*`), which are the interface's and
/// shown by every shard alike; each QP and application tagged with its shard. `None` without
/// any.
pub fn merge(parts: Vec<Snapshot>) -> Option<Snapshot> {
    let n = u32::try_from(parts.len()).ok()?;
    let mut it = parts.into_iter();
    let mut all = it.next()?;
    if n > 1 {
        all.datapath_reason = format!(
            "{n} engine shards, one per rx queue 0..{n}; shard 0: {}",
            all.datapath_reason
        );
    }
    all.shards = n;
    let add = |into: &mut BTreeMap<String, u64>, from: BTreeMap<String, u64>| {
        for (k, v) in from {
            let steer = k.starts_with("steer_");
            let e = into.entry(k).or_default();
            *e = if steer { (*e).max(v) } else { *e + v };
        }
    };
    for (shard, s) in (1..).zip(it) {
        all.uptime_ms = all.uptime_ms.max(s.uptime_ms);
        add(&mut all.packets, s.packets);
        add(&mut all.drops, s.drops);
        add(&mut all.datapath_counters, s.datapath_counters);
        all.icrc_errors += s.icrc_errors;
        all.icrc_unverifiable += s.icrc_unverifiable;
        all.retransmits += s.retransmits;
        all.naks_sent += s.naks_sent;
        all.naks_received += s.naks_received;
        all.qps.extend(s.qps.into_iter().map(|(k, mut q)| {
            q.shard = shard;
            (k, q)
        }));
        all.apps.extend(s.apps.into_iter().map(|mut a| {
            a.shard = shard;
            a
        }));
        all.host.add(&s.host);
    }
    all.apps.sort_by_key(|a| a.id);
    Some(all)
}

fn state_name(s: QpState) -> &'static str {
    match s {
        QpState::Reset => "reset",
        QpState::Init => "init",
        QpState::Rtr => "rtr",
        QpState::Rts => "rts",
        QpState::Sqd => "sqd",
        QpState::Sqe => "sqe",
        QpState::Error => "error",
    }
}

/// The text `rocev2d stats` prints without `--json`: one `key value` per line, grouped.
pub fn render_text(s: &Snapshot) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "iface {}", s.iface);
    let _ = writeln!(o, "datapath {} ({})", s.datapath, s.datapath_reason);
    let _ = writeln!(o, "uptime_ms {}", s.uptime_ms);
    let _ = writeln!(o, "shards {}", s.shards);
    for (k, v) in &s.packets {
        let _ = writeln!(o, "{k} {v}");
    }
    let _ = writeln!(o, "icrc_errors {}", s.icrc_errors);
    let _ = writeln!(o, "icrc_unverifiable {}", s.icrc_unverifiable);
    let _ = writeln!(o, "retransmits {}", s.retransmits);
    let _ = writeln!(o, "naks_sent {}", s.naks_sent);
    let _ = writeln!(o, "naks_received {}", s.naks_received);
    let _ = writeln!(o, "drops:");
    for (k, v) in &s.drops {
        let _ = writeln!(o, "  {k} {v}");
    }
    let _ = writeln!(o, "datapath counters:");
    for (k, v) in &s.datapath_counters {
        let _ = writeln!(o, "  {k} {v}");
    }
    let h = &s.host;
    let _ = writeln!(
        o,
        "applications {} (attached {}, detached {}, refused requests {}, refused work requests {}, closed corrupt {}, memory faults {}); connections refused {} (user), {} (busy), {} closed silent",
        s.apps.len(),
        h.attached,
        h.detached,
        h.refused_requests,
        h.refused_work_requests,
        h.closed_corrupt,
        h.memory_faults,
        h.refused_users,
        h.refused_busy,
        h.hello_timeouts
    );
    for a in &s.apps {
        let _ = writeln!(
            o,
            "  app {} pid {} uid {} shard {}: qps [{}] cqs {} mrs {} ({} bytes, {} mapped) rings \
             {} bytes posted {} completed {}",
            a.id,
            a.pid,
            a.uid,
            a.shard,
            a.qps.join(" "),
            a.cqs,
            a.mrs,
            a.mr_bytes,
            a.mr_mapped_bytes,
            a.ring_bytes,
            a.posted,
            a.completed
        );
    }
    for (q, qs) in &s.qps {
        let _ = writeln!(o, "qp {q} {} shard {}:", qs.state, qs.shard);
        if let Some(m) = qs.path_mtu {
            let _ = writeln!(o, "  path_mtu {m}");
        }
        for (k, v) in &qs.counters {
            let _ = writeln!(o, "  {k} {v}");
        }
        if let Some(cc) = &qs.cc {
            let _ = writeln!(o, "  cc_rate_bps {}", cc.rate_bps);
            if let Some(t) = cc.target_bps {
                let _ = writeln!(o, "  cc_target_bps {t}");
            }
            if let Some(a) = cc.alpha {
                let _ = writeln!(o, "  cc_alpha {a:.4}");
            }
            if let Some(n) = cc.n {
                let _ = writeln!(o, "  cc_n {n}");
            }
            let _ = writeln!(o, "  cc_cnps {}", cc.cnps);
        }
    }
    o
}

/// What `rocev2d stats --watch` prints each interval: rates between two snapshots taken
/// `secs` apart (packets and bits per second through the endpoint, drops per second by
/// reason, only the reasons that moved) and one line per QP (its packets per second each way,
/// retransmissions per second, and its controller's rate), so an experiment can be watched
/// live, as `ibv_devinfo` plus `perfquery` would.
pub fn render_rates(prev: &Snapshot, cur: &Snapshot, secs: f64) -> String {
    let secs = secs.max(1e-9);
    let per_s = |a: Option<&u64>, b: Option<&u64>| {
        b.copied()
            .unwrap_or(0)
            .saturating_sub(a.copied().unwrap_or(0)) as f64
            / secs
    };
    let p = |k: &str| per_s(prev.packets.get(k), cur.packets.get(k));
    let mut o = String::new();
    let _ = writeln!(
        o,
        "{} ({}): rx {:.0} pkt/s {:.3} Gbit/s, tx {:.0} pkt/s {:.3} Gbit/s",
        cur.iface,
        cur.datapath,
        p("rx_packets"),
        p("rx_bytes") * 8e-9,
        p("tx_packets"),
        p("tx_bytes") * 8e-9,
    );
    let drops: Vec<String> = cur
        .drops
        .iter()
        .filter_map(|(k, v)| {
            let r = per_s(prev.drops.get(k), Some(v));
            (r > 0.0).then(|| format!("{k} {r:.0}/s"))
        })
        .collect();
    if !drops.is_empty() {
        let _ = writeln!(o, "drops: {}", drops.join(", "));
    }
    // A sharded daemon's rows say their shard; one engine's stay as they were.
    let sharded = cur.shards > 1;
    if !cur.qps.is_empty() {
        let _ = write!(
            o,
            "{:<10} {:<6} {:>12} {:>12} {:>10} {:>12}",
            "qpn", "state", "tx pkt/s", "rx pkt/s", "retx/s", "cc Gbit/s"
        );
        let _ = writeln!(o, "{}", if sharded { "  shard" } else { "" });
    }
    for (qpn, q) in &cur.qps {
        let before = prev.qps.get(qpn);
        let c = |k: &str| per_s(before.and_then(|b| b.counters.get(k)), q.counters.get(k));
        let cc = q.cc.as_ref().map_or_else(
            || "-".to_string(),
            |c| format!("{:.3}", c.rate_bps as f64 * 1e-9),
        );
        let _ = write!(
            o,
            "{qpn:<10} {:<6} {:>12.0} {:>12.0} {:>10.0} {cc:>12}",
            q.state,
            c("tx_packets"),
            c("rx_packets"),
            c("retransmits"),
        );
        let _ = match sharded {
            true => writeln!(o, " {:>6}", q.shard),
            false => writeln!(o),
        };
    }
    o
}

/// The snapshot in the Prometheus text exposition format (version 0.0.4): what `rocev2d stats
/// --prometheus` prints and the daemon's metrics endpoint serves (`[stats] metrics`). Counters
/// end in `_total`; every sample carries `iface`, per-QP ones `qpn` too; the congestion
/// controller's state is gauges. Families come in a fixed order with one `# HELP`/`# TYPE` each.
pub fn render_prometheus(s: &Snapshot) -> String {
    let mut o = String::new();
    let iface = escape_label(&s.iface);
    let family = |o: &mut String, name: &str, kind: &str, help: &str, samples: &[(String, f64)]| {
        if samples.is_empty() {
            return;
        }
        let _ = writeln!(o, "# HELP rocev2_{name} {help}");
        let _ = writeln!(o, "# TYPE rocev2_{name} {kind}");
        for (labels, v) in samples {
            let _ = writeln!(o, "rocev2_{name}{{iface=\"{iface}\"{labels}}} {v}");
        }
    };
    family(
        &mut o,
        "info",
        "gauge",
        "The datapath serving the interface (value 1).",
        &[(format!(",datapath=\"{}\"", escape_label(&s.datapath)), 1.0)],
    );
    family(
        &mut o,
        "uptime_seconds",
        "gauge",
        "Seconds since the daemon started.",
        &[(String::new(), s.uptime_ms as f64 / 1000.0)],
    );
    family(
        &mut o,
        "shards",
        "gauge",
        "Engine shards serving the interface (rocev2d run --queues); the counters are their sum.",
        &[(String::new(), f64::from(s.shards))],
    );
    for (k, v) in &s.packets {
        let help = format!("Endpoint {} (frames or bytes).", k.replace('_', " "));
        family(
            &mut o,
            &format!("{k}_total"),
            "counter",
            &help,
            &[(String::new(), *v as f64)],
        );
    }
    let drops: Vec<(String, f64)> = s
        .drops
        .iter()
        .map(|(r, v)| (format!(",reason=\"{}\"", escape_label(r)), *v as f64))
        .collect();
    family(
        &mut o,
        "drops_total",
        "counter",
        "Received frames dropped, by reason.",
        &drops,
    );
    family(
        &mut o,
        "icrc_unverifiable_total",
        "counter",
        "UDP mode: frames accepted without a verifiable ICRC.",
        &[(String::new(), s.icrc_unverifiable as f64)],
    );
    let dp: Vec<(String, f64)> = s
        .datapath_counters
        .iter()
        .map(|(k, v)| (format!(",counter=\"{}\"", escape_label(k)), *v as f64))
        .collect();
    family(
        &mut o,
        "datapath_total",
        "counter",
        "The datapath's own counters.",
        &dp,
    );
    let qp_counters: std::collections::BTreeSet<&String> =
        s.qps.values().flat_map(|q| q.counters.keys()).collect();
    for c in qp_counters {
        let samples: Vec<(String, f64)> = s
            .qps
            .iter()
            .filter_map(|(qpn, q)| q.counters.get(c).map(|v| (qp_label(qpn), *v as f64)))
            .collect();
        let help = format!("Per-QP {}.", c.replace('_', " "));
        family(&mut o, &format!("qp_{c}_total"), "counter", &help, &samples);
    }
    let shards: Vec<(String, f64)> = s
        .qps
        .iter()
        .map(|(qpn, q)| (qp_label(qpn), f64::from(q.shard)))
        .collect();
    family(
        &mut o,
        "qp_shard",
        "gauge",
        "The engine shard serving the QP.",
        &shards,
    );
    let cc = |f: fn(&CcStats) -> Option<f64>| -> Vec<(String, f64)> {
        s.qps
            .iter()
            .filter_map(|(qpn, q)| q.cc.as_ref().and_then(f).map(|v| (qp_label(qpn), v)))
            .collect()
    };
    family(
        &mut o,
        "qp_cc_rate_bps",
        "gauge",
        "Allowed rate of the QP's congestion controller, bit/s.",
        &cc(|c| Some(c.rate_bps as f64)),
    );
    family(
        &mut o,
        "qp_cc_target_bps",
        "gauge",
        "Target rate R_T (DCQCN, DCQCN+), bit/s.",
        &cc(|c| c.target_bps.map(|t| t as f64)),
    );
    family(
        &mut o,
        "qp_cc_alpha",
        "gauge",
        "DCQCN's alpha.",
        &cc(|c| c.alpha),
    );
    family(
        &mut o,
        "qp_cc_n",
        "gauge",
        "DASR's N, senders the receiver counts (Dart).",
        &cc(|c| c.n.map(f64::from)),
    );
    family(
        &mut o,
        "qp_cc_cnps_total",
        "counter",
        "CNPs that reached the QP's controller.",
        &cc(|c| Some(c.cnps as f64)),
    );
    o
}

/// `,qpn="0x000011"`.
fn qp_label(qpn: &str) -> String {
    format!(",qpn=\"{}\"", escape_label(qpn))
}

/// A label value as the text format wants it: backslash, quote and newline escaped.
fn escape_label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Writes one snapshot to a connected client, as one JSON line.
///
/// # Errors
/// The write's error (a client that went away).
pub fn send(stream: &mut UnixStream, s: &Snapshot) -> std::io::Result<()> {
    stream.set_write_timeout(Some(Duration::from_secs(1)))?;
    let mut line = serde_json::to_vec(s).map_err(std::io::Error::other)?;
    line.push(b'\n');
    stream.write_all(&line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_snapshot_lists_every_drop_reason() {
        let mut ep = Endpoint::new(1);
        let mut mem = rocev2_core::mr::VecMemory::new();
        let _ = ep.handle_frame(rocev2_core::time::Instant::ZERO, &[0; 10], &mut mem);
        let id = Identity {
            iface: "veth0".into(),
            datapath: "udp".into(),
            reason: "asked for".into(),
            started: std::time::Instant::now(),
        };
        let s = snapshot(&id, &ep, Instant::ZERO, &DatapathStats::default());
        assert_eq!(s.drops.len(), DropReason::ALL.len());
        assert_eq!(s.drops["truncated"], 1);
        assert_eq!(s.packets["rx_packets"], 1);
        let text = render_text(&s);
        assert!(text.contains("  truncated 1\n"), "{text}");
        assert!(text.contains("  icrc_error 0\n"), "{text}");
        let back: Snapshot = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(back, s);
    }

    #[test]
    fn stats_of_shards_merge_into_one_document_per_host() {
        use crate::host::{AppSnapshot, HostCounters};
        let part = |app: u32, qpn: &str, rx: u64| {
            let mut ep = Endpoint::new(1);
            let mut mem = rocev2_core::mr::VecMemory::new();
            let _ = ep.handle_frame(Instant::ZERO, &[0; 10], &mut mem);
            let id = Identity {
                iface: "veth0".into(),
                datapath: "xdp".into(),
                reason: format!("queue of app {app}"),
                started: std::time::Instant::now(),
            };
            let dp = DatapathStats {
                rx_packets: rx,
                steer_redirected: 40,
                ..DatapathStats::default()
            };
            let mut s = snapshot(&id, &ep, Instant::ZERO, &dp);
            s.qps.insert(
                qpn.into(),
                QpSnapshot {
                    state: "rts".into(),
                    shard: 0,
                    path_mtu: Some(4096),
                    counters: [("rx_packets".to_string(), rx)].into(),
                    cc: None,
                },
            );
            s.apps.push(AppSnapshot {
                id: app,
                shard: 0,
                pid: 10 + app,
                uid: 0,
                qps: vec![qpn.into()],
                cqs: 1,
                mrs: 1,
                mr_bytes: 4096,
                mr_mapped_bytes: 4096,
                ring_bytes: 0,
                posted: rx,
                completed: rx,
            });
            s.host = HostCounters {
                attached: 1,
                refused_requests: u64::from(app),
                ..HostCounters::default()
            };
            s
        };
        assert!(merge(Vec::new()).is_none());
        let one = merge(vec![part(1, "0x000011", 5)]).unwrap();
        assert_eq!(
            (one.shards, one.datapath_reason.as_str()),
            (1, "queue of app 1")
        );
        let s = merge(vec![part(2, "0x000012", 5), part(1, "0x040012", 7)]).unwrap();
        assert_eq!(s.shards, 2);
        assert!(
            s.datapath_reason.starts_with("2 engine shards"),
            "{}",
            s.datapath_reason
        );
        assert_eq!(
            s.packets["rx_packets"], 2,
            "each engine's own frames, summed"
        );
        assert_eq!(s.drops["truncated"], 2);
        assert_eq!(s.datapath_counters["rx_packets"], 12);
        assert_eq!(
            s.datapath_counters["steer_redirected"], 40,
            "the interface's program, shown by every shard alike: not summed"
        );
        assert_eq!((s.host.attached, s.host.refused_requests), (2, 3));
        assert_eq!(
            s.qps
                .iter()
                .map(|(q, v)| (q.as_str(), v.shard))
                .collect::<Vec<_>>(),
            [("0x000012", 0), ("0x040012", 1)]
        );
        assert_eq!(
            s.apps.iter().map(|a| (a.id, a.shard)).collect::<Vec<_>>(),
            [(1, 1), (2, 0)],
            "by id, each with its shard"
        );
        let text = render_text(&s);
        assert!(text.contains("shards 2\n"), "{text}");
        assert!(text.contains("app 1 pid 11 uid 0 shard 1:"), "{text}");
        assert!(text.contains("qp 0x040012 rts shard 1:"), "{text}");
        let rates = render_rates(&s, &s, 1.0);
        let row = rates.lines().find(|l| l.starts_with("0x040012")).unwrap();
        assert_eq!(row.split_whitespace().last(), Some("1"), "{rates}");
        assert!(rates.contains("cc Gbit/s  shard\n"), "{rates}");
        let prom = render_prometheus(&s);
        assert!(
            prom.contains("rocev2_shards{iface=\"veth0\"} 2\n"),
            "{prom}"
        );
        assert!(
            prom.contains("rocev2_qp_shard{iface=\"veth0\",qpn=\"0x040012\"} 1\n"),
            "{prom}"
        );
        let back: Snapshot = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(back, s);
    }

    #[test]
    fn ten_thousand_qps_cross_the_control_socket_whole() {
        use rocev2_ipc::frame;
        use rocev2_ipc::proto::{Part, Response, StatsParts, stats_responses};
        let mut ep = Endpoint::new(1);
        let pd = ep.alloc_pd();
        let cq = ep.create_cq(1);
        for _ in 0..10_000 {
            ep.create_qp(rocev2_core::qp::QpConfig::new(pd, cq, cq))
                .unwrap();
        }
        let id = Identity {
            iface: "veth0".into(),
            datapath: "udp".into(),
            reason: "asked for".into(),
            started: std::time::Instant::now(),
        };
        let s = snapshot(&id, &ep, Instant::ZERO, &DatapathStats::default());
        let json = serde_json::to_string(&s).unwrap();
        assert!(json.len() > 10 * frame::MAX_BODY, "{} bytes", json.len());
        let (mut parts, mut whole, mut d) =
            (StatsParts::default(), None, frame::Decoder::default());
        for r in stats_responses(json) {
            d.extend(&frame::encode(&r, 0));
            let (back, _) = d
                .next_frame::<Response>()
                .unwrap()
                .expect("each fits a frame");
            if let Part::Whole(w) = parts.push(back) {
                whole = Some(w);
            }
        }
        let back: Snapshot = serde_json::from_str(&whole.unwrap()).unwrap();
        assert_eq!(back.qps.len(), 10_000);
    }

    #[test]
    fn stats_show_each_qps_congestion_controller() {
        use rocev2_core::cc::CcScheme;
        use rocev2_core::qp::QpConfig;
        use rocev2_core::time::Rate;
        let mut ep = Endpoint::new(1);
        let pd = ep.alloc_pd();
        let cq = ep.create_cq(16);
        let line = Rate::from_gbps(10);
        let mut with = QpConfig::new(pd, cq, cq);
        with.cc = CcScheme::Dcqcn.qp_config(line, 1024, &Default::default());
        let q_cc = ep.create_qp(with).unwrap();
        let q_plain = ep.create_qp(QpConfig::new(pd, cq, cq)).unwrap();
        let id = Identity {
            iface: "veth0".into(),
            datapath: "udp".into(),
            reason: "asked for".into(),
            started: std::time::Instant::now(),
        };
        let s = snapshot(&id, &ep, Instant::ZERO, &DatapathStats::default());
        let key = |q: rocev2_core::wire::Qpn| format!("{:#08x}", q.value());
        let cc = s.qps[&key(q_cc)]
            .cc
            .clone()
            .expect("DCQCN QP shows its controller");
        // A fresh DCQCN flow: line rate, R_T = line, α = 1 (seed 002 §II-B), no CNP yet.
        assert_eq!(cc.rate_bps, 10_000_000_000);
        assert_eq!(cc.target_bps, Some(10_000_000_000));
        assert_eq!(cc.alpha, Some(1.0));
        assert_eq!((cc.n, cc.cnps), (None, 0));
        assert_eq!(s.qps[&key(q_plain)].cc, None);
        assert_eq!(s.qps[&key(q_cc)].counters["cnps_received"], 0);
        let text = render_text(&s);
        assert!(text.contains("  cc_rate_bps 10000000000\n"), "{text}");
        assert!(text.contains("  cc_alpha 1.0000\n"), "{text}");
        assert!(text.contains("  cc_cnps 0\n"), "{text}");
        let back: Snapshot = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(back, s);
    }

    #[test]
    fn stats_watch_rates_between_snapshots() {
        let id = Identity {
            iface: "veth0".into(),
            datapath: "udp".into(),
            reason: String::new(),
            started: std::time::Instant::now(),
        };
        let mut ep = Endpoint::new(1);
        let pd = ep.alloc_pd();
        let cq = ep.create_cq(4);
        ep.create_qp(rocev2_core::qp::QpConfig::new(pd, cq, cq))
            .unwrap();
        let a = snapshot(&id, &ep, Instant::ZERO, &DatapathStats::default());
        let mut b = a.clone();
        b.packets.insert("rx_packets".into(), 2000);
        b.packets.insert("rx_bytes".into(), 250_000_000);
        b.drops.insert("truncated".into(), 10);
        let q = b.qps.keys().next().unwrap().clone();
        b.qps
            .get_mut(&q)
            .unwrap()
            .counters
            .insert("tx_packets".into(), 500);
        let text = render_rates(&a, &b, 2.0);
        // 2000 frames and 2 Gbit over 2 s; 10 drops; 500 packets from the QP.
        assert!(
            text.starts_with("veth0 (udp): rx 1000 pkt/s 1.000 Gbit/s, tx 0 pkt/s"),
            "{text}"
        );
        assert!(text.contains("drops: truncated 5/s\n"), "{text}");
        assert!(
            !text.contains("icrc_error"),
            "reasons that did not move are left out: {text}"
        );
        let row = text.lines().find(|l| l.starts_with(&q)).unwrap();
        let cols: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(cols[1..], ["reset", "250", "0", "0", "-"], "{text}");
    }

    /// The metrics a Prometheus server would scrape, read back by an independent parser of the
    /// text format: every family typed, counters and gauges where they belong, the labels and
    /// values of the snapshot.
    #[test]
    fn stats_prometheus_text_parses_back() {
        use prometheus_parse::{Scrape, Value};
        use rocev2_core::cc::CcScheme;
        use rocev2_core::qp::QpConfig;
        use rocev2_core::time::Rate;
        let mut ep = Endpoint::new(1);
        let pd = ep.alloc_pd();
        let cq = ep.create_cq(16);
        let mut with = QpConfig::new(pd, cq, cq);
        with.cc = CcScheme::Dcqcn.qp_config(Rate::from_gbps(10), 1024, &Default::default());
        let qpn = ep.create_qp(with).unwrap();
        let id = Identity {
            iface: "veth\"0".into(),
            datapath: "xdp".into(),
            reason: "asked for".into(),
            started: std::time::Instant::now(),
        };
        let dp = DatapathStats {
            rx_packets: 7,
            ..DatapathStats::default()
        };
        let text = render_prometheus(&snapshot(&id, &ep, Instant::ZERO, &dp));
        let scrape = Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).expect("parses");
        let find = |name: &str, label: (&str, &str)| {
            scrape
                .samples
                .iter()
                .find(|s| s.metric == name && s.labels.get(label.0) == Some(label.1))
                .unwrap_or_else(|| panic!("{name} {label:?} in\n{text}"))
        };
        let counter = |v: &Value| match v {
            Value::Counter(c) => *c,
            other => panic!("not a counter: {other:?}"),
        };
        let gauge = |v: &Value| match v {
            Value::Gauge(g) => *g,
            other => panic!("not a gauge: {other:?}"),
        };
        let q = format!("{:#08x}", qpn.value());
        let s = find("rocev2_drops_total", ("reason", "icrc_error"));
        assert_eq!(counter(&s.value), 0.0);
        // The quote is escaped (prometheus-parse hands label values back still escaped).
        assert_eq!(s.labels.get("iface"), Some("veth\\\"0"));
        let rx = find("rocev2_datapath_total", ("counter", "rx_packets"));
        assert_eq!(counter(&rx.value), 7.0);
        assert_eq!(
            gauge(&find("rocev2_qp_cc_rate_bps", ("qpn", &q)).value),
            1e10
        );
        assert_eq!(gauge(&find("rocev2_qp_cc_alpha", ("qpn", &q)).value), 1.0);
        assert_eq!(
            counter(&find("rocev2_qp_retransmits_total", ("qpn", &q)).value),
            0.0
        );
        assert_eq!(gauge(&find("rocev2_info", ("datapath", "xdp")).value), 1.0);
        // One HELP and one TYPE per family, before its samples.
        let families: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .map(|l| l.split(' ').next().unwrap())
            .collect();
        let unique: std::collections::BTreeSet<&&str> = families.iter().collect();
        assert_eq!(unique.len(), families.len(), "{families:?}");
        assert_eq!(families.len(), scrape.docs.len());
    }
}
