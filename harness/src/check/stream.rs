//! `history.jsonl` read once for everything `chaos check` makes of it: the verdict (`HistoryFold`), the report (`DigestBuilder`) and the story (`StoryFold`), in memory that does not grow with the history.
//!
//! Three stages, on threads of their own:
//! - the reader cuts the file into chunks of whole lines and cuts off a torn
//!   last line (the only line allowed to be cut short);
//! - decoders (one per core) check each line is UTF-8 and decode it into the
//!   fields the consumers read ([`OpView`]), chunk by chunk, copying them
//!   into the chunk's batch: the lines the harness writes by hand (`scan`),
//!   any other by serde, which also says what is wrong with a bad one;
//! - the consumer takes the batches in order and feeds each event to the
//!   fold, the digest and the story.
//!
//! An ingest line is mostly its turbine list, and a shard's list is the same
//! line after line. A decoder keeps the lists it has decoded (as their JSON
//! text) and recognises them byte for byte; the fold is given the list
//! decoded once and numbered, so it finds its group without reading names
//! (`HistoryFold::observe_fields`, which judges as `observe` by contract).
//! An ingest event whose list holds anything but names is folded from its
//! own text with `observe_line`.

use super::scan::{self, Turbines};
use chaos_checkers::{FoldEvent, HistoryFold, TurbineList};
use chaos_history::verb;
use chaos_history::{Op, OpType, OpView, RunMeta, Scalar, ValueFields};
use chaos_report::{DigestBuilder, EventLookup, HistoryDigest, StoryFold};
use std::borrow::Cow;
use std::io::Read;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, sync_channel, Receiver, Sender, SyncSender};
use std::sync::Arc;

/// The history is read this much at a time, then to the end of a line.
const CHUNK_BYTES: usize = 4 << 20;
/// Turbine lists a decoder remembers.
const LISTS_KEPT: usize = 16;

/// What one pass over the history gives.
pub struct Streamed {
    pub fold: HistoryFold,
    pub digest: HistoryDigest,
    pub story: StoryFold,
    /// The last line was cut short: the harness stopped mid-write.
    pub torn_tail: bool,
}

/// Read `path` once for the verdict, the report and the story.
pub fn read(path: &Path, meta: &RunMeta) -> anyhow::Result<Streamed> {
    let decoders = std::thread::available_parallelism().map_or(1, |n| n.get().clamp(1, 4));
    read_in(path, meta, CHUNK_BYTES, decoders)
}

/// Why the pass stopped early.
enum Stop {
    /// The first bad line, as one line of text naming the file and the line.
    Bad(String),
    Interrupted,
}

pub(crate) fn read_in(
    path: &Path,
    meta: &RunMeta,
    chunk_bytes: usize,
    decoders: usize,
) -> anyhow::Result<Streamed> {
    let file = std::fs::File::open(path)
        .map_err(|e| anyhow::anyhow!("{}: cannot read: {e}", path.display()))?;
    let shown = path.display().to_string();
    let (consumed, read) = std::thread::scope(|s| {
        let mut chunk_txs = Vec::new();
        let mut batch_rxs = Vec::new();
        // Buffers go back to where they were filled, to be filled again: fresh
        // memory costs a page fault per page, and a chunk is a thousand pages.
        let (free_tx, free_rx) = channel::<Vec<u8>>();
        for _ in 0..decoders {
            let (chunk_tx, chunk_rx) = sync_channel::<Chunk>(1);
            let (batch_tx, batch_rx) = sync_channel::<Batch>(1);
            let (spent_tx, spent_rx) = channel::<Batch>();
            chunk_txs.push(chunk_tx);
            batch_rxs.push((batch_rx, spent_tx));
            let free_tx = free_tx.clone();
            s.spawn(move || decoder(chunk_rx, batch_tx, free_tx, spent_rx));
        }
        drop(free_tx);
        let shown = &shown;
        let consumer = s.spawn(move || consume(batch_rxs, meta, shown));
        let read = reader(file, chunk_txs, free_rx, chunk_bytes, shown);
        let consumed = consumer
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p));
        (consumed, read)
    });
    let (fold, digest, story) = match consumed {
        Ok(c) => c,
        Err(Stop::Bad(line)) => anyhow::bail!(line),
        Err(Stop::Interrupted) => return Err(super::cancel::Interrupted.into()),
    };
    let torn_tail = match read {
        Ok(torn) => torn,
        Err(Stop::Bad(line)) => anyhow::bail!(line),
        Err(Stop::Interrupted) => return Err(super::cancel::Interrupted.into()),
    };
    Ok(Streamed {
        fold,
        digest: digest.finish(),
        story,
        torn_tail,
    })
}

