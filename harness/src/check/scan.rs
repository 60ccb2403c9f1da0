//! A hand-written decoder for the history lines `chaos check` reads by the
//! million: the compact objects the harness writes, keys in any order, with
//! the kept `value` fields as plain strings, integers, booleans or null.
//!
//! It only ever accepts: a line it does not fully understand (an escape in a
//! string, a number with a fraction or an exponent where a field is kept, a
//! repeated top-level key, a `value` that is neither an object nor null,
//! nesting deeper than a few levels, ...) gives `None`, and the caller decodes
//! it with serde, which says what is wrong with it if anything is. So a line
//! accepted here decodes with serde too, into the same [`OpView`]: the grammar
//! checked is JSON's (every byte of the line is looked at, skipped values
//! included, and every string is checked to be UTF-8), never looser.
//!
//! An ingest line is mostly its turbine list, and a shard's list is the same
//! line after line: a list already decoded (its text checked by the decode
//! that made it) is recognised byte for byte and not looked at again.

use chaos_history::{OpType, OpView, Scalar, ValueFields};
use std::borrow::Cow;
use std::sync::LazyLock;

/// Nesting of skipped values beyond which a line is left to serde.
const MAX_DEPTH: u32 = 16;

/// The header's keys in the order the harness writes them.
const HEADER_ORDER: [&str; 7] = [
    "\"index\":",
    "\"time_ns\":",
    "\"scenario_time\":",
    "\"process\":",
    "\"type\":",
    "\"f\":",
    "\"value\":",
];

/// An ingest batch's `value` keys in the order the harness writes them.
const VALUE_ORDER: [&str; 3] = ["\"shard\":", "\"ts_ms\":", "\"turbines\":"];

/// What a line's `value.turbines` is, when it is an array.
#[derive(Debug, PartialEq)]
pub(crate) enum Turbines<'a> {
    /// Byte for byte the known list of this index.
    Known(usize),
    /// A list of names seen for the first time: its text and its names.
    New(&'a str, Vec<&'a str>),
}

/// A decoded line: the event as serde would decode it, less `value.turbines`
/// (always `None` here), which is `turbines` when it is an array of names.
pub(crate) struct Scanned<'a> {
    pub view: OpView<'a>,
    pub turbines: Option<Turbines<'a>>,
}

/// Decode `line`, recognising the lists in `known` (their JSON texts); `None`
/// when the line is not of the shape decoded here (serde must decide).
pub(crate) fn line<'a, K: AsRef<str>>(line: &'a [u8], known: &[K]) -> Option<Scanned<'a>> {
    let mut c = Cursor::new(line, known)?;
    // Filled in place, each field once (a repeated one is an error to serde).
    let mut out = Scanned {
        view: OpView::new(
            0,
            0,
            Cow::Borrowed(""),
            OpType::Invoke,
            Cow::Borrowed(""),
            ValueFields::default(),
        ),
        turbines: None,
    };
    let mut seen = [false; HEADER_ORDER.len()];
    c.ws();
    c.eat(b'{')?;
    c.ws();
    if c.peek()? != b'}' {
        let mut guess = 0;
        loop {
            let key = c.key(HEADER_ORDER.get(guess).copied())?;
            let name = |k: &&str| k[1..k.len() - 2] == *key;
            let at = match HEADER_ORDER.get(guess) {
                Some(k) if name(k) => Some(guess),
                _ => HEADER_ORDER.iter().position(name),
            };
            guess = at.map_or(HEADER_ORDER.len(), |k| k + 1);
            c.ws();
            // A repeated key is an error to serde: leave it to serde.
            let v = &mut out.view;
            match at {
                Some(k) if seen[k] => return None,
                Some(k) => seen[k] = true,
                None => {}
            }
            match key {
                "index" => v.index = c.uint()?,
                "time_ns" => v.time_ns = c.int()?,
                "scenario_time" => {
                    c.string()?;
                }
                "process" => v.process = Cow::Borrowed(c.string()?),
                "type" => {
                    v.kind = match c.string()? {
                        "invoke" => OpType::Invoke,
                        "ok" => OpType::Ok,
                        "fail" => OpType::Fail,
                        "info" => OpType::Info,
                        _ => return None,
                    }
                }
                "f" => v.f = Cow::Borrowed(c.string()?),
                "value" => out.turbines = c.value_fields(&mut v.value)?,
                _ => c.skip(0)?,
            }
            c.ws();
            match c.next()? {
                b',' => c.ws(),
                b'}' => break,
                _ => return None,
            }
        }
    } else {
        c.i += 1;
    }
    c.ws();
    // Every field but `value` is required.
    if c.i != line.len() || !seen[..HEADER_ORDER.len() - 1].iter().all(|&s| s) {
        return None;
    }
    Some(out)
}

