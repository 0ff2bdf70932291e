//! The JSON reader behind [`crate::config::parse_json`]: a small parser into a tree
//! and a serde deserializer over that tree whose errors carry the field path
//! (`policies[0].breaker.mode`).
//!
//! It replaces `serde_json`'s streaming deserializer in `.wasm` hosts, where that
//! deserializer's code, instantiated once per config type, was a third of the
//! module. Config documents are small and read on (re)configure only.

use serde::de::{self, DeserializeSeed, IntoDeserializer, Visitor};
use std::fmt;

/// Nesting deeper than this is refused (hostile input must not exhaust the stack).
const MAX_DEPTH: usize = 128;

/// A parsed JSON value. Object members keep document order.
#[derive(Debug, PartialEq)]
enum Value {
    Null,
    Bool(bool),
    /// A non-negative integer.
    U64(u64),
    /// A negative integer.
    I64(i64),
    /// Any other number, with how serde names it in type errors (``floating point
    /// `1.5` ``, from the document's text: no float formatting in `.wasm` hosts).
    F64(f64, String),
    Str(String),
    Array(Vec<Value>),
    Object(Vec<(String, Value)>),
}

/// A reading error: the reason, and the field path once it is known.
#[derive(Debug)]
pub(crate) struct Error {
    pub(crate) path: Option<String>,
    pub(crate) reason: String,
}

impl Error {
    fn at(mut self, path: &Path<'_>) -> Self {
        if self.path.is_none() {
            let mut s = String::new();
            path.write(&mut s);
            self.path = Some(s);
        }
        self
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason)
    }
}

impl std::error::Error for Error {}

impl de::Error for Error {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        Error {
            path: None,
            reason: msg.to_string(),
        }
    }

    fn invalid_type(unexp: de::Unexpected<'_>, exp: &dyn de::Expected) -> Self {
        Self::custom(format_args!(
            "invalid type: {}, expected {exp}",
            Shown(unexp)
        ))
    }

    fn invalid_value(unexp: de::Unexpected<'_>, exp: &dyn de::Expected) -> Self {
        Self::custom(format_args!(
            "invalid value: {}, expected {exp}",
            Shown(unexp)
        ))
    }
}

/// serde's wording for an unexpected value, with `null` for JSON's null (as
/// `serde_json` says it) and without serde's float formatting, which would put
/// `core`'s float printer into every `.wasm` host.
struct Shown<'a>(de::Unexpected<'a>);

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use de::Unexpected as U;
        match self.0 {
            U::Bool(b) => write!(f, "boolean `{b}`"),
            U::Unsigned(i) => write!(f, "integer `{i}`"),
            U::Signed(i) => write!(f, "integer `{i}`"),
            U::Float(v) => write!(f, "floating point `{}`", crate::config::Num(v)),
            U::Char(c) => write!(f, "character `{c}`"),
            U::Str(s) => write!(f, "string {s:?}"),
            U::Bytes(_) => f.write_str("byte array"),
            U::Unit => f.write_str("null"),
            U::Option => f.write_str("Option value"),
            U::NewtypeStruct => f.write_str("newtype struct"),
            U::Seq => f.write_str("sequence"),
            U::Map => f.write_str("map"),
            U::Enum => f.write_str("enum"),
            U::UnitVariant => f.write_str("unit variant"),
            U::NewtypeVariant => f.write_str("newtype variant"),
            U::TupleVariant => f.write_str("tuple variant"),
            U::StructVariant => f.write_str("struct variant"),
            U::Other(other) => f.write_str(other),
        }
    }
}

/// Where a value sits in the document, as a chain of borrowed segments.
enum Path<'a> {
    Root,
    Key(&'a Path<'a>, &'a str),
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
                out.push_str(key);
            }
            Path::Index(parent, i) => {
                parent.write(out);
                out.push('[');
                out.push_str(&i.to_string());
                out.push(']');
            }
        }
    }
}