/// Whole lines of the file, as bytes (a decoder checks they are UTF-8).
struct Chunk {
    /// Byte offset of the chunk in the file.
    offset: u64,
    bytes: Vec<u8>,
}

/// Reads whole lines a chunk at a time and hands chunk k to decoder k mod n.
/// Returns whether the last line was torn (it is not sent).
fn reader(
    mut file: std::fs::File,
    txs: Vec<SyncSender<Chunk>>,
    free: Receiver<Vec<u8>>,
    chunk_bytes: usize,
    path: &str,
) -> Result<bool, Stop> {
    let io = |e: std::io::Error| Stop::Bad(format!("{path}: cannot read: {e}"));
    let mut carry: Vec<u8> = Vec::new();
    let mut offset = 0u64;
    let mut sent = 0usize;
    // A chunk is sent once the next is read: the last one is told apart (a torn
    // line can only be the last one), and blank chunks join the one before.
    let mut pending: Option<Vec<u8>> = None;
    let mut send = |mut bytes: Vec<u8>, last: bool| -> Result<bool, Stop> {
        if super::cancel::cancelled() {
            return Err(Stop::Interrupted);
        }
        let torn = last && cut_torn_tail(&mut bytes);
        let len = bytes.len() as u64;
        let tx = &txs[sent % txs.len()];
        sent += 1;
        // A decoder that is gone means the consumer stopped (it says why):
        // the rest of the file is not read for nothing.
        if tx.send(Chunk { offset, bytes }).is_err() {
            return Err(Stop::Interrupted);
        }
        offset += len;
        Ok(torn)
    };
    loop {
        if super::cancel::cancelled() {
            return Err(Stop::Interrupted);
        }
        let mut bytes = free.try_recv().unwrap_or_default();
        bytes.clear();
        bytes.reserve(carry.len() + chunk_bytes + (64 << 10));
        bytes.extend_from_slice(&carry);
        carry.clear();
        let before = bytes.len();
        (&mut file)
            .take(chunk_bytes as u64)
            .read_to_end(&mut bytes)
            .map_err(io)?;
        let eof = bytes.len() - before < chunk_bytes;
        // Whole lines only: keep what follows the last newline for the next chunk
        // (a line longer than a chunk makes the chunk longer).
        if !eof {
            match memchr::memrchr(b'\n', &bytes) {
                Some(nl) => {
                    carry.extend_from_slice(&bytes[nl + 1..]);
                    bytes.truncate(nl + 1);
                }
                None => {
                    carry = bytes;
                    continue;
                }
            }
        }
        if !bytes.is_empty() {
            let blank = bytes.iter().all(u8::is_ascii_whitespace);
            match (&mut pending, blank) {
                (Some(p), true) => p.extend_from_slice(&bytes),
                (p, _) => {
                    if let Some(previous) = p.replace(bytes) {
                        send(previous, false)?;
                    }
                }
            }
        }
        if eof {
            return match pending.take() {
                Some(last) => send(last, true),
                None => Ok(false),
            };
        }
    }
}

/// Cut the file's last line off when it is torn (cut short by a harness
/// stopped mid-write: its JSON ends early, or a character is cut in two).
fn cut_torn_tail(bytes: &mut Vec<u8>) -> bool {
    let end = bytes.len()
        - bytes
            .iter()
            .rev()
            .take_while(|b| b.is_ascii_whitespace())
            .count();
    let start = memchr::memrchr(b'\n', &bytes[..end]).map_or(0, |i| i + 1);
    let torn = match std::str::from_utf8(&bytes[start..end]) {
        Err(e) => e.error_len().is_none(),
        Ok("") => false,
        Ok(line) => {
            matches!(serde_json::from_str::<serde::de::IgnoredAny>(line), Err(e) if e.is_eof())
        }
    };
    if torn {
        bytes.truncate(start);
    }
    torn
}

/// A string or a JSON text copied into a batch's arena: (start, length).
type At = (u32, u32);

/// A kept `value` field, its strings in the arena.
#[derive(Debug, Clone, Copy)]
enum Field {
    Str(At),
    Int(i64),
    UInt(u64),
    Float(f64),
    Bool(bool),
    Null,
    Json(At),
}

/// The `ValueFields` a record keeps, in this order.
const FIELDS: usize = 23;

/// One decoded line, owned by its batch.
struct Rec {
    offset: u64,
    /// The line's number in its chunk.
    line: u64,
    index: u64,
    time_ns: i64,
    kind: OpType,
    process: At,
    f: At,
    fields: [Option<Field>; FIELDS],
    /// The ingest turbine list (an index into the batch's lists), for the fold.
    list: Option<u32>,
    /// The line itself, for the fold, when it has no list.
    raw: Option<At>,
}