/// A position in a line, and the line checked to be UTF-8 but for the
/// known list it holds, if any (its bytes are not looked at again).
struct Cursor<'a> {
    b: &'a [u8],
    i: usize,
    /// The line up to the known list (all of it when it has none).
    head: &'a str,
    /// Where the known list is (start, end) and which it is.
    hole: Option<(usize, usize, usize)>,
    /// The line after the known list.
    tail: &'a str,
}

impl<'a> Cursor<'a> {
    /// Check the line is UTF-8, but for a known list where an ingest line has
    /// it. (If that text is not the `value.turbines` after all, `string`
    /// refuses any string in it: the line is then left to serde.)
    fn new<K: AsRef<str>>(b: &'a [u8], known: &[K]) -> Option<Cursor<'a>> {
        const KEY: &[u8] = b"\"turbines\":";
        static FINDER: LazyLock<memchr::memmem::Finder<'static>> =
            LazyLock::new(|| memchr::memmem::Finder::new(KEY));
        let hole = FINDER.find(b).and_then(|at| {
            let start = at + KEY.len();
            let k = known
                .iter()
                .position(|k| b[start..].starts_with(k.as_ref().as_bytes()))?;
            Some((start, start + known[k].as_ref().len(), k))
        });
        let (head, tail) = match hole {
            Some((start, end, _)) => (&b[..start], &b[end..]),
            None => (b, &b[b.len()..]),
        };
        Some(Cursor {
            b,
            i: 0,
            head: std::str::from_utf8(head).ok()?,
            hole,
            tail: std::str::from_utf8(tail).ok()?,
        })
    }

    /// The text of bytes `start..end`, when they are not in the known list.
    fn text(&self, start: usize, end: usize) -> Option<&'a str> {
        match self.hole {
            None => self.head.get(start..end),
            Some((a, _, _)) if end <= a => self.head.get(start..end),
            Some((_, z, _)) if start >= z => self.tail.get(start - z..end - z),
            Some(_) => None,
        }
    }

    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn next(&mut self) -> Option<u8> {
        let b = self.peek()?;
        self.i += 1;
        Some(b)
    }

    fn eat(&mut self, want: u8) -> Option<()> {
        (self.next()? == want).then_some(())
    }

