//! A lock service's members talking to each other through the proxy (etcd's and ZooKeeper's three members alike): each member names the others by host name (`lock-2`), the same for all, and runs in a mount namespace of its own whose `/etc/hosts` maps every other member's name to a loopback address unique to the pair (member 1 sees `lock-2` at 127.1.2.1, member 3 at 127.3.2.1). The proxy's link `lock-1->lock-2` listens there, on each of lock-2's peer ports, and forwards to lock-2's listener on 127.0.0.1, so cutting it cuts the connections lock-1 opens to lock-2 and nothing else.

use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use tokio::process::Command;

/// `127.I.J.1`: where member I reaches member J (the proxy's link `lock-I->lock-J`).
pub(super) fn pair_ip(from: usize, to: usize) -> String {
    format!("127.{from}.{to}.1")
}

/// The name members know member `n` by.
pub(super) fn host(n: usize) -> String {
    format!("lock-{n}")
}

/// The members' peer links: for each ordered pair `(link, listen, upstream)` once per peer port
/// of the member connected to. `members` are `(number, node name, its peer ports)`.
pub(super) fn links(members: &[(usize, String, Vec<u16>)]) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    if members.len() < 2 {
        return out;
    }
    for (from, from_node, _) in members {
        for (to, to_node, ports) in members.iter().filter(|t| t.0 != *from) {
            for port in ports {
                out.push((
                    chaos_nemesis::Link::name(from_node, to_node),
                    format!("{}:{port}", pair_ip(*from, *to)),
                    format!("127.0.0.1:{port}"),
                ));
            }
        }
    }
    out
}

/// Write member `n`'s own `/etc/hosts` to `path`: itself on 127.0.0.1, each other member of
/// `all` (their numbers) at the pair's address.
pub(super) fn write_hosts(path: &Path, n: usize, all: &[usize]) -> anyhow::Result<()> {
    let mut text = format!("127.0.0.1 localhost\n127.0.0.1 {}\n", host(n));
    for other in all.iter().filter(|o| **o != n) {
        text.push_str(&format!("{} {}\n", pair_ip(n, *other), host(*other)));
    }
    std::fs::write(path, text).map_err(|e| anyhow::anyhow!("write {}: {e}", path.display()))
}

/// Refuse a cluster when not root: the mount namespaces need it.
pub(super) fn need_root(count: usize) -> anyhow::Result<()> {
    if count > 1 && unsafe { libc::geteuid() } != 0 {
        anyhow::bail!(
            "[lock] members = {count} needs root: each member runs in a mount namespace of its own (its /etc/hosts sends its peer traffic through the proxy); run as root, or use members = 1"
        );
    }
    Ok(())
}

/// Run the child as `run_as`, and with `hosts` (when a cluster's member) as its `/etc/hosts` in
/// a mount namespace of its own.
pub(super) fn user_and_hosts(
    cmd: &mut Command,
    hosts: Option<&Path>,
    run_as: Option<(u32, u32)>,
) -> anyhow::Result<()> {
    match hosts {
        Some(hosts) => private_hosts(cmd, hosts, run_as),
        None => {
            if let Some((uid, gid)) = run_as {
                cmd.uid(uid).gid(gid);
            }
            Ok(())
        }
    }
}

/// Run the child in a mount namespace of its own with `hosts` as its `/etc/hosts`, then as
/// `run_as` (the namespace and the mount need root, so the user changes after them, here, and
/// the parent-death signal set after this hook survives).
fn private_hosts(
    cmd: &mut Command,
    hosts: &Path,
    run_as: Option<(u32, u32)>,
) -> anyhow::Result<()> {
    let src = std::ffi::CString::new(hosts.as_os_str().as_bytes())?;
    let dst = std::ffi::CString::new("/etc/hosts")?;
    let root = std::ffi::CString::new("/")?;
    // SAFETY: unshare, mount, setgroups, setgid and setuid are async-signal-safe; the strings
    // were made before the fork; nothing allocates.
    unsafe {
        cmd.pre_exec(move || {
            let fail = || Err(std::io::Error::last_os_error());
            if libc::unshare(libc::CLONE_NEWNS) != 0 {
                return fail();
            }
            let none = std::ptr::null();
            let private = libc::MS_REC | libc::MS_PRIVATE;
            if libc::mount(none, root.as_ptr(), none, private, std::ptr::null()) != 0 {
                return fail();
            }
            let bind = libc::MS_BIND;
            if libc::mount(src.as_ptr(), dst.as_ptr(), none, bind, std::ptr::null()) != 0 {
                return fail();
            }
            if let Some((uid, gid)) = run_as {
                if libc::setgroups(0, std::ptr::null()) != 0
                    || libc::setgid(gid) != 0
                    || libc::setuid(uid) != 0
                {
                    return fail();
                }
            }
            Ok(())
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_ordered_pair_has_a_link_per_peer_port_at_the_pair_s_address() {
        let members: Vec<(usize, String, Vec<u16>)> = (1..=3)
            .map(|n| (n, host(n), vec![1000 + n as u16, 2000 + n as u16]))
            .collect();
        let links = links(&members);
        assert_eq!(links.len(), 12);
        let to_2: Vec<_> = links.iter().filter(|l| l.0 == "lock-1->lock-2").collect();
        assert_eq!(
            to_2,
            [
                &(
                    "lock-1->lock-2".into(),
                    "127.1.2.1:1002".into(),
                    "127.0.0.1:1002".into()
                ),
                &(
                    "lock-1->lock-2".into(),
                    "127.1.2.1:2002".into(),
                    "127.0.0.1:2002".into()
                ),
            ]
        );
        assert!(super::links(&members[..1]).is_empty());
    }
}