/// A turbine list of names: its JSON text as lines carry it, decoded once.
/// Its `id` is its number for the fold ([`TurbineList::key`]).
struct List {
    id: u64,
    text: String,
    names: Vec<String>,
}

static LIST_IDS: AtomicU64 = AtomicU64::new(0);

/// A chunk decoded: its records, the strings they point into, the lists
/// they name, and the first bad line if any (as the error's one line).
struct Batch {
    recs: Vec<Rec>,
    arena: String,
    lists: Vec<Arc<List>>,
    /// Lines in the chunk (up to the bad one).
    lines: u64,
    /// The first line that is not an event: its number in the chunk, and why.
    bad: Option<(u64, String)>,
}

impl Batch {
    fn put(&mut self, s: &str) -> At {
        let at = (self.arena.len() as u32, s.len() as u32);
        self.arena.push_str(s);
        at
    }

    fn get(&self, at: At) -> &str {
        &self.arena[at.0 as usize..(at.0 + at.1) as usize]
    }

    fn field(&mut self, s: &Option<Scalar>) -> Option<Field> {
        Some(match s.as_ref()? {
            Scalar::Str(text) => Field::Str(self.put(text)),
            Scalar::Int(i) => Field::Int(*i),
            Scalar::UInt(u) => Field::UInt(*u),
            Scalar::Float(x) => Field::Float(*x),
            Scalar::Bool(b) => Field::Bool(*b),
            Scalar::Null => Field::Null,
            Scalar::Json(text) => Field::Json(self.put(text)),
        })
    }

    fn scalar(&self, f: Option<Field>) -> Option<Scalar<'_>> {
        Some(match f? {
            Field::Str(at) => Scalar::Str(Cow::Borrowed(self.get(at))),
            Field::Int(i) => Scalar::Int(i),
            Field::UInt(u) => Scalar::UInt(u),
            Field::Float(x) => Scalar::Float(x),
            Field::Bool(b) => Scalar::Bool(b),
            Field::Null => Scalar::Null,
            Field::Json(at) => Scalar::Json(self.get(at).to_string()),
        })
    }

    /// The record as the consumers read it (`turbines` is not kept: the fold gets the list).
    fn view(&self, r: &Rec) -> OpView<'_> {
        let f = |i: usize| self.scalar(r.fields[i]);
        OpView::new(
            r.index,
            r.time_ns,
            Cow::Borrowed(self.get(r.process)),
            r.kind,
            Cow::Borrowed(self.get(r.f)),
            ValueFields {
                turbine: f(0),
                shard: f(1),
                from: f(2),
                to: f(3),
                why: f(4),
                reason: f(5),
                token: f(6),
                shard_token: f(7),
                holder: f(8),
                target: f(9),
                error: f(10),
                ts_ms: f(11),
                code: f(12),
                after_exit: f(13),
                when: f(14),
                by: f(15),
                turbines: None,
                publisher: f(16),
                repeated_key: f(17),
                object: f(18),
                version: f(19),
                role: f(20),
                leader: f(21),
                members: f(22),
            },
        )
    }
}

/// Why a line is not an event: the column and what serde said, on one line.
fn not_an_event(e: &serde_json::Error) -> String {
    let text = e.to_string();
    let what = match text.rfind(" at line ") {
        Some(at) => &text[..at],
        None => &text,
    };
    if e.is_eof() {
        format!("cut short ({what}), and only the last line may be: not a history event")
    } else {
        format!("not a history event (column {}): {what}", e.column())
    }
}

