//! A proxy's sockets as duplicated descriptors, so a disable cuts them in the API call itself.
//!
//! A proxy's listening socket and every open connection's two sockets are kept here as
//! duplicates, so a disable shuts them down (`shutdown(2)`: clients see the connection end, new
//! connects are refused) rather than when the proxy's tasks next run. On a loaded machine the
//! tasks took up to 15 ms to be scheduled and close four links; Toxiproxy too closes every
//! connection before it answers. The tasks then wind down on their own.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, Mutex};

/// One proxy's listening socket and its open connections' sockets, as duplicates.
#[derive(Default)]
pub(crate) struct Sockets {
    inner: Mutex<SocketsInner>,
}

#[derive(Default)]
struct SocketsInner {
    cut: bool,
    next: u64,
    open: HashMap<u64, Vec<OwnedFd>>,
}

/// Removes a connection's descriptors from its proxy's `Sockets` when the connection ends.
pub(crate) struct Registered {
    sockets: Arc<Sockets>,
    key: u64,
}

impl Drop for Registered {
    fn drop(&mut self) {
        let mut inner = self.sockets.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.open.remove(&self.key);
    }
}

fn shut(fd: &OwnedFd) {
    // SAFETY: the descriptor is ours (a dup) and open for as long as `fd` lives.
    unsafe {
        libc::shutdown(fd.as_raw_fd(), libc::SHUT_RDWR);
    }
}

impl Sockets {
    /// Keep duplicates of `fds` until the returned guard drops; a proxy already cut shuts
    /// them at once.
    pub(crate) fn register(self: &Arc<Self>, fds: &[BorrowedFd<'_>]) -> Registered {
        let dups: Vec<OwnedFd> = fds
            .iter()
            .filter_map(|fd| fd.try_clone_to_owned().ok())
            .collect();
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if inner.cut {
            dups.iter().for_each(shut);
        }
        inner.next += 1;
        let key = inner.next;
        inner.open.insert(key, dups);
        Registered {
            sockets: self.clone(),
            key,
        }
    }

    /// Shut every registered socket down, now and for any registered later.
    pub(crate) fn cut_all(&self) {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.cut = true;
        inner.open.values().flatten().for_each(shut);
    }
}
