//! Ctrl-C and SIGTERM during `chaos check`: a flag every stage of the check looks at between chunks.

use std::sync::atomic::{AtomicBool, Ordering};

/// Set when the user interrupts: a check in progress stops at its next chunk.
static CANCEL: AtomicBool = AtomicBool::new(false);

/// Stop any check in progress (Ctrl-C, SIGTERM): it returns [`Interrupted`] promptly.
pub fn cancel() {
    CANCEL.store(true, Ordering::SeqCst);
}

pub(super) fn cancelled() -> bool {
    CANCEL.load(Ordering::Relaxed)
}

/// The error of a check stopped by [`cancel`].
#[derive(Debug, thiserror::Error)]
#[error("interrupted")]
pub struct Interrupted;
