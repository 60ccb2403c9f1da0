//! Real-time scheduling for the few threads whose timing is the product's claim: the proxy's
//! API thread, its forwarding workers while some link is timed (`server::priority`), and the
//! thread that releases a held fault at its instant.
//!
//! On a 2-core machine shared with four Postgres servers and four movers, a normal thread
//! (even at nice -10) was woken up to 4 ms late and a fault landed up to 6 ms after its
//! instant. A SCHED_FIFO thread runs as soon as it is runnable. These threads spend their
//! time waiting (sockets, timers) and do little work each time, and Linux keeps 5% of every
//! second for normal threads (`sched_rt_runtime_us`), so they cannot starve the system under
//! test. Without permission (not root, no CAP_SYS_NICE, a container without it) nothing
//! changes.

/// The SCHED_FIFO priority used (1-99; low, above every normal thread).
pub const PRIORITY: i32 = 10;

/// Put the calling thread on SCHED_FIFO at [`PRIORITY`]; whether it was permitted.
pub fn raise_current_thread() -> bool {
    // 0 is the calling thread.
    raise_thread(0)
}

/// Put the calling thread back on the normal scheduler.
pub fn lower_current_thread() {
    lower_thread(0)
}

/// Put thread `tid` of this process on SCHED_FIFO at [`PRIORITY`]; whether it was permitted.
pub fn raise_thread(tid: libc::pid_t) -> bool {
    let param = libc::sched_param {
        sched_priority: PRIORITY,
    };
    // SAFETY: a thread id of this process; `param` lives across the call.
    unsafe { libc::sched_setscheduler(tid, libc::SCHED_FIFO, &param) == 0 }
}

/// Put thread `tid` of this process back on the normal scheduler.
pub fn lower_thread(tid: libc::pid_t) {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: as above.
    unsafe {
        libc::sched_setscheduler(tid, libc::SCHED_OTHER, &param);
    }
}
