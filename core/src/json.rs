//! The config reader and writer of the one schema: a small JSON parser into a tree
//! ([`Value`]), [`FromJson`] to read the schema's types from it with errors that name
//! the field path (`policies[0].breaker.mode`) and the reason, and [`ToJson`] to write
//! them back.
//!
//! Structs and enums of the schema declare their JSON shape once, with
//! [`json_struct!`](crate::json_struct) and [`json_enum!`](crate::json_enum): every
//! field optional (omitted fields keep the type's `Default`), unknown and duplicate
//! fields refused, enums as snake_case strings. The per-type code this generates is a
//! few calls per field, so a `.wasm` host carries the whole schema in a few KB (serde's
//! derives were about a third of each module). Config documents are small and read on
//! (re)configure only.

use crate::config::{ConfigError, Num};
use std::fmt::Write as _;

/// Nesting deeper than this is refused (hostile input must not exhaust the stack).
const MAX_DEPTH: usize = 128;

/// A parsed JSON value. Object members keep document order.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// `null`.
    Null,
    /// `true` / `false`.
    Bool(bool),
    /// A non-negative integer.
    U64(u64),
    /// A negative integer.
    I64(i64),
    /// Any other number.
    F64(f64),
    /// A string.
    Str(String),
    /// An array.
    Array(Vec<Value>),
    /// An object: its members in document order (duplicates kept; [`Fields`] refuses
    /// them).
    Object(Vec<(String, Value)>),
}

/// Where a value sits in the document, as a chain of borrowed segments.
#[derive(Clone, Copy, Debug)]
pub enum Path<'a> {
    /// The document itself.
    Root,
    /// A member of an object.
    Key(&'a Path<'a>, &'a str),
    /// An element of an array.
    Index(&'a Path<'a>, usize),
}

impl Path<'_> {
    fn write(&self, out: &mut String) {
        match self {
            Path::Root => {}
            Path::Key(parent, key) => {
                parent.write(out);
                if !out.is_empty() {
                    out.push('.');
                }
                let _ = write!(out, "{}", Shown(key));
            }
            Path::Index(parent, i) => {
                parent.write(out);
                let _ = write!(out, "[{i}]");
            }
        }
    }

    /// The dotted path, e.g. `policies[0].breaker.mode`.
    pub fn render(&self) -> String {
        let mut s = String::new();
        self.write(&mut s);
        s
    }

    /// An error at this path.
    #[inline(never)]
    pub fn error(&self, reason: impl Into<String>) -> ConfigError {
        ConfigError {
            path: self.render(),
            reason: reason.into(),
        }
    }
}

/// Parses a JSON document into a [`Value`] tree.
pub fn parse(json: &[u8]) -> Result<Value, ConfigError> {
    Parser { s: json, at: 0 }.document()
}

/// Parses `json` and reads a `T` from it.
pub fn from_slice<T: FromJson>(json: &[u8]) -> Result<T, ConfigError> {
    T::from_json(&parse(json)?, &Path::Root)
}

/// A type of the schema that can be read from a JSON value.
pub trait FromJson: Sized {
    /// Reads `v`, found at `at`; errors name `at` (or a path below it).
    fn from_json(v: &Value, at: &Path<'_>) -> Result<Self, ConfigError>;

    /// Reads `v` over `self` (structs of the schema: field by field, in place, so a
    /// large struct is never moved).
    fn read_into(&mut self, v: &Value, at: &Path<'_>) -> Result<(), ConfigError> {
        *self = Self::from_json(v, at)?;
        Ok(())
    }
}

/// A type of the schema that can be written as JSON.
pub trait ToJson {
    /// Appends the compact JSON of `self` to `out`.
    fn write_json(&self, out: &mut String);

    /// The compact JSON of `self`.
    fn to_json(&self) -> String {
        let mut s = String::new();
        self.write_json(&mut s);
        s
    }
}

/// Writes `s` with control characters escaped (`\u{a}`) and, with `quoted`, `"` and
/// `\\` backslashed: one byte loop for [`Shown`] and [`Quoted`].
#[inline(never)]
fn escaped(f: &mut std::fmt::Formatter<'_>, s: &str, quoted: bool) -> std::fmt::Result {
    let mut from = 0;
    for (i, b) in s.bytes().enumerate() {
        let control = b < b' ' || b == 0x7f;
        if control || (quoted && (b == b'"' || b == b'\\')) {
            f.write_str(s.get(from..i).unwrap_or_default())?;
            if control {
                // `\u{a}`, `\u{1b}`: hex without leading zeros, as Rust escapes.
                const HEX: &str = "0123456789abcdef";
                let digit = |n: u8| HEX.get(usize::from(n)..usize::from(n) + 1).unwrap_or("0");
                f.write_str("\\u{")?;
                if b >= 16 {
                    f.write_str(digit(b >> 4))?;
                }
                f.write_str(digit(b & 15))?;
                f.write_str("}")?;
                from = i + 1;
            } else {
                f.write_str("\\")?;
                from = i;
            }
        }
    }
    f.write_str(s.get(from..).unwrap_or_default())
}

/// `s` cut after 128 bytes, on a character boundary (the cut, and whether anything
/// was left out).
#[inline(never)]
fn clipped(s: &str) -> (&str, bool) {
    let mut cut = s.len().min(128);
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    (s.get(..cut).unwrap_or_default(), cut < s.len())
}

/// A document's text (a field name, a variant) shown in a message: at most 128
/// bytes, then `…`; control characters escaped (`\u{a}`), so a name cannot
/// break a log line or flood it.
pub struct Shown<'a>(pub &'a str);

