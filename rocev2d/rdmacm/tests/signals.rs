//! A signal ends a blocking wait of either library with `EINTR`, as it ends the `read` of
//! libibverbs' completion channel and of librdmacm's event channel. qperf ends each timed loop
//! with `SIGALRM` (its handler has no `SA_RESTART`) while blocked in `ibv_get_cq_event`; a
//! wait that carried on after the signal left its server in the loop and the client without
//! results. No device is needed: the waits are the libraries' own.

use rocev2_rdmacm::channel::{free_channel, new_channel, rdma_get_cm_event};
use std::thread::JoinHandle;
use std::time::Duration;

extern "C" fn ignore(_: libc::c_int) {}

/// Signals `waiter`'s thread every 10 ms, as qperf's interval timer does, until it returns:
/// however late it starts to wait, a signal comes while it waits. A wait that outlives a
/// thousand signals ignores them: the test fails rather than hangs.
fn interrupt_until_finished<T>(waiter: &JoinHandle<T>) {
    use std::os::unix::thread::JoinHandleExt;
    // SAFETY: a zeroed sigaction is valid; the handler does nothing and is async-signal-safe;
    // no SA_RESTART, as qperf installs its SIGALRM handler.
    unsafe {
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = ignore as extern "C" fn(libc::c_int) as libc::sighandler_t;
        assert_eq!(
            libc::sigaction(libc::SIGUSR1, &act, std::ptr::null_mut()),
            0
        );
    }
    for _ in 0..1000 {
        if waiter.is_finished() {
            return;
        }
        // SAFETY: the thread is not joined yet, so its pthread_t stays valid.
        unsafe { libc::pthread_kill(waiter.as_pthread_t(), libc::SIGUSR1) };
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("the wait carried on through a thousand signals");
}

#[test]
fn a_signal_ends_a_completion_channel_wait_with_eintr() {
    let set = rocev2_ibverbs::epoll::create().expect("epoll set");
    let waiter = std::thread::spawn(move || {
        rocev2_ibverbs::epoll::next::<u8>(&set, || ()).map(|p| p as usize)
    });
    interrupt_until_finished(&waiter);
    assert_eq!(waiter.join().expect("waiter"), Err(libc::EINTR));
}

#[test]
fn a_signal_ends_an_event_channel_wait_with_eintr() {
    let ch = new_channel().expect("event channel") as usize;
    let waiter = std::thread::spawn(move || {
        let mut ev = std::ptr::null_mut();
        let ret = rdma_get_cm_event(ch as *mut _, &mut ev);
        (ret, std::io::Error::last_os_error().raw_os_error())
    });
    interrupt_until_finished(&waiter);
    assert_eq!(waiter.join().expect("waiter"), (-1, Some(libc::EINTR)));
    free_channel(ch as *mut _).expect("free channel");
}
