//! AF_XDP steering: RoCEv2 frames go to the AF_XDP socket of the queue they arrived on,
//! everything else to the kernel. Fails open (STYLE.md §1.3): anything unparsable is passed.
#![no_std]
#![no_main]

use aya_ebpf::{
    bindings::xdp_action,
    macros::{map, xdp},
    maps::{PerCpuArray, XskMap},
    programs::XdpContext,
};
use rocev2_ebpf::parse::{Headers, Ip, headers};
use rocev2_ebpf_common::steer::{Counter, MAX_QUEUES};

/// Socket per rx queue, filled by the loader (`steer::XSKS_MAP`).
#[map(name = "ROCEV2_XSKS")]
static XSKS: XskMap = XskMap::with_max_entries(MAX_QUEUES, 0);

/// Per-CPU counters indexed by [`Counter`] (`steer::COUNTERS_MAP`).
#[map(name = "ROCEV2_STEER_COUNTERS")]
static COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(Counter::COUNT, 0);

/// `frags`: loaded with `BPF_F_XDP_HAS_FRAGS`, so it may run on interfaces whose MTU exceeds a
/// page (jumbo frames arrive as several buffers; the headers it parses are in the first) and the
/// AF_XDP socket receives such frames as several descriptors (`XDP_USE_SG`).
#[xdp(frags)]
pub fn rocev2_steer(ctx: XdpContext) -> u32 {
    // SAFETY: data..data_end is this packet as handed to us by the kernel.
    let found = unsafe { headers(ctx.data(), ctx.data_end()) };
    let (counter, action) = match found {
        Headers::Ip(Ip { roce: true, .. }) => match XSKS.redirect(ctx.rx_queue_index(), 0) {
            Ok(action) => (Counter::Redirected, action),
            Err(_) => (Counter::NoSocket, xdp_action::XDP_PASS),
        },
        Headers::Ip(_) | Headers::NotIp => (Counter::NotRoce, xdp_action::XDP_PASS),
        Headers::Truncated => (Counter::Truncated, xdp_action::XDP_PASS),
    };
    count(counter);
    action
}

#[inline(always)]
fn count(counter: Counter) {
    if let Some(slot) = COUNTERS.get_ptr_mut(counter as u32) {
        // SAFETY: a per-CPU slot; nothing else runs on this CPU meanwhile.
        unsafe { *slot += 1 };
    }
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