/// Parses `json` and deserializes a `T` from it.
pub(crate) fn from_slice<T: de::DeserializeOwned>(json: &[u8]) -> Result<T, Error> {
    let value = Parser { s: json, at: 0 }.document()?;
    T::deserialize(ValueDe {
        value: &value,
        path: &Path::Root,
    })
    .map_err(|e| e.at(&Path::Root))
}

// ---------------------------------------------------------------------------------
// Parser

struct Parser<'a> {
    s: &'a [u8],
    at: usize,
}

impl Parser<'_> {
    fn document(mut self) -> Result<Value, Error> {
        let v = self.value(0)?;
        self.skip_ws();
        if self.at < self.s.len() {
            return Err(self.syntax("trailing characters"));
        }
        Ok(v)
    }

    /// A syntax error, located by line and column (the field path is left empty).
    fn syntax(&self, what: &str) -> Error {
        let end = self.at.min(self.s.len());
        let line = 1 + self.s[..end].iter().filter(|&&b| b == b'\n').count();
        let start = self.s[..end]
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |i| i + 1);
        Error {
            path: Some(String::new()),
            reason: format!("{what} at line {line} column {}", end - start + 1),
        }
    }

    fn eof(&self, what: &str) -> Error {
        self.syntax(&format!("EOF while parsing {what}"))
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

    fn value(&mut self, depth: usize) -> Result<Value, Error> {
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
                for (word, v) in [
                    ("null", Value::Null),
                    ("true", Value::Bool(true)),
                    ("false", Value::Bool(false)),
                ] {
                    if self.s[self.at..].starts_with(word.as_bytes()) {
                        self.at += word.len();
                        return Ok(v);
                    }
                }
                Err(self.syntax("expected value"))
            }
        }
    }

    fn object(&mut self, depth: usize) -> Result<Value, Error> {
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
                Some(_) => return Err(self.syntax("key must be a string")),
            }
            let key = self.string()?;
            match self.peek() {
                Some(b':') => self.at += 1,
                None => return Err(self.eof("an object")),
                Some(_) => return Err(self.syntax("expected `:`")),
            }
            members.push((key, self.value(depth + 1)?));
            match self.peek() {
                Some(b',') => self.at += 1,
                Some(b'}') => {
                    self.at += 1;
                    return Ok(Value::Object(members));
                }
                None => return Err(self.eof("an object")),
                Some(_) => return Err(self.syntax("expected `,` or `}`")),
            }
        }
    }

    fn array(&mut self, depth: usize) -> Result<Value, Error> {
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
                Some(_) => return Err(self.syntax("expected `,` or `]`")),
            }
        }
    }

    /// A string starting at the opening quote.
    fn string(&mut self) -> Result<String, Error> {
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
                            return Err(self.syntax("invalid escape"));
                        }
                    };
                    let mut buf = [0; 4];
                    out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                }
                0..=0x1f => {
                    self.at -= 1;
                    return Err(self.syntax("control character in a string"));
                }
                _ => out.push(b),
            }
        }
        String::from_utf8(out).map_err(|_| self.syntax("invalid UTF-8 in a string"))
    }

    /// The code point of a `\u` escape (the `\u` already read), pairing surrogates.
    fn unicode_escape(&mut self) -> Result<char, Error> {
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

    fn hex4(&mut self) -> Result<u32, Error> {
        let mut v = 0;
        for _ in 0..4 {
            let Some(&b) = self.s.get(self.at) else {
                return Err(self.eof("a string"));
            };
            let d = match b {
                b'0'..=b'9' => b - b'0',
                b'a'..=b'f' => b - b'a' + 10,
                b'A'..=b'F' => b - b'A' + 10,
                _ => return Err(self.syntax("invalid \\u escape")),
            };
            v = v * 16 + u32::from(d);
            self.at += 1;
        }
        Ok(v)
    }

    fn number(&mut self) -> Result<Value, Error> {
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
            0 => return Err(self.syntax("invalid number")),
            n if n > 1 && self.s[int_start] == b'0' => {
                return Err(self.syntax("invalid number (leading zero)"))
            }
            _ => {}
        }
        let mut integer = true;
        if self.s.get(self.at) == Some(&b'.') {
            integer = false;
            self.at += 1;
            if digits(self) == 0 {
                return Err(self.syntax("invalid number"));
            }
        }
        if let Some(b'e' | b'E') = self.s.get(self.at) {
            integer = false;
            self.at += 1;
            if let Some(b'+' | b'-') = self.s.get(self.at) {
                self.at += 1;
            }
            if digits(self) == 0 {
                return Err(self.syntax("invalid number"));
            }
        }
        // The slice holds only ASCII digits, signs, `.` and exponents.
        let text = std::str::from_utf8(&self.s[start..self.at]).unwrap_or_default();
        if integer {
            if negative {
                // `-0` stays a float (negative zero), as serde_json reads it.
                match text.parse::<i64>() {
                    Ok(0) | Err(_) => {}
                    Ok(v) => return Ok(Value::I64(v)),
                }
            } else if let Ok(v) = text.parse::<u64>() {
                return Ok(Value::U64(v));
            }
        }
        match text.parse::<f64>() {
            Ok(v) if v.is_finite() => Ok(Value::F64(v, format!("floating point `{text}`"))),
            _ => Err(self.syntax("number out of range")),
        }
    }
}

