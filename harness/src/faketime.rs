//! libfaketime, as the clock faults use it: the file a box's or node's offset is read from, and the environment that preloads it (the backends start a clocked node with it; `faults/clock.rs` writes the offsets).

use std::path::{Path, PathBuf};

/// Where libfaketime lives on Debian (the host's, and the images').
pub const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// The file libfaketime reads a box's or node's clock offset from (a clock fault writes it).
/// A node whose file exists when it starts runs under libfaketime (both backends).
pub fn faketime_file(log_dir: &Path, name: &str) -> PathBuf {
    log_dir.join(format!("{name}.faketime"))
}

/// The environment that puts a process under libfaketime, reading `file`, with only its
/// real-time clock faked: a clock fault in production moves the wall clock, never
/// CLOCK_MONOTONIC (and a faked monotonic clock hangs timed waits, e.g. Python's).
pub fn env_for(file: &Path) -> Vec<(String, String)> {
    vec![
        ("LD_PRELOAD".into(), LIBFAKETIME.into()),
        ("FAKETIME_TIMESTAMP_FILE".into(), file.display().to_string()),
        ("FAKETIME_NO_CACHE".into(), "1".into()),
        ("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into()),
    ]
}