impl std::fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (s, more) = clipped(self.0);
        escaped(f, s, false)?;
        if more {
            f.write_str("…")?;
        }
        Ok(())
    }
}

/// A string shown in a message in double quotes, `"` and `\\` escaped (`"a\\"b"`),
/// control characters as `\u{a}`: what `{:?}` shows for printable text, without the
/// Unicode tables `Debug` brings into a `.wasm`.
pub struct Quoted<'a>(pub &'a str);

impl std::fmt::Display for Quoted<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("\"")?;
        escaped(f, self.0, true)?;
        f.write_str("\"")
    }
}

/// How an unexpected value is named in a type error (JSON's words).
fn shown(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(true) => "boolean `true`".into(),
        Value::Bool(false) => "boolean `false`".into(),
        Value::U64(i) => text!("integer `{i}`"),
        // (As a sign and a u64: no second integer formatter in the `.wasm`.)
        Value::I64(i) => text!(
            "integer `{}{}`",
            if *i < 0 { "-" } else { "" },
            i.unsigned_abs()
        ),
        Value::F64(v) => text!("floating point `{}`", Num(*v)),
        Value::Str(s) => {
            let (head, more) = clipped(s);
            let mut s = text!("string {}", Quoted(head));
            if more {
                s.push('…');
            }
            s
        }
        Value::Array(_) => "an array".into(),
        Value::Object(_) => "an object".into(),
    }
}

/// "invalid type: …, expected `expected`" at `at`.
#[inline(never)]
pub fn wrong_type(v: &Value, at: &Path<'_>, expected: &str) -> ConfigError {
    at.error(text!("invalid type: {}, expected {expected}", shown(v)))
}

/// "invalid value: …, expected `expected`" at `at`.
#[inline(never)]
fn wrong_value(v: &Value, at: &Path<'_>, expected: &str) -> ConfigError {
    at.error(text!("invalid value: {}, expected {expected}", shown(v)))
}

/// `` `a`, `b`, `c` `` for error messages.
fn one_of(names: &[&str]) -> String {
    let mut s = String::new();
    for (i, n) in names.iter().enumerate() {
        if i > 0 {
            s.push_str(", ");
        }
        s.push('`');
        s.push_str(n);
        s.push('`');
    }
    s
}

/// The members of an object whose field names were checked: every member is one of
/// the type's fields, and none is given twice.
pub struct Fields<'v, 'p> {
    members: &'v [(String, Value)],
    at: &'p Path<'p>,
}

impl<'v, 'p> Fields<'v, 'p> {
    /// `v` as an object of the fields `names` (`what` names the type in a type
    /// error, e.g. `struct Config`).
    #[inline(never)]
    pub fn of(
        v: &'v Value,
        at: &'p Path<'p>,
        names: &[&str],
        what: &str,
    ) -> Result<Self, ConfigError> {
        let Value::Object(members) = v else {
            return Err(wrong_type(v, at, what));
        };
        for (i, (key, _)) in members.iter().enumerate() {
            let here = Path::Key(at, key);
            if !names.contains(&key.as_str()) {
                return Err(here.error(match names {
                    [] => text!("unknown field `{}`, there are no fields", Shown(key)),
                    _ => text!(
                        "unknown field `{}`, expected one of {}",
                        Shown(key),
                        one_of(names)
                    ),
                }));
            }
            // Members are all distinct known names up to here: at most `names.len()`.
            if members[..i].iter().any(|(k, _)| k == key) {
                return Err(here.error(text!("duplicate field `{}`", Shown(key))));
            }
        }
        Ok(Fields { members, at })
    }

    /// The value of field `name`, if given.
    #[inline(never)]
    pub fn get(&self, name: &str) -> Option<&'v Value> {
        self.members.iter().find(|(k, _)| k == name).map(|(_, v)| v)
    }

    /// Reads field `name` into `into` if it is given (else `into` keeps its value).
    #[inline(never)]
    pub fn read<T: FromJson>(&self, name: &str, into: &mut T) -> Result<(), ConfigError> {
        if let Some(v) = self.get(name) {
            *into = T::from_json(v, &Path::Key(self.at, name))?;
        }
        Ok(())
    }

    /// Reads field `name`, which must be given.
    pub fn required<T: FromJson>(&self, name: &str) -> Result<T, ConfigError> {
        match self.get(name) {
            Some(v) => T::from_json(v, &Path::Key(self.at, name)),
            None => Err(self.at.error(text!("missing field `{name}`"))),
        }
    }
}

