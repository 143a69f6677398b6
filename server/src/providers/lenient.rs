//! A lenient typed reader for the few fields SubLane reads from an upstream's JSON answer: a
//! field of another JSON type than expected reads as absent, a key given twice keeps its last
//! value, and every other field is skipped unbuilt but checked (a text a `Value` refuses is
//! refused here too), which is how `Value`'s accessors read (and what they read is the oracle of
//! the observer's and the Chat transforms' tests), without building the document.

use std::borrow::Cow;

use serde::{
    Deserialize, Deserializer,
    de::{DeserializeSeed, Error, MapAccess, SeqAccess, Visitor},
};

/// A struct of [`Loose`] fields, read from a JSON object by hand rather than derived: a key that
/// comes twice keeps its last value, as in a `Value` map (a derived struct refuses the whole
/// object), and other keys are skipped (checked, not built: [`Skip`]). A field's JSON name is its
/// Rust name, or the string after `=` (`kind = "type": Loose<..>`). The fields are as visible as
/// the struct.
macro_rules! lenient_object {
    ($(#[$m:meta])* $vis:vis $name:ident $(<$a:lifetime>)? { $($field:ident $(= $json:literal)?: $ty:ty,)* }) => {
        $(#[$m])*
        #[derive(Debug, Default)]
        $vis struct $name $(<$a>)? {
            $($vis $field: $ty,)*
        }

        impl<'de $(, $a)?> $crate::providers::lenient::Expected<'de> for $name $(<$a>)? $(where 'de: $a)? {
            fn from_map<A: ::serde::de::MapAccess<'de>>(mut map: A) -> Result<Option<Self>, A::Error> {
                let mut this = Self::default();
                let known = $crate::providers::lenient::Known(&[$($crate::providers::lenient::json_name!($field $($json)?)),*]);
                while let Some(key) = map.next_key_seed(known)? {
                    match key {
                        $(Some($crate::providers::lenient::json_name!($field $($json)?)) => this.$field = map.next_value()?,)*
                        _ => {
                            map.next_value::<$crate::providers::lenient::Skip>()?;
                        }
                    }
                }
                Ok(Some(this))
            }
        }
    };
}

/// A [`lenient_object`] field's JSON name.
macro_rules! json_name {
    ($field:ident) => {
        stringify!($field)
    };
    ($field:ident $json:literal) => {
        $json
    };
}

/// An object's key, matched against the names a reader knows without building a string.
#[derive(Clone, Copy)]
pub struct Known(pub &'static [&'static str]);

impl<'de> DeserializeSeed<'de> for Known {
    type Value = Option<&'static str>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl Visitor<'_> for Known {
    type Value = Option<&'static str>;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an object key")
    }
    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(self.0.iter().copied().find(|name| *name == v))
    }
}

/// Any JSON value, skipped unbuilt but checked as a `Value` is: a string's escapes must make
/// text (no lone surrogate), a number must fit an `f64`, and nesting obeys the parser's depth
/// limit. serde's `IgnoredAny` checks none of these, so a reader that skipped with it would
/// take a document that the document path refuses, and the two paths would part.
#[derive(Debug, Clone, Copy)]
pub struct Skip;

impl<'de> Deserialize<'de> for Skip {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(Skip)
    }
}

impl<'de> Visitor<'de> for Skip {
    type Value = Skip;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_f64<E: Error>(self, v: f64) -> Result<Skip, E> {
        // serde_json refuses a number out of range itself; this holds for any other reader.
        if v.is_finite() { Ok(Skip) } else { Err(E::custom("number out of range")) }
    }
    fn visit_str<E>(self, _: &str) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_unit<E>(self) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Skip, A::Error> {
        while seq.next_element::<Skip>()?.is_some() {}
        Ok(Skip)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Skip, A::Error> {
        while map.next_entry::<Skip, Skip>()?.is_some() {}
        Ok(Skip)
    }
}

/// A value of the expected JSON type, or `None` for any other (skipped, nothing built): an
/// answer with an odd field still yields the fields that are right.
#[derive(Debug)]
pub struct Loose<T>(pub Option<T>);

impl<T> Default for Loose<T> {
    fn default() -> Self {
        Loose(None)
    }
}

/// The JSON types a [`Loose`] value accepts; every other type reads as `None`.
pub trait Expected<'de>: Sized {
    fn from_int(_: i128) -> Option<Self> {
        None
    }
    fn from_bool(_: bool) -> Option<Self> {
        None
    }
    /// A string borrowed from the input (one without escapes).
    fn from_borrowed(_: &'de str) -> Option<Self> {
        None
    }
    /// A string that had to be unescaped, valid only during the call.
    fn from_transient(_: &str) -> Option<Self> {
        None
    }
    fn from_map<A: MapAccess<'de>>(map: A) -> Result<Option<Self>, A::Error> {
        Skip.visit_map(map).map(|_| None)
    }
    fn from_seq<A: SeqAccess<'de>>(seq: A) -> Result<Option<Self>, A::Error> {
        Skip.visit_seq(seq).map(|_| None)
    }
}

/// An integer that fits an `i64`, as `Value::as_i64` reads it (a float is not one).
impl Expected<'_> for i64 {
    fn from_int(v: i128) -> Option<Self> {
        i64::try_from(v).ok()
    }
}

impl<'de: 'a, 'a> Expected<'de> for Cow<'a, str> {
    fn from_borrowed(v: &'de str) -> Option<Self> {
        Some(Cow::Borrowed(v))
    }
    fn from_transient(v: &str) -> Option<Self> {
        Some(Cow::Owned(v.to_owned()))
    }
}

