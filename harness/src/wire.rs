//! Just enough of the Postgres wire protocol, read from the server's side of a box-to-shard link,
//! to tell a trigger when a transaction opens, a write completes and a commit lands (DESIGN
//! section 10). The proxy forwards bytes and knows nothing of Postgres; this reads them.
//!
//! Every server message is a type byte and a big-endian length that counts itself. Two carry
//! what a trigger needs: CommandComplete (`C`, its tag names the statement and its rows, e.g.
//! `INSERT 0 5`, `COPY 985`, `DELETE 3`) and ReadyForQuery (`Z`, the transaction status:
//! `I` idle, `T` in a transaction, `E` in a failed one). A third tells the two COPYs apart:
//! CopyOutResponse (`H`) opens a `COPY ... TO STDOUT`, a read whose tag says `COPY n` too.

/// What a link's server stream says happened.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum WireEvent {
    /// A transaction block opened (idle, then in a transaction).
    Txn,
    /// A row-changing statement or COPY completed with rows; `in_txn` when inside a block.
    Write {
        tag: String,
        rows: u64,
        in_txn: bool,
    },
    /// A transaction committed: a block's COMMIT, or a write outside any block (its implicit
    /// transaction), once the server is ready for the next query.
    Commit,
}

/// The server side of one link's connections, each its own [`ServerStream`], fed what the
/// proxy's tap shows (the client's side and a connection's end tell nothing).
#[derive(Default)]
pub struct ServerStreams(std::sync::Mutex<std::collections::HashMap<u64, ServerStream>>);

impl ServerStreams {
    /// The events this piece of a server stream completes.
    pub fn feed(&self, e: &chaos_proxy::TapEvent<'_>) -> Vec<WireEvent> {
        if e.stream != chaos_proxy::Stream::Downstream {
            return vec![];
        }
        let mut streams = self.0.lock().unwrap_or_else(|p| p.into_inner());
        match e.data {
            chaos_proxy::TapData::Bytes(b) => streams.entry(e.connection).or_default().feed(b),
            chaos_proxy::TapData::End => {
                streams.remove(&e.connection);
                vec![]
            }
        }
    }
}

/// Messages longer than this are not Postgres talking: stop reading the stream.
const MAX_MESSAGE: usize = 1 << 30;

/// One link's server-to-client stream, fed in the pieces the proxy forwards.
#[derive(Debug)]
pub struct ServerStream {
    buf: Vec<u8>,
    /// Before the first real message the server may answer an SSL or GSS request with one
    /// byte (`N`, `S` or `G`); the first message proper is `R` (authentication) or `E`.
    started: bool,
    status: u8,
    /// A write outside a block since the last ReadyForQuery (committed when it comes).
    implicit_write: bool,
    last_tag: String,
    /// Inside a `COPY ... TO STDOUT` (after CopyOutResponse): its `COPY n` is no write.
    copy_out: bool,
    broken: bool,
}

impl Default for ServerStream {
    fn default() -> ServerStream {
        ServerStream {
            buf: Vec::new(),
            started: false,
            status: b'I',
            implicit_write: false,
            last_tag: String::new(),
            copy_out: false,
            broken: false,
        }
    }
}

impl ServerStream {
    /// Read the next piece of the stream; the events it completes, in order.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<WireEvent> {
        let mut out = Vec::new();
        if self.broken {
            return out;
        }
        self.buf.extend_from_slice(bytes);
        let mut at = 0;
        if !self.started {
            while at < self.buf.len() && !matches!(self.buf[at], b'R' | b'E') {
                at += 1;
            }
            if at < self.buf.len() {
                self.started = true;
            }
        }
        while self.started && self.buf.len() - at >= 5 {
            let kind = self.buf[at];
            let len = u32::from_be_bytes([
                self.buf[at + 1],
                self.buf[at + 2],
                self.buf[at + 3],
                self.buf[at + 4],
            ]) as usize;
            if !(4..=MAX_MESSAGE).contains(&len) {
                self.broken = true;
                self.buf.clear();
                return out;
            }
            if self.buf.len() - at < 1 + len {
                break;
            }
            let body = &self.buf[at + 5..at + 1 + len];
            match kind {
                b'H' => self.copy_out = true,
                b'C' => {
                    let tag = String::from_utf8_lossy(body.strip_suffix(&[0]).unwrap_or(body));
                    let tag = tag.into_owned();
                    let read = std::mem::take(&mut self.copy_out);
                    if let Some(rows) = written_rows(&tag).filter(|_| !read) {
                        let in_txn = self.status != b'I';
                        if !in_txn {
                            self.implicit_write = true;
                        }
                        out.push(WireEvent::Write {
                            tag: tag.clone(),
                            rows,
                            in_txn,
                        });
                    }
                    self.last_tag = tag;
                }
                b'Z' if len == 5 => {
                    let status = body[0];
                    match (self.status, status) {
                        (b'I', b'T') => out.push(WireEvent::Txn),
                        (b'T' | b'E', b'I') if self.last_tag == "COMMIT" => {
                            out.push(WireEvent::Commit)
                        }
                        (b'I', b'I') if self.implicit_write => out.push(WireEvent::Commit),
                        _ => {}
                    }
                    self.implicit_write = false;
                    self.status = status;
                }
                _ => {}
            }
            at += 1 + len;
        }
        self.buf.drain(..at);
        out
    }
}