/// A struct read field by field ([`json_struct!`](crate::json_struct) implements it):
/// field `i` of its field list gets `v`.
#[doc(hidden)]
pub trait ReadField {
    /// Reads field number `i` from `v`.
    fn read_field(&mut self, i: usize, v: &Value, at: &Path<'_>) -> Result<(), ConfigError>;
}

/// Reads the object `v` of the fields `names` into `into`, field by field (one copy of
/// the loop for every struct of the schema).
#[doc(hidden)]
#[inline(never)]
pub fn read_object(
    v: &Value,
    at: &Path<'_>,
    names: &[&str],
    what: &str,
    into: &mut dyn ReadField,
) -> Result<(), ConfigError> {
    let f = Fields::of(v, at, names, what)?;
    for (key, value) in f.members {
        if let Some(i) = names.iter().position(|n| n == key) {
            into.read_field(i, value, &Path::Key(at, key))?;
        }
    }
    Ok(())
}

/// The index of `v`'s string among `names` (an enum of unit variants).
#[inline(never)]
pub fn variant(v: &Value, at: &Path<'_>, names: &[&str], what: &str) -> Result<usize, ConfigError> {
    let Value::Str(s) = v else {
        return Err(wrong_type(v, at, what));
    };
    names.iter().position(|n| n == s).ok_or_else(|| {
        at.error(text!(
            "unknown value `{}`, expected one of {}",
            Shown(s),
            one_of(names)
        ))
    })
}

fn unsigned(v: &Value, at: &Path<'_>, max: u64, what: &str) -> Result<u64, ConfigError> {
    match v {
        Value::U64(n) if *n <= max => Ok(*n),
        Value::U64(_) | Value::I64(_) => Err(wrong_value(v, at, what)),
        // A whole number written with a fraction or an exponent (`100.0`, `1e+06`, as
        // some templating prints numbers): say how to write it (found by review).
        Value::F64(f) if f.fract() == 0.0 => Err(wrong_type(
            v,
            at,
            &text!("{what} (write it without a fraction or exponent)"),
        )),
        _ => Err(wrong_type(v, at, what)),
    }
}

impl FromJson for u64 {
    #[inline(never)]
    fn from_json(v: &Value, at: &Path<'_>) -> Result<Self, ConfigError> {
        unsigned(v, at, u64::MAX, "a whole number ≥ 0")
    }
}

impl FromJson for u32 {
    #[inline(never)]
    fn from_json(v: &Value, at: &Path<'_>) -> Result<Self, ConfigError> {
        unsigned(v, at, u32::MAX.into(), "a whole number in 0..=4294967295").map(|n| n as u32)
    }
}

impl FromJson for f64 {
    #[inline(never)]
    fn from_json(v: &Value, at: &Path<'_>) -> Result<Self, ConfigError> {
        match v {
            Value::U64(n) => Ok(*n as f64),
            Value::I64(n) => Ok(*n as f64),
            Value::F64(n) => Ok(*n),
            _ => Err(wrong_type(v, at, "a number")),
        }
    }
}

impl FromJson for bool {
    #[inline(never)]
    fn from_json(v: &Value, at: &Path<'_>) -> Result<Self, ConfigError> {
        match v {
            Value::Bool(b) => Ok(*b),
            _ => Err(wrong_type(v, at, "a boolean")),
        }
    }
}

impl FromJson for String {
    #[inline(never)]
    fn from_json(v: &Value, at: &Path<'_>) -> Result<Self, ConfigError> {
        match v {
            Value::Str(s) => Ok(s.clone()),
            _ => Err(wrong_type(v, at, "a string")),
        }
    }
}

impl<T: FromJson> FromJson for Option<T> {
    fn from_json(v: &Value, at: &Path<'_>) -> Result<Self, ConfigError> {
        match v {
            Value::Null => Ok(None),
            _ => T::from_json(v, at).map(Some),
        }
    }
}

impl<T: FromJson> FromJson for Vec<T> {
    fn from_json(v: &Value, at: &Path<'_>) -> Result<Self, ConfigError> {
        let Value::Array(items) = v else {
            return Err(wrong_type(v, at, "an array"));
        };
        let mut out = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            out.push(T::from_json(item, &Path::Index(at, i))?);
        }
        Ok(out)
    }
}

impl FromJson for Value {
    fn from_json(v: &Value, _: &Path<'_>) -> Result<Self, ConfigError> {
        Ok(v.clone())
    }
}

impl ToJson for u64 {
    fn write_json(&self, out: &mut String) {
        let _ = write!(out, "{self}");
    }
}

impl ToJson for u32 {
    fn write_json(&self, out: &mut String) {
        let _ = write!(out, "{self}");
    }
}

impl ToJson for f64 {
    fn write_json(&self, out: &mut String) {
        if self.is_finite() {
            let _ = write!(out, "{self:?}");
        } else {
            out.push_str("null");
        }
    }
}

impl ToJson for bool {
    fn write_json(&self, out: &mut String) {
        out.push_str(if *self { "true" } else { "false" });
    }
}

impl ToJson for str {
    fn write_json(&self, out: &mut String) {
        out.push('"');
        let mut rest = self;
        // Escapes are ASCII: copy what lies between them as it is (`get` at an ASCII
        // byte's position: a char boundary, and no panic path).
        while let Some(i) = rest
            .bytes()
            .position(|b| b == b'"' || b == b'\\' || b < 0x20)
        {
            out.push_str(rest.get(..i).unwrap_or_default());
            match rest.as_bytes().get(i).copied().unwrap_or_default() {
                b'"' => out.push_str("\\\""),
                b'\\' => out.push_str("\\\\"),
                b'\n' => out.push_str("\\n"),
                b'\r' => out.push_str("\\r"),
                b'\t' => out.push_str("\\t"),
                b => {
                    const HEX: &[u8; 16] = b"0123456789abcdef";
                    out.push_str("\\u00");
                    out.push(char::from(HEX[usize::from(b >> 4)]));
                    out.push(char::from(HEX[usize::from(b & 15)]));
                }
            }
            rest = rest.get(i + 1..).unwrap_or_default();
        }
        out.push_str(rest);
        out.push('"');
    }
}

impl ToJson for String {
    fn write_json(&self, out: &mut String) {
        self.as_str().write_json(out);
    }
}

impl<T: ToJson> ToJson for Option<T> {
    fn write_json(&self, out: &mut String) {
        match self {
            Some(v) => v.write_json(out),
            None => out.push_str("null"),
        }
    }
}

impl<T: ToJson> ToJson for Vec<T> {
    fn write_json(&self, out: &mut String) {
        out.push('[');
        for (i, v) in self.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            v.write_json(out);
        }
        out.push(']');
    }
}

