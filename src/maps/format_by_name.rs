//! An original's format as the maps store it: by its name, read back into the type (a name
//! this build does not know reads as no format, as it did when the name was kept as text and
//! parsed where it was used).

use imgcas_processors::SourceFormat;
use serde::{Deserialize, Deserializer, Serializer};

pub fn serialize<S: Serializer>(format: &Option<SourceFormat>, out: S) -> Result<S::Ok, S::Error> {
    match format {
        Some(format) => out.serialize_some(format.name()),
        None => out.serialize_none(),
    }
}

pub fn deserialize<'de, D: Deserializer<'de>>(input: D) -> Result<Option<SourceFormat>, D::Error> {
    let name = Option::<String>::deserialize(input)?;
    Ok(name.as_deref().and_then(SourceFormat::from_name))
}

/// The name a store's text column holds.
pub fn name(format: Option<SourceFormat>) -> Option<&'static str> {
    format.map(SourceFormat::name)
}

/// The format a store's text column names.
pub fn read(name: Option<String>) -> Option<SourceFormat> {
    name.as_deref().and_then(SourceFormat::from_name)
}
