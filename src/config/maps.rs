//! The maps' settings beyond the backend rule: what counts as a PostgreSQL connection string
//! (a `postgres://` URL or libpq's `key=value` words), the password `maps.password_file`
//! holds, and a maps URL as it may be printed — its password hidden. The URL's password
//! never reaches a log line or an error: `MapsConfig` and `MapsBackend` print through
//! [`redacted`], and nothing else formats the URL.

use std::fmt;
use std::ops::Range;
use std::path::Path;

use super::{MapsBackend, MapsConfig};

/// Whether `url` names PostgreSQL: a `postgres://` or `postgresql://` URL, or libpq's
/// `key=value` words (`host=db.internal dbname=imgcas sslmode=verify-full`), whose first word
/// is a keyword followed by `=` (a URL of another scheme has `:` or `/` before any `=`).
pub fn names_postgres(url: &str) -> bool {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        return true;
    }
    match url.trim_start().split_once('=') {
        Some((key, _)) => {
            let key = key.trim_end();
            !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        }
        None => false,
    }
}

/// The password `maps.password_file` holds: the file's bytes, one trailing line end
/// (`\n` or `\r\n`) trimmed. An unreadable or empty file is an error that names the file
/// (never its contents).
pub fn password_from_file(path: &Path) -> Result<Vec<u8>, String> {
    let mut bytes =
        std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if bytes.last() == Some(&b'\n') {
        bytes.pop();
        if bytes.last() == Some(&b'\r') {
            bytes.pop();
        }
    }
    if bytes.is_empty() {
        return Err(format!("{} holds no password", path.display()));
    }
    Ok(bytes)
}

/// The validation of `maps.password_file`: the file can be read and holds a password.
pub(super) fn check(maps: &MapsConfig) -> Result<(), String> {
    match &maps.password_file {
        Some(path) => password_from_file(path).map(|_| ()),
        None => Ok(()),
    }
}

/// What stands for a hidden password.
const HIDDEN: &str = "***";

/// `url` with its password hidden: the one in a URL's user part (`user:***@host`), and any
/// `password` parameter, in a URL's query or among `key=value` words.
pub fn redacted(url: &str) -> String {
    match url.find("://") {
        Some(scheme_end) => redacted_url(url, scheme_end + 3),
        None => redacted_words(url),
    }
}

fn redacted_url(url: &str, after_scheme: usize) -> String {
    let mut out = url[..after_scheme].to_string();
    let mut rest = &url[after_scheme..];
    // The user part ends at the first `@` (as tokio-postgres reads it).
    if let Some(at) = rest.find('@') {
        let user = &rest[..at];
        match user.split_once(':') {
            Some((name, _)) => {
                out.push_str(name);
                out.push(':');
                out.push_str(HIDDEN);
            }
            None => out.push_str(user),
        }
        out.push('@');
        rest = &rest[at + 1..];
    }
    let Some(query_at) = rest.find('?') else {
        out.push_str(rest);
        return out;
    };
    out.push_str(&rest[..=query_at]);
    let pairs: Vec<String> = rest[query_at + 1..]
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((key, _)) if key.eq_ignore_ascii_case("password") => format!("{key}={HIDDEN}"),
            _ => pair.to_string(),
        })
        .collect();
    out.push_str(&pairs.join("&"));
    out
}

/// The words with each `password` value hidden; words that cannot be read are hidden whole.
fn redacted_words(text: &str) -> String {
    let Ok(words) = words(text) else {
        return format!("({HIDDEN}: not key=value words)");
    };
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    for word in words.iter().filter(|w| w.key == "password") {
        out.push_str(&text[copied..word.text.start]);
        out.push_str(HIDDEN);
        copied = word.text.end;
    }
    out.push_str(&text[copied..]);
    out
}

/// One `key = value` of libpq's words: the keyword, the value (unquoted, unescaped) and
/// where the value's text lies in the string.
#[derive(Debug, PartialEq)]
pub struct Word<'a> {
    pub key: &'a str,
    pub value: String,
    pub text: Range<usize>,
}

/// libpq's `key = value` words, read as tokio-postgres reads them: blanks around `=`, a value
/// bare (up to a blank) or in `'…'`, `\` escaping the next character in either. An error
/// names a keyword at most, never a value.
pub fn words(text: &str) -> Result<Vec<Word<'_>>, String> {
    let mut words = Vec::new();
    let mut chars = text.char_indices().peekable();
    loop {
        skip_blanks(&mut chars);
        let Some(&(start, _)) = chars.peek() else {
            return Ok(words);
        };
        let mut end = text.len();
        while let Some(&(i, c)) = chars.peek() {
            if c.is_whitespace() || c == '=' {
                end = i;
                break;
            }
            chars.next();
        }
        let key = &text[start..end];
        if key.is_empty() {
            return Err("a `=` without a keyword before it".into());
        }
        skip_blanks(&mut chars);
        if chars.next().map(|(_, c)| c) != Some('=') {
            return Err(format!("`{key}` is not followed by `=`"));
        }
        skip_blanks(&mut chars);
        let (value, span) = word_value(text, &mut chars)
            .ok_or_else(|| format!("`{key}` has no value, or its quote is not closed"))?;
        words.push(Word {
            key,
            value,
            text: span,
        });
    }
}