/// Writes `"name":` (after a comma unless `first`).
#[doc(hidden)]
pub fn write_key(out: &mut String, name: &str, first: bool) {
    if !first {
        out.push(',');
    }
    name.write_json(out);
    out.push(':');
}

/// The JSON name of a field: its identifier, or the literal given with `as`.
#[doc(hidden)]
#[macro_export]
macro_rules! json_name {
    ($field:ident) => {
        stringify!($field)
    };
    ($field:ident $name:literal) => {
        $name
    };
}

/// Declares the JSON shape of a struct with named fields that implements `Default`:
/// an object of its fields (`field as "name"` renames one), each optional. `read`
/// before the type name declares reading only.
///
/// ```
/// # use fusewire_core::{json_struct, json::{from_slice, ToJson}};
/// #[derive(Default, Debug, PartialEq)]
/// struct Limits { max: u32, names: Vec<String>, kind: Option<String> }
/// json_struct!(Limits { max, names, kind as "type" });
/// let l: Limits = from_slice(br#"{"max": 3, "type": "x"}"#).unwrap();
/// assert_eq!(l.max, 3);
/// assert_eq!(l.to_json(), r#"{"max":3,"names":[],"type":"x"}"#);
/// let e = from_slice::<Limits>(br#"{"mx": 3}"#).unwrap_err();
/// assert_eq!(e.to_string(), "mx: unknown field `mx`, expected one of `max`, `names`, `type`");
/// ```
#[macro_export]
macro_rules! json_struct {
    ($ty:ident { $($field:ident $(as $name:literal)?),* $(,)? }) => {
        $crate::json_struct!(read $ty { $($field $(as $name)?),* });

        impl $crate::json::ToJson for $ty {
            #[allow(unused_assignments)]
            fn write_json(&self, out: &mut String) {
                out.push('{');
                let mut first = true;
                $(
                    $crate::json::write_key(out, $crate::json_name!($field $($name)?), first);
                    $crate::json::ToJson::write_json(&self.$field, out);
                    first = false;
                )*
                out.push('}');
            }
        }
    };
    // Reading only (a host's own document types).
    (read $ty:ident { $($field:ident $(as $name:literal)?),* $(,)? }) => {
        impl $crate::json::ReadField for $ty {
            #[allow(unused_assignments)]
            fn read_field(
                &mut self,
                i: usize,
                v: &$crate::json::Value,
                at: &$crate::json::Path<'_>,
            ) -> Result<(), $crate::ConfigError> {
                let mut n = 0;
                $(
                    if i == n {
                        return $crate::json::FromJson::read_into(&mut self.$field, v, at);
                    }
                    n += 1;
                )*
                Ok(())
            }
        }

        impl $crate::json::FromJson for $ty {
            fn from_json(
                v: &$crate::json::Value,
                at: &$crate::json::Path<'_>,
            ) -> Result<Self, $crate::ConfigError> {
                let mut out = <$ty as Default>::default();
                $crate::json::FromJson::read_into(&mut out, v, at)?;
                Ok(out)
            }

            fn read_into(
                &mut self,
                v: &$crate::json::Value,
                at: &$crate::json::Path<'_>,
            ) -> Result<(), $crate::ConfigError> {
                $crate::json::read_object(
                    v,
                    at,
                    &[$($crate::json_name!($field $($name)?)),*],
                    "an object",
                    self,
                )
            }
        }
    };
}

/// Declares the JSON shape of a fieldless enum: one string per variant.
///
/// ```
/// # use fusewire_core::{json_enum, json::{from_slice, ToJson}};
/// #[derive(Clone, Copy, Debug, PartialEq)]
/// enum Mode { Fast, Slow }
/// json_enum!(Mode { Fast = "fast", Slow = "slow" });
/// assert_eq!(from_slice::<Mode>(br#""slow""#).unwrap(), Mode::Slow);
/// assert_eq!(Mode::Fast.to_json(), r#""fast""#);
/// ```
#[macro_export]
macro_rules! json_enum {
    ($ty:ident { $($variant:ident = $name:literal),* $(,)? }) => {
        impl $crate::json::FromJson for $ty {
            fn from_json(
                v: &$crate::json::Value,
                at: &$crate::json::Path<'_>,
            ) -> Result<Self, $crate::ConfigError> {
                let i = $crate::json::variant(v, at, &[$($name),*], "a string")?;
                let all = [$($ty::$variant),*];
                // `variant` returns an index into the names, one per variant.
                Ok(all.get(i).copied().unwrap_or(all[0]))
            }
        }

        impl $crate::json::ToJson for $ty {
            fn write_json(&self, out: &mut String) {
                let name = match self { $($ty::$variant => $name),* };
                $crate::json::ToJson::write_json(name, out);
            }
        }
    };
}

// ---------------------------------------------------------------------------------
// Parser

struct Parser<'a> {
    s: &'a [u8],
    at: usize,
}

