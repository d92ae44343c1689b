//! The named tokens (`[security.tokens]`, `IMGCAS_TOKENS`) and what each may do: its scopes.
//!
//! A named token exists so that a merchant's pipeline can upload and ingest under its own
//! tenant; audit #3 found that such a token also opened moderation, so one tenant could take
//! another's originals down and lift the other's takedowns. Each token now carries scopes,
//! typed when the configuration is read: a token given as a plain string has
//! `upload,ingest`, the admin token has them all.

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;

/// What a token may do. `Admin` implies every other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scope {
    /// `POST /v1/originals`.
    Upload,
    /// `POST /v1/ingest`.
    Ingest,
    /// `GET /metrics`.
    Metrics,
    /// Takedowns, the blocklist, forgetting URLs, similar originals: what reads or removes
    /// other tenants' content.
    Moderate,
    /// Everything, as the admin token.
    Admin,
}

impl Scope {
    pub const ALL: [Scope; 5] = [
        Scope::Upload,
        Scope::Ingest,
        Scope::Metrics,
        Scope::Moderate,
        Scope::Admin,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Scope::Upload => "upload",
            Scope::Ingest => "ingest",
            Scope::Metrics => "metrics",
            Scope::Moderate => "moderate",
            Scope::Admin => "admin",
        }
    }

    fn parse(name: &str) -> Result<Scope, String> {
        Scope::ALL
            .into_iter()
            .find(|s| s.name() == name.trim())
            .ok_or_else(|| {
                format!(
                    "`{}` is not a scope (upload, ingest, metrics, moderate, admin)",
                    name.trim()
                )
            })
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A set of scopes, small enough to be a bit set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Scopes(u8);

impl Scopes {
    /// What a token given without scopes may do: a merchant's pipeline.
    pub const TENANT: Scopes = Scopes((1 << Scope::Upload as u8) | (1 << Scope::Ingest as u8));
    /// The admin token's.
    pub const ADMIN: Scopes = Scopes(1 << Scope::Admin as u8);

    /// Whether a request with these scopes may do what `needed` names (`admin` may do all).
    pub fn allow(self, needed: Scope) -> bool {
        self.0 & (1 << needed as u8 | 1 << Scope::Admin as u8) != 0
    }

    /// Parses a comma list (`upload,ingest`); an empty list is refused (a token that may do
    /// nothing is a mistake, not a setting).
    pub fn parse_list<'a>(names: impl IntoIterator<Item = &'a str>) -> Result<Scopes, String> {
        let mut scopes = Scopes::default();
        for name in names.into_iter().filter(|n| !n.trim().is_empty()) {
            scopes.0 |= 1 << Scope::parse(name)? as u8;
        }
        match scopes.0 {
            0 => Err("a token needs at least one scope".into()),
            _ => Ok(scopes),
        }
    }

    /// The names, comma-separated, in the order of [`Scope::ALL`].
    pub fn names(self) -> String {
        Scope::ALL
            .into_iter()
            .filter(|s| self.0 & (1 << *s as u8) != 0)
            .map(Scope::name)
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// A named token and its scopes.
#[derive(Clone, PartialEq, Deserialize)]
#[serde(try_from = "TokenSetting")]
pub struct NamedToken {
    pub token: String,
    pub scopes: Scopes,
}

impl NamedToken {
    /// A token with the tenant's default scopes.
    pub fn tenant(token: impl Into<String>) -> NamedToken {
        NamedToken {
            token: token.into(),
            scopes: Scopes::TENANT,
        }
    }
}

/// Never the token itself in a printed configuration.
impl fmt::Debug for NamedToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NamedToken")
            .field("token", &"<hidden>")
            .field("scopes", &self.scopes.names())
            .finish()
    }
}

/// How TOML gives a named token: `shop = "<token>"`, or
/// `moderator = { token = "<token>", scopes = ["moderate", "metrics"] }` (a comma string
/// works too).
#[derive(Deserialize)]
#[serde(untagged)]
enum TokenSetting {
    Plain(String),
    Scoped { token: String, scopes: ScopeNames },
}

#[derive(Deserialize)]
#[serde(untagged)]
enum ScopeNames {
    List(Vec<String>),
    Comma(String),
}

impl TryFrom<TokenSetting> for NamedToken {
    type Error = String;

    fn try_from(setting: TokenSetting) -> Result<NamedToken, String> {
        match setting {
            TokenSetting::Plain(token) => Ok(NamedToken::tenant(token)),
            TokenSetting::Scoped { token, scopes } => {
                let scopes = match &scopes {
                    ScopeNames::List(names) => Scopes::parse_list(names.iter().map(String::as_str)),
                    ScopeNames::Comma(names) => Scopes::parse_list(names.split(',')),
                }?;
                Ok(NamedToken { token, scopes })
            }
        }
    }
}