// ---------------------------------------------------------------------------------
// Deserializer

/// Deserializes from one value of the tree; `path` names it in errors.
struct ValueDe<'de, 'p> {
    value: &'de Value,
    path: &'p Path<'p>,
}

impl<'de> ValueDe<'de, '_> {
    /// A type error for this value; `exp` says what was wanted.
    fn wrong(&self, exp: &dyn de::Expected) -> Error {
        de::Error::invalid_type(unexpected(self.value), exp)
    }

    fn seq<V: Visitor<'de>>(&self, items: &'de [Value], visitor: V) -> Result<V::Value, Error> {
        let mut seq = SeqDe {
            items: items.iter(),
            index: 0,
            path: self.path,
        };
        let v = visitor.visit_seq(&mut seq)?;
        match seq.items.len() {
            0 => Ok(v),
            _ => Err(too_long(items.len())),
        }
    }

    fn map<V: Visitor<'de>>(
        &self,
        members: &'de [(String, Value)],
        visitor: V,
    ) -> Result<V::Value, Error> {
        let mut map = MapDe {
            members: members.iter(),
            value: None,
            path: self.path,
        };
        // An error between a key and its value (a duplicate field) is the key's.
        visitor.visit_map(&mut map).map_err(|e| match map.value {
            Some((key, _)) => e.at(&Path::Key(self.path, key)),
            None => e,
        })
    }

    fn number<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.value {
            Value::U64(v) => visitor.visit_u64(*v),
            Value::I64(v) => visitor.visit_i64(*v),
            Value::F64(v, _) => visitor.visit_f64(*v),
            _ => Err(self.wrong(&visitor)),
        }
    }

    /// Like `number`, but a fraction is refused here, so serde's own message for it
    /// (which formats the float) is never reached.
    fn integer<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.value {
            Value::U64(v) => visitor.visit_u64(*v),
            Value::I64(v) => visitor.visit_i64(*v),
            _ => Err(self.wrong(&visitor)),
        }
    }

    fn text<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.value {
            Value::Str(s) => visitor.visit_borrowed_str(s),
            _ => Err(self.wrong(&visitor)),
        }
    }
}

/// How serde names a value in type errors (kept out of the per-type code).
#[inline(never)]
fn unexpected(v: &Value) -> de::Unexpected<'_> {
    use de::Unexpected as U;
    match v {
        Value::Null => U::Unit,
        Value::Bool(b) => U::Bool(*b),
        Value::U64(v) => U::Unsigned(*v),
        Value::I64(v) => U::Signed(*v),
        Value::F64(_, text) => U::Other(text),
        Value::Str(s) => U::Str(s),
        Value::Array(_) => U::Seq,
        Value::Object(_) => U::Map,
    }
}