impl Parser<'_> {
    fn document(mut self) -> Result<Value, ConfigError> {
        let v = self.value(0)?;
        self.skip_ws();
        if self.at < self.s.len() {
            return Err(self.malformed("trailing characters"));
        }
        Ok(v)
    }

    /// A syntax error, located by line and column (the field path is left empty).
    fn syntax(&self, what: &str) -> ConfigError {
        let end = self.at.min(self.s.len());
        let line = 1 + self.s[..end].iter().filter(|&&b| b == b'\n').count();
        let start = self.s[..end]
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |i| i + 1);
        ConfigError {
            path: String::new(),
            reason: text!("{what} at line {line} column {}", end - start + 1),
        }
    }

    /// A syntax error no `JSON.stringify` output has (the npm binding's JSON is all
    /// such): it says what was expected with the `syntax-messages` feature (default),
    /// else only where it is.
    #[inline(always)]
    fn malformed(&self, what: &'static str) -> ConfigError {
        self.syntax(if cfg!(feature = "syntax-messages") {
            what
        } else {
            "malformed JSON"
        })
    }

    fn eof(&self, what: &str) -> ConfigError {
        if cfg!(feature = "syntax-messages") {
            self.syntax(&text!("EOF while parsing {what}"))
        } else {
            self.syntax("unexpected end of JSON")
        }
    }

    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.s.get(self.at) {
            self.at += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.skip_ws();
        self.s.get(self.at).copied()
    }

    fn value(&mut self, depth: usize) -> Result<Value, ConfigError> {
        if depth > MAX_DEPTH {
            return Err(self.syntax("recursion limit exceeded"));
        }
        match self.peek() {
            None => Err(self.eof("a value")),
            Some(b'{') => self.object(depth),
            Some(b'[') => self.array(depth),
            Some(b'"') => Ok(Value::Str(self.string()?)),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(_) => {
                let rest = self.s.get(self.at..).unwrap_or_default();
                let (v, len) = if rest.starts_with(b"null") {
                    (Value::Null, 4)
                } else if rest.starts_with(b"true") {
                    (Value::Bool(true), 4)
                } else if rest.starts_with(b"false") {
                    (Value::Bool(false), 5)
                } else {
                    return Err(self.malformed("expected value"));
                };
                self.at += len;
                Ok(v)
            }
        }
    }

    fn object(&mut self, depth: usize) -> Result<Value, ConfigError> {
        self.at += 1;
        let mut members = Vec::new();
        if self.peek() == Some(b'}') {
            self.at += 1;
            return Ok(Value::Object(members));
        }
        loop {
            match self.peek() {
                Some(b'"') => {}
                None => return Err(self.eof("an object")),
                Some(_) => return Err(self.malformed("key must be a string")),
            }
            let key = self.string()?;
            match self.peek() {
                Some(b':') => self.at += 1,
                None => return Err(self.eof("an object")),
                Some(_) => return Err(self.malformed("expected `:`")),
            }
            members.push((key, self.value(depth + 1)?));
            match self.peek() {
                Some(b',') => self.at += 1,
                Some(b'}') => {
                    self.at += 1;
                    return Ok(Value::Object(members));
                }
                None => return Err(self.eof("an object")),
                Some(_) => return Err(self.malformed("expected `,` or `}`")),
            }
        }
    }

    fn array(&mut self, depth: usize) -> Result<Value, ConfigError> {
        self.at += 1;
        let mut items = Vec::new();
        if self.peek() == Some(b']') {
            self.at += 1;
            return Ok(Value::Array(items));
        }
        loop {
            items.push(self.value(depth + 1)?);
            match self.peek() {
                Some(b',') => self.at += 1,
                Some(b']') => {
                    self.at += 1;
                    return Ok(Value::Array(items));
                }
                None => return Err(self.eof("a list")),
                Some(_) => return Err(self.malformed("expected `,` or `]`")),
            }
        }
    }

    /// A string starting at the opening quote.
    fn string(&mut self) -> Result<String, ConfigError> {
        self.at += 1;
        let mut out: Vec<u8> = Vec::new();
        loop {
            let Some(&b) = self.s.get(self.at) else {
                return Err(self.eof("a string"));
            };
            self.at += 1;
            match b {
                b'"' => break,
                b'\\' => {
                    let Some(&e) = self.s.get(self.at) else {
                        return Err(self.eof("a string"));
                    };
                    self.at += 1;
                    let c = match e {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => self.unicode_escape()?,
                        _ => {
                            self.at -= 1;
                            return Err(self.malformed("invalid escape"));
                        }
                    };
                    let mut buf = [0; 4];
                    out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                }
                0..=0x1f => {
                    self.at -= 1;
                    return Err(self.malformed("control character in a string"));
                }
                _ => out.push(b),
            }
        }
        String::from_utf8(out).map_err(|_| self.malformed("invalid UTF-8 in a string"))
    }

    /// The code point of a `\u` escape (the `\u` already read), pairing surrogates.
    fn unicode_escape(&mut self) -> Result<char, ConfigError> {
        let hi = self.hex4()?;
        let code = if (0xD800..0xDC00).contains(&hi) {
            if !self.s[self.at..].starts_with(b"\\u") {
                return Err(self.syntax("unpaired surrogate in a string"));
            }
            self.at += 2;
            let lo = self.hex4()?;
            if !(0xDC00..0xE000).contains(&lo) {
                return Err(self.syntax("unpaired surrogate in a string"));
            }
            0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)
        } else {
            hi
        };
        char::from_u32(code).ok_or_else(|| self.syntax("unpaired surrogate in a string"))
    }

    fn hex4(&mut self) -> Result<u32, ConfigError> {
        let mut v = 0;
        for _ in 0..4 {
            let Some(&b) = self.s.get(self.at) else {
                return Err(self.eof("a string"));
            };
            let d = match b {
                b'0'..=b'9' => b - b'0',
                b'a'..=b'f' => b - b'a' + 10,
                b'A'..=b'F' => b - b'A' + 10,
                _ => return Err(self.malformed("invalid \\u escape")),
            };
            v = v * 16 + u32::from(d);
            self.at += 1;
        }
        Ok(v)
    }

    fn number(&mut self) -> Result<Value, ConfigError> {
        let start = self.at;
        let negative = self.s[self.at] == b'-';
        if negative {
            self.at += 1;
        }
        let digits = |p: &mut Self| {
            let from = p.at;
            while let Some(b'0'..=b'9') = p.s.get(p.at) {
                p.at += 1;
            }
            p.at - from
        };
        let int_start = self.at;
        match digits(self) {
            0 => return Err(self.malformed("invalid number")),
            n if n > 1 && self.s[int_start] == b'0' => {
                return Err(self.malformed("invalid number (leading zero)"))
            }
            _ => {}
        }
        let mut integer = true;
        if self.s.get(self.at) == Some(&b'.') {
            integer = false;
            self.at += 1;
            if digits(self) == 0 {
                return Err(self.malformed("invalid number"));
            }
        }
        if let Some(b'e' | b'E') = self.s.get(self.at) {
            integer = false;
            self.at += 1;
            if let Some(b'+' | b'-') = self.s.get(self.at) {
                self.at += 1;
            }
            if digits(self) == 0 {
                return Err(self.malformed("invalid number"));
            }
        }
        let text = &self.s[start..self.at];
        if integer {
            // At most 20 digits: u64 arithmetic with overflow checks.
            let magnitude = text
                .iter()
                .filter(|b| b.is_ascii_digit())
                .try_fold(0u64, |n, &d| {
                    n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
                });
            match (negative, magnitude) {
                // `-0` is 0 (serde_json reads it as a float, which a whole-number
                // field refused with a message showing `0`).
                (_, Some(0)) => return Ok(Value::U64(0)),
                (false, Some(n)) => return Ok(Value::U64(n)),
                (true, Some(n)) if n > 0 && n <= 1 << 63 => {
                    return Ok(Value::I64(0i64.wrapping_sub_unsigned(n)))
                }
                _ => {}
            }
        }
        match decimal(text) {
            v if v.is_finite() => Ok(Value::F64(v)),
            _ => Err(self.syntax("number out of range")),
        }
    }
}