/// Decodes chunks into batches until the reader or the consumer stops.
/// Chunks go back to the reader, and batches come back from the consumer, to be reused.
fn decoder(
    chunks: Receiver<Chunk>,
    batches: SyncSender<Batch>,
    free: Sender<Vec<u8>>,
    spent: Receiver<Batch>,
) {
    // The lists seen last first: a shard's batches repeat its list.
    let mut lists: Vec<Known> = Vec::new();
    for chunk in chunks {
        if super::cancel::cancelled() {
            return;
        }
        let mut batch = match spent.try_recv() {
            Ok(mut b) => {
                b.recs.clear();
                b.arena.clear();
                b.lists.clear();
                b.lines = 0;
                b.bad = None;
                b
            }
            Err(_) => Batch {
                recs: Vec::with_capacity(chunk.bytes.len() / 256 + 16),
                arena: String::with_capacity(chunk.bytes.len() / 4),
                lists: Vec::new(),
                lines: 0,
                bad: None,
            },
        };
        let bytes = &chunk.bytes[..];
        let mut start = 0;
        while start < bytes.len() {
            let end = memchr::memchr(b'\n', &bytes[start..]).map_or(bytes.len(), |i| start + i);
            let at = chunk.offset + start as u64;
            let line = &bytes[start..end];
            start = end + 1;
            batch.lines += 1;
            let n = batch.lines;
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            // The common shapes by hand; anything else (or anything wrong) by serde.
            let fast = scan::line(line, &lists).map(|scanned| {
                let list = match scanned.turbines {
                    Some(Turbines::Known(k)) => {
                        lists[..=k].rotate_right(1);
                        Some(lists[0].0.clone())
                    }
                    Some(Turbines::New(text, ref names)) if scanned.view.f == verb::INGEST => {
                        let names = names.iter().map(|n| n.to_string()).collect();
                        Some(remember(&mut lists, text, names))
                    }
                    _ => None,
                };
                record(&mut batch, &scanned.view, (at, n), list, line)
            });
            let rec = match fast {
                Some(rec) => rec,
                None => {
                    let text = match std::str::from_utf8(line) {
                        Ok(text) => text,
                        Err(e) => {
                            batch.bad = Some((
                                n,
                                format!(
                                    "not UTF-8 text (byte {} of the line)",
                                    e.valid_up_to() + 1
                                ),
                            ));
                            break;
                        }
                    };
                    if text.trim().is_empty() {
                        continue;
                    }
                    match OpView::parse(text) {
                        Ok(view) => {
                            let list = match &view.value.turbines {
                                Some(Scalar::Json(text))
                                    if view.f == verb::INGEST && text.starts_with('[') =>
                                {
                                    serde_json::from_str(text)
                                        .ok()
                                        .map(|names| remember(&mut lists, text, names))
                                }
                                _ => None,
                            };
                            record(&mut batch, &view, (at, n), list, line)
                        }
                        Err(e) => {
                            batch.bad = Some((n, not_an_event(&e)));
                            break;
                        }
                    }
                }
            };
            match rec {
                Some(rec) => batch.recs.push(rec),
                None => {
                    batch.bad = Some((n, "not UTF-8 text".into()));
                    break;
                }
            }
        }
        let _ = free.send(chunk.bytes);
        if batches.send(batch).is_err() {
            return;
        }
    }
}

/// A list of names seen for the first time, remembered first.
fn remember(lists: &mut Vec<Known>, text: &str, names: Vec<String>) -> Arc<List> {
    let list = Arc::new(List {
        id: LIST_IDS.fetch_add(1, Ordering::Relaxed),
        text: text.to_string(),
        names,
    });
    lists.insert(0, Known(list.clone()));
    lists.truncate(LISTS_KEPT);
    list
}

/// A list a decoder remembers, recognised by its text.
struct Known(Arc<List>);

impl AsRef<str> for Known {
    fn as_ref(&self) -> &str {
        &self.0.text
    }
}

/// A decoded line as a record of `batch`.
fn record(
    batch: &mut Batch,
    view: &OpView,
    (offset, number): (u64, u64),
    list: Option<Arc<List>>,
    line: &[u8],
) -> Option<Rec> {
    let v = &view.value;
    let fields = [
        batch.field(&v.turbine),
        batch.field(&v.shard),
        batch.field(&v.from),
        batch.field(&v.to),
        batch.field(&v.why),
        batch.field(&v.reason),
        batch.field(&v.token),
        batch.field(&v.shard_token),
        batch.field(&v.holder),
        batch.field(&v.target),
        batch.field(&v.error),
        batch.field(&v.ts_ms),
        batch.field(&v.code),
        batch.field(&v.after_exit),
        batch.field(&v.when),
        batch.field(&v.by),
        batch.field(&v.publisher),
        batch.field(&v.repeated_key),
        batch.field(&v.object),
        batch.field(&v.version),
        batch.field(&v.role),
        batch.field(&v.leader),
        batch.field(&v.members),
    ];
    // The fold reads completions, and an ingest batch's invoke too (a batch never answered
    // may have landed); other invokes it only counts.
    let completion = view.kind != OpType::Invoke || view.f == verb::INGEST;
    // Only an ingest event needs its list, and only for `f: "ingest"` does the fold read it.
    let list = match list {
        Some(list) if completion && view.f == verb::INGEST => {
            Some(match batch.lists.iter().position(|l| l.id == list.id) {
                Some(i) => i as u32,
                None => {
                    batch.lists.push(list);
                    batch.lists.len() as u32 - 1
                }
            })
        }
        _ => None,
    };
    // A list of anything but names, a fault or a box's view of its lease: the fold reads the
    // line itself.
    let odd_list = matches!(&v.turbines, Some(Scalar::Json(t)) if t.starts_with('['));
    let whole = HistoryFold::keeps_whole(&view.process, &view.f, view.kind);
    let raw = match whole || (completion && list.is_none() && view.f == verb::INGEST && odd_list) {
        true => Some(batch.put(std::str::from_utf8(line).ok()?)),
        false => None,
    };
    Some(Rec {
        offset,
        line: number,
        index: view.index,
        time_ns: view.time_ns,
        kind: view.kind,
        process: batch.put(&view.process),
        f: batch.put(&view.f),
        fields,
        list,
        raw,
    })
}