#[inline(never)]
fn too_long(len: usize) -> Error {
    de::Error::invalid_length(len, &"fewer elements")
}

macro_rules! forward {
    ($to:ident: $($method:ident)*) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
            self.$to(visitor)
        }
    )*};
}

/// Each method reads only the value kinds its type can take, so the code serde
/// derives per config type stays small (`deserialize_any` is for the few types that
/// accept several kinds).
impl<'de> de::Deserializer<'de> for ValueDe<'de, '_> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.value {
            Value::Null => visitor.visit_unit(),
            Value::Bool(b) => visitor.visit_bool(*b),
            Value::U64(_) | Value::I64(_) | Value::F64(..) => self.number(visitor),
            Value::Str(s) => visitor.visit_borrowed_str(s),
            Value::Array(items) => self.seq(items, visitor),
            Value::Object(members) => self.map(members, visitor),
        }
    }

    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.value {
            Value::Bool(b) => visitor.visit_bool(*b),
            _ => Err(self.wrong(&visitor)),
        }
    }

    forward! { integer:
        deserialize_i8 deserialize_i16 deserialize_i32 deserialize_i64
        deserialize_u8 deserialize_u16 deserialize_u32 deserialize_u64
    }
    forward! { number: deserialize_f32 deserialize_f64 }
    forward! { text: deserialize_char deserialize_str deserialize_string deserialize_identifier }

    fn deserialize_bytes<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_byte_buf<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.value {
            Value::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.value {
            Value::Null => visitor.visit_unit(),
            _ => Err(self.wrong(&visitor)),
        }
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_unit(visitor)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.value {
            Value::Array(items) => self.seq(items, visitor),
            _ => Err(self.wrong(&visitor)),
        }
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.value {
            Value::Object(members) => self.map(members, visitor),
            _ => Err(self.wrong(&visitor)),
        }
    }

    /// Structs are objects only (not serde_json's positional array form).
    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_map(visitor)
    }

    /// Unit variants only: every enum of the schema is a string.
    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        match self.value {
            Value::Str(s) => visitor.visit_enum(s.as_str().into_deserializer()),
            _ => Err(self.wrong(&visitor)),
        }
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_unit()
    }
}

struct SeqDe<'de, 'p> {
    items: std::slice::Iter<'de, Value>,
    index: usize,
    path: &'p Path<'p>,
}

impl<'de> de::SeqAccess<'de> for SeqDe<'de, '_> {
    type Error = Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Error> {
        let Some(value) = self.items.next() else {
            return Ok(None);
        };
        let path = Path::Index(self.path, self.index);
        self.index += 1;
        seed.deserialize(ValueDe { value, path: &path })
            .map(Some)
            .map_err(|e| e.at(&path))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.items.len())
    }
}

struct MapDe<'de, 'p> {
    members: std::slice::Iter<'de, (String, Value)>,
    /// The member whose key was just read.
    value: Option<&'de (String, Value)>,
    path: &'p Path<'p>,
}

impl<'de> de::MapAccess<'de> for MapDe<'de, '_> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Error> {
        let Some(member) = self.members.next() else {
            return Ok(None);
        };
        self.value = Some(member);
        let path = Path::Key(self.path, &member.0);
        let key: de::value::BorrowedStrDeserializer<'de, Error> =
            de::value::BorrowedStrDeserializer::new(&member.0);
        seed.deserialize(key).map(Some).map_err(|e| e.at(&path))
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Error> {
        let Some((key, value)) = self.value.take() else {
            return Err(de::Error::custom("a value was asked for before its key"));
        };
        let path = Path::Key(self.path, key);
        seed.deserialize(ValueDe { value, path: &path })
            .map_err(|e| e.at(&path))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.members.len())
    }
}

#[cfg(test)]
mod tests {
    use super::{Parser, Value};