/// Exact powers of ten as `f64` (10^22 is the last one a double holds exactly).
const POW10: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];

/// The value of a JSON number's text (already checked against the grammar).
///
/// Correctly rounded when the significant digits fit 2^53 and the decimal exponent is
/// within ±22 (every number a config writes: `50`, `12.5`, `0.1`, `1e-3`); otherwise
/// within a few units in the last place. Short and table-free: core's exact parser
/// brings about 16 KB of code and tables into every `.wasm` host.
fn decimal(text: &[u8]) -> f64 {
    let (negative, text) = match text.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, text),
    };
    let (mut mantissa, mut exp, mut kept) = (0u64, 0i64, 0u32);
    let mut fraction = false;
    let mut rest = text;
    while let Some((&b, tail)) = rest.split_first() {
        match b {
            b'0'..=b'9' => {
                if kept < 19 {
                    if mantissa > 0 || b != b'0' {
                        kept += 1;
                    }
                    mantissa = mantissa * 10 + u64::from(b - b'0');
                    exp -= i64::from(fraction);
                } else {
                    // Digits past the 19th: dropped (a relative error below 1e-18).
                    exp += i64::from(!fraction);
                }
            }
            b'.' => fraction = true,
            _ => break,
        }
        rest = tail;
    }
    if let Some((b'e' | b'E', tail)) = rest.split_first() {
        let (sign, digits) = match tail.split_first() {
            Some((b'-', d)) => (-1, d),
            Some((b'+', d)) => (1, d),
            _ => (1, tail),
        };
        let mut e = 0i64;
        for &d in digits {
            e = (e * 10 + i64::from(d - b'0')).min(100_000);
        }
        exp += sign * e;
    }
    let mut v = mantissa as f64;
    if mantissa != 0 {
        if exp < 0 {
            while exp < -22 && v != 0.0 {
                v /= 1e22;
                exp += 22;
            }
            v /= POW10[(-exp).min(22) as usize];
        } else {
            while exp > 22 && v.is_finite() {
                v *= 1e22;
                exp -= 22;
            }
            v *= POW10[exp.min(22) as usize];
        }
    }
    if negative {
        -v
    } else {
        v
    }
}

#[cfg(test)]
mod tests {
    use super::{from_slice, parse, ToJson, Value};

    fn syntax(s: &str) -> Result<Value, String> {
        parse(s.as_bytes()).map_err(|e| e.reason)
    }