/// `IMGCAS_TOKENS`: `name=<token>` entries joined with `;`, each optionally followed by
/// `&scopes=<scope>,<scope>` (`shop=<token>;mod=<token>&scopes=moderate,metrics`).
pub fn parse_env(value: &str) -> Result<BTreeMap<String, NamedToken>, String> {
    let mut tokens = BTreeMap::new();
    for entry in value.split(';').map(str::trim).filter(|e| !e.is_empty()) {
        let Some((name, rest)) = entry.split_once('=') else {
            // The entry may be a token given without its name: never printed.
            return Err("an entry is not `name=<token>`".into());
        };
        let name = name.trim().to_string();
        let token = match rest.rsplit_once("&scopes=") {
            Some((token, scopes)) => NamedToken {
                token: token.trim().to_string(),
                scopes: Scopes::parse_list(scopes.split(','))
                    .map_err(|why| format!("`{name}`: {why}"))?,
            },
            None => NamedToken::tenant(rest.trim()),
        };
        if tokens.insert(name.clone(), token).is_some() {
            return Err(format!("`{name}` is given twice"));
        }
    }
    Ok(tokens)
}

/// Checks the tokens: the admin token and the named ones (`[security.tokens]`) of 16 bytes
/// or more, plain names, no token given twice. (key, why) of the first that is not.
pub fn check(
    tokens: &BTreeMap<String, NamedToken>,
    admin_token: Option<&str>,
) -> Result<(), (String, String)> {
    const SHORT: &str = "must be at least 16 bytes (e.g. `openssl rand -hex 32`)";
    if admin_token.is_some_and(|t| t.len() < 16) {
        return Err(("security.admin_token".into(), SHORT.into()));
    }
    let mut seen: Vec<&str> = admin_token.into_iter().collect();
    for (name, named) in tokens {
        let key = format!("security.tokens.{name}");
        if !imgcas_processors::spec::is_plain_name(name) || name == "-" || name == "other" {
            return Err((key, "a token's name is letters, digits, `-` and `_`".into()));
        }
        if named.token.len() < 16 {
            return Err((key, SHORT.into()));
        }
        if seen.contains(&named.token.as_str()) {
            return Err((key, "the same token is given twice".into()));
        }
        seen.push(&named.token);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_token_may_upload_and_ingest_only() {
        let tokens = parse_env("shop=0123456789abcdef0").unwrap();
        let shop = &tokens["shop"];
        assert!(shop.scopes.allow(Scope::Upload) && shop.scopes.allow(Scope::Ingest));
        for scope in [Scope::Metrics, Scope::Moderate, Scope::Admin] {
            assert!(!shop.scopes.allow(scope), "{scope}");
        }
    }

    #[test]
    fn scopes_follow_the_token_and_admin_allows_all() {
        let tokens = parse_env(
            "m=0123456789abcdef0&scopes=moderate, metrics; root=0123456789abcdef1&scopes=admin",
        )
        .unwrap();
        assert_eq!(tokens["m"].token, "0123456789abcdef0");
        assert_eq!(tokens["m"].scopes.names(), "metrics,moderate");
        assert!(!tokens["m"].scopes.allow(Scope::Upload));
        assert!(Scope::ALL.iter().all(|s| tokens["root"].scopes.allow(*s)));
        assert!(Scope::ALL.iter().all(|s| Scopes::ADMIN.allow(*s)));
    }

    #[test]
    fn unknown_or_missing_scopes_are_refused_without_the_token() {
        let e = parse_env("m=0123456789abcdef0&scopes=moderat").unwrap_err();
        assert!(e.contains("`moderat` is not a scope"), "{e}");
        let e = parse_env("m=0123456789abcdef0&scopes=").unwrap_err();
        assert!(e.contains("at least one scope"), "{e}");
        assert!(!e.contains("0123456789abcdef0"));
        let e = parse_env("secret-token-without-a-name").unwrap_err();
        assert!(!e.contains("secret-token"), "{e}");
    }

    #[test]
    fn toml_takes_a_string_or_a_table() {
        #[derive(Deserialize)]
        struct T {
            tokens: BTreeMap<String, NamedToken>,
        }
        let t: T = toml::from_str(
            "[tokens]\nshop = \"0123456789abcdef0\"\nm = { token = \"0123456789abcdef1\", scopes = [\"moderate\"] }\nn = { token = \"0123456789abcdef2\", scopes = \"metrics,ingest\" }\n",
        )
        .unwrap();
        assert_eq!(t.tokens["shop"].scopes, Scopes::TENANT);
        assert_eq!(t.tokens["m"].scopes.names(), "moderate");
        assert_eq!(t.tokens["n"].scopes.names(), "ingest,metrics");
        assert!(format!("{:?}", t.tokens["m"]).contains("<hidden>"));
    }
}