    fn parse(s: &str) -> Result<Value, String> {
        Parser {
            s: s.as_bytes(),
            at: 0,
        }
        .document()
        .map_err(|e| e.reason)
    }

    #[test]
    fn values() {
        use Value::*;
        assert_eq!(parse(" null "), Ok(Null));
        assert_eq!(
            parse("[true,false]"),
            Ok(Array(vec![Bool(true), Bool(false)]))
        );
        assert_eq!(parse("0"), Ok(U64(0)));
        assert_eq!(parse("-0"), Ok(F64(-0.0, "floating point `-0`".into())));
        assert_eq!(parse("18446744073709551615"), Ok(U64(u64::MAX)));
        let f = |v: f64, text: &str| F64(v, format!("floating point `{text}`"));
        assert_eq!(
            parse("18446744073709551616"),
            Ok(f(18446744073709551616.0, "18446744073709551616"))
        );
        assert_eq!(parse("-9223372036854775808"), Ok(I64(i64::MIN)));
        assert_eq!(parse("-3"), Ok(I64(-3)));
        assert_eq!(parse("0.1"), Ok(f(0.1, "0.1")));
        assert_eq!(parse("-2.5e-3"), Ok(f(-0.0025, "-2.5e-3")));
        assert_eq!(parse("1E2"), Ok(f(100.0, "1E2")));
        assert_eq!(
            parse(r#"{"a":"x\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00","b":{}}"#),
            Ok(Object(vec![
                (
                    "a".into(),
                    Str("x\"\\/\u{8}\u{c}\n\r\t\u{e9}\u{1F600}".into())
                ),
                ("b".into(), Object(vec![])),
            ]))
        );
        assert_eq!(parse("\"héllo\""), Ok(Str("héllo".into())));
    }

    #[test]
    fn syntax_errors_say_where() {
        let bad = |s: &str, what: &str| {
            let e = parse(s).unwrap_err();
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
        assert!(parse(&"[".repeat(200))
            .unwrap_err()
            .contains("recursion limit"));
        assert!(parse(&format!("{}{}", "[".repeat(100), "]".repeat(100))).is_ok());
    }

    #[derive(Debug, PartialEq, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Doc {
        #[serde(default)]
        items: Vec<Item>,
        name: Option<String>,
    }

    #[derive(Debug, PartialEq, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Item {
        n: u32,
        #[serde(default)]
        mode: Mode,
        #[serde(default)]
        pair: Option<(u8, f64)>,
    }

    #[derive(Debug, Default, PartialEq, serde::Deserialize)]
    #[serde(rename_all = "snake_case")]
    enum Mode {
        #[default]
        Fast,
        Slow,
    }

    fn read(s: &str) -> Result<Doc, (String, String)> {
        super::from_slice(s.as_bytes()).map_err(|e| (e.path.unwrap_or_default(), e.reason))
    }