    #[test]
    fn values() {
        use Value::*;
        assert_eq!(syntax(" null "), Ok(Null));
        assert_eq!(
            syntax("[true,false]"),
            Ok(Array(vec![Bool(true), Bool(false)]))
        );
        assert_eq!(syntax("0"), Ok(U64(0)));
        // `-0` is the whole number 0 (a float refused by whole-number fields
        // before); `-0.0` stays a float.
        assert_eq!(syntax("-0"), Ok(U64(0)));
        assert_eq!(syntax("-0.0"), Ok(F64(-0.0)));
        assert_eq!(syntax("18446744073709551615"), Ok(U64(u64::MAX)));
        let f = |v: f64, _text: &str| F64(v);
        assert_eq!(
            syntax("18446744073709551616"),
            Ok(f(18446744073709551616.0, "18446744073709551616"))
        );
        assert_eq!(syntax("-9223372036854775808"), Ok(I64(i64::MIN)));
        assert_eq!(syntax("-3"), Ok(I64(-3)));
        assert_eq!(syntax("0.1"), Ok(f(0.1, "0.1")));
        assert_eq!(syntax("-2.5e-3"), Ok(f(-0.0025, "-2.5e-3")));
        assert_eq!(syntax("1E2"), Ok(f(100.0, "1E2")));
        assert_eq!(
            syntax(r#"{"a":"x\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00","b":{}}"#),
            Ok(Object(vec![
                (
                    "a".into(),
                    Str("x\"\\/\u{8}\u{c}\n\r\t\u{e9}\u{1F600}".into())
                ),
                ("b".into(), Object(vec![])),
            ]))
        );
        assert_eq!(syntax("\"héllo\""), Ok(Str("héllo".into())));
    }

    /// Without `syntax-messages` (the npm binding) a syntax error says only where;
    /// what a valid document can still get wrong keeps its words.
    #[cfg(not(feature = "syntax-messages"))]
    #[test]
    fn without_syntax_messages_errors_say_where_only() {
        let e = |s: &str| syntax(s).unwrap_err();
        assert_eq!(e("[1 2]"), "malformed JSON at line 1 column 4");
        assert_eq!(e("{"), "unexpected end of JSON at line 1 column 2");
        assert_eq!(e("1e999"), "number out of range at line 1 column 6");
        assert_eq!(
            e(r#""\ud800""#),
            "unpaired surrogate in a string at line 1 column 8"
        );
    }

    #[cfg(feature = "syntax-messages")]
    #[test]
    fn syntax_errors_say_where() {
        let bad = |s: &str, what: &str| {
            let e = syntax(s).unwrap_err();
            assert!(e.contains(what), "{s:?}: {e}");
        };
        bad("", "EOF while parsing a value at line 1 column 1");
        bad("{", "EOF while parsing an object");
        bad("[1,", "EOF while parsing a value");
        bad("[1 2]", "expected `,` or `]` at line 1 column 4");
        bad("{\"a\" 1}", "expected `:`");
        bad(
            "{\n \"a\": 1,\n 2}",
            "key must be a string at line 3 column 2",
        );
        bad("{\"a\":1}x", "trailing characters");
        bad("01", "leading zero");
        bad("1.", "invalid number");
        bad("-", "invalid number");
        bad("1e", "invalid number");
        bad("1e999", "out of range");
        bad("nul", "expected value");
        bad("\"\\x\"", "invalid escape");
        bad("\"\\ud800\"", "unpaired surrogate");
        bad("\"\\ud800\\u0041\"", "unpaired surrogate");
        bad("\"a\nb\"", "control character");
        bad("\"abc", "EOF while parsing a string");
        assert!(syntax(&"[".repeat(200))
            .unwrap_err()
            .contains("recursion limit"));
        assert!(syntax(&format!("{}{}", "[".repeat(100), "]".repeat(100))).is_ok());
    }

    #[derive(Debug, Default, PartialEq)]
    struct Doc {
        items: Vec<Item>,
        name: Option<String>,
    }
    json_struct!(Doc { items, name });

    #[derive(Debug, Default, PartialEq)]
    struct Item {
        n: u32,
        mode: Mode,
        ratio: f64,
        on: bool,
        kind: Option<Mode>,
    }
    json_struct!(Item { n, mode, ratio, on, kind as "type" });

    #[derive(Clone, Copy, Debug, Default, PartialEq)]
    enum Mode {
        #[default]
        Fast,
        Slow,
    }
    json_enum!(Mode {
        Fast = "fast",
        Slow = "slow"
    });

    fn read(s: &str) -> Result<Doc, (String, String)> {
        from_slice(s.as_bytes()).map_err(|e| (e.path, e.reason))
    }

    #[test]
    fn reads_with_defaults_options_enums_and_renames() {
        let d = read(
            r#"{"items":[{"n":1},{"n":2,"mode":"slow","ratio":3,"on":true,"type":"fast"}],"name":null}"#,
        );
        assert_eq!(
            d,
            Ok(Doc {
                items: vec![
                    Item {
                        n: 1,
                        ..Item::default()
                    },
                    Item {
                        n: 2,
                        mode: Mode::Slow,
                        ratio: 3.0,
                        on: true,
                        kind: Some(Mode::Fast),
                    },
                ],
                name: None,
            })
        );
        assert_eq!(read(r#"{"name":"x"}"#).unwrap().name.as_deref(), Some("x"));
    }

    #[test]
    fn writes_what_it_reads() {
        let d = read(r#"{"items":[{"n":7,"ratio":0.1,"type":"slow"}],"name":"a\"b\n"}"#).unwrap();
        let text = d.to_json();
        assert_eq!(
            text,
            r#"{"items":[{"n":7,"mode":"fast","ratio":0.1,"on":false,"type":"slow"}],"name":"a\"b\n"}"#
        );
        assert_eq!(read(&text).unwrap(), d);
        assert_eq!(f64::NAN.to_json(), "null");
        assert_eq!("\u{1}".to_json(), "\"\\u0001\"");
    }

    #[test]
    fn errors_name_the_path() {
        let bad = |s: &str, path: &str, why: &str| {
            let (p, r) = read(s).unwrap_err();
            assert_eq!(p, path, "{s}: {r}");
            assert_eq!(r, why, "{s}");
        };
        bad(
            r#"{"items":[{"n":1},{"n":1,"m":2}]}"#,
            "items[1].m",
            "unknown field `m`, expected one of `n`, `mode`, `ratio`, `on`, `type`",
        );
        bad(
            r#"{"items":[{"n":"x"}]}"#,
            "items[0].n",
            "invalid type: string \"x\", expected a whole number in 0..=4294967295",
        );
        bad(
            r#"{"items":[{"n":-1}]}"#,
            "items[0].n",
            "invalid value: integer `-1`, expected a whole number in 0..=4294967295",
        );
        bad(
            r#"{"items":[{"n":4294967296}]}"#,
            "items[0].n",
            "invalid value: integer `4294967296`, expected a whole number in 0..=4294967295",
        );
        bad(
            r#"{"items":[{"n":1.5}]}"#,
            "items[0].n",
            "invalid type: floating point `1.5`, expected a whole number in 0..=4294967295",
        );
        bad(
            r#"{"items":[{"n":1,"mode":"warp"}]}"#,
            "items[0].mode",
            "unknown value `warp`, expected one of `fast`, `slow`",
        );
        bad(
            r#"{"items":[{"n":1,"mode":3}]}"#,
            "items[0].mode",
            "invalid type: integer `3`, expected a string",
        );
        bad(
            r#"{"items":[{"ratio":"1"}]}"#,
            "items[0].ratio",
            "invalid type: string \"1\", expected a number",
        );
        bad(
            r#"{"items":[{"on":1e-7}]}"#,
            "items[0].on",
            "invalid type: floating point `1e-7`, expected a boolean",
        );
        bad(
            r#"{"items":[{"n":1,"n":2}]}"#,
            "items[0].n",
            "duplicate field `n`",
        );
        bad(
            r#"{"items":{}}"#,
            "items",
            "invalid type: an object, expected an array",
        );
        bad(
            r#"{"items":[null]}"#,
            "items[0]",
            "invalid type: null, expected an object",
        );
        bad(
            r#"{"name":[1]}"#,
            "name",
            "invalid type: an array, expected a string",
        );
        bad(
            r#""doc""#,
            "",
            "invalid type: string \"doc\", expected an object",
        );
        #[cfg(feature = "syntax-messages")]
        bad(
            "{\n\"items\": [\n{\"n\": tru}]}",
            "",
            "expected value at line 3 column 7",
        );
    }

    #[test]
    fn required_fields() {
        struct Top {
            n: u64,
        }
        impl super::FromJson for Top {
            fn from_json(v: &Value, at: &super::Path<'_>) -> Result<Self, crate::ConfigError> {
                let f = super::Fields::of(v, at, &["n"], "struct Top")?;
                Ok(Top {
                    n: f.required("n")?,
                })
            }
        }
        assert_eq!(from_slice::<Top>(br#"{"n":5}"#).map(|t| t.n), Ok(5));
        let e = from_slice::<Top>(br#"{}"#).err().unwrap();
        assert_eq!(e.to_string(), "missing field `n`");
    }

    #[test]
    fn decimals() {
        let exact: [(&str, f64); 12] = [
            ("0.1", 0.1),
            ("12.5", 12.5),
            ("-2.5e-3", -0.0025),
            ("1E2", 100.0),
            ("99.99", 99.99),
            ("1.5", 1.5),
            ("0.000001", 1e-6),
            ("123456789012345.6", 123456789012345.6),
            ("1e22", 1e22),
            ("1e-22", 1e-22),
            ("0.0", 0.0),
            ("-0", -0.0),
        ];
        for (text, want) in exact {
            assert_eq!(
                super::decimal(text.as_bytes()).to_bits(),
                want.to_bits(),
                "{text}"
            );
        }
        let close = [
            ("1.7976931348623157e308", f64::MAX),
            ("2.2250738585072014e-308", f64::MIN_POSITIVE),
            ("3.141592653589793238462643383279", std::f64::consts::PI),
            ("123456789012345678901234567890", 1.2345678901234568e29),
            ("1e-300", 1e-300),
            ("4.9406564584124654e-300", 4.9406564584124654e-300),
        ];
        for (text, want) in close {
            let got = super::decimal(text.as_bytes());
            assert!(((got - want) / want).abs() < 1e-15, "{text}: {got:e}");
        }
        assert!(super::decimal(b"1e400").is_infinite());
        assert_eq!(super::decimal(b"1e-400"), 0.0);
        assert!(super::decimal(b"1e99999999999999999999").is_infinite());
    }

    #[test]
    fn quoted() {
        let q = |s: &str| super::Quoted(s).to_string();
        assert_eq!(q("plain"), "\"plain\"");
        assert_eq!(q(r#"a"b\c"#), r#""a\"b\\c""#);
        assert_eq!(q("é\""), "\"é\\\"\"");
        assert_eq!(q(""), "\"\"");
        assert_eq!(q("a\nb\u{1b}"), "\"a\\u{a}b\\u{1b}\"");
    }

    /// Found by review: a field name with a newline broke the message (and a log
    /// line); a 1 MB name or value was echoed whole.
    #[test]
    fn names_and_values_in_messages_are_escaped_and_clipped() {
        let (p, r) = read("{\"x\\ny\": 1}").unwrap_err();
        assert_eq!(p, "x\\u{a}y");
        assert!(r.starts_with("unknown field `x\\u{a}y`"), "{r}");
        let long = "k".repeat(1_000_000);
        let (p, r) = read(&format!("{{\"{long}\": 1}}")).unwrap_err();
        assert_eq!(p, format!("{}…", "k".repeat(128)));
        assert!(r.len() < 300, "{}", r.len());
        let (_, r) = read(&format!("{{\"items\": [{{\"mode\": \"{long}\"}}]}}")).unwrap_err();
        assert!(r.len() < 300, "{}", r.len());
        let (_, r) = read(&format!("{{\"items\": \"{long}\"}}")).unwrap_err();
        assert!(r.len() < 300 && r.contains("…"), "{r:.300}");
    }

    #[test]
    fn invalid_utf8_is_an_error() {
        let e = parse(b"\"\xff\"").unwrap_err();
        let what = if cfg!(feature = "syntax-messages") {
            "UTF-8"
        } else {
            "malformed JSON"
        };
        assert!(e.reason.contains(what), "{}", e.reason);
    }
}