    /// JSON's whitespace, as serde_json skips it.
    fn ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\t' | b'\r') = self.peek() {
            self.i += 1;
        }
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        let end = self.i.checked_add(word.len())?;
        (self.b.get(self.i..end)? == word).then(|| self.i = end)
    }

    /// A string without escapes or control characters (UTF-8, as the line).
    fn string(&mut self) -> Option<&'a str> {
        self.eat(b'"')?;
        let start = self.i;
        let end = start + plain_len(&self.b[start..]);
        if self.b.get(end) != Some(&b'"') {
            return None;
        }
        self.i = end + 1;
        self.text(start, end)
    }

    /// An object's key and its colon; `guess` (the key as the harness
    /// writes it, quoted, with its colon) is tried first, byte for byte.
    fn key(&mut self, guess: Option<&'static str>) -> Option<&'a str> {
        if let Some(guess) = guess {
            if self.b[self.i..].starts_with(guess.as_bytes()) {
                self.i += guess.len();
                return Some(&guess[1..guess.len() - 2]);
            }
        }
        let key = self.string()?;
        self.ws();
        self.eat(b':')?;
        Some(key)
    }

    /// An integer as JSON writes it: its sign and magnitude; `None` if it has
    /// a fraction or an exponent, or does not fit in 64 bits.
    fn integer(&mut self) -> Option<(bool, u64)> {
        let negative = self.peek()? == b'-';
        if negative {
            self.i += 1;
        }
        let first = self.next()?;
        if !first.is_ascii_digit() {
            return None;
        }
        let mut n = u64::from(first - b'0');
        while let Some(d @ b'0'..=b'9') = self.peek() {
            // A leading zero followed by a digit is not JSON.
            if first == b'0' {
                return None;
            }
            n = n.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
            self.i += 1;
        }
        match self.peek() {
            Some(b'.' | b'e' | b'E') => None,
            _ => Some((negative, n)),
        }
    }

    fn uint(&mut self) -> Option<u64> {
        match self.integer()? {
            (false, n) => Some(n),
            // serde reads `-0` as a float, and any other negative as not a u64.
            (true, _) => None,
        }
    }

    fn int(&mut self) -> Option<i64> {
        match self.integer()? {
            (false, n) => i64::try_from(n).ok(),
            (true, 0) => None,
            (true, n) => 0i64.checked_sub_unsigned(n),
        }
    }

    /// A kept field's value as serde's `Scalar`, when it is a plain one.
    fn scalar(&mut self) -> Option<Scalar<'a>> {
        Some(match self.peek()? {
            b'"' => Scalar::Str(Cow::Borrowed(self.string()?)),
            b'n' => {
                self.literal(b"null")?;
                Scalar::Null
            }
            b't' => {
                self.literal(b"true")?;
                Scalar::Bool(true)
            }
            b'f' => {
                self.literal(b"false")?;
                Scalar::Bool(false)
            }
            _ => Scalar::Int(self.int()?),
        })
    }

    /// Skip any JSON value, checking it is one.
    fn skip(&mut self, depth: u32) -> Option<()> {
        match self.peek()? {
            b'"' => {
                self.string()?;
            }
            b'n' => self.literal(b"null")?,
            b't' => self.literal(b"true")?,
            b'f' => self.literal(b"false")?,
            open @ (b'[' | b'{') => {
                if depth >= MAX_DEPTH {
                    return None;
                }
                let close = if open == b'[' { b']' } else { b'}' };
                self.i += 1;
                self.ws();
                if self.peek()? == close {
                    self.i += 1;
                    return Some(());
                }
                loop {
                    if open == b'{' {
                        self.string()?;
                        self.ws();
                        self.eat(b':')?;
                        self.ws();
                    }
                    self.skip(depth + 1)?;
                    self.ws();
                    match self.next()? {
                        b',' => self.ws(),
                        b if b == close => break,
                        _ => return None,
                    }
                }
            }
            _ => self.number()?,
        }
        Some(())
    }

    /// Any JSON number (its grammar only: a skipped number is not read).
    fn number(&mut self) -> Option<()> {
        let digits = |c: &mut Cursor| {
            let start = c.i;
            while let Some(b'0'..=b'9') = c.peek() {
                c.i += 1;
            }
            (c.i > start).then_some(())
        };
        if self.peek()? == b'-' {
            self.i += 1;
        }
        match self.peek()? {
            b'0' => self.i += 1,
            b'1'..=b'9' => digits(self)?,
            _ => return None,
        }
        if self.peek() == Some(b'.') {
            self.i += 1;
            digits(self)?;
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.i += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.i += 1;
            }
            digits(self)?;
        }
        Some(())
    }

    /// A turbine list: a known one byte for byte, or an array of names.
    fn turbines(&mut self) -> Option<Turbines<'a>> {
        if let Some((start, end, k)) = self.hole {
            if self.i == start {
                self.i = end;
                return Some(Turbines::Known(k));
            }
        }
        let start = self.i;
        let mut names = Vec::new();
        self.eat(b'[')?;
        self.ws();
        if self.peek()? == b']' {
            self.i += 1;
        } else {
            loop {
                names.push(self.string()?);
                self.ws();
                match self.next()? {
                    b',' => self.ws(),
                    b']' => break,
                    _ => return None,
                }
            }
        }
        Some(Turbines::New(self.text(start, self.i)?, names))
    }

    /// The `value` object's kept fields (or `null`: none).
    /// Fills `v` (empty) in place: an event is big, and copies of it add up.
    fn value_fields(&mut self, v: &mut ValueFields<'a>) -> Option<Option<Turbines<'a>>> {
        let mut turbines = None;
        if self.peek()? == b'n' {
            self.literal(b"null")?;
            return Some(None);
        }
        self.eat(b'{')?;
        self.ws();
        if self.peek()? == b'}' {
            self.i += 1;
            return Some(None);
        }
        let mut guess = 0;
        loop {
            let key = self.key(VALUE_ORDER.get(guess).copied())?;
            guess += 1;
            self.ws();
            // A repeated key: the last one counts, as with serde.
            let slot = match key {
                "turbine" => Some(&mut v.turbine),
                "shard" => Some(&mut v.shard),
                "from" => Some(&mut v.from),
                "to" => Some(&mut v.to),
                "why" => Some(&mut v.why),
                "reason" => Some(&mut v.reason),
                "token" => Some(&mut v.token),
                "shard_token" => Some(&mut v.shard_token),
                "holder" => Some(&mut v.holder),
                "target" => Some(&mut v.target),
                "error" => Some(&mut v.error),
                "ts_ms" => Some(&mut v.ts_ms),
                "code" => Some(&mut v.code),
                "after_exit" => Some(&mut v.after_exit),
                "when" => Some(&mut v.when),
                "by" => Some(&mut v.by),
                "publisher" => Some(&mut v.publisher),
                "repeated_key" => Some(&mut v.repeated_key),
                "object" => Some(&mut v.object),
                "version" => Some(&mut v.version),
                "role" => Some(&mut v.role),
                "leader" => Some(&mut v.leader),
                "members" => Some(&mut v.members),
                "turbines" => {
                    // Not an array: no list, as the fold reads it.
                    turbines = match self.peek()? {
                        b'[' => Some(self.turbines()?),
                        _ => {
                            self.scalar()?;
                            None
                        }
                    };
                    None
                }
                _ => {
                    self.skip(1)?;
                    None
                }
            };
            if let Some(slot) = slot {
                *slot = Some(self.scalar()?);
            }
            self.ws();
            match self.next()? {
                b',' => self.ws(),
                b'}' => break,
                _ => return None,
            }
        }
        Some(turbines)
    }
}

/// How many bytes of `b` come before a quote, a backslash or a control
/// character (all of `b` if none): eight at a time while none is there.
fn plain_len(b: &[u8]) -> usize {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGH: u64 = u64::from_ne_bytes([0x80; 8]);
    // Whether any byte of `w` is zero, or below `n` (exact as a yes or no).
    let below = |w: u64, n: u8| w.wrapping_sub(ONES * u64::from(n)) & !w & HIGH != 0;
    let has = |w: u64, byte: u8| below(w ^ (ONES * u64::from(byte)), 1);
    let mut at = 0;
    while let Some(chunk) = b.get(at..at + 8) {
        let w = u64::from_ne_bytes(chunk.try_into().expect("eight bytes"));
        if below(w, 0x20) || has(w, b'"') || has(w, b'\\') {
            break;
        }
        at += 8;
    }
    at + b[at..]
        .iter()
        .position(|&c| c == b'"' || c == b'\\' || c < 0x20)
        .unwrap_or(b.len() - at)
}

#[cfg(test)]
mod tests;