    #[test]
    fn deserializes_with_defaults_options_enums_and_tuples() {
        let d = read(r#"{"items":[{"n":1},{"n":2,"mode":"slow","pair":[3,0.5]}],"name":null}"#);
        assert_eq!(
            d,
            Ok(Doc {
                items: vec![
                    Item {
                        n: 1,
                        mode: Mode::Fast,
                        pair: None
                    },
                    Item {
                        n: 2,
                        mode: Mode::Slow,
                        pair: Some((3, 0.5))
                    },
                ],
                name: None,
            })
        );
        assert_eq!(read(r#"{"name":"x"}"#).unwrap().name.as_deref(), Some("x"));
    }

    #[test]
    fn errors_name_the_path() {
        let bad = |s: &str, path: &str, why: &str| {
            let (p, r) = read(s).unwrap_err();
            assert_eq!(p, path, "{s}: {r}");
            assert!(r.contains(why), "{s}: {r}");
        };
        bad(
            r#"{"items":[{"n":1},{"n":1,"m":2}]}"#,
            "items[1].m",
            "unknown field `m`, expected one of `n`, `mode`, `pair`",
        );
        bad(
            r#"{"items":[{"n":"x"}]}"#,
            "items[0].n",
            "invalid type: string \"x\", expected u32",
        );
        bad(
            r#"{"items":[{"n":-1}]}"#,
            "items[0].n",
            "invalid value: integer `-1`, expected u32",
        );
        bad(
            r#"{"items":[{"n":4294967296}]}"#,
            "items[0].n",
            "expected u32",
        );
        bad(
            r#"{"items":[{"n":1.5}]}"#,
            "items[0].n",
            "invalid type: floating point `1.5`",
        );
        bad(
            r#"{"items":[{"mode":"slow"}]}"#,
            "items[0]",
            "missing field `n`",
        );
        bad(
            r#"{"items":[{"n":1,"mode":"warp"}]}"#,
            "items[0].mode",
            "unknown variant `warp`",
        );
        bad(
            r#"{"items":[{"n":1,"mode":3}]}"#,
            "items[0].mode",
            "invalid type: integer `3`",
        );
        bad(
            r#"{"items":[{"n":1,"pair":[1,2,3]}]}"#,
            "items[0].pair",
            "invalid length 3",
        );
        bad(
            r#"{"items":[{"n":1,"pair":[300,2]}]}"#,
            "items[0].pair[0]",
            "expected u8",
        );
        bad(
            r#"{"items":[{"n":1,"n":2}]}"#,
            "items[0].n",
            "duplicate field `n`",
        );
        bad(
            r#"{"items":{}}"#,
            "items",
            "invalid type: map, expected a sequence",
        );
        bad(
            r#""doc""#,
            "",
            "invalid type: string \"doc\", expected struct Doc",
        );
        bad(
            "{\n\"items\": [\n{\"n\": tru}]}",
            "",
            "expected value at line 3 column 7",
        );
    }

    /// A type that reads any kind of value but accepts only strings.
    struct OnlyStr;

    impl<'de> serde::Deserialize<'de> for OnlyStr {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl serde::de::Visitor<'_> for V {
                type Value = OnlyStr;
                fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    f.write_str("a string")
                }
                fn visit_str<E>(self, _: &str) -> Result<OnlyStr, E> {
                    Ok(OnlyStr)
                }
            }
            d.deserialize_any(V)
        }
    }

    #[test]
    fn unexpected_values_are_named_as_serde_json_names_them() {
        let why = |s: &str| match super::from_slice::<Vec<OnlyStr>>(s.as_bytes()) {
            Ok(_) => String::new(),
            Err(e) => format!("{}: {}", e.path.unwrap_or_default(), e.reason),
        };
        assert_eq!(why(r#"["a"]"#), "");
        assert_eq!(why("[null]"), "[0]: invalid type: null, expected a string");
        assert_eq!(
            why(r#"["a",true]"#),
            "[1]: invalid type: boolean `true`, expected a string"
        );
        assert_eq!(
            why("[7]"),
            "[0]: invalid type: integer `7`, expected a string"
        );
        assert_eq!(
            why("[-7]"),
            "[0]: invalid type: integer `-7`, expected a string"
        );
        // A float serde itself reports is shown without core's float printer.
        assert_eq!(
            why("[2.25]"),
            "[0]: invalid type: floating point `2.250`, expected a string"
        );
        assert_eq!(
            why("[[1]]"),
            "[0]: invalid type: sequence, expected a string"
        );
        assert_eq!(
            why(r#"[{"a":1}]"#),
            "[0]: invalid type: map, expected a string"
        );
        let e = super::from_slice::<bool>(b"1e-7").unwrap_err();
        assert_eq!(
            e.reason,
            "invalid type: floating point `1e-7`, expected a boolean"
        );
    }

    #[test]
    fn invalid_utf8_is_an_error() {
        let e = Parser {
            s: b"\"\xff\"",
            at: 0,
        }
        .document()
        .unwrap_err();
        assert!(e.reason.contains("UTF-8"), "{}", e.reason);
    }
}
