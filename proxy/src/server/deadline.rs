//! A pump's own precise timer: a timerfd in the runtime's epoll set.
//!
//! tokio's timer rounds deadlines up to whole milliseconds, and the shared timer thread
//! (`precise`) costs a second wake-up per delayed chunk: the timer thread wakes at the
//! deadline, then wakes a proxy worker, each hop up to tens of microseconds on a busy VM
//! and each adding its own jitter. A timerfd expires on a kernel hrtimer with no slack and
//! wakes the worker's `epoll_wait` itself, so a due chunk is written by the first thread to
//! run. Made only when a toxic first makes the link wait: a link without one never has it.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Instant;
use tokio::io::unix::AsyncFd;

pub(crate) struct Deadline {
    fd: AsyncFd<OwnedFd>,
    /// The instant the timer is set for, so waiting again for it does not re-arm it.
    armed: Option<Instant>,
}

impl Deadline {
    pub(crate) fn new() -> io::Result<Deadline> {
        // SAFETY: plain syscall; the descriptor is owned from here on.
        let raw = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a new descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: the AsyncFd owns the descriptor; nothing else closes or replaces it.
        let fd = unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE)? };
        Ok(Deadline { fd, armed: None })
    }

    /// Set the timer to fire `after` from now (std's Instant is CLOCK_MONOTONIC too).
    fn arm(&mut self, at: Instant) -> io::Result<()> {
        let after = at.saturating_duration_since(Instant::now());
        // A zero it_value disarms a timerfd: fire a nanosecond from now instead.
        let nanos = after.subsec_nanos().max(u32::from(after.as_secs() == 0));
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: after.as_secs() as libc::time_t,
                tv_nsec: nanos as libc::c_long,
            },
        };
        // SAFETY: a valid timerfd and a spec that lives across the call. Setting it also
        // resets its expiry count, so an earlier expiry is not read as this one.
        let r =
            unsafe { libc::timerfd_settime(self.fd.as_raw_fd(), 0, &spec, std::ptr::null_mut()) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        self.armed = Some(at);
        Ok(())
    }

    /// Complete at `at`, never before. Cancel-safe: dropped and called again with the same
    /// instant, it keeps the timer as set.
    pub(crate) async fn sleep_until(&mut self, at: Instant) -> io::Result<()> {
        loop {
            if Instant::now() >= at {
                return Ok(());
            }
            if self.armed != Some(at) {
                self.arm(at)?;
            }
            let mut ready = self.fd.readable().await?;
            let mut expirations = [0u8; 8];
            // SAFETY: reads 8 bytes into a local 8-byte buffer.
            let read = ready.try_io(|fd| {
                let n = unsafe {
                    libc::read(
                        fd.as_raw_fd(),
                        expirations.as_mut_ptr().cast(),
                        expirations.len(),
                    )
                };
                if n < 0 {
                    Err(io::Error::last_os_error())
                } else {
                    Ok(())
                }
            });
            if let Ok(r) = read {
                r?;
                // Fired: the next wait arms it again, even for the same instant, and waits
                // for the next expiry rather than reading this one's readiness again.
                ready.clear_ready();
                self.armed = None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn never_completes_before_its_instant() {
        let mut d = Deadline::new().unwrap();
        for ms in [3u64, 1, 0, 2] {
            let at = Instant::now() + Duration::from_millis(ms);
            d.sleep_until(at).await.unwrap();
            assert!(Instant::now() >= at);
        }
    }

    #[tokio::test]
    async fn a_dropped_wait_leaves_a_later_one_correct() {
        let mut d = Deadline::new().unwrap();
        let far = Instant::now() + Duration::from_secs(3600);
        // Arm for an hour, give up at once, then wait for a near instant.
        let gave_up = tokio::time::timeout(Duration::from_millis(1), d.sleep_until(far)).await;
        assert!(gave_up.is_err());
        let near = Instant::now() + Duration::from_millis(2);
        d.sleep_until(near).await.unwrap();
        assert!(Instant::now() >= near);
    }
}