type Chars<'a> = std::iter::Peekable<std::str::CharIndices<'a>>;

fn skip_blanks(chars: &mut Chars<'_>) {
    while chars.next_if(|(_, c)| c.is_whitespace()).is_some() {}
}

fn word_value(text: &str, chars: &mut Chars<'_>) -> Option<(String, Range<usize>)> {
    let &(start, first) = chars.peek()?;
    let mut value = String::new();
    if first == '\'' {
        chars.next();
        while let Some((i, c)) = chars.next() {
            match c {
                '\'' => return Some((value, start..i + 1)),
                '\\' => value.push(chars.next()?.1),
                c => value.push(c),
            }
        }
        return None;
    }
    let mut end = text.len();
    while let Some(&(i, c)) = chars.peek() {
        if c.is_whitespace() {
            end = i;
            break;
        }
        chars.next();
        match c {
            '\\' => value.extend(chars.next().map(|(_, c)| c)),
            c => value.push(c),
        }
    }
    (!value.is_empty()).then_some((value, start..end))
}

impl fmt::Debug for MapsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MapsConfig")
            .field("url", &self.url.as_deref().map(redacted))
            .field("password_file", &self.password_file)
            .finish()
    }
}

impl fmt::Debug for MapsBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MapsBackend::Embedded => f.write_str("Embedded"),
            MapsBackend::EmbeddedAt(dir) => f.debug_tuple("EmbeddedAt").field(dir).finish(),
            MapsBackend::Postgres(url) => f.debug_tuple("Postgres").field(&redacted(url)).finish(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postgres_is_a_url_or_key_value_words() {
        assert!(names_postgres("postgres://imgcas@db/imgcas"));
        assert!(names_postgres("postgresql://db"));
        assert!(names_postgres("host=db dbname=imgcas sslmode=verify-full"));
        assert!(names_postgres("  host = db"));
        assert!(!names_postgres("redb:///srv/imgcas"));
        assert!(!names_postgres("mysql://u:p@h/db?x=1"));
        assert!(!names_postgres("/srv/imgcas"));
        assert!(!names_postgres("=x"));
    }

    #[test]
    fn the_password_file_is_read_with_one_line_end_trimmed() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pw");
        std::fs::write(&file, "s3cret \r\n").unwrap();
        assert_eq!(password_from_file(&file).unwrap(), b"s3cret ");
        std::fs::write(&file, "s3cret").unwrap();
        assert_eq!(password_from_file(&file).unwrap(), b"s3cret");
        std::fs::write(&file, "\n").unwrap();
        assert!(password_from_file(&file)
            .unwrap_err()
            .contains("holds no password"));
        let missing = password_from_file(&dir.path().join("nope")).unwrap_err();
        assert!(missing.starts_with("cannot read "), "{missing}");
    }

    #[test]
    fn passwords_are_hidden_when_printed() {
        for (url, shown) in [
            (
                "postgres://imgcas:hunter2@db:5432/imgcas?sslmode=require",
                "postgres://imgcas:***@db:5432/imgcas?sslmode=require",
            ),
            (
                "postgres://db/imgcas?password=hunter2&sslmode=verify-full",
                "postgres://db/imgcas?password=***&sslmode=verify-full",
            ),
            ("postgres://imgcas@db/imgcas", "postgres://imgcas@db/imgcas"),
            (
                "host=db password=hunter2 dbname=imgcas",
                "host=db password=*** dbname=imgcas",
            ),
            (
                "host=db password = 'hun ter\\'2' dbname=x",
                "host=db password = *** dbname=x",
            ),
            ("user=me passwordx=1", "user=me passwordx=1"),
            ("host=db password='unclosed", "(***: not key=value words)"),
        ] {
            assert_eq!(redacted(url), shown);
        }
        let config = MapsConfig {
            url: Some("postgres://u:hunter2@db/x".into()),
            ..MapsConfig::default()
        };
        assert!(!format!("{config:?}").contains("hunter2"));
        let backend = MapsBackend::Postgres("host=db password=hunter2".into());
        assert!(!format!("{backend:?}").contains("hunter2"));
    }

    #[test]
    fn words_read_as_libpq_writes_them() {
        let text = r"host = db  dbname='my db' password=a\ b sslrootcert='/x/it\'s.pem'";
        let read: Vec<(&str, String)> = words(text)
            .unwrap()
            .into_iter()
            .map(|w| (w.key, w.value))
            .collect();
        let expected = [
            ("host", "db"),
            ("dbname", "my db"),
            ("password", "a b"),
            ("sslrootcert", "/x/it's.pem"),
        ];
        assert_eq!(read.len(), expected.len());
        for ((key, value), (k, v)) in read.iter().zip(expected) {
            assert_eq!((*key, value.as_str()), (k, v));
        }
        assert_eq!(words("  ").unwrap(), vec![]);
        for bad in ["host", "host=", "=db", "host='db", "password 'x'"] {
            assert!(words(bad).is_err(), "{bad}");
        }
        let unclosed = words("password='hunter2").unwrap_err();
        assert!(!unclosed.contains("hunter2"), "{unclosed}");
    }
}
