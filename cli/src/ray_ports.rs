//! The head's GCS port, held by `tf-cluster ray` from its start until Ray's
//! GCS is about to bind it: bound without listening and without
//! SO_REUSEADDR, so no other process, of any user, can listen there
//! meanwhile (a worker node's `ray start` would send the step's token to
//! it). A port another user already listens on is refused at once, naming
//! the user. The guard (`ray_guard.py`) closes the IPv4 socket right before
//! Ray starts its GCS (Ray's GCS listens on IPv4's every address), then
//! checks the listener before any call, and keeps the IPv6 one (bound with
//! IPV6_V6ONLY) while Ray runs: no one listens on the port's IPv6 side.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// The uids listening on `port` (IPv4 and IPv6), from /proc/net/tcp{,6}.
pub fn listeners(port: u16) -> Vec<u32> {
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|table| std::fs::read_to_string(table).ok())
        .flat_map(|text| listeners_in(&text, port))
        .collect()
}

/// The uids of `text`'s (a /proc/net/tcp table's) sockets listening on
/// `port`: state 0A, local address `ADDR:PORT` in hex, uid the 8th column.
fn listeners_in(text: &str, port: u16) -> Vec<u32> {
    text.lines()
        .skip(1)
        .filter_map(|row| {
            let col: Vec<&str> = row.split_whitespace().collect();
            let local = col.get(1)?.rsplit_once(':')?.1;
            let listening = *col.get(3)? == "0A";
            (listening && u16::from_str_radix(local, 16).ok()? == port)
                .then(|| col.get(7)?.parse().ok())?
        })
        .collect()
}

/// `uid`'s name and number, as the guard says it: `bob (uid 1001)`.
pub fn whose(uid: u32) -> String {
    if uid == unsafe { libc::getuid() } {
        return "another process of yours, not this step's GCS".into();
    }
    let name = std::fs::read_to_string("/etc/passwd")
        .ok()
        .and_then(|text| {
            text.lines().find_map(|l| {
                let f: Vec<&str> = l.split(':').collect();
                (f.get(2)? == &uid.to_string().as_str()).then(|| f[0].to_string())
            })
        });
    match name {
        Some(name) => format!("{name} (uid {uid})"),
        None => format!("uid {uid}"),
    }
}

/// A TCP socket bound to every address of one family on `port`, not
/// listening, without SO_REUSEADDR (another's listen would then succeed).
fn bind_only(port: u16, v6: bool) -> std::io::Result<OwnedFd> {
    let family = if v6 { libc::AF_INET6 } else { libc::AF_INET };
    let fd = unsafe { libc::socket(family, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let rc = if v6 {
        let one: libc::c_int = 1;
        unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::IPPROTO_IPV6,
                libc::IPV6_V6ONLY,
                (&one as *const libc::c_int).cast(),
                size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        let mut addr: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
        addr.sin6_family = libc::AF_INET6 as libc::sa_family_t;
        addr.sin6_port = port.to_be();
        bind_to(&fd, &addr)
    } else {
        let mut addr: libc::sockaddr_in = unsafe { std::mem::zeroed() };
        addr.sin_family = libc::AF_INET as libc::sa_family_t;
        addr.sin_port = port.to_be();
        bind_to(&fd, &addr)
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(fd)
}

/// bind(2) of `fd` to `addr`, a sockaddr_in or sockaddr_in6: its return.
fn bind_to<T>(fd: &OwnedFd, addr: &T) -> libc::c_int {
    let len = size_of::<T>() as libc::socklen_t;
    unsafe { libc::bind(fd.as_raw_fd(), (addr as *const T).cast(), len) }
}

/// Holds the head's GCS `port` on IPv4 and IPv6 (each with its family, 4
/// or 6). Another's listener there is refused in one line; a port that
/// cannot be bound for another reason (a closed connection's TIME_WAIT, no
/// IPv6) is left to the guard's check.
pub fn hold(port: u16) -> Result<Vec<(OwnedFd, u8)>, String> {
    let mut held = Vec::new();
    for v6 in [false, true] {
        match bind_only(port, v6) {
            Ok(fd) => held.push((fd, if v6 { 6 } else { 4 })),
            Err(e) if e.raw_os_error() == Some(libc::EADDRINUSE) => {
                if let Some(&uid) = listeners(port).first() {
                    return Err(format!(
                        "the head's GCS port {port} is taken by {}: Ray not started, and not started again with this step's token",
                        whose(uid)
                    ));
                }
            }
            Err(_) => {}
        }
    }
    Ok(held)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:2EE0 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1001        0 4242 1 0000000000000000 100 0 0 10 0
   1: 0100007F:2EE0 0100007F:9C40 01 00000000:00000000 00:00000000 00000000  1000        0 4243 1 0000000000000000 100 0 0 10 0
   2: 0100007F:2EE1 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 4244 1 0000000000000000 100 0 0 10 0
";

    #[test]
    fn listeners_are_the_listening_rows_of_the_port() {
        assert_eq!(listeners_in(TABLE, 12000), [1001]);
        assert_eq!(listeners_in(TABLE, 12001), [1000]);
        assert!(listeners_in(TABLE, 12002).is_empty());
    }

    #[test]
    fn a_held_port_cannot_be_listened_on_and_a_listened_one_is_refused() {
        let free = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
        let port = free.local_addr().unwrap().port();
        drop(free);
        let held = hold(port).unwrap();
        assert!(!held.is_empty());
        assert!(std::net::TcpListener::bind(("0.0.0.0", port)).is_err());
        drop(held);
        let other = std::net::TcpListener::bind(("0.0.0.0", port)).unwrap();
        let e = hold(port).unwrap_err();
        assert!(
            e.contains(&format!(
                "GCS port {port} is taken by another process of yours"
            )),
            "{e}"
        );
        drop(other);
    }
}