/// Rows a CommandComplete tag says a statement wrote (None: not a write, or no rows).
fn written_rows(tag: &str) -> Option<u64> {
    let mut words = tag.split(' ');
    let verb = words.next()?;
    if !matches!(verb, "INSERT" | "UPDATE" | "DELETE" | "COPY" | "MERGE") {
        return None;
    }
    let rows: u64 = tag.rsplit(' ').next()?.parse().ok()?;
    (rows > 0).then_some(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(kind: u8, body: &[u8]) -> Vec<u8> {
        let mut m = vec![kind];
        m.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
        m.extend_from_slice(body);
        m
    }

    fn complete(tag: &str) -> Vec<u8> {
        let mut b = tag.as_bytes().to_vec();
        b.push(0);
        msg(b'C', &b)
    }

    fn ready(status: u8) -> Vec<u8> {
        msg(b'Z', &[status])
    }

    fn startup() -> Vec<u8> {
        let mut s = vec![b'N']; // the answer to an SSL request
        s.extend(msg(b'R', &0u32.to_be_bytes()));
        s.extend(msg(b'S', b"server_version\x0015\x00"));
        s.extend(ready(b'I'));
        s
    }

    #[test]
    fn a_block_opens_writes_and_commits() {
        let mut s = ServerStream::default();
        let mut bytes = startup();
        bytes.extend(complete("BEGIN"));
        bytes.extend(ready(b'T'));
        bytes.extend(complete("COPY 985"));
        bytes.extend(ready(b'T'));
        bytes.extend(complete("COMMIT"));
        bytes.extend(ready(b'I'));
        let events = s.feed(&bytes);
        assert_eq!(
            events,
            vec![
                WireEvent::Txn,
                WireEvent::Write {
                    tag: "COPY 985".into(),
                    rows: 985,
                    in_txn: true
                },
                WireEvent::Commit
            ]
        );
    }

    #[test]
    fn messages_cut_anywhere_decode_the_same() {
        let mut bytes = startup();
        bytes.extend(complete("DELETE 3"));
        bytes.extend(ready(b'I'));
        bytes.extend(complete("SELECT 1"));
        bytes.extend(ready(b'I'));
        bytes.extend(complete("BEGIN"));
        bytes.extend(ready(b'T'));
        bytes.extend(complete("INSERT 0 0"));
        bytes.extend(ready(b'T'));
        bytes.extend(complete("ROLLBACK"));
        bytes.extend(ready(b'I'));
        let whole = ServerStream::default().feed(&bytes);
        assert_eq!(
            whole,
            vec![
                WireEvent::Write {
                    tag: "DELETE 3".into(),
                    rows: 3,
                    in_txn: false
                },
                WireEvent::Commit,
                WireEvent::Txn,
            ],
            "an autocommit write commits at the next ready; a rolled-back block commits nothing"
        );
        for cut in 1..bytes.len() {
            let mut s = ServerStream::default();
            let mut got = s.feed(&bytes[..cut]);
            got.extend(s.feed(&bytes[cut..]));
            assert_eq!(got, whole, "cut at {cut}");
        }
    }

    /// `\copy (select ...) to stdout`, as a mover that copies with psql reads its source: a
    /// COPY out is a read, though its tag says `COPY 985` like the write into the destination.
    #[test]
    fn a_copy_out_is_no_write() {
        let mut s = ServerStream::default();
        let mut bytes = startup();
        bytes.extend(msg(b'H', &[0, 0, 3, 0, 0, 0, 0, 0, 0]));
        bytes.extend(msg(b'd', b"AP-0002\t...\n"));
        bytes.extend(msg(b'c', b""));
        bytes.extend(complete("COPY 985"));
        bytes.extend(ready(b'I'));
        bytes.extend(msg(b'G', &[0, 0, 3, 0, 0, 0, 0, 0, 0]));
        bytes.extend(complete("COPY 985"));
        bytes.extend(ready(b'I'));
        assert_eq!(
            s.feed(&bytes),
            vec![
                WireEvent::Write {
                    tag: "COPY 985".into(),
                    rows: 985,
                    in_txn: false
                },
                WireEvent::Commit
            ],
            "only the COPY in (after CopyInResponse) writes"
        );
    }

    #[test]
    fn garbage_stops_the_reading_not_the_link() {
        let mut s = ServerStream::default();
        let mut bytes = startup();
        bytes.extend([b'C', 0xff, 0xff, 0xff, 0xff]);
        assert!(s.feed(&bytes).is_empty());
        assert!(s.feed(&complete("DELETE 1")).is_empty());
    }
}