impl<'de, T: Expected<'de>> Deserialize<'de> for Loose<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit<T>(std::marker::PhantomData<T>);
        impl<'de, T: Expected<'de>> Visitor<'de> for Visit<T> {
            type Value = Loose<T>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
                Ok(Loose(T::from_int(v.into())))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
                Ok(Loose(T::from_int(v.into())))
            }
            fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
                Ok(Loose(None))
            }
            fn visit_bool<E>(self, v: bool) -> Result<Self::Value, E> {
                Ok(Loose(T::from_bool(v)))
            }
            fn visit_unit<E>(self) -> Result<Self::Value, E> {
                Ok(Loose(None))
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Loose(T::from_borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Loose(T::from_transient(v)))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
                T::from_seq(seq).map(Loose)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                T::from_map(map).map(Loose)
            }
        }
        d.deserialize_any(Visit(std::marker::PhantomData))
    }
}

/// The first element of an array, as `value[0]` reads it: `None` for an empty array, one whose
/// first element is of another type, or no array (the other elements are skipped unbuilt).
#[derive(Debug)]
pub struct First<T>(pub T);

impl<'de, T: Expected<'de>> Expected<'de> for First<T> {
    fn from_seq<A: SeqAccess<'de>>(mut seq: A) -> Result<Option<Self>, A::Error> {
        let first = seq.next_element::<Loose<T>>()?.and_then(|l| l.0);
        Skip.visit_seq(seq)?;
        Ok(first.map(First))
    }
}

/// Any object, as `value.is_object()` reads it (its members skipped unbuilt).
#[derive(Debug)]
pub struct AnObject;

impl<'de> Expected<'de> for AnObject {
    fn from_map<A: MapAccess<'de>>(map: A) -> Result<Option<Self>, A::Error> {
        Skip.visit_map(map).map(|_| Some(AnObject))
    }
}

/// A string that is not empty, as `value.as_str().is_some_and(|s| !s.is_empty())` reads it.
#[derive(Debug)]
pub struct NonEmpty;

impl Expected<'_> for NonEmpty {
    fn from_borrowed(v: &str) -> Option<Self> {
        (!v.is_empty()).then_some(NonEmpty)
    }
    fn from_transient(v: &str) -> Option<Self> {
        (!v.is_empty()).then_some(NonEmpty)
    }
}

/// `true`, as `value == true` reads it (`false`, and any other type, is `None`).
#[derive(Debug)]
pub struct True;

impl Expected<'_> for True {
    fn from_bool(v: bool) -> Option<Self> {
        v.then_some(True)
    }
}

/// A field that may be there with any value, where being there at all counts (as
/// `value.get(name)` tells): `present` with a value of another type than `T` reads as present
/// with no value.
#[derive(Debug)]
pub struct Seen<T> {
    pub present: bool,
    pub value: Option<T>,
}

impl<T> Default for Seen<T> {
    fn default() -> Self {
        Seen { present: false, value: None }
    }
}

impl<'de, T: Expected<'de>> Deserialize<'de> for Seen<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Loose::<T>::deserialize(d).map(|l| Seen { present: true, value: l.0 })
    }
}

pub(crate) use {json_name, lenient_object};

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// `object` (a JSON object's text before its `}`) with one more member that only a check
    /// refuses, in as many ways as there are: a document refuses each, so a reader that skips
    /// the member must refuse it too.
    pub(crate) fn faults_in_skipped_members(object: &str) -> Vec<String> {
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        [r#""\ud800""#, "1e400", "-1e400", &deep, r#"{"k":"\udc00x"}"#]
            .iter()
            .map(|bad| format!(r#"{object},"unknown":{bad}}}"#))
            .collect()
    }

    #[test]
    fn a_skipped_member_is_checked_as_a_document_is() {
        lenient_object! {
            One { a: Loose<i64>, }
        }
        let read = |text: &str| serde_json::from_str::<Loose<One>>(text).map(|l| l.0.and_then(|o| o.a.0));
        assert_eq!(read(r#"{"a":1,"b":[{"c":"\ud83d\ude00"},-1.5e300,null,true]}"#).ok(), Some(Some(1)));
        for text in faults_in_skipped_members(r#"{"a":1"#) {
            assert!(serde_json::from_str::<serde_json::Value>(&text).is_err(), "{text}");
            assert!(read(&text).is_err(), "{text}");
        }
        // and from bytes, text that is not UTF-8
        let bytes = |text: &[u8]| serde_json::from_slice::<Loose<One>>(text).map(|l| l.0.and_then(|o| o.a.0));
        assert_eq!(bytes(br#"{"a":1,"b":"\u00e9"}"#).ok(), Some(Some(1)));
        assert!(serde_json::from_slice::<serde_json::Value>(b"{\"a\":1,\"b\":\"\xff\"}").is_err());
        assert!(bytes(b"{\"a\":1,\"b\":\"\xff\"}").is_err());
        // the other places a value is skipped: the rest of an array, an object or array of
        // another type than expected, an object whose members are not read
        for bad in ["1e400", r#""\udfff""#] {
            let rest = format!("[1,{bad}]");
            assert!(serde_json::from_str::<Loose<First<i64>>>(&rest).is_err(), "{rest}");
            assert!(serde_json::from_str::<Loose<i64>>(&rest).is_err(), "{rest}");
            let members = format!(r#"{{"x":{bad}}}"#);
            assert!(serde_json::from_str::<Loose<AnObject>>(&members).is_err(), "{members}");
            assert!(serde_json::from_str::<Loose<i64>>(&members).is_err(), "{members}");
        }
    }
}