/// Takes the batches in order and feeds every event to the fold, the digest and the story.
fn consume(
    batches: Vec<(Receiver<Batch>, Sender<Batch>)>,
    meta: &RunMeta,
    path: &str,
) -> Result<(HistoryFold, DigestBuilder, StoryFold), Stop> {
    let mut fold = HistoryFold::new(meta);
    let mut digest = DigestBuilder::new(meta);
    let mut story = StoryFold::new(meta);
    // The number of the line before the batch's first.
    let mut base = 0u64;
    for k in 0.. {
        let (from, back) = &batches[k % batches.len()];
        let Ok(batch) = from.recv() else {
            break;
        };
        if super::cancel::cancelled() {
            return Err(Stop::Interrupted);
        }
        for rec in &batch.recs {
            let view = batch.view(rec);
            match rec.raw {
                Some(raw) => {
                    if let Err(e) = fold.observe_line(batch.get(raw)) {
                        // A line decoded as an event always folds; say so if not.
                        return Err(Stop::Bad(format!(
                            "{path}:{}: {}",
                            base + rec.line,
                            not_an_event(&e)
                        )));
                    }
                }
                None => fold.observe_fields(&fold_event(
                    &view,
                    rec.list.map(|l| &*batch.lists[l as usize]),
                )),
            }
            digest.observe(&view, rec.offset);
            story.observe(&view);
        }
        if let Some((n, why)) = &batch.bad {
            return Err(Stop::Bad(format!("{path}:{}: {why}", base + n)));
        }
        base += batch.lines;
        // Its decoder fills it again (a decoder that is gone needs none).
        let _ = back.send(batch);
    }
    Ok((fold, digest, story))
}

/// What the fold reads of an event, as `HistoryFold::observe` would read it
/// from the `Op` (`Scalar::as_str` and `as_i64` are `Value`'s).
fn fold_event<'v>(view: &'v OpView, list: Option<&'v List>) -> FoldEvent<'v> {
    let v = &view.value;
    let int = |x: &Option<Scalar>| x.as_ref().and_then(Scalar::as_i64);
    FoldEvent {
        kind: view.kind,
        process: &view.process,
        f: &view.f,
        time_ns: view.time_ns,
        reason: v.reason.as_ref().and_then(Scalar::as_str),
        token: int(&v.token),
        shard_token: int(&v.shard_token),
        shard: v.shard.as_ref().and_then(Scalar::as_str),
        ts_ms: int(&v.ts_ms),
        turbines: list.map(|l| TurbineList {
            key: l.id,
            names: &l.names,
        }),
    }
}

/// The history file read back at an event's byte offset, for the report's
/// hover titles (the few marks it draws one by one).
pub struct FileEvents {
    file: std::fs::File,
}

impl FileEvents {
    pub fn open(path: &Path) -> anyhow::Result<FileEvents> {
        let file = std::fs::File::open(path)
            .map_err(|e| anyhow::anyhow!("{}: cannot read: {e}", path.display()))?;
        Ok(FileEvents { file })
    }
}

impl EventLookup for FileEvents {
    fn event(&self, src: u64) -> Option<Op> {
        use std::os::unix::fs::FileExt;
        let mut buf = vec![0u8; 4096];
        let mut len = 0;
        loop {
            if len == buf.len() {
                if buf.len() >= 64 << 20 {
                    return None;
                }
                buf.resize(buf.len() * 2, 0);
            }
            let n = self.file.read_at(&mut buf[len..], src + len as u64).ok()?;
            if let Some(nl) = memchr::memchr(b'\n', &buf[len..len + n]) {
                len += nl;
                break;
            }
            len += n;
            if n == 0 {
                break;
            }
        }
        let line = std::str::from_utf8(&buf[..len]).ok()?;
        serde_json::from_str(line.trim_end_matches('\r')).ok()
    }
}
